"""Injected perturbations applied to a schedule: slow compute, waits before collectives, slow NICs.

Theory of operation
-------------------
Two steps, so that a run's iterations share one structure but draw their own delays:

1. :func:`insert_delays` works on the **one-iteration** schedule (before it is repeated): for every
   :class:`DelaySpec` and every collective instance of its type (or every instance) that one of its ranks
   is a member of, one DELAY op is inserted on that rank right before the rank's first op of the
   instance. It takes over the instance's dependencies from outside the instance (and becomes the
   parent of the ops that had none inside it), so the rank joins the collective only once the wait is
   over. The op's ``node`` is ``DELAY_NODE_BASE − spec index`` (−2, −3, …: never a trace node id, never
   the compiler's synthetic −1), its duration 0 for now.
2. :func:`perturb_run` works on the **repeated** run schedule: it scales the DELAY ops that came from
   trace compute nodes (``node >= 0``) of each :class:`RankPerturbation`'s ranks by ``compute_scale``,
   draws the duration of every inserted op (fixed, or lognormal ``median × exp(sigma × N(0, 1))``, one
   draw per op in global op order from a generator seeded by the run's seed: deterministic on sim) and
   writes per-rank NIC caps into ``meta["nic_rate_bps"]`` (``{"<rank>": bps}``), which every rank
   endpoint applies to its line rate (:class:`~emulator.endpoint.endpoint.RankEndpoint`).

Sans-IO: pure functions of their arguments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from emulator.errors import ScheduleError
from emulator.schedule.model import OP_DELAY, Schedule

#: node id of an inserted delay of spec ``i``: ``DELAY_NODE_BASE - i``
DELAY_NODE_BASE = -2


@dataclass(frozen=True, slots=True)
class DelaySpec:
    """A wait before collectives: ``collective`` is a CollectiveType value (None = every collective)."""

    ranks: tuple[int, ...]
    collective: int | None = None
    dist: str = "fixed"  # fixed | lognormal
    fixed_ns: int = 0
    median_ns: int = 0
    sigma: float = 0.0


@dataclass(frozen=True, slots=True)
class RankPerturbation:
    """Per-rank changes of the run schedule (``None`` = unchanged)."""

    ranks: tuple[int, ...]
    compute_scale: float | None = None
    nic_rate_bps: float | None = None


def insert_delays(schedule: Schedule, specs: Sequence[DelaySpec]) -> Schedule:
    """``schedule`` with one DELAY op per (spec, matching instance, member rank of the spec)."""
    s = schedule
    n = s.n_ops
    if not specs or n == 0:
        return s
    flow = s.op_flow.astype(np.int64)
    inst = np.where(flow >= 0, s.flow_coll[np.maximum(flow, 0)], -1).astype(np.int64) if s.n_flows else np.full(n, -1)
    rank = s.op_rank.astype(np.int64)
    # one group per (spec, rank, instance): the ops of that instance on that rank
    gid = np.full(n, -1, dtype=np.int64)
    group_spec: list[int] = []
    for k, spec in enumerate(specs):
        sel = (inst >= 0) & np.isin(rank, np.asarray(spec.ranks, dtype=np.int64)) & (gid < 0)
        if spec.collective is not None:
            sel &= s.coll_type[np.maximum(inst, 0)].astype(np.int64) == int(spec.collective)
        if not sel.any():
            continue
        keys = rank[sel] * (s.n_colls + 1) + inst[sel]
        uniq, local = np.unique(keys, return_inverse=True)
        gid[sel] = len(group_spec) + local
        group_spec.extend([k] * uniq.shape[0])
    n_groups = len(group_spec)
    if n_groups == 0:
        return s
    members = np.flatnonzero(gid >= 0)
    first = np.full(n_groups, n, dtype=np.int64)
    np.minimum.at(first, gid[members], members)
    order = np.argsort(first, kind="stable")  # groups by insertion point
    first_sorted = first[order]
    new_of_old = np.arange(n, dtype=np.int64) + np.searchsorted(first_sorted, np.arange(n), side="right")
    delay_new = np.empty(n_groups, dtype=np.int64)
    delay_new[order] = first_sorted + np.arange(n_groups)

    # edges: (child, parent) in old ids; edges from a group op to an op outside its group move to the delay
    counts = np.diff(s.dep_ptr.astype(np.int64))
    child = np.repeat(np.arange(n, dtype=np.int64), counts)
    parent = s.dep_idx.astype(np.int64)
    g_child = gid[child]
    outside = (g_child >= 0) & (gid[parent] != g_child)
    keep_c, keep_p = new_of_old[child[~outside]], new_of_old[parent[~outside]]
    moved_c, moved_p = delay_new[g_child[outside]], new_of_old[parent[outside]]
    has_inside = np.zeros(n, dtype=bool)
    has_inside[child[~outside & (g_child >= 0)]] = True
    heads = members[~has_inside[members]]  # group ops with no parent inside the group wait for the delay
    head_c, head_p = new_of_old[heads], delay_new[gid[heads]]
    c_all = np.concatenate([keep_c, moved_c, head_c])
    p_all = np.concatenate([keep_p, moved_p, head_p])
    m = n + n_groups
    if (p_all >= c_all).any():  # an instance's ops on a rank are contiguous in compiled schedules
        raise ScheduleError("cannot insert a delay before a collective whose ops on a rank are interleaved "
                            "with other work")
    key = np.unique(c_all * m + p_all)
    c_all, p_all = key // m, key % m
    dep_ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(c_all, minlength=m), out=dep_ptr[1:])

    def grow(old: np.ndarray, fill: int | np.ndarray) -> np.ndarray:
        out = np.empty(m, dtype=old.dtype)
        out[new_of_old] = old
        out[delay_new] = fill
        return out

    rank_counts = np.bincount(np.concatenate([rank, rank[first]]), minlength=s.world_size)
    rank_op_ptr = np.zeros(s.world_size + 1, dtype=np.int64)
    np.cumsum(rank_counts, out=rank_op_ptr[1:])
    nodes = DELAY_NODE_BASE - np.asarray(group_spec, dtype=np.int64)
    return dataclasses.replace(
        s,
        op_rank=grow(s.op_rank, rank[first].astype(s.op_rank.dtype)),
        op_kind=grow(s.op_kind, OP_DELAY),
        op_flow=grow(s.op_flow, -1),
        op_duration_ns=grow(s.op_duration_ns, 0),
        op_not_before_ns=grow(s.op_not_before_ns, -1),
        op_node=grow(s.op_node, nodes),
        dep_ptr=dep_ptr,
        dep_idx=p_all.astype(np.int32 if m < 2**31 else np.int64),
        rank_op_ptr=rank_op_ptr,
    )


def perturb_run(
    schedule: Schedule,
    specs: Sequence[DelaySpec],
    ranks: Sequence[RankPerturbation],
    seed: int,
) -> tuple[Schedule, dict[str, dict[str, float | int]]]:
    """The run schedule with compute scaled, inserted delays drawn and NIC caps set; and per rank the
    injected delays' ``count``, ``total_ns``, ``mean_ns``, ``max_ns`` (ranks with inserted delays only)."""
    s = schedule
    dur = s.op_duration_ns.copy()
    node = s.op_node.astype(np.int64)
    rank = s.op_rank.astype(np.int64)
    compute = (s.op_kind == OP_DELAY) & (node >= 0)
    for rp in ranks:
        if rp.compute_scale is not None:
            sel = compute & np.isin(rank, np.asarray(rp.ranks, dtype=np.int64))
            dur[sel] = np.rint(dur[sel].astype(np.float64) * rp.compute_scale).astype(np.int64)
    injected = np.flatnonzero(node <= DELAY_NODE_BASE)
    rng = np.random.default_rng([int(seed), 0x5EED])
    normals = rng.standard_normal(injected.shape[0])
    for k, spec in enumerate(specs):
        mine = node[injected] == DELAY_NODE_BASE - k
        if spec.dist == "fixed":
            dur[injected[mine]] = int(spec.fixed_ns)
        else:
            dur[injected[mine]] = np.rint(spec.median_ns * np.exp(spec.sigma * normals[mine])).astype(np.int64)
    stats: dict[str, dict[str, float | int]] = {}
    for r in np.unique(rank[injected]).tolist():
        d = dur[injected[rank[injected] == r]]
        stats[str(r)] = {"count": int(d.shape[0]), "total_ns": int(d.sum()), "mean_ns": float(d.mean()),
                         "max_ns": int(d.max())}
    meta = dict(s.meta)
    caps = {str(r): float(rp.nic_rate_bps) for rp in ranks if rp.nic_rate_bps is not None for r in rp.ranks}
    if caps:
        meta["nic_rate_bps"] = caps
    return dataclasses.replace(s, op_duration_ns=dur, meta=meta), stats
