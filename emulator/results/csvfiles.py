"""The CSV files of a results directory, derived from the schedule and raw records only.

Conventions: one header line, ``,``-separated, times in integer ns with ``-1`` = did not happen (as in
the raw records), floats with full precision, an empty cell for a float with no finite value
(slowdown of an unfinished flow), booleans as ``0``/``1``.

* ``flows.csv`` — one row per flow (flow id = schedule row): ids, endpoints, size, queue pair, instance
  (``coll``, −1 for point-to-point), algorithm step and chunk, run iteration and warmup flag, scheduled /
  actual start, end (last byte held by the receiver), acked (last byte acknowledged at the sender), FCT
  from the scheduled and from the actual start, ideal FCT (empty fabric), slowdown (≥ 1), packets sent
  (incl. retransmits), retransmitted packets, CE marks seen, CNPs received by the sender and sent by the
  receiver; then the per-QP detail (wire queue pairs, and per part its UDP source port, bytes, start and
  end) and the flow's job (``workload.jobs``; empty without jobs).
* ``collectives.csv`` — one row per (instance, member rank): instance id, type, group name, seq, size,
  algorithm, rank, start, end, completion (end − start), is_last (a last finisher of a complete
  instance), warmup flag, run iteration; then the straggler figures of complete instances (warmup ones
  too; empty cells for an incomplete instance): the member's lateness and is_slow judged as in results.json
  (``analysis.straggler_basis``: ``ideal`` = the excess over the algorithm's own finish order on an empty
  fabric, see :mod:`emulator.stats.stragglers`; ``median`` = end − median end of the instance and
  completion > k × the instance's median completion; k = ``analysis.slow_factor``), and,
  repeated on every member row of the instance, its CCT (last end − first start), slowest rank, skew
  (max end − median end), straggler delay ((max T − min T)/max T) and straggler slowdown (max T / min T).
* ``ranks.csv`` — one row per rank: the ``ranks.<rank>`` summary flattened (completion p50/p99/max;
  an empty ``events_dropped`` cell where the records have no event log).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from emulator.endpoint.qpn import part_sizes, receiver_qpn, sender_qpn
from emulator.endpoint.records import PART_HELD, PART_STARTED, RankRecords
from emulator.schedule.model import OP_SEND, Schedule
from emulator.schema import dump
from emulator.stats import CollectiveRecords, analyze_stragglers, collective_name
from emulator.stats.analysis_options import AnalysisOptions, ideal_ops
from emulator.stats.jobs import flow_jobs
from emulator.stats.run_summary import flow_figures
from emulator.stats.stragglers import DEFAULT_LATE_TOLERANCE, DEFAULT_SLOW_FACTOR
from emulator.stats.summary_types import RunSummary
from emulator.stats.tables import flow_table, group_name, incomplete_instances, member_table
from emulator.wire.marking import udp_source_port

FLOW_COLUMNS = ("flow", "src", "dst", "size_bytes", "qp", "coll", "step", "chunk", "iteration", "warmup",
                "scheduled_start_ns", "actual_start_ns", "end_ns", "acked_ns", "fct_scheduled_ns", "fct_actual_ns",
                "ideal_fct_ns", "slowdown", "packets", "retransmits", "ce_marks", "cnps_received", "cnps_sent",
                "qps", "udp_sports", "qp_bytes", "qp_start_ns", "qp_end_ns", "job")
#: per-QP detail (last, so older readers by position keep theirs): ``qps`` wire queue pairs the flow was split
#: over (fabric.transport.qps_per_peer), then per part (space-separated, in part order): ``udp_sports`` its RoCEv2
#: UDP source port, ``qp_bytes`` its bytes, ``qp_start_ns`` its first packet handed to the driver,
#: ``qp_end_ns`` every byte of it held by the receiver (-1: did not happen); FCT stays per flow.
#: ``job``: the flow's job of ``workload.jobs`` (empty without jobs)
COLLECTIVE_COLUMNS = ("instance", "type", "group", "seq", "size_bytes", "algorithm", "rank", "start_ns", "end_ns",
                      "completion_ns", "is_last", "warmup", "iteration", "lateness_ns", "is_slow", "cct_ns",
                      "slowest_rank", "skew_ns", "straggler_delay", "straggler_slowdown")
#: per-instance figures repeated on each member row (empty for an incomplete instance)
INSTANCE_COLUMNS = ("cct_ns", "slowest_rank", "skew_ns", "straggler_delay", "straggler_slowdown")
RANK_COLUMNS = ("rank", "reported", "ops", "ops_done", "bytes_sent", "bytes_received", "packets_sent", "retransmits",
                "cnps_sent", "cnps_received", "ce_marks", "timeouts", "events_dropped", "instances", "last_count", "slow_count",
                "mean_lateness_ns", "completion_p50_ns", "completion_p99_ns", "completion_max_ns")


def _cell(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    if v is None:
        return ""
    return v


def _write(path: Path, header: Sequence[str], columns: Sequence[Iterable[Any]]) -> int:
    n = 0
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        for row in zip(*columns, strict=True):
            w.writerow([_cell(v) for v in row])
            n += 1
    return n


def flows_columns(schedule: Schedule, ops: Mapping[str, np.ndarray], opts: AnalysisOptions) -> dict[str, np.ndarray]:
    ft = dict(flow_table(schedule, ops))
    st = flow_figures(ft, opts)
    ft["fct_scheduled_ns"] = st.fct_scheduled_ns
    ft["fct_actual_ns"] = st.fct_actual_ns
    ft["ideal_fct_ns"] = st.ideal_fct_ns
    ft["slowdown"] = st.slowdown
    return ft


def wire_qp_columns(schedule: Schedule, qps_per_peer: int) -> dict[str, list[Any]]:
    """Per flow: how many wire queue pairs carried it and their UDP source ports (``part_sizes``)."""
    n_qps: list[Any] = []
    sports: list[Any] = []
    for qp, size in zip(schedule.flow_qp.tolist(), schedule.flow_size_bytes.tolist(), strict=True):
        wire = [qp * qps_per_peer + k for k, _ in part_sizes(int(size), qps_per_peer)]
        n_qps.append(len(wire))
        sports.append(" ".join(str(udp_source_port(sender_qpn(w), receiver_qpn(w))) for w in wire))
    return {"qps": n_qps, "udp_sports": sports}


def part_times(schedule: Schedule, records: Mapping[int, RankRecords], qps_per_peer: int,
               ) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) ns per flow and part (``n_flows × Q``, -1: did not happen) from the records' part logs:
    start = the SEND part's first packet, end = the RECV part held (the earliest row of each)."""
    q = qps_per_peer
    never = np.iinfo(np.int64).max
    start = np.full((schedule.n_flows, q), never, dtype=np.int64)
    end = np.full((schedule.n_flows, q), never, dtype=np.int64)
    for r, rec in records.items():
        if not rec.part_t_ns:
            continue
        op = int(schedule.rank_op_ptr[r]) + np.asarray(rec.part_op, dtype=np.int64)
        flow = schedule.op_flow[op].astype(np.int64)
        k = np.asarray(rec.part_qp, dtype=np.int64) - schedule.flow_qp[flow].astype(np.int64) * q
        t = np.asarray(rec.part_t_ns, dtype=np.int64)
        kind = np.asarray(rec.part_kind)
        ok = (k >= 0) & (k < q)
        sent = ok & (kind == PART_STARTED) & (schedule.op_kind[op] == OP_SEND)
        held = ok & (kind == PART_HELD)
        np.minimum.at(start, (flow[sent], k[sent]), t[sent])
        np.minimum.at(end, (flow[held], k[held]), t[held])
    return np.where(start == never, -1, start), np.where(end == never, -1, end)


