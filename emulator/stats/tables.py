"""Raw records + schedule → per-op, per-flow and per-member tables (numpy columns).

Theory of operation
-------------------
Drivers return :class:`~emulator.endpoint.records.RankRecords` per rank, indexed by the rank's local
op. :func:`op_table` lays them side by side in global op order (a rank that sent nothing back keeps
``-1`` times and zero counters). From there:

* :func:`flow_table` — one row per flow (flow id = schedule row): the SEND op (on ``src``) gives the
  *scheduled* start (its ``ready_ns``), the *actual* start (``start_ns``), the ack time (``end_ns``),
  packets sent incl. retransmits, retransmitted packets and CNPs received; the RECV op (on ``dst``)
  gives the *end* (every byte held: ``end_ns``), CE marks seen and CNPs sent. ``-1`` = did not happen.
* :func:`member_table` — one row per (collective instance, member rank), in the schedule's CSR member
  order: ``start`` = the earliest ``ready_ns`` of the rank's ops in the instance (when its schedule let
  the instance begin), ``end`` = the latest ``end_ns`` (everything it sent delivered and acknowledged,
  everything addressed to it held). A member with an op that never became ready / never ended gets
  ``-1``; a member without ops in the instance (possible only for degenerate algorithms) is flagged
  ``has_ops = False`` and left out of the statistics. An instance with such a ``-1`` member is
  incomplete (:func:`incomplete_instances`, the one definition results.json and collectives.csv use).

* :func:`iteration_table` — one row per (run iteration, rank with ops in it): ``start`` = the earliest
  ``ready_ns`` of the rank's ops in that iteration, ``end`` = the latest ``end_ns`` (``-1`` when one of
  them never became ready / never ended), over *every* op (collective, point-to-point and compute).

Run iterations (``schedule.meta["run"]``, see :mod:`emulator.schedule.compose`): instance ``i`` is in
iteration ``i // colls_per_iteration``, flow ``f`` in ``f // flows_per_iteration`` and rank ``r``'s
``j``-th op in ``j // ops_per_iteration[r]`` (the repeated schedule keeps each rank's ops in iteration
order); those below ``warmup`` are warmup. A schedule without ``meta["run"]`` is one measured iteration.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from emulator.endpoint.records import OP_COLUMNS, RankRecords
from emulator.errors import ResultsError
from emulator.schedule.model import OP_RECV, OP_SEND, Schedule

_BIG = np.iinfo(np.int64).max


def group_name(schedule: Schedule, group: int) -> str:
    """The name of process group index ``group`` (its index as text when the schedule names none)."""
    return schedule.group_names[group] if group < len(schedule.group_names) else str(group)


def run_info(schedule: Schedule) -> dict[str, int]:
    run = schedule.meta.get("run") or {}
    return {
        "iterations": int(run.get("iterations", 1)),
        "warmup": int(run.get("warmup", 0)),
        "colls_per_iteration": int(run.get("colls_per_iteration", schedule.n_colls)) or 1,
        "flows_per_iteration": int(run.get("flows_per_iteration", schedule.n_flows)) or 1,
    }


def op_iterations(schedule: Schedule) -> np.ndarray:
    """Run iteration of every op (int64, global op order; see module docstring)."""
    info = run_info(schedule)
    n_iter = max(1, info["iterations"] + info["warmup"])
    counts = np.diff(schedule.rank_op_ptr.astype(np.int64))
    per = (schedule.meta.get("run") or {}).get("ops_per_iteration")
    per_rank = np.asarray(per, dtype=np.int64) if per is not None else counts // n_iter
    if per_rank.shape != counts.shape or (per_rank * n_iter != counts).any():
        raise ResultsError(f"schedule meta.run.ops_per_iteration does not match {n_iter} iterations of the "
                           "ops of every rank")
    rank = np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts)
    local = np.arange(schedule.n_ops, dtype=np.int64) - schedule.rank_op_ptr[rank].astype(np.int64)
    return local // np.maximum(per_rank[rank], 1)


def iteration_table(schedule: Schedule, ops: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One row per (run iteration, rank with ops in it), sorted by rank then iteration."""
    info = run_info(schedule)
    it = op_iterations(schedule)
    n = schedule.n_ops
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return {"iteration": empty, "rank": empty, "start_ns": empty, "end_ns": empty, "ops": empty,
                "warmup": np.zeros(0, dtype=bool)}
    rank = schedule.op_rank.astype(np.int64)
    # ops are grouped by rank and, inside a rank, by iteration: every (rank, iteration) is one run of ops
    first = np.flatnonzero(np.concatenate(([True], (rank[1:] != rank[:-1]) | (it[1:] != it[:-1]))))
    ready, end = ops["ready_ns"], ops["end_ns"]
    start = np.minimum.reduceat(np.where(ready < 0, _BIG, ready), first)
    stop = np.maximum.reduceat(end, first)
    unready = np.logical_or.reduceat(ready < 0, first)
    unended = np.logical_or.reduceat(end < 0, first)
    iteration = it[first]
    return {
        "iteration": iteration,
        "rank": rank[first],
        "start_ns": np.where(unready, -1, start),
        "end_ns": np.where(unended, -1, stop),
        "ops": np.diff(np.append(first, n)).astype(np.int64),
        "warmup": iteration < info["warmup"],
    }


