"""Lowering: an algorithm's transfer table → flow columns plus one op template per group position.

A template is one position's share of a collective instance in rank-local op ids: a SEND op on each
transfer's src and a RECV op on its dst, in the topological order of the transfers (lowest index first,
which is the table's own order when every ``after`` index is smaller than its transfer's), and the
edges of the transfers' ``after`` lists (a SEND waits for the RECV of a transfer its sender received,
or the SEND of one it sent earlier). The compiler (:mod:`emulator.schedule.compiler`) places a copy of
a position's template on the rank that holds that position, once per instance. All array operations:
a 1,024-rank All-to-All (a million transfers) lowers in about a second.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from emulator.errors import ScheduleError
from emulator.schedule.algorithms.table import TransferTable
from emulator.schedule.model import OP_RECV, OP_SEND


@dataclass(slots=True)
class Template:
    """One position's share of a lowered collective (local op indices)."""

    kind: np.ndarray  # int8
    tidx: np.ndarray  # int32 transfer index
    edge_child: np.ndarray  # int32
    edge_parent: np.ndarray  # int32
    roots: np.ndarray  # int32: ops without in-instance parents
    sinks: np.ndarray  # int32: ops without in-instance children


@dataclass(slots=True)
class Lowered:
    """An algorithm's transfers for one (type, n, size, root, algorithm, chunks, window)."""

    src: np.ndarray
    dst: np.ndarray
    size: np.ndarray
    step: np.ndarray
    chunk: np.ndarray
    templates: list[Template]


def _topological_rank(t: TransferTable, label: str) -> np.ndarray | None:
    """Each transfer's place in the lowest-index-first topological order; None when that is the list's own
    order (every ``after`` index smaller than its transfer's, as the registered algorithms make them)."""
    m = len(t)
    child = np.repeat(np.arange(m, dtype=np.int64), np.diff(t.after_ptr))
    bad = np.flatnonzero((t.after_idx < 0) | (t.after_idx >= m) | (t.after_idx == child))
    if bad.size:
        raise ScheduleError(f"{label}: transfer {child[bad[0]]} has an invalid 'after' index {t.after_idx[bad[0]]}")
    if not (t.after_idx > child).any():
        return None
    indeg = np.bincount(child, minlength=m).tolist()
    kids: list[list[int]] = [[] for _ in range(m)]
    for c, a in zip(child.tolist(), t.after_idx.tolist(), strict=True):
        kids[a].append(c)
    ready = [i for i in range(m) if indeg[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for c in kids[i]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(ready, c)
    if len(order) != m:
        raise ScheduleError(f"{label}: algorithm produced cyclic transfer dependencies")
    place = np.empty(m, dtype=np.int64)
    place[np.asarray(order, dtype=np.int64)] = np.arange(m, dtype=np.int64)
    return place


def lower(t: TransferTable, n: int, label: str) -> Lowered:
    """Turn a transfer table into flow columns plus one op template per group position.

    Each position's ops follow the topological order of the transfers (a SEND on the transfer's src, a
    RECV on its dst); a transfer's ``after`` entries become edges from its SEND to the RECV of a transfer
    its sender received, or to the SEND of one it sent earlier."""
    m = len(t)
    src = t.src.astype(np.int64)
    dst = t.dst.astype(np.int64)
    if m and (src.min() < 0 or dst.min() < 0 or src.max() >= n or dst.max() >= n or (src == dst).any()):
        raise ScheduleError(f"{label}: algorithm produced a transfer with a bad position (n={n})")
    place = _topological_rank(t, label)
    tid = np.arange(m, dtype=np.int64)
    # events 2i (the SEND of transfer i, on its src) and 2i+1 (its RECV, on its dst), sorted by position,
    # then by the transfer's place in the order (a stable sort keeps the table's order where that is it)
    ev_pos = np.stack((src, dst), axis=1).reshape(-1)
    if place is None:
        ev_order = np.argsort(ev_pos.astype(np.int16 if n < 2**15 else np.int64), kind="stable")
    else:
        ev_order = np.argsort(ev_pos * max(m, 1) + np.repeat(place, 2), kind="stable")
    counts = np.bincount(ev_pos, minlength=n)
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    local = np.empty(2 * m, dtype=np.int64)
    local[ev_order] = np.arange(2 * m, dtype=np.int64) - starts[ev_pos[ev_order]]
    send_local, recv_local = local[0::2], local[1::2]
    kinds = np.where(ev_order % 2 == 0, OP_SEND, OP_RECV).astype(np.int8)
    tids = (ev_order // 2).astype(np.int32)
    # edges (position of the waiting sender, its SEND, the parent op)
    child_t = np.repeat(tid, np.diff(t.after_ptr))
    a = t.after_idx
    e_pos = src[child_t]
    via_recv = dst[a] == e_pos
    via_send = src[a] == e_pos
    stray = np.flatnonzero(~(via_recv | via_send))
    if stray.size:
        i, j = int(child_t[stray[0]]), int(a[stray[0]])
        raise ScheduleError(f"{label}: transfer {i} waits for transfer {j}, which does not involve its sender")
    e_child = send_local[child_t]
    e_parent = np.where(via_recv, recv_local[a], send_local[a])
    has_parent = np.zeros(2 * m, dtype=bool)
    has_child = np.zeros(2 * m, dtype=bool)
    has_parent[starts[e_pos] + e_child] = True
    has_child[starts[e_pos] + e_parent] = True
    e_sort = np.argsort(e_pos, kind="stable")
    e_starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(e_pos, minlength=n), out=e_starts[1:])
    e_child = e_child[e_sort].astype(np.int32)  # rank-local op ids fit int32 (see _RankOut)
    e_parent = e_parent[e_sort].astype(np.int32)
    templates = []
    for p in range(n):
        lo, hi = int(starts[p]), int(starts[p + 1])
        elo, ehi = int(e_starts[p]), int(e_starts[p + 1])
        templates.append(
            Template(
                kind=kinds[lo:hi],
                tidx=tids[lo:hi],
                edge_child=e_child[elo:ehi],
                edge_parent=e_parent[elo:ehi],
                roots=np.flatnonzero(~has_parent[lo:hi]).astype(np.int32),
                sinks=np.flatnonzero(~has_child[lo:hi]).astype(np.int32),
            )
        )
    return Lowered(src=t.src.astype(np.int32), dst=t.dst.astype(np.int32), size=t.size_bytes.astype(np.int64),
                 step=t.step.astype(np.int32), chunk=t.chunk.astype(np.int32), templates=templates)