def part_columns(schedule: Schedule, flows: Mapping[str, list[Any]], records: Mapping[int, RankRecords] | None,
                 qps_per_peer: int) -> dict[str, list[str]]:
    """``qp_bytes``, ``qp_start_ns``, ``qp_end_ns`` per flow (space-separated per part, see FLOW_COLUMNS); with
    one QP per peer the flow's own bytes, start and end, from ``flows`` (the flow table's columns)."""
    if qps_per_peer == 1 or records is None:
        return {"qp_bytes": [str(x) for x in flows["size_bytes"]],
                "qp_start_ns": [str(x) for x in flows["actual_start_ns"]],
                "qp_end_ns": [str(x) for x in flows["end_ns"]]}
    start, end = part_times(schedule, records, qps_per_peer)
    out: dict[str, list[str]] = {"qp_bytes": [], "qp_start_ns": [], "qp_end_ns": []}
    for f, size in enumerate(schedule.flow_size_bytes.tolist()):
        parts = part_sizes(int(size), qps_per_peer)
        out["qp_bytes"].append(" ".join(str(n) for _, n in parts))
        out["qp_start_ns"].append(" ".join(str(int(start[f, k])) for k, _ in parts))
        out["qp_end_ns"].append(" ".join(str(int(end[f, k])) for k, _ in parts))
    return out


