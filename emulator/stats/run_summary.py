"""The summaries of ``results.json``: computed from raw records and the schedule only, typed as
:class:`~emulator.stats.summary_types.RunSummary`.

Theory of operation
-------------------
:func:`compute_summary` takes the run's schedule, the per-rank records, the driver's fabric counters and
health, and the :class:`~emulator.stats.analysis_options.AnalysisOptions` stored with the results; it
never looks at live state, so :func:`emulator.results.recompute` gives the very same summary later.
Warmup instances and flows (see :mod:`emulator.stats.tables`) are recorded in the CSV files but left out
of every distribution; an instance counts only when every member finished it (else it is *incomplete* and
counted apart). Non-finite floats are None (``null`` in JSON, :func:`~emulator.stats.jsonsafe.jsonable`).

Metric paths (what SLOs and ``emulator compare`` address; times in ns, fractions in [0, 1], bandwidth in
GB/s = 10^9 B/s, rates in bit/s; a ``Distribution`` is ``count, min, p50, p90, p99, p999, max, mean,
stdev, cv`` with nearest-rank percentiles, all null when count is 0).

Memory stays flat on long runs (``AnalysisOptions.exact_limit``, default 10^6): a grouping of at most that
many samples (one distribution, or all the groups of a per-type / per-size / per-group / per-rank cut
together) is exact; above it every distribution of the grouping comes from log-linear histograms built
chunk by chunk (:mod:`emulator.stats.bounded`): count, min, max exact, mean exact up to one rounding,
stdev/cv from Chan-combined float64 moments, percentiles within ``relative_error`` (2^-(bits+1), 0.39 %
by default) of the exact nearest-rank value and clamped to [min, max]; such a Distribution carries
``"approx": {"relative_error": e}`` (exact ones carry no ``approx`` key). ``flows.slowdown_by_size`` stays
exact (it orders all measured flows by size once).

``<type>`` for every collective type run (``all_reduce``, ``all_to_all``, ``all_gather``,
``reduce_scatter``, ``broadcast``, ``reduce``, ``gather``, ``scatter``, ``barrier``):
    ``<type>.count`` measured complete instances · ``<type>.incomplete`` · ``<type>.warmup``
    ``<type>.cct.{p50,p90,p99,p999,max,min,mean,cv,...}`` CCT distribution (ns), e.g. ``all_reduce.cct.p99``
    ``<type>.algbw_weighted_gbps``, ``<type>.busbw_weighted_gbps``: the per-instance algbw / busbw
    (nccl-tests factors, t = CCT) averaged with each instance's bytes S as weight — THE per-type figure
    (sizes differ: the per-size figures are ``nccl_table``) · ``<type>.algbw_gbps``, ``<type>.busbw_gbps``
    of the one instance at the median (p50) CCT (kept for SLOs; not shown in reports)
    ``<type>.completion.*`` per-member completion ``T_r`` (ns)
    ``<type>.sizes`` list of per (size, group, n_ranks) rows: ``cct_ns`` distribution, ``busbw_at_median_gbps``
``nccl_table`` rows ``collective, n_ranks, comm_size_bytes, size_bytes, count, instances, time_us,
    algbw_gbps, busbw_gbps, p50_us, p99_us, max_us`` · ``nccl_avg_busbw_gbps``
``groups.<group name>.{collectives, count, incomplete, cct.*, completion.*}``
``stragglers.max_skew`` largest per-instance skew as a fraction of the CCT (``< 20%`` reads 0.2) ·
    ``stragglers.median_skew``, ``stragglers.p99_skew`` (fractions) · ``stragglers.median_skew_ns``,
    ``stragglers.p99_skew_ns``, ``stragglers.max_skew_ns`` · ``stragglers.skew_ns.*``,
    ``stragglers.skew_fraction.*``, ``stragglers.end_spread_ns.*``, ``stragglers.straggler_delay.*``,
    ``stragglers.straggler_slowdown.*`` · ``stragglers.slow_factor`` (k) · ``stragglers.slow_ranks``
    (ranks with ``T_r > k × median`` in at least one instance) · ``stragglers.instances_with_slow_rank`` ·
    ``stragglers.last_finisher_counts.<rank>`` · ``stragglers.most_often_last_rank`` /
    ``most_often_last_count`` · ``stragglers.last_finisher_histogram.<count>``
``ranks.<rank>.{bytes_sent, bytes_received, packets_sent, retransmits, cnps_sent, cnps_received,
    ce_marks, timeouts, events_dropped, reported, ops, ops_done, instances, last_count, slow_count,
    mean_lateness_ns, completion.*}`` (byte/packet counters are the endpoint's, warmup included; ``reported``
    is false for a rank the driver got no records from; ``events_dropped`` = events its full event log
    did not keep, absent where the records have no event log)
``flows.{flows, finished, unfinished}`` (measured flows) · ``flows.fct_scheduled_ns.*`` (FCT from the
    scheduled start: THE flow completion time) · ``flows.fct_actual_ns.*`` · ``flows.slowdown.*`` ·
    ``flows.achieved_rate_bps.*`` · ``flows.slowdown_by_size`` (HPCC 5 % buckets: ``min_size_bytes,
    max_size_bytes, flows, unfinished, median_slowdown, p95_slowdown, p99_slowdown``) ·
    ``flows.all_unfinished`` (warmup included) · ``flows.inconsistent_times`` (flows whose end precedes a
    start; counted as unfinished and warned about, never silently used)
``iteration`` — the job view of every run (collectives, point-to-point and compute alike): each run iteration
    (one copy of the compiled workload, see :mod:`emulator.run.workload`) is one job step over the ranks
    with ops in it; per rank ``start`` = its first op's ready time, ``end`` = its last op's end;
    **JCT** = max over ranks of end − min over ranks of start; ``T_r`` = end_r − start_r. Only complete
    measured iterations are analysed (every op of every rank ended):
    ``iteration.count`` · ``iteration.incomplete`` · ``iteration.warmup`` ·
    ``iteration.jct.{p50,p90,p99,p999,max,min,mean,cv,...}`` job (iteration) completion time (ns) ·
    ``iteration.completion.*`` per-rank iteration completion ``T_r`` over (iteration, rank) ·
    ``iteration.per_iteration`` list of ``iteration`` (run iteration index, warmup ones first, as in the
    CSV files), ``jct_ns``, ``first_start_ns``, ``last_end_ns``, ``ranks``, ``slowest_rank``, ``skew_ns``,
    ``straggler_delay`` — at most ``AnalysisOptions.per_iteration_limit`` (1000) entries: the first
    ``ceil(limit/2)`` and the last ``floor(limit/2)`` measured iterations in order ·
    ``iteration.per_iteration_total`` (all measured complete iterations) · ``iteration.per_iteration_omitted``
    (those left out of the list; the distributions and stragglers always cover all of them) · ``iteration.stragglers.*`` the same figures as ``stragglers.*`` with iterations
    as the instances (``iteration.stragglers.max_skew``, ``.p99_skew_ns``, ``.straggler_delay.p99``,
    ``.slow_ranks``, ``.most_often_last_rank``, ``.last_finisher_counts.<rank>`` …) ·
    ``iteration.ranks.<rank>.{iterations, last_count, slow_count, mean_lateness_ns, max_lateness_ns,
    completion.*}``
``p2p`` — measured point-to-point flows (not part of a collective instance: ``coll == -1``; SEND/RECV nodes,
    pipeline activations): ``p2p.{flows, finished, unfinished, bytes, bytes_delivered}`` ·
    ``p2p.fct_scheduled_ns.*`` (FCT from the scheduled start) · ``p2p.fct_actual_ns.*`` · ``p2p.slowdown.*``
    · ``p2p.achieved_rate_bps.*`` (all counts 0 and distributions empty when the run has none)
Stragglers are judged against the algorithm's own finish order on an empty fabric
(``analysis.straggler_basis`` ``ideal``, the schedule run by :func:`emulator.drivers.ideal.run_ideal` at the
analysis rate and latency; see :mod:`emulator.stats.stragglers`): lateness, ``mean_lateness_ns``, slow ranks
and last finishers are excesses over that order; ``stragglers.basis`` says which basis, and
``stragglers.excess_skew_ns.*`` is the distribution of the largest excess per instance. Results stored
with no ``straggler_basis`` recompute with ``median`` (the figures they were written with).
(``iteration`` and ``p2p`` were added within results version 1: directories written before lack them and
still read and render; :func:`emulator.results.recompute` adds them.)
``fabric.{max_peak_queue_bytes, mean_queue_bytes, ecn_marks, drops, pause_time_ns, max_utilisation,
    busiest_port, busiest_port_name, switch_ports}`` over the switch ports (NIC uplinks, ``kind`` host,
    are left out of the aggregates: their queue is the sender's own backlog) · ``fabric.lost_packets`` the
    injected loss (``fabric.loss``, sim) on every port's link, NIC uplinks too · ``fabric.ports`` = every
    per-port dict as the driver counted it (``port``, ``name``, ``kind``, ``rate_bps``, ``dequeued_*``,
    ``marked_packets``, ``dropped_*``, ``peak_queue_bytes``, ``mean_queue_bytes``, ``paused_time_ns``,
    ``utilisation`` …); all null/empty when the driver has no fabric counters (direct)
``generator.{flows, started, not_started, flows_late, late_fraction, late_threshold_ns, lag_ns.*}`` over
    the measured flows (lag = actual − scheduled start) · ``generator.packets_late`` (the driver's
    ``packets_late``, else the software switch's late forwards) · ``generator.packets_unsent`` (the
    driver's ``packets_unsent``, else the endpoints' send errors) · ``generator.packets_skipped`` ·
    ``generator.late_ops`` (the endpoints' ``late_ops`` counters) · ``generator.driver`` = the driver's
    own health as it reported it (lag histograms, wake-ups, socket drops, simulator speed)
``totals.{bytes_scheduled, bytes_delivered, flows, flows_incomplete, instances, instances_measured,
    instances_warmup, instances_incomplete, ops, ops_incomplete}`` (whole run, warmup included)
``warnings`` list of one-line strings (driver fell behind, incomplete run, ...)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from emulator.endpoint.records import RankRecords
from emulator.instruments.percentiles import Distribution
from emulator.schedule.model import Schedule
from emulator.stats import (
    CollectiveRecords,
    FlowStats,
    StragglerAnalysis,
    algbw_bytes,
    analyze_stragglers,
    average_busbw_gbps,
    cct_report,
    collective_name,
    flow_stats,
    generator_health,
    instance_bandwidths_gbps,
    nccl_table,
    rank_completion_distributions,
    slowdown_by_size,
)
from emulator.stats.analysis_options import AnalysisOptions, ideal_ops
from emulator.stats.bounded import summarize_bounded, summarize_by_bounded
from emulator.stats.jobs import job_summaries
from emulator.stats.jsonsafe import jsonable
from emulator.stats.summary_types import RunSummary
from emulator.stats.tables import (
    flow_table,
    group_name,
    incomplete_instances,
    iteration_table,
    member_table,
    op_table,
    run_info,
)

#: counters copied from the endpoint into ``ranks.<rank>``
RANK_COUNTERS = ("bytes_sent", "bytes_received", "packets_sent", "retransmits", "cnps_sent", "cnps_received",
                 "ce_marks", "timeouts")
#: counters copied only where the endpoint kept them: ``events_dropped`` exists only with an event log
#: (absent from older records and from the ideal driver, where it would be an unknown, not a zero)
RANK_LOG_COUNTERS = ("events_dropped",)


def _nearest_index(values: np.ndarray, rows: np.ndarray, target: float) -> int:
    """The first of ``rows`` whose value is closest to ``target`` (equal to it when ``target`` is exact)."""
    return int(rows[int(np.argmin(np.abs(values[rows].astype(np.float64) - float(target))))])


def _ideal_rows(ideal: Mapping[str, np.ndarray] | None, rows: np.ndarray) -> dict[str, np.ndarray]:
    """``ideal_start_ns``/``ideal_end_ns`` keywords of :func:`analyze_stragglers` for the table ``rows``
    (none when there is no ideal run or it left one of those rows unfinished)."""
    if ideal is None:
        return {}
    start, end = ideal["start_ns"][rows], ideal["end_ns"][rows]
    if (start < 0).any() or (end < 0).any():
        return {}
    return {"ideal_start_ns": start, "ideal_end_ns": end}


def _straggler_analysis(recs: CollectiveRecords, opts: AnalysisOptions, ideal: Mapping[str, np.ndarray] | None,
                        rows: np.ndarray, order: np.ndarray) -> StragglerAnalysis:
    """Straggler figures of ``recs`` (built from table ``rows`` and regrouped by ``order``)."""
    kw = _ideal_rows(ideal, rows)
    kw = {k: v[order] for k, v in kw.items()}
    return analyze_stragglers(recs, opts.slow_factor, opts.policy, late_tolerance=opts.late_tolerance, **kw)


def byte_weighted_gbps(ctype: np.ndarray, size: np.ndarray, n_ranks: np.ndarray, alg: np.ndarray,
                       bus: np.ndarray) -> tuple[float | None, float | None]:
    """(algbw, busbw) of instances averaged with their bytes S as weights (None when they move no bytes)."""
    weight = np.array([algbw_bytes(collective_name(int(c)), int(z), int(n))
                       for c, z, n in zip(ctype.tolist(), size.tolist(), n_ranks.tolist(), strict=True)],
                      dtype=np.float64)
    total = float(weight.sum())
    if not total > 0:
        return None, None
    return float(np.dot(weight, alg) / total), float(np.dot(weight, bus) / total)


def _collectives(schedule: Schedule, members: dict[str, np.ndarray], opts: AnalysisOptions,
                 out: dict[str, Any], ideal: Mapping[str, np.ndarray] | None = None) -> None:
    s = schedule
    nc = s.n_colls
    type_names = [collective_name(int(t)) for t in s.coll_type.tolist()]
    use = members["has_ops"]
    inst = members["instance"]
    incomplete = incomplete_instances(members, nc)
    has_members = np.bincount(inst[use], minlength=nc) > 0
    warm = np.zeros(nc, dtype=bool)
    if inst.size:
        warm[inst] = members["warmup"]
    measured = has_members & ~warm
    good = measured & ~incomplete
    rows = use & good[inst] if inst.size else use
    out["totals"].update({
        "instances": nc, "instances_measured": int(measured.sum()), "instances_warmup": int((has_members & warm).sum()),
        "instances_incomplete": int((has_members & incomplete).sum()),
    })
    groups: dict[str, Any] = {}
    for t in sorted(set(type_names)):
        is_t = np.asarray([n == t for n in type_names], dtype=bool)
        out[t] = {"count": int((good & is_t).sum()), "incomplete": int((measured & incomplete & is_t).sum()),
                  "warmup": int((has_members & warm & is_t).sum()),
                  "cct": Distribution.empty().to_dict(), "completion": Distribution.empty().to_dict(),
                  "algbw_gbps": None, "busbw_gbps": None, "algbw_weighted_gbps": None,
                  "busbw_weighted_gbps": None, "sizes": []}
    if not rows.any():
        out["nccl_table"], out["nccl_avg_busbw_gbps"], out["groups"] = [], None, groups
        out["stragglers"] = _no_stragglers(opts)
        return
    recs = CollectiveRecords.from_instance_ids(inst[rows], members["rank"][rows], members["start_ns"][rows],
                                               members["end_ns"][rows])
    ids = recs.instance_id
    pol = opts.policy
    analysis = _straggler_analysis(recs, opts, ideal, rows, np.argsort(inst[rows], kind="stable"))
    times = analysis.times
    ctype = s.coll_type[ids].astype(np.int64)
    order = sorted(set(type_names))
    tcode = np.asarray([order.index(type_names[i]) for i in ids.tolist()], dtype=np.int64)
    size = s.coll_size_bytes[ids].astype(np.int64)
    group = s.coll_group[ids].astype(np.int64)
    alg, bus = instance_bandwidths_gbps(ctype, size, times.n_members, times.cct_ns)
    seg = recs.member_instance
    # one ordering by key per grouping (chunked above exact_limit), never a masked copy per key
    cct_by_type = summarize_by_bounded(tcode, times.cct_ns, pol)
    completion_by_type = summarize_by_bounded(lambda a, b: [tcode[seg[a:b]]], times.completion_ns, pol)
    for (code,), d in cct_by_type.items():
        entry = out[order[int(code)]]
        entry["cct"] = d.to_dict()
        entry["completion"] = completion_by_type[(code,)].to_dict()
        of_type = np.flatnonzero(tcode == code)
        at = _nearest_index(times.cct_ns, of_type, d.p50)  # type: ignore[arg-type]
        entry["algbw_gbps"], entry["busbw_gbps"] = float(alg[at]), float(bus[at])
        entry["algbw_weighted_gbps"], entry["busbw_weighted_gbps"] = byte_weighted_gbps(
            s.coll_type[ids[of_type]], size[of_type], times.n_members[of_type], alg[of_type], bus[of_type])
    for r in cct_report(times, ctype.tolist(), size, group, pol):
        d = r.to_dict()
        d["group_name"] = group_name(s, r.group)
        out[r.collective]["sizes"].append(d)
    table = nccl_table(ctype.tolist(), size, times.n_members, times.cct_ns, root_rank=s.coll_root_ranks()[ids])
    out["nccl_table"] = [r.to_dict() for r in table]
    out["nccl_avg_busbw_gbps"] = average_busbw_gbps(table)
    cct_by_group = summarize_by_bounded(group, times.cct_ns, pol)
    completion_by_group = summarize_by_bounded(lambda a, b: [group[seg[a:b]]], times.completion_ns, pol)
    present = np.zeros(len(order), dtype=bool)
    for (g,), d in cct_by_group.items():
        m = group == g
        present[:] = False
        present[np.unique(tcode[m])] = True
        gname = group_name(s, g)
        gcount_incomplete = int((measured & incomplete & (s.coll_group == g)).sum())
        groups[gname] = {"collectives": [order[i] for i in np.flatnonzero(present).tolist()], "count": int(m.sum()),
                         "incomplete": gcount_incomplete, "cct": d.to_dict(),
                         "completion": completion_by_group[(g,)].to_dict()}
    out["groups"] = groups
    out["stragglers"] = _straggler_figures(analysis)
    per_rank = {row["rank"]: row for row in analysis.ranks.to_rows()}
    rank_completion = {r: d.to_dict() for r, d in rank_completion_distributions(recs, times, pol).items()}
    out["_rank_stragglers"] = (per_rank, rank_completion)


def _no_stragglers(opts: AnalysisOptions) -> dict[str, Any]:
    """``stragglers.*`` (or ``iteration.stragglers.*``) when nothing complete was measured."""
    return {"instances": 0, "max_skew": None, "median_skew": None, "p99_skew": None, "slow_ranks": [],
            "slow_factor": opts.slow_factor}


def _straggler_figures(analysis: StragglerAnalysis) -> dict[str, Any]:
    """``stragglers.*`` (or ``iteration.stragglers.*``): the run summary plus the headline skew figures."""
    ss = analysis.summary
    frac = analysis.instances.skew_fraction
    frac = frac[~np.isnan(frac)]
    ranks = analysis.ranks
    st = ss.to_dict()
    st.update({
        "max_skew": float(frac.max()) if frac.size else None,
        "median_skew": ss.skew_fraction.p50,
        "p99_skew": ss.skew_fraction.p99,
        "median_skew_ns": ss.skew_ns.p50,
        "p99_skew_ns": ss.skew_ns.p99,
        "max_skew_ns": ss.skew_ns.max,
        "slow_ranks": [int(r) for r, c in zip(ranks.rank.tolist(), ranks.slow_count.tolist(), strict=True) if c > 0],
        "last_finisher_counts": {str(r): int(c) for r, c in zip(ranks.rank.tolist(), ranks.last_count.tolist(),
                                                                 strict=True)},
    })
    return st


def _iterations(schedule: Schedule, ops: Mapping[str, np.ndarray], opts: AnalysisOptions,
                out: dict[str, Any], ideal: Mapping[str, np.ndarray] | None = None) -> None:
    """``iteration.*``: every run iteration treated as one job step over every rank (all ops, p2p included)."""
    t = iteration_table(schedule, ops)
    info = run_info(schedule)
    n_iter = info["iterations"] + info["warmup"]
    it = t["iteration"]
    bad = np.bincount(it[(t["start_ns"] < 0) | (t["end_ns"] < 0)], minlength=n_iter) > 0
    present = np.bincount(it, minlength=n_iter) > 0
    warm = np.arange(n_iter) < info["warmup"]
    good = present & ~warm & ~bad
    entry: dict[str, Any] = {
        "count": int(good.sum()), "incomplete": int((present & ~warm & bad).sum()),
        "warmup": int((present & warm).sum()),
        "jct": Distribution.empty().to_dict(), "completion": Distribution.empty().to_dict(),
        "per_iteration": [], "stragglers": _no_stragglers(opts),
        "ranks": {},
    }
    out["iteration"] = entry
    rows = good[it]
    if not rows.any():
        return
    recs = CollectiveRecords.from_instance_ids(it[rows], t["rank"][rows], t["start_ns"][rows], t["end_ns"][rows])
    pol = opts.policy
    ideal_t = iteration_table(schedule, ideal) if ideal is not None else None
    analysis = _straggler_analysis(recs, opts, ideal_t, rows, np.argsort(it[rows], kind="stable"))
    times, inst = analysis.times, analysis.instances
    entry["jct"] = summarize_bounded(times.cct_ns, pol).to_dict()
    entry["completion"] = summarize_bounded(times.completion_ns, pol).to_dict()
    kept = _kept_iterations(times.cct_ns.shape[0], opts.per_iteration_limit)
    entry["per_iteration"] = [
        {"iteration": int(k), "jct_ns": int(j), "first_start_ns": int(a), "last_end_ns": int(b),
         "ranks": int(n), "slowest_rank": int(sr), "skew_ns": int(sk), "straggler_delay": float(sd)}
        for k, j, a, b, n, sr, sk, sd in zip(
            times.instance_id[kept].tolist(), times.cct_ns[kept].tolist(), times.first_start_ns[kept].tolist(),
            times.last_end_ns[kept].tolist(), times.n_members[kept].tolist(), inst.slowest_rank[kept].tolist(),
            inst.skew_ns[kept].tolist(), inst.straggler_delay[kept].tolist(), strict=True)]
    entry["per_iteration_total"] = int(times.cct_ns.shape[0])
    entry["per_iteration_omitted"] = int(times.cct_ns.shape[0] - kept.shape[0])
    entry["stragglers"] = _straggler_figures(analysis)
    completion = rank_completion_distributions(recs, times, pol)
    entry["ranks"] = {str(row["rank"]): {**{k: row[k] for k in ("iterations", "last_count", "slow_count",
                                                                   "mean_lateness_ns", "max_lateness_ns")},
                                         "completion": completion[int(row["rank"])].to_dict()}
                      for row in _rank_rows(analysis)}


def _kept_iterations(n: int, limit: int) -> np.ndarray:
    """Indices of the iterations listed in ``per_iteration``: all when ``n <= limit``, else the first
    ``ceil(limit / 2)`` and the last ``floor(limit / 2)`` (results.json stays bounded on long runs)."""
    if n <= limit:
        return np.arange(n, dtype=np.int64)
    head = (limit + 1) // 2
    return np.concatenate((np.arange(head), np.arange(n - (limit - head), n))).astype(np.int64)


def _rank_rows(analysis: StragglerAnalysis) -> list[dict[str, Any]]:
    rows = analysis.ranks.to_rows()
    for row in rows:
        row["iterations"] = row.pop("instances")
    return rows


def _ranks(schedule: Schedule, records: Mapping[int, RankRecords], ops: Mapping[str, np.ndarray],
           out: dict[str, Any]) -> None:
    per_rank, completion = out.pop("_rank_stragglers", ({}, {}))
    ranks: dict[str, Any] = {}
    for r in range(schedule.world_size):
        a, b = int(schedule.rank_op_ptr[r]), int(schedule.rank_op_ptr[r + 1])
        rec = records.get(r)
        c = rec.counters if rec is not None else {}
        entry: dict[str, Any] = {k: int(c.get(k, 0)) for k in RANK_COUNTERS}
        entry.update({k: int(c[k]) for k in RANK_LOG_COUNTERS if k in c})
        if "ce_marks" not in c:
            entry["ce_marks"] = int(ops["ce_marks"][a:b].sum())
        entry["reported"] = rec is not None
        entry["ops"] = b - a
        entry["ops_done"] = int((ops["end_ns"][a:b] >= 0).sum())
        st = per_rank.get(r, {})
        entry["instances"] = int(st.get("instances", 0))
        entry["last_count"] = int(st.get("last_count", 0))
        entry["slow_count"] = int(st.get("slow_count", 0))
        entry["mean_lateness_ns"] = st.get("mean_lateness_ns")
        entry["completion"] = completion.get(r, Distribution.empty().to_dict())
        ranks[str(r)] = entry
    out["ranks"] = ranks


def inconsistent_flows(ft: Mapping[str, np.ndarray]) -> np.ndarray:
    """Flows with an end time but a missing start or an end before a start (a driver glitch)."""
    end, sched, actual = ft["end_ns"], ft["scheduled_start_ns"], ft["actual_start_ns"]
    return (end >= 0) & ((actual < 0) | (sched < 0) | (end < actual) | (end < sched))


def flow_figures(ft: Mapping[str, np.ndarray], opts: AnalysisOptions, rows: np.ndarray | None = None) -> FlowStats:
    """FCT (both starts), ideal FCT and slowdown of the flow-table ``rows`` (all when None).

    A flow counts as finished only with consistent times (:func:`inconsistent_flows` are unfinished),
    so a driver glitch can neither crash the report nor pass for a fast flow. results.json and
    flows.csv both come from here, so they always agree.
    """
    sel = slice(None) if rows is None else rows
    end = np.where(inconsistent_flows(ft), -1, ft["end_ns"])[sel]
    rtt, bottleneck = opts.path(ft["src"][sel], ft["dst"][sel])
    return flow_stats(ft["size_bytes"][sel], np.maximum(ft["scheduled_start_ns"][sel], 0), ft["actual_start_ns"][sel],
                      end, rtt, bottleneck, opts.mtu_bytes)


def _flows(schedule: Schedule, ft: Mapping[str, np.ndarray], opts: AnalysisOptions, out: dict[str, Any]) -> None:
    size = ft["size_bytes"]
    bad = inconsistent_flows(ft)
    unfinished = int((ft["end_ns"] < 0).sum())  # warmup included
    out["totals"].update({
        "flows": int(size.shape[0]), "flows_incomplete": unfinished,
        "bytes_scheduled": int(size.sum()), "bytes_delivered": int(size[ft["end_ns"] >= 0].sum()),
    })
    stats = flow_figures(ft, opts, ~ft["warmup"])
    f = stats.summary(opts.policy).to_dict()
    f["slowdown_by_size"] = [b.to_dict() for b in slowdown_by_size(stats, opts.bucket_fraction)]
    f["all_unfinished"] = unfinished
    f["inconsistent_times"] = int(bad.sum())
    out["flows"] = f
    p2p = (ft["coll"] < 0) & ~ft["warmup"]
    p = flow_figures(ft, opts, p2p).summary(opts.policy).to_dict()
    p["bytes"] = int(size[p2p].sum())
    p["bytes_delivered"] = int(size[p2p & (ft["end_ns"] >= 0) & ~bad].sum())
    out["p2p"] = p


def _fabric(fabric: Mapping[str, Any], out: dict[str, Any]) -> None:
    ports = [dict(p) for p in fabric.get("ports", [])]
    # aggregates cover switch ports; NIC uplinks (kind "host") queue the sender's own backlog
    sw = [p for p in ports if p.get("kind") != "host"] or ports

    def total(key: str) -> int:
        return int(sum(p.get(key, 0) or 0 for p in sw))

    util = [(float(p["utilisation"]), p) for p in sw if p.get("utilisation") is not None]
    busiest = max(util, key=lambda x: x[0]) if util else (None, {})
    out["fabric"] = {
        "ports": ports,
        "switch_ports": len(sw),
        "max_peak_queue_bytes": max((p.get("peak_queue_bytes", 0) for p in sw), default=None),
        "mean_queue_bytes": (sum(float(p.get("mean_queue_bytes", 0.0)) for p in sw) / len(sw)) if sw else None,
        "ecn_marks": total("marked_packets") if sw else None,
        "drops": total("dropped_packets") if sw else None,
        "lost_packets": int(sum(p.get("loss_packets", 0) or 0 for p in ports)) if ports else None,
        "pause_time_ns": total("paused_time_ns") if sw else None,
        "max_utilisation": busiest[0],
        "busiest_port": busiest[1].get("port"),
        "busiest_port_name": busiest[1].get("name"),
    }
    for k, v in fabric.items():
        if k not in ("ports", "queue_samples") and not isinstance(v, (list, dict)):
            out["fabric"].setdefault(k, v)


def _generator(ft: Mapping[str, np.ndarray], health: Mapping[str, Any], opts: AnalysisOptions, late_ops: int,
               out: dict[str, Any]) -> None:
    m = ~ft["warmup"]
    started = ft["scheduled_start_ns"][m] >= 0
    sched = ft["scheduled_start_ns"][m]
    actual = np.where(started, ft["actual_start_ns"][m], -1)

    def count(*keys: str) -> int:
        for key in keys:
            v = health.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
                return int(v)
        return 0

    g = generator_health(np.maximum(sched, 0), actual, opts.late_threshold_ns,
                         count("packets_late", "switch_late_packets"), count("packets_skipped"),
                         count("packets_unsent", "endpoint_send_errors"), opts.policy).to_dict()
    g["late_ops"] = late_ops
    g["driver"] = {k: v for k, v in health.items() if k != "warnings"}
    out["generator"] = g


def compute_summary(schedule: Schedule, records: Mapping[int, RankRecords], fabric: Mapping[str, Any] | None = None,
                    health: Mapping[str, Any] | None = None, options: AnalysisOptions | None = None) -> RunSummary:
    """Every summary of results.json (see module docstring for the metric paths)."""
    opts = options or AnalysisOptions()
    fabric = fabric or {}
    health = health or {}
    ops = op_table(schedule, records)
    out: dict[str, Any] = {"totals": {}}
    members = member_table(schedule, ops)
    ideal = ideal_ops(schedule, opts)
    _collectives(schedule, members, opts, out, None if ideal is None else member_table(schedule, ideal))
    _ranks(schedule, records, ops, out)
    ft = flow_table(schedule, ops)
    _flows(schedule, ft, opts, out)
    _iterations(schedule, ops, opts, out, ideal)
    jobs = job_summaries(schedule, ops, members, opts.slow_factor, opts.policy)
    if jobs is not None:
        out["jobs"] = jobs
    _fabric(fabric, out)
    late_ops = sum(int(r.counters.get("late_ops", 0)) for r in records.values())
    _generator(ft, health, opts, late_ops, out)
    out["totals"]["ops"] = schedule.n_ops
    out["totals"]["ops_incomplete"] = int((ops["end_ns"] < 0).sum())
    warnings = [str(w) for w in health.get("warnings", [])]
    missing = [r for r in range(schedule.world_size) if r not in records]
    if missing:
        warnings.append(f"no records from rank(s) {', '.join(map(str, missing[:16]))}"
                        + (" ..." if len(missing) > 16 else ""))
    if out["totals"]["flows_incomplete"]:
        warnings.append(f"{out['totals']['flows_incomplete']} of {out['totals']['flows']} flows did not finish")
    if out["flows"]["inconsistent_times"]:
        warnings.append(f"{out['flows']['inconsistent_times']} flows had inconsistent times and count as unfinished")
    out["warnings"] = warnings
    return RunSummary.from_dict(jsonable(out))