def op_table(schedule: Schedule, records: Mapping[int, RankRecords]) -> dict[str, np.ndarray]:
    """Every op column of every rank in global op order (missing ranks: -1 times, 0 counters)."""
    n = schedule.n_ops
    out = {name: np.full(n, -1, dtype=np.int64) if i < 3 else np.zeros(n, dtype=np.int64)
           for i, name in enumerate(OP_COLUMNS)}
    for rank, rec in records.items():
        if not 0 <= rank < schedule.world_size:
            raise ResultsError(f"records of rank {rank}, but the schedule has {schedule.world_size} ranks")
        a, b = int(schedule.rank_op_ptr[rank]), int(schedule.rank_op_ptr[rank + 1])
        if rec.n_ops != b - a:
            raise ResultsError(f"rank {rank}: records hold {rec.n_ops} ops, the schedule {b - a}")
        for name in OP_COLUMNS:
            out[name][a:b] = getattr(rec, name)
    return out


def flow_table(schedule: Schedule, ops: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    s = schedule
    nf = s.n_flows
    kind, flow = s.op_kind, s.op_flow.astype(np.int64)
    send = np.full(nf, -1, dtype=np.int64)
    recv = np.full(nf, -1, dtype=np.int64)
    send[flow[kind == OP_SEND]] = np.flatnonzero(kind == OP_SEND)
    recv[flow[kind == OP_RECV]] = np.flatnonzero(kind == OP_RECV)
    if nf and ((send < 0).any() or (recv < 0).any()):
        raise ResultsError("schedule has a flow without its SEND or RECV op")

    def col(name: str, idx: np.ndarray) -> np.ndarray:
        return ops[name][idx] if nf else np.zeros(0, dtype=np.int64)

    info = run_info(s)
    iteration = np.arange(nf, dtype=np.int64) // info["flows_per_iteration"]
    return {
        "flow": np.arange(nf, dtype=np.int64),
        "src": s.flow_src.astype(np.int64),
        "dst": s.flow_dst.astype(np.int64),
        "size_bytes": s.flow_size_bytes.astype(np.int64),
        "qp": s.flow_qp.astype(np.int64),
        "coll": s.flow_coll.astype(np.int64),
        "step": s.flow_step.astype(np.int64),
        "chunk": s.flow_chunk.astype(np.int64),
        "iteration": iteration,
        "warmup": iteration < info["warmup"],
        "scheduled_start_ns": col("ready_ns", send),
        "actual_start_ns": col("start_ns", send),
        "end_ns": col("end_ns", recv),
        "acked_ns": col("end_ns", send),
        "packets": col("packets", send),
        "retransmits": col("retx_packets", send),
        "ce_marks": col("ce_marks", recv),
        "cnps_received": col("cnps", send),
        "cnps_sent": col("cnps", recv),
    }


def member_table(schedule: Schedule, ops: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    s = schedule
    w = max(1, s.world_size)
    per = np.diff(s.coll_rank_ptr)
    inst = np.repeat(np.arange(s.n_colls, dtype=np.int64), per)
    member_rank = s.coll_rank_idx.astype(np.int64)
    keys = inst * w + member_rank
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    nm = keys.shape[0]

    has_flow = s.op_flow >= 0
    op_ids = np.flatnonzero(has_flow)
    op_coll = s.flow_coll[s.op_flow[op_ids]].astype(np.int64)
    in_coll = op_coll >= 0
    op_ids, op_coll = op_ids[in_coll], op_coll[in_coll]
    op_key = op_coll * w + s.op_rank[op_ids].astype(np.int64)
    pos = np.searchsorted(sorted_keys, op_key)
    if op_key.size and ((pos >= nm) | (sorted_keys[np.minimum(pos, max(nm - 1, 0))] != op_key)).any():
        raise ResultsError("schedule has a collective op on a rank that is not a member of its instance")
    row = order[pos] if op_key.size else pos

    ready, end = ops["ready_ns"][op_ids], ops["end_ns"][op_ids]
    start = np.full(nm, _BIG, dtype=np.int64)
    stop = np.full(nm, -1, dtype=np.int64)
    n_ops = np.bincount(row, minlength=nm)
    unready = np.bincount(row, weights=(ready < 0), minlength=nm) > 0
    unended = np.bincount(row, weights=(end < 0), minlength=nm) > 0
    np.minimum.at(start, row, np.where(ready < 0, _BIG, ready))
    np.maximum.at(stop, row, end)
    has_ops = n_ops > 0
    start = np.where(has_ops & ~unready, start, -1)
    stop = np.where(has_ops & ~unended, stop, -1)
    info = run_info(s)
    iteration = inst // info["colls_per_iteration"]
    return {
        "instance": inst,
        "rank": member_rank,
        "start_ns": start,
        "end_ns": stop,
        "has_ops": has_ops,
        "ops": n_ops.astype(np.int64),
        "iteration": iteration,
        "warmup": iteration < info["warmup"],
    }


def incomplete_instances(members: Mapping[str, np.ndarray], n_colls: int) -> np.ndarray:
    """Bool per collective instance: one of its members with ops never became ready or never ended."""
    done = (members["start_ns"] >= 0) & (members["end_ns"] >= 0)
    return np.bincount(members["instance"][members["has_ops"] & ~done], minlength=n_colls) > 0
