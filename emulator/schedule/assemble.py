"""Final stage of the compiler: per-rank op columns and matched instances → one columnar Schedule.

Theory of operation: the walk (``emulator.schedule.compiler``) leaves, per rank, op columns whose
SEND/RECV ops still point at *(collective instance, transfer index)* or at a point-to-point record, and
dependency edges in rank-local op ids. This module

1. orders collective instances by (group name, seq) and lays out their flows (transfer order within an
   instance), then pairs point-to-point records by ``(src, dst, tag, k)`` and appends one flow per pair;
2. copies each rank's op columns into preallocated global columns (freeing the rank's walk output
   right away, which bounds peak memory), resolves every op's flow id, and turns the edges into CSR:
   per rank, keys ``child·N + parent`` in global op ids are sorted and de-duplicated; since edges
   never leave their rank and ranks are laid out in order, the runs concatenate already sorted;
3. numbers queue pairs (one per (group, src, dst)), scales compute durations, and in open-loop mode sets
   ``not_before_ns`` and drops the dependencies.

Everything here is whole-array numpy work except the point-to-point pairing (one dict entry per
SEND/RECV node) and the open-loop time estimate (one pass over the ops, only when asked for).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from emulator.errors import ScheduleError
from emulator.schedule.algorithms.base import _cached_plan
from emulator.schedule.model import OP_DELAY, Schedule, dependencies_from_keys, op_layout
from emulator.trace.model import ROOTED

if TYPE_CHECKING:  # pragma: no cover
    from emulator.schedule.compiler import _Compiler

#: one rank's walk output: op columns (kind, inst, tidx, duration, scaled, node, start), edge children,
#: edge parents (rank-local op ids)
RankColumns = tuple[list[np.ndarray], np.ndarray, np.ndarray]

_I32 = np.int32
_I64 = np.int64


def _pair_p2p(c: _Compiler, first_flow: int) -> tuple[np.ndarray, list[tuple[int, int, int, str]]]:
    """Flow id per point-to-point record (-1 = unmatched, ignored) and the flows (src, dst, size, group)."""
    sends: dict[tuple[int, int, int, int], int] = {}
    recvs: dict[tuple[int, int, int, int], int] = {}
    for i, (is_send, s, d, tag, k, _rank, _op, _size) in enumerate(c.p2p):
        (sends if is_send else recvs)[(s, d, tag, k)] = i
    flow_of = np.full(len(c.p2p), -1, dtype=_I64)
    flows: list[tuple[int, int, int, str]] = []
    strict = c.o.p2p_pairing != "ignore"
    for key in sorted(set(sends) | set(recvs)):
        si, ri = sends.get(key), recvs.get(key)
        if si is None or ri is None:
            if strict:
                i = si if si is not None else ri
                s, d, tag, k = key
                what, other, peer = ("SEND to", "RECV", d) if si is not None else ("RECV from", "SEND", s)
                raise ScheduleError(
                    f"rank {c.p2p[i][5]} node {c.p2p_nodes[i]}: {what} rank {peer} (tag {tag}, occurrence #{k}) "
                    f"has no matching {other} on rank {peer} (p2p_pairing={c.o.p2p_pairing}; 'ignore' drops unmatched nodes)"
                )
            continue
        ssize, rsize = c.p2p[si][7], c.p2p[ri][7]
        if ssize != rsize:
            raise ScheduleError(
                f"rank {key[0]} node {c.p2p_nodes[si]} SEND {ssize} B to rank {key[1]} pairs with rank {key[1]} "
                f"node {c.p2p_nodes[ri]} RECV of {rsize} B (tag {key[2]}, occurrence #{key[3]})"
            )
        fid = first_flow + len(flows)
        flow_of[si] = fid
        flow_of[ri] = fid
        flows.append((key[0], key[1], ssize, c.p2p_group[si]))
    return flow_of, flows


def _estimate_start_ns(kind: np.ndarray, dur: np.ndarray, ptr: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Dependency-free start estimate: longest path of durations (communication = 0 time)."""
    n = kind.shape[0]
    t = [0] * n
    d = dur.tolist()
    p = ptr.tolist()
    ix = idx.tolist()
    for i in range(n):
        lo, hi = p[i], p[i + 1]
        if lo != hi:
            t[i] = max(t[j] + d[j] for j in ix[lo:hi])
    return np.asarray(t, dtype=_I64)


