"""Put schedules side by side (merge) or one after another (repeat) without recompiling.

Theory of operation
-------------------
Both operations concatenate the columnar tables of several :class:`Schedule` parts with offsets:

* **flows** are appended in part order (flow ids of part ``p`` shift by the flows of parts ``< p``);
  ``flow_coll`` shifts by the instances of earlier parts.
* **ops** stay grouped by rank (``rank_op_ptr``): rank ``r``'s ops are its ops of part 0, then of part 1,
  … Each op keeps its parents (remapped to the new global ids); ``op_flow`` shifts with the flows.
* **collective instances** are appended; group and algorithm indices are remapped to the union of the
  parts' ``group_names`` / ``algorithm_names`` (first seen first).

:func:`merge_schedules` is for independent workloads that run *at once* (one part per inline collective
group): nothing links the parts, queue-pair ids of part ``p`` shift past every id of earlier parts (a
QP belongs to one (group, src, dst) pair, and the groups of different parts are different).

:func:`repeat_schedule` runs one part ``n`` times *in sequence* (warmup + measured run iterations):
iteration ``k`` reuses the same queue pairs (PSNs continue, as a real job reuses its connections),
its instances keep their group with ``seq`` continuing after iteration ``k−1``, and on every rank
each op of iteration ``k`` that has no parent waits for every *sink* (an op with no child on that rank)
of iteration ``k−1`` on the same rank — a per-rank step boundary, like a training step. Open-loop
parts (any ``not_before_ns`` set, no dependencies) are not chained; their ``not_before_ns`` shift by
``k × period`` where period = the largest ``not_before_ns + duration_ns`` of the part (communication
counts as zero time there, as in the open-loop estimate).

``meta["coll_roots"]`` (root rank per rooted instance) is carried over with the instances' new indices.

``meta["run"]`` of a repeated schedule records ``iterations``, ``warmup``, ``colls_per_iteration``,
``flows_per_iteration`` and ``ops_per_iteration`` (per rank) so results can tell warmup from measured
instances: instance ``i`` belongs to run iteration ``i // colls_per_iteration``, flow ``f`` to
``f // flows_per_iteration``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from emulator.errors import ScheduleError
from emulator.schedule.model import Schedule, dependencies, op_layout

_I32, _I64 = np.int32, np.int64


def _union(names_lists: Sequence[tuple[str, ...]]) -> tuple[tuple[str, ...], list[np.ndarray]]:
    out: list[str] = []
    index: dict[str, int] = {}
    maps = []
    for names in names_lists:
        m = []
        for n in names:
            if n not in index:
                index[n] = len(out)
                out.append(n)
            m.append(index[n])
        maps.append(np.asarray(m, dtype=_I64))
    return tuple(out), maps


def _sinks(s: Schedule) -> np.ndarray:
    """Bool per op: no other op (of its rank) depends on it."""
    has_child = np.zeros(s.n_ops, dtype=bool)
    if s.dep_idx.size:
        has_child[s.dep_idx.astype(_I64)] = True
    return ~has_child


def _concat(parts: Sequence[Schedule], *, chain: bool, qp_shift: bool, seq_continue: bool,
            not_before_shift: Sequence[int], meta: dict) -> Schedule:
    if not parts:
        raise ScheduleError("nothing to combine: no schedule parts")
    world = max(p.world_size for p in parts)
    group_names, gmaps = _union([p.group_names for p in parts])
    algo_names, amaps = _union([p.algorithm_names for p in parts])

    flow_off = np.cumsum([0] + [p.n_flows for p in parts])
    coll_off = np.cumsum([0] + [p.n_colls for p in parts])
    qp_off = [0]
    for p in parts:
        qp_off.append(qp_off[-1] + ((int(p.flow_qp.max()) + 1) if (qp_shift and p.n_flows) else 0))

    # ---- flows
    def cat(name: str, dtype, shift=None) -> np.ndarray:
        arrs = []
        for i, p in enumerate(parts):
            a = getattr(p, name).astype(dtype, copy=True)
            if shift is not None:
                a = shift(i, a)
            arrs.append(a)
        return np.concatenate(arrs) if arrs else np.zeros(0, dtype)

    flow_qp = cat("flow_qp", _I32, lambda i, a: a + qp_off[i])
    flow_coll = cat("flow_coll", _I32, lambda i, a: np.where(a >= 0, a + coll_off[i], a))

    # ---- ops: new order is by rank, then part, then original order
    rank_counts = np.zeros(world, dtype=_I64)
    new_ids: list[np.ndarray] = []
    per_part_rank_counts = []
    for p in parts:
        c = np.zeros(world, dtype=_I64)
        c[: p.world_size] = np.diff(p.rank_op_ptr)
        per_part_rank_counts.append(c)
        rank_counts += c
    op_rank, rank_op_ptr = op_layout(rank_counts)
    # start of part i's block inside rank r = rank_op_ptr[r] + sum_{j<i} counts_j[r]
    running = rank_op_ptr[:-1].copy()
    for i, p in enumerate(parts):
        ids = np.empty(p.n_ops, dtype=_I64)
        for r in range(p.world_size):
            a, b = int(p.rank_op_ptr[r]), int(p.rank_op_ptr[r + 1])
            ids[a:b] = running[r] + np.arange(b - a, dtype=_I64)
        running = running + per_part_rank_counts[i]
        new_ids.append(ids)
    n_ops = int(rank_op_ptr[-1])

    def scatter(name: str, dtype, shift=None) -> np.ndarray:
        out = np.zeros(n_ops, dtype=dtype)
        for i, p in enumerate(parts):
            a = getattr(p, name).astype(dtype, copy=True)
            if shift is not None:
                a = shift(i, a)
            out[new_ids[i]] = a
        return out

    op_kind = scatter("op_kind", np.int8)
    op_flow = scatter("op_flow", _I32, lambda i, a: np.where(a >= 0, a + flow_off[i], a))
    op_duration = scatter("op_duration_ns", _I64)
    op_not_before = scatter("op_not_before_ns", _I64,
                            lambda i, a: np.where(a >= 0, a + not_before_shift[i], a))
    op_node = scatter("op_node", _I64)

    # ---- dependencies (child, parent) pairs in new ids
    children, parents = [], []
    prev_sinks: np.ndarray | None = None
    for i, p in enumerate(parts):
        cnt = np.diff(p.dep_ptr)
        children.append(new_ids[i][np.repeat(np.arange(p.n_ops, dtype=_I64), cnt)])
        parents.append(new_ids[i][p.dep_idx.astype(_I64)])
        if chain and prev_sinks is not None:
            roots = np.flatnonzero(cnt == 0)
            # every root of this part waits for every sink of the previous part on the same rank
            sink_rank = op_rank[prev_sinks]
            root_ids = new_ids[i][roots]
            root_rank = op_rank[root_ids]
            order = np.argsort(sink_rank, kind="stable")
            sr = sink_rank[order]
            lo = np.searchsorted(sr, root_rank, side="left")
            hi = np.searchsorted(sr, root_rank, side="right")
            n_each = hi - lo
            if n_each.sum():
                children.append(np.repeat(root_ids, n_each))
                parents.append(np.concatenate([prev_sinks[order][a:b] for a, b in zip(lo, hi, strict=True)]))
        if chain:
            prev_sinks = new_ids[i][_sinks(p)]
    child = np.concatenate(children) if children else np.zeros(0, _I64)
    parent = np.concatenate(parents) if parents else np.zeros(0, _I64)
    dep_ptr, dep_idx = dependencies(child, parent, n_ops)

    # ---- collective instances
    coll_group = cat("coll_group", _I32, lambda i, a: gmaps[i][a].astype(_I32) if a.size else a)
    coll_algorithm = cat("coll_algorithm", np.int16, lambda i, a: amaps[i][a].astype(np.int16) if a.size else a)
    coll_seq = cat("coll_seq", _I32)
    if seq_continue:
        seen: dict[int, int] = {}
        start = 0
        for p in parts:
            g = coll_group[start : start + p.n_colls]
            shift = np.asarray([seen.get(int(x), 0) for x in g], dtype=_I32)
            coll_seq[start : start + p.n_colls] += shift
            for x in np.unique(g).tolist():
                seen[int(x)] = seen.get(int(x), 0) + int(np.count_nonzero(g == x))
            start += p.n_colls
    members = np.cumsum([0] + [int(p.coll_rank_ptr[-1]) for p in parts])
    coll_rank_ptr = np.concatenate(
        [np.zeros(1, _I64)] + [p.coll_rank_ptr[1:].astype(_I64) + members[i] for i, p in enumerate(parts)]
    )
    roots = [(p.coll_root_ranks(), int(coll_off[i])) for i, p in enumerate(parts)]
    rooted_coll = np.concatenate([np.flatnonzero(r >= 0) + off for r, off in roots]) if roots else np.zeros(0, _I64)
    if rooted_coll.size:  # root rank of every rooted instance, at its new index
        meta = {**meta, "coll_roots": {"coll": rooted_coll.tolist(),
                                       "rank": np.concatenate([r[r >= 0] for r, _ in roots]).tolist()}}
    return Schedule(
        world_size=world,
        flow_src=cat("flow_src", _I32),
        flow_dst=cat("flow_dst", _I32),
        flow_size_bytes=cat("flow_size_bytes", _I64),
        flow_qp=flow_qp,
        flow_coll=flow_coll,
        flow_step=cat("flow_step", _I32),
        flow_chunk=cat("flow_chunk", _I32),
        op_rank=op_rank,
        op_kind=op_kind,
        op_flow=op_flow,
        op_duration_ns=op_duration,
        op_not_before_ns=op_not_before,
        op_node=op_node,
        dep_ptr=dep_ptr,
        dep_idx=dep_idx,
        rank_op_ptr=rank_op_ptr,
        coll_type=cat("coll_type", np.int8),
        coll_group=coll_group,
        coll_seq=coll_seq,
        coll_size_bytes=cat("coll_size_bytes", _I64),
        coll_algorithm=coll_algorithm,
        coll_rank_ptr=coll_rank_ptr,
        coll_rank_idx=cat("coll_rank_idx", _I32),
        group_names=group_names,
        algorithm_names=algo_names,
        meta=meta,
    )


def merge_schedules(parts: Sequence[Schedule], meta: dict | None = None) -> Schedule:
    """Independent schedules side by side (they run at once; see module docstring)."""
    if not parts:
        raise ScheduleError("nothing to merge: no schedules")
    if len(parts) == 1:
        return parts[0]
    return _concat(parts, chain=False, qp_shift=True, seq_continue=False, not_before_shift=[0] * len(parts),
                   meta=dict(meta or parts[0].meta))


def is_open_loop(s: Schedule) -> bool:
    return bool((s.op_not_before_ns >= 0).any())


def repeat_schedule(schedule: Schedule, iterations: int, warmup: int = 0) -> Schedule:
    """``warmup + iterations`` copies of ``schedule`` in sequence (see module docstring)."""
    n = int(warmup) + int(iterations)
    if iterations < 1 or warmup < 0:
        raise ScheduleError(f"run iterations must be >= 1 and warmup >= 0, got {iterations} and {warmup}")
    open_loop = is_open_loop(schedule)
    period = 0
    if open_loop and schedule.n_ops:
        period = max(1, int((np.maximum(schedule.op_not_before_ns, 0) + schedule.op_duration_ns).max()))
    meta = dict(schedule.meta)
    meta["run"] = {
        "iterations": int(iterations),
        "warmup": int(warmup),
        "colls_per_iteration": schedule.n_colls,
        "flows_per_iteration": schedule.n_flows,
        "ops_per_iteration": [int(x) for x in np.diff(schedule.rank_op_ptr)],
        "open_loop_period_ns": period,
    }
    if n == 1:
        return Schedule(**{**{f: getattr(schedule, f) for f in schedule.__dataclass_fields__}, "meta": meta})
    return _concat([schedule] * n, chain=not open_loop, qp_shift=False, seq_continue=True,
                   not_before_shift=[k * period for k in range(n)], meta=meta)


def sequence_schedules(parts: Sequence[Schedule], meta: dict | None = None) -> Schedule:
    """Schedules one after another on every rank, without a run record (see module docstring: each part's
    first ops wait for the previous part's last ops on the same rank; queue pairs are reused)."""
    if len(parts) == 1:
        return parts[0]
    return _concat(parts, chain=True, qp_shift=False, seq_continue=True, not_before_shift=[0] * len(parts),
                   meta=dict(meta if meta is not None else parts[-1].meta))


def delay_schedule(world_size: int, duration_ns: int) -> Schedule:
    """One DELAY op of ``duration_ns`` on each of ``world_size`` ranks, nothing else."""
    from emulator.schedule.model import OP_DELAY

    n = int(world_size)
    op_rank, rank_op_ptr = op_layout(np.ones(n, dtype=_I64))
    e32, e64 = np.zeros(0, _I32), np.zeros(0, _I64)
    return Schedule(
        world_size=n, flow_src=e32, flow_dst=e32, flow_size_bytes=e64, flow_qp=e32, flow_coll=e32,
        flow_step=e32, flow_chunk=e32, op_rank=op_rank, op_kind=np.full(n, OP_DELAY, np.int8),
        op_flow=np.full(n, -1, _I32), op_duration_ns=np.full(n, int(duration_ns), _I64),
        op_not_before_ns=np.full(n, -1, _I64), op_node=np.full(n, -1, _I64),
        dep_ptr=np.zeros(n + 1, _I64), dep_idx=e64, rank_op_ptr=rank_op_ptr,
        coll_type=np.zeros(0, np.int8), coll_group=e32, coll_seq=e32, coll_size_bytes=e64,
        coll_algorithm=np.zeros(0, np.int16), coll_rank_ptr=np.zeros(1, _I64), coll_rank_idx=e32)


def place_ranks(s: Schedule, ranks: Sequence[int], world_size: int, group_prefix: str = "") -> Schedule:
    """``s`` with its rank ``i`` renamed ``ranks[i]`` in a world of ``world_size`` ranks (ops regrouped by new
    rank, in their order), and every group name prefixed with ``group_prefix``."""
    m = np.asarray(ranks, dtype=_I64)
    if m.shape[0] < s.world_size or (m.size and (m.min() < 0 or m.max() >= world_size)):
        raise ScheduleError(f"placement of {m.shape[0]} ranks into {world_size} does not cover the "
                            f"schedule's {s.world_size} ranks")
    if np.unique(m).size != m.size:
        raise ScheduleError("placement names one rank twice")
    new_rank = m[s.op_rank.astype(_I64)]
    order = np.argsort(new_rank, kind="stable")  # new op id -> old op id
    new_id = np.empty(s.n_ops, dtype=_I64)
    new_id[order] = np.arange(s.n_ops, dtype=_I64)
    op_rank, rank_op_ptr = op_layout(np.bincount(new_rank, minlength=world_size))
    child = np.repeat(np.arange(s.n_ops, dtype=_I64), np.diff(s.dep_ptr))
    dep_ptr, dep_idx = dependencies(new_id[child], new_id[s.dep_idx.astype(_I64)], s.n_ops)
    meta = dict(s.meta)
    if meta.get("coll_roots"):
        roots = meta["coll_roots"]
        meta["coll_roots"] = {"coll": list(roots["coll"]), "rank": m[np.asarray(roots["rank"], _I64)].tolist()}
    return Schedule(
        world_size=int(world_size),
        flow_src=m[s.flow_src.astype(_I64)].astype(_I32),
        flow_dst=m[s.flow_dst.astype(_I64)].astype(_I32),
        flow_size_bytes=s.flow_size_bytes, flow_qp=s.flow_qp, flow_coll=s.flow_coll, flow_step=s.flow_step,
        flow_chunk=s.flow_chunk,
        op_rank=op_rank, op_kind=s.op_kind[order], op_flow=s.op_flow[order],
        op_duration_ns=s.op_duration_ns[order], op_not_before_ns=s.op_not_before_ns[order],
        op_node=s.op_node[order], dep_ptr=dep_ptr, dep_idx=dep_idx, rank_op_ptr=rank_op_ptr,
        coll_type=s.coll_type, coll_group=s.coll_group, coll_seq=s.coll_seq, coll_size_bytes=s.coll_size_bytes,
        coll_algorithm=s.coll_algorithm, coll_rank_ptr=s.coll_rank_ptr,
        coll_rank_idx=m[s.coll_rank_idx.astype(_I64)].astype(_I32),
        group_names=tuple(group_prefix + g for g in s.group_names), algorithm_names=s.algorithm_names, meta=meta)