def write_flows_csv(path: Path, schedule: Schedule, ops: Mapping[str, np.ndarray], opts: AnalysisOptions,
                    qps_per_peer: int = 1, records: Mapping[int, RankRecords] | None = None) -> int:
    """Write flows.csv (``records``: for the per-part times with ``qps_per_peer`` > 1)."""
    ft: dict[str, Any] = {c: v.tolist() for c, v in flows_columns(schedule, ops, opts).items()}
    ft.update(wire_qp_columns(schedule, qps_per_peer))
    ft.update(part_columns(schedule, ft, records, qps_per_peer))
    ft["job"] = flow_jobs(schedule).tolist()
    return _write(path, FLOW_COLUMNS, [ft[c] for c in FLOW_COLUMNS])


def _straggler_cells(m: Mapping[str, np.ndarray], good: np.ndarray, slow_factor: float,
                     ideal: Mapping[str, np.ndarray] | None = None, late_tolerance: float = DEFAULT_LATE_TOLERANCE,
                     ) -> dict[str, list[Any]]:
    """Per-member and per-instance straggler figures of the member rows ``good`` (None elsewhere)."""
    n = int(good.shape[0])
    cols: dict[str, list[Any]] = {c: [None] * n for c in ("lateness_ns", "is_slow", *INSTANCE_COLUMNS)}
    if not good.any():
        return cols
    recs = CollectiveRecords.from_instance_ids(m["instance"][good], m["rank"][good], m["start_ns"][good],
                                               m["end_ns"][good])
    order = np.argsort(m["instance"][good], kind="stable")  # from_instance_ids' grouping of the rows
    kw = {} if ideal is None else {"ideal_start_ns": ideal["start_ns"][good][order],
                                   "ideal_end_ns": ideal["end_ns"][good][order]}
    if kw and min(int(v.min()) for v in kw.values()) < 0:
        kw = {}  # the ideal run left one of these members unfinished: judge against the median
    a = analyze_stragglers(recs, slow_factor, late_tolerance=late_tolerance, **kw)
    seg = recs.member_instance
    per_row = {"lateness_ns": a.members.lateness_ns, "is_slow": a.members.is_slow, "cct_ns": a.times.cct_ns[seg],
               "slowest_rank": a.instances.slowest_rank[seg], "skew_ns": a.instances.skew_ns[seg],
               "straggler_delay": a.instances.straggler_delay[seg],
               "straggler_slowdown": a.instances.straggler_slowdown[seg]}
    where = np.flatnonzero(good).tolist()
    for name, values in per_row.items():
        col = cols[name]
        for i, v in zip(where, values.tolist(), strict=True):
            col[i] = v
    return cols