def assemble(c: _Compiler, outs: dict[int, RankColumns], meta: dict) -> Schedule:
    """Build the Schedule; consumes ``outs`` (rank → op columns, edge children, edge parents)."""
    _cached_plan.cache_clear()  # the plans served the walk; a 1,024-rank one is a million transfer objects
    world = c.world_size
    insts = c.insts
    group_names = tuple(sorted({i.group for i in insts} | set(c.p2p_group)))
    gidx = {g: i for i, g in enumerate(group_names)}
    algorithm_names = tuple(sorted({i.algorithm for i in insts}))
    aidx = {a: i for i, a in enumerate(algorithm_names)}

    # collective instances and their flows
    order = sorted(range(len(insts)), key=lambda i: (gidx[insts[i].group], insts[i].seq))
    inst_base = np.zeros(len(insts), dtype=_I64)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("src", "dst", "size", "step", "chunk", "coll", "group")}
    coll_rank_ptr = [0]
    coll_rank_idx: list[int] = []
    rooted: dict[str, list[int]] = {"coll": [], "rank": []}  # rooted instances (row) and their root rank
    nflows = 0
    for row, iid in enumerate(order):
        inst = insts[iid]
        ranks = np.asarray(c.groups[inst.group], dtype=_I32)
        plan = inst.plan
        m = plan.src.shape[0]
        inst_base[iid] = nflows
        nflows += m
        parts["src"].append(ranks[plan.src])
        parts["dst"].append(ranks[plan.dst])
        parts["size"].append(plan.size)
        parts["step"].append(plan.step)
        parts["chunk"].append(plan.chunk)
        parts["coll"].append(np.full(m, row, dtype=_I32))
        parts["group"].append(np.full(m, gidx[inst.group], dtype=_I64))
        coll_rank_idx.extend(c.groups[inst.group])
        coll_rank_ptr.append(len(coll_rank_idx))
        if inst.type in ROOTED:
            rooted["coll"].append(row)
            rooted["rank"].append(int(ranks[inst.root]))
    if rooted["coll"]:
        meta = {**meta, "coll_roots": rooted}
    p2p_flow, p2p_flows = _pair_p2p(c, nflows)
    if p2p_flows:
        arr = list(zip(*p2p_flows, strict=True))
        k = len(p2p_flows)
        parts["src"].append(np.asarray(arr[0], dtype=_I32))
        parts["dst"].append(np.asarray(arr[1], dtype=_I32))
        parts["size"].append(np.asarray(arr[2], dtype=_I64))
        parts["step"].append(np.zeros(k, dtype=_I32))
        parts["chunk"].append(np.zeros(k, dtype=_I32))
        parts["coll"].append(np.full(k, -1, dtype=_I32))
        parts["group"].append(np.asarray([gidx[g] for g in arr[3]], dtype=_I64))
    dtypes = {"src": _I32, "dst": _I32, "size": _I64, "step": _I32, "chunk": _I32, "coll": _I32, "group": _I64}
    f = {k: (np.concatenate(v).astype(dtypes[k], copy=False) if v else np.zeros(0, dtype=dtypes[k]))
         for k, v in parts.items()}
    # queue pairs: one per (group, src, dst), dense ids in sorted key order
    w = max(world, 1)
    qkey = (f["group"] * w + f["src"]) * w + f["dst"]
    _, qp = np.unique(qkey, return_inverse=True)

    # ops: copy each rank into preallocated columns and turn its edges into sorted, de-duplicated
    # keys child·N + parent, freeing the rank's walk output as soon as it is copied (peak memory).
    # Edges never leave their rank and ranks are laid out in order, so the per-rank sorted key runs
    # concatenate into a globally sorted array: no global sort.
    rank_counts = np.zeros(world, dtype=_I64)
    for r, (cols_r, _ec, _ep) in outs.items():
        rank_counts[r] = cols_r[0].shape[0]
    n_ops = int(rank_counts.sum())
    stride = max(n_ops, 1)
    ctypes = (np.int8, _I32, _I32, _I64, np.bool_, _I64, _I64)
    cols = [np.empty(n_ops, dtype=t) for t in ctypes]
    keys: list[np.ndarray] = []
    offset = 0
    for r in range(world):
        done = outs.pop(r, None)
        if done is None:
            continue
        cols_r, ec, ep = done
        del done
        count = int(rank_counts[r])
        for dst, src in zip(cols, cols_r, strict=True):
            dst[offset : offset + count] = src
        del cols_r
        key = ec.astype(_I64)
        key += offset
        key *= stride
        key += ep
        key += offset
        del ec, ep
        key.sort()
        if key.shape[0] > 1:
            keep = np.empty(key.shape[0], dtype=bool)
            keep[0] = True
            np.not_equal(key[1:], key[:-1], out=keep[1:])
            key = key[keep]
            del keep
        keys.append(key)
        offset += count
    kind, inst_col, tidx, dur, scaled, node, start_us = cols
    del cols
    op_flow = np.full(n_ops, -1, dtype=_I32)
    m = inst_col >= 0
    op_flow[m] = inst_base[inst_col[m]] + tidx[m]
    m2 = inst_col == -2
    if m2.any():
        fl = p2p_flow[tidx[m2]]
        op_flow[m2] = fl
        dropped = np.flatnonzero(m2)[fl < 0]
        kind[dropped] = OP_DELAY  # unmatched point-to-point node under p2p_pairing=ignore: a zero wait
    del m, m2, inst_col, tidx
    scale = float(c.o.compute_scale)
    if scale != 1.0:
        dur[scaled] = np.rint(dur[scaled].astype(np.float64) * scale).astype(_I64)
    del scaled

    key = np.concatenate(keys) if keys else np.zeros(0, dtype=_I64)
    del keys
    dep_ptr, dep_idx = dependencies_from_keys(key, n_ops)
    del key

    not_before = np.full(n_ops, -1, dtype=_I64)
    if c.o.open_loop:
        if c.has_times:
            not_before = np.where(start_us > 0, (start_us - c.t0_us).clip(min=0) * 1000, 0).astype(_I64)
        else:
            not_before = _estimate_start_ns(kind, np.where(kind == OP_DELAY, dur, 0), dep_ptr, dep_idx)
        dep_ptr = np.zeros(n_ops + 1, dtype=_I64)
        dep_idx = np.zeros(0, dtype=dep_idx.dtype)

    op_rank, rank_op_ptr = op_layout(rank_counts)
    ordered = [insts[i] for i in order]
    return Schedule(
        world_size=world,
        flow_src=f["src"],
        flow_dst=f["dst"],
        flow_size_bytes=f["size"],
        flow_qp=qp.reshape(-1).astype(_I32),
        flow_coll=f["coll"],
        flow_step=f["step"],
        flow_chunk=f["chunk"],
        op_rank=op_rank,
        op_kind=kind,
        op_flow=op_flow,
        op_duration_ns=dur,
        op_not_before_ns=not_before,
        op_node=node,
        dep_ptr=dep_ptr,
        dep_idx=dep_idx,
        rank_op_ptr=rank_op_ptr,
        coll_type=np.asarray([int(i.type) for i in ordered], dtype=np.int8),
        coll_group=np.asarray([gidx[i.group] for i in ordered], dtype=_I32),
        coll_seq=np.asarray([i.seq for i in ordered], dtype=_I32),
        coll_size_bytes=np.asarray([i.size for i in ordered], dtype=_I64),
        coll_algorithm=np.asarray([aidx[i.algorithm] for i in ordered], dtype=np.int16),
        coll_rank_ptr=np.asarray(coll_rank_ptr, dtype=_I64),
        coll_rank_idx=np.asarray(coll_rank_idx, dtype=_I32),
        group_names=group_names,
        algorithm_names=algorithm_names,
        meta=meta,
    )