def collectives_columns(schedule: Schedule, ops: Mapping[str, np.ndarray],
                        slow_factor: float = DEFAULT_SLOW_FACTOR,
                        options: AnalysisOptions | None = None) -> dict[str, list[Any]]:
    """The collectives.csv columns; with ``options`` its slow factor and straggler basis apply."""
    s = schedule
    ideal = None
    tolerance = DEFAULT_LATE_TOLERANCE
    if options is not None:
        slow_factor, tolerance = options.slow_factor, options.late_tolerance
        table = ideal_ops(s, options)
        ideal = None if table is None else member_table(s, table)
    m = member_table(s, ops)
    inst = m["instance"]
    done = (m["start_ns"] >= 0) & (m["end_ns"] >= 0) & m["has_ops"]
    incomplete = incomplete_instances(m, s.n_colls)
    last = np.full(s.n_colls, -1, dtype=np.int64)
    np.maximum.at(last, inst, np.where(m["has_ops"], m["end_ns"], -1))
    is_last = done & ~incomplete[inst] & (m["end_ns"] == last[inst]) if inst.size else done
    types = [collective_name(int(t)) for t in s.coll_type.tolist()]
    groups = [group_name(s, g) for g in s.coll_group.tolist()]
    algos = [s.algorithm_names[a] if 0 <= a < len(s.algorithm_names) else str(a) for a in s.coll_algorithm.tolist()]
    il = inst.tolist()
    return {
        "instance": il,
        "type": [types[i] for i in il],
        "group": [groups[i] for i in il],
        "seq": s.coll_seq[inst].tolist(),
        "size_bytes": s.coll_size_bytes[inst].tolist(),
        "algorithm": [algos[i] for i in il],
        "rank": m["rank"].tolist(),
        "start_ns": m["start_ns"].tolist(),
        "end_ns": m["end_ns"].tolist(),
        "completion_ns": np.where(done, m["end_ns"] - m["start_ns"], -1).tolist(),
        "is_last": is_last.tolist(),
        "warmup": m["warmup"].tolist(),
        "iteration": m["iteration"].tolist(),
        **_straggler_cells(m, done & ~incomplete[inst] if inst.size else done, slow_factor, ideal, tolerance),
    }


def write_collectives_csv(path: Path, schedule: Schedule, ops: Mapping[str, np.ndarray],
                          slow_factor: float = DEFAULT_SLOW_FACTOR, options: AnalysisOptions | None = None,
                          arrays_path: Path | None = None) -> int:
    """Write collectives.csv (and, with ``arrays_path``, the same columns as :func:`collective_arrays`)."""
    cols = collectives_columns(schedule, ops, slow_factor, options)
    if arrays_path is not None:
        with open(arrays_path, "wb") as fh:
            np.savez_compressed(fh, **collective_arrays(cols))
    return _write(path, COLLECTIVE_COLUMNS, [cols[c] for c in COLLECTIVE_COLUMNS])


#: the text columns of collectives.csv; the others are numbers (booleans as bool arrays)
_TEXT_COLUMNS = ("type", "group", "algorithm")
_BOOL_COLUMNS = ("is_last", "warmup", "is_slow")
#: numeric columns whose empty cells (no finite value) become NaN, so they are float arrays
_FLOAT_COLUMNS = ("lateness_ns", "cct_ns", "slowest_rank", "skew_ns", "straggler_delay", "straggler_slowdown")


def collective_arrays(cols: Mapping[str, list[Any]]) -> dict[str, np.ndarray]:
    """The collectives.csv columns as numpy arrays (``collectives.npz``): text as str, flags as bool, the
    per-instance figures as float64 with NaN where the CSV cell is empty, the rest as int64."""
    out: dict[str, np.ndarray] = {}
    for c in COLLECTIVE_COLUMNS:
        v = cols[c]
        if c in _TEXT_COLUMNS:
            out[c] = np.asarray(v, dtype=np.str_) if v else np.zeros(0, dtype=np.str_)
        elif c in _BOOL_COLUMNS:
            out[c] = np.asarray([bool(x) for x in v], dtype=bool)
        elif c in _FLOAT_COLUMNS:
            out[c] = np.asarray([math.nan if x is None else float(x) for x in v], dtype=np.float64)
        else:
            out[c] = np.asarray(v, dtype=np.int64)
    return out


def write_ranks_csv(path: Path, summary: RunSummary) -> int:
    ranks = summary.ranks
    rows: dict[str, list[Any]] = {c: [] for c in RANK_COLUMNS}
    for key in sorted(ranks, key=int):
        r = ranks[key]
        comp = r.completion
        flat = dict(dump(r), rank=int(key), completion_p50_ns=comp.p50, completion_p99_ns=comp.p99,
                    completion_max_ns=comp.max)
        for c in RANK_COLUMNS:
            rows[c].append(flat.get(c))
    return _write(path, RANK_COLUMNS, [rows[c] for c in RANK_COLUMNS])


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))
