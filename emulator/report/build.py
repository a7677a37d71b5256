"""Build the report :class:`~emulator.report.document.Document` of a results directory.

Theory of operation
-------------------
Reads the run's metadata (``results.json``) and its typed summary
(:class:`~emulator.stats.summary_types.RunSummary`, metric paths of :mod:`emulator.stats.run_summary`)
and, for figures only, the stored arrays through the results reader; computes nothing that the summary
already holds. Sections, in the order a reader asks the questions: the run (what ran, where,
complete or not), the fabric's configuration (port rate, buffer, ECN, PFC, topology, congestion-control
preset and the knobs overridden from it, from the stored effective profile), the job view (completion time of every measured run iteration over all ranks, per-rank
iteration completion and stragglers over iterations; absent from results written before it existed),
collective completion time per type and size, the nccl-tests-style table, process
groups, stragglers (run figures + one row per rank), flows (FCT from the scheduled start, slowdown,
HPCC size buckets; point-to-point flows apart), the fabric (per port, busiest first), generator health (lag, late flows — the
coordinated-omission check) and SLOs. Times print auto-scaled with their unit (ns, us, ms, s; the
nccl-tests table keeps nccl-tests' µs), bandwidths in GB/s (10^9 B/s) with their share of the port rate,
link rates in Gb/s, queues in KiB. A value with no samples prints as ``n/a``, never as 0. Percentiles are nearest
rank; ``n`` is printed next to every distribution (with n < 100, p99 is the max).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from emulator.instruments.percentiles import Distribution
from emulator.report.console import counted
from emulator.report.document import Document, Figure, Table
from emulator.stats.summary_types import IterationRow, RunSummary, StragglerFigures
from emulator.units import format_duration_ns

NA = "n/a"


def us(ns: Any) -> str:
    """A duration in ns, auto-scaled with its unit (``706.61 ms``)."""
    return NA if ns is None else format_duration_ns(float(ns))


def num(v: Any, digits: int = 3) -> str:
    if v is None:
        return NA
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    try:
        return f"{float(v):.{digits}f}"
    except (TypeError, ValueError):
        return str(v)


def pct(v: Any) -> str:
    return NA if v is None else f"{100 * float(v):.2f}%"


def kib(v: Any) -> str:
    return NA if v is None else f"{float(v) / 1024:.1f}"


def _dist_cells(d: Distribution | None, fmt: Any = us) -> tuple[str, ...]:
    d = d or Distribution.empty()
    return (str(d.count), fmt(d.min), fmt(d.p50), fmt(d.p90), fmt(d.p99), fmt(d.p999), fmt(d.max), fmt(d.mean),
            num(d.cv))


_DIST_COLS = ("n", "min", "p50", "p90", "p99", "p99.9", "max", "mean", "cv")


def _dist_line(d: Distribution | None, unit: str = "us") -> str:
    if d is None or not d.count:
        return f"{NA} (n=0)"
    f = us if unit == "us" else (lambda v: num(v, 3))
    suffix = "" if unit == "us" else f" {unit}" if unit else ""
    return (f"p50 {f(d.p50)} / p99 {f(d.p99)} / p99.9 {f(d.p999)} / max {f(d.max)}"
            f"{suffix} (n={d.count}, mean {f(d.mean)}, cv {num(d.cv)})")


def _types(summary: RunSummary) -> list[str]:
    from emulator.report.compare import COLLECTIVE_TYPES

    return [t for t in COLLECTIVE_TYPES if t in summary.collectives]


def _run_section(doc: Document, res: Any) -> None:
    from emulator.report.console import delivered

    d = res.doc
    prof = d.get("profile") or {}
    sec = doc.section("Run")
    topo = ((prof.get("fabric") or {}).get("topology") or {})
    it = d.get("iterations") or {}
    facts = [
        ("name", str(d.get("name", ""))),
        ("description", str(prof.get("description") or "-")),
        ("workload", str((d.get("workload") or {}).get("description") or "-")),
        ("results", f"{res.path} (results version {d.get('results_version')})"),
        ("tool", f"{(d.get('tool') or {}).get('name', 'emulator')} {(d.get('tool') or {}).get('version', '')}"),
        ("host", " ".join(str((d.get("host") or {}).get(k, "")) for k in ("hostname", "system", "kernel", "machine"))),
        ("started / finished (UTC)", f"{d.get('started_utc', NA)} / {d.get('finished_utc', NA)}"),
        ("wall time", f"{num(d.get('wall_s'), 2)} s"),
        ("fabric", f"{d.get('fabric_kind', NA)}" + (f", topology {topo.get('kind')}" if topo else "")),
        ("seed", str(d.get("seed", NA))),
        ("iterations", f"warmup {it.get('warmup', NA)}, measured {it.get('measured', NA)}"),
        ("complete", num(d.get("complete"))),
        ("trace hash", str(d.get("trace_hash") or "-")),
        ("schedule hash", str(d.get("schedule_hash") or "-")),
    ]
    if (res.doc.get("summary") or {}).get("totals"):
        tot = res.summary.totals
        facts.append(("totals", f"{counted(tot.instances, 'instance')} ({tot.instances_measured} measured, "
                                f"{tot.instances_warmup} warmup, {tot.instances_incomplete} "
                                f"incomplete), {counted(tot.flows, 'flow')}, {delivered(res.summary)}"))
    sec.facts.extend(facts)
    sec.notes.extend(f"error: {e}" for e in d.get("errors") or [])


def fabric_config_facts(profile: Mapping[str, Any], kind: str | None = None) -> list[tuple[str, str]]:
    """The fabric a run had, from the effective profile: ports, buffer, ECN, PFC, MTU, topology, CC.

    Rates read as in the run summary (``25.00 Gbps``); sizes and times as the profile writes them.
    """
    from emulator.schema import format_exact
    from emulator.units import format_rate_bps as format_rate

    fab = profile.get("fabric") or {}
    if not fab:
        return []
    ports, ecn, pfc = fab.get("ports") or {}, fab.get("ecn") or {}, fab.get("pfc") or {}
    topo = fab.get("topology") or {}
    cc = profile.get("congestion_control") or {}

    def size(v: Any) -> str:
        return NA if v is None else format_exact(int(v), "bytes")

    def format_rate_bps(v: Any) -> str:
        return format_rate(float(v))

    facts = [
        ("port rate", NA if ports.get("rate") is None else format_rate_bps(ports["rate"])),
        ("buffer per port", size(ports.get("buffer"))),
        ("link latency", NA if ports.get("latency") is None else format_exact(int(ports["latency"]), "ns")),
        ("MTU", size(fab.get("mtu"))),
        ("ECN", f"on: Kmin {size(ecn.get('kmin'))}, Kmax {size(ecn.get('kmax'))}, Pmax {pct(ecn.get('pmax'))}"
                if ecn.get("enabled") else "off"),
        ("PFC", f"on: XOFF {size(pfc.get('xoff'))}, XON {size(pfc.get('xon'))}" if pfc.get("enabled") else "off"),
    ]
    if topo:
        line = str(topo.get("kind"))
        if topo.get("kind") == "leaf_spine":
            line += (f": {counted(int(topo.get('leaves') or 0), 'leaf', 'leaves')}, "
                     f"{counted(int(topo.get('spines') or 0), 'spine')}, oversubscription "
                     f"{num(topo.get('oversubscription'), 2)}")
            if topo.get("uplink_rate"):
                line += f", uplinks {format_rate_bps(topo['uplink_rate'])}"
        facts.append(("topology", line))
    if fab.get("loss"):
        facts.append(("injected loss", pct(fab.get("loss"))))
    preset = str(cc.get("preset", NA))
    if cc.get("rate") is not None:
        preset += f" at {format_rate_bps(cc['rate'])}"
    overrides = cc.get("overrides") or {}
    facts.append(("congestion control", preset))
    facts.append(("knobs differing from the preset",
                  ", ".join(f"{k} = {v}" for k, v in sorted(overrides.items())) if overrides else "none"))
    if kind == "direct":
        facts.append(("note", "direct fabric: the real network's switches apply their own buffer, ECN and PFC"))
    return facts


def _fabric_config_section(doc: Document, res: Any) -> None:
    facts = fabric_config_facts(res.doc.get("profile") or {}, res.doc.get("fabric_kind"))
    if facts:
        doc.section("Fabric configuration").facts.extend(facts)


def _iteration_section(doc: Document, summary: RunSummary, max_rows: int = 100) -> None:
    it = summary.iteration
    if it is None:
        return  # results written before the job view existed
    st = it.stragglers
    sec = doc.section("Iterations (job completion)")
    sec.facts.extend([
        ("iterations", f"{it.count} measured complete, {it.incomplete} incomplete, {it.warmup} warmup"),
        ("JCT (last rank done − first rank ready)", _dist_line(it.jct)),
        ("per-rank iteration completion T_r", _dist_line(it.completion)),
        *_straggler_facts(st, "JCT", "iterations"),
    ])
    per = list(it.per_iteration)
    rows = tuple((str(r.iteration), us(r.jct_ns), us(r.first_start_ns), us(r.last_end_ns),
                  str(r.ranks), _slowest(r), us(r.skew_ns), num(r.straggler_delay))
                 for r in per[:max_rows])
    note = "iteration = run iteration index (warmup iterations come first)"
    total = it.per_iteration_total if it.per_iteration_total is not None else len(per)
    shown = min(len(per), max_rows)
    if total > shown:
        note += (f"; {shown} of {total} iterations shown (results.json keeps {len(per)}: the first and the last; "
                 "JCT and straggler figures above cover all of them)")
    sec.tables.append(Table("Per measured iteration", ("iteration", "JCT", "first ready", "last end", "ranks",
                                                            "slowest rank", "skew", "straggler delay"), rows,
                            note=note + "."))
    rrows = tuple((k, str(r.iterations), str(r.last_count), str(r.slow_count), us(r.mean_lateness_ns))
                  + _dist_cells(r.completion) for k, r in sorted(it.ranks.items(), key=lambda kv: int(kv[0])))
    sec.tables.append(Table("Per rank over iterations", ("rank", "iterations", "last", "slow", "mean late")
                            + _DIST_COLS, rrows, note="T_r = the rank's last op end − its first op ready time."))


def _collective_section(doc: Document, summary: RunSummary, figs: dict[str, Figure],
                        rate_bps: float | None = None) -> None:
    from emulator.report.console import gbps_with_line

    sec = doc.section("Collective completion time")
    rows = []
    size_rows = []
    for t in _types(summary):
        e = summary.collectives[t]
        rows.append((t, str(e.incomplete), str(e.warmup)) + _dist_cells(e.cct)
                    + (gbps_with_line(e.busbw_weighted_gbps, rate_bps),))
        for s in e.sizes:
            size_rows.append((t, str(s.comm_size_bytes), s.group_name or str(s.group), str(s.n_ranks))
                             + _dist_cells(s.cct_ns))
    sec.notes.append("busbw = algbw × the nccl-tests factor of the collective, algbw = S / CCT (S = the bytes "
                     "nccl-tests counts); (%) = share of the " + (f"{num(rate_bps / 1e9, 1)} Gb/s " if rate_bps else "")
                     + "port rate. Per collective type busbw is the mean over its instances weighted by their "
                     "bytes; per size it is the nccl-tests table's (at the mean CCT of that size).")
    sec.tables.append(Table(
        "CCT per collective type (complete measured instances)",
        ("type", "incomplete", "warmup") + _DIST_COLS + ("busbw (% line), byte-weighted",), tuple(rows),
        note="CCT = last member done − first member started; nearest-rank percentiles (n < 100: p99 = max)."))
    if size_rows:
        sec.tables.append(Table("CCT per type, size and group", ("type", "size B", "group", "ranks") + _DIST_COLS,
                                tuple(size_rows)))
    if "cct_cdf" in figs:
        sec.figures.append(figs["cct_cdf"])

    def share(v: Any) -> str:
        return NA if v is None or not rate_bps else f"{100 * float(v) * 8e9 / rate_bps:.1f}"

    trows = tuple(
        (r.collective, str(r.size_bytes), str(r.count), "float", _redop(r.collective), r.root, num(r.time_us, 2),
         num(r.algbw_gbps, 2), share(r.algbw_gbps), num(r.busbw_gbps, 2), share(r.busbw_gbps), str(r.n_ranks),
         str(r.instances), num(r.p50_us, 2), num(r.p99_us, 2), num(r.max_us, 2))
        for r in summary.nccl_table)
    avg = summary.nccl_avg_busbw_gbps
    sec.tables.append(Table(
        "nccl-tests-style table per size (out-of-place; time = mean CCT)",
        ("collective", "size", "count", "type", "redop", "root", "time(us)", "algbw(GB/s)", "% line", "busbw(GB/s)",
         "% line", "ranks", "#inst", "p50(us)", "p99(us)", "max(us)"),
        trows, note=f"Avg bus bandwidth : {num(avg, 2)}"))


def _redop(name: Any) -> str:
    return "sum" if name in ("all_reduce", "reduce_scatter", "reduce") else "none"


def _jobs_section(doc: Document, summary: RunSummary, job: str | None = None) -> None:
    """``jobs.<name>.*`` side by side (runs of ``workload.jobs`` only; ``job``: that job's row only)."""
    if not summary.jobs:
        return
    sec = doc.section("Jobs" if job is None else f"Job {job}")
    jobs = [(n, j) for n, j in summary.jobs.items() if job is None or n == job]
    sec.tables.append(Table("Per job", ("job", "hosts", "iterations", "incomplete", "JCT p50", "JCT max",
                                        "instances", "CCT p50", "CCT p99", "skew max", "slow ranks",
                                        "flows unfinished", "MiB finished"), tuple(
        (name, ",".join(map(str, j.hosts)), str(j.count), str(j.incomplete), us(j.jct.p50), us(j.jct.max),
         str(j.instances), us(j.cct.p50), us(j.cct.p99), pct(j.stragglers.max_skew),
         ",".join(map(str, j.stragglers.slow_ranks)) or "none", str(j.flows_unfinished),
         num(j.bytes_finished / 2**20)) for name, j in jobs)))
    sec.tables.append(Table("JCT per job", ("job",) + _DIST_COLS,
                            tuple((name,) + _dist_cells(j.jct) for name, j in jobs)))


def _groups_section(doc: Document, summary: RunSummary) -> None:
    groups = summary.groups
    if not groups:
        return
    sec = doc.section("Process groups")
    rows = tuple((str(g), ",".join(e.collectives), str(e.incomplete)) + _dist_cells(e.cct) for g, e in groups.items())
    sec.tables.append(Table("CCT per process group", ("group", "collectives", "incomplete") + _DIST_COLS, rows))


def _slowest(row: IterationRow) -> str:
    """An iteration's slowest rank, or ``all tied`` when every rank took the same time (no rank was slowest)."""
    return "all tied" if row.straggler_delay == 0 else str(row.slowest_rank)


def most_often_last(st: StragglerFigures, unit: str = "") -> str:
    """``rank R (N×)``, ``ranks a, b tied``, ``all ranks tied`` or ``none`` (see :mod:`emulator.report.console`)."""
    from emulator.report.console import most_often_last as text

    return NA if st.most_often_last_rank is None else text(st, unit)


def _straggler_facts(st: StragglerFigures, basis: str, unit: str) -> list[tuple[str, str]]:
    """The straggler figures of ``stragglers.*`` (``basis`` CCT, per instance) or ``iteration.stragglers.*``."""
    return [
        ("skew (max end − median end)", f"median {pct(st.median_skew)} / p99 {pct(st.p99_skew)} / "
                                        f"max {pct(st.max_skew)} of {basis}; median {us(st.median_skew_ns)} / "
                                        f"p99 {us(st.p99_skew_ns)} / max {us(st.max_skew_ns)}"),
        ("straggler delay (max T − min T)/max T", _dist_line(st.straggler_delay, "")),
        ("straggler slowdown max T / min T", _dist_line(st.straggler_slowdown, "")),
        (f"slow ranks (T_r / ideal T_r > {num(st.slow_factor, 2)} × median ratio)" if st.basis == "ideal"
         else f"slow ranks (T_r > {num(st.slow_factor, 2)} × median)",
         ", ".join(map(str, st.slow_ranks)) or "none"),
        (f"{unit} with a slow rank", str(st.instances_with_slow_rank or 0)),
        ("most often last", most_often_last(st, unit)),
        *_excess_facts(st),
    ]


def _excess_facts(st: StragglerFigures) -> list[tuple[str, str]]:
    """What the straggler figures are judged against, and the lateness beyond the algorithm's own order."""
    if st.basis != "ideal":
        return [("judged against", "the median member (results written before the ideal basis)")]
    return [("judged against", "the algorithm's own per-rank finish order on an empty fabric, at the instance's "
                               "pace (lateness, slow and last are excesses over it)"),
            ("late beyond that order (largest per instance)", _dist_line(st.excess_skew_ns))]


def _straggler_section(doc: Document, summary: RunSummary, figs: dict[str, Figure]) -> None:
    st = summary.stragglers
    sec = doc.section("Stragglers")
    sec.facts.extend([("instances analysed", str(st.instances)), *_straggler_facts(st, "CCT", "collective instances")])
    sec.facts.extend(("attribution", line) for line in (summary.straggler_attribution or {}).get("lines", []))
    ranks = summary.ranks
    rows = []
    for key in sorted(ranks, key=lambda k: int(k)):
        r = ranks[key]
        c = r.completion
        rows.append((key, str(r.instances), str(r.last_count), str(r.slow_count),
                     us(r.mean_lateness_ns), us(c.p50), us(c.p99), us(c.max),
                     str(r.bytes_sent), str(r.retransmits), str(r.ce_marks),
                     str(r.cnps_sent), str(r.cnps_received), "-" if r.events_dropped is None else str(r.events_dropped),
                     f"{r.ops_done}/{r.ops}"))
    sec.tables.append(Table(
        "Per rank", ("rank", "instances", "last", "slow", "mean late", "T p50", "T p99", "T max",
                     "bytes sent", "retx", "CE", "CNP sent", "CNP rcvd", "events dropped", "ops done"), tuple(rows),
        note="last = times it was a last finisher; lateness = end − median end of the instance; T = per-rank completion; "
             "events dropped = events beyond the rank's full event log (- = no event log)."))
    sec.figures.extend(f for k, f in figs.items() if k.startswith("stragglers_"))


def _flow_section(doc: Document, summary: RunSummary, figs: dict[str, Figure]) -> None:
    f = summary.flows
    sec = doc.section("Flows")
    sec.facts.extend([
        ("flows (measured)", f"{f.flows} ({f.finished} finished, {f.unfinished} unfinished; "
                             f"{f.all_unfinished or 0} unfinished incl. warmup)"),
        ("FCT from scheduled start", _dist_line(f.fct_scheduled_ns)),
        ("FCT from actual start", _dist_line(f.fct_actual_ns)),
        ("FCT slowdown (vs empty fabric)", _dist_line(f.slowdown, "x")),
    ])
    p2p = summary.p2p
    if p2p is not None and p2p.flows:
        sec.facts.extend([
            ("point-to-point flows (no collective)", f"{p2p.flows} ({p2p.unfinished} unfinished), "
                                                     f"{p2p.bytes_delivered or 0} of {counted(p2p.bytes or 0, 'byte')}"),
            ("p2p FCT from scheduled start", _dist_line(p2p.fct_scheduled_ns)),
            ("p2p FCT slowdown", _dist_line(p2p.slowdown, "x")),
        ])
    rate = f.achieved_rate_bps
    if rate.count:
        sec.facts.append(("achieved rate", f"p50 {num((rate.p50 or 0) / 1e9, 2)} / min "
                                           f"{num((rate.min or 0) / 1e9, 2)} Gb/s payload (n={rate.count})"))
    rows = tuple((str(b.min_size_bytes), str(b.max_size_bytes), str(b.flows), str(b.unfinished),
                  num(b.median_slowdown), num(b.p95_slowdown), num(b.p99_slowdown)) for b in f.slowdown_by_size or ())
    sec.tables.append(Table("FCT slowdown by flow size (HPCC 5 % buckets)",
                            ("min size B", "max size B", "flows", "unfinished", "median", "p95", "p99"), rows))
    if "fct_slowdown" in figs:
        sec.figures.append(figs["fct_slowdown"])


def _job_flow_section(doc: Document, res: Any, job: str | None) -> None:
    """"Flows per job" (FCT and slowdown of each job's measured flows, from the flows.csv columns); with
    ``job``, that job's row only."""
    if not res.summary.jobs:
        return
    from emulator.stats.jobs import flow_jobs, job_flow_figures

    flows = {**res.flow_columns(), "job": flow_jobs(res.schedule())}
    figures = {n: f for n, f in job_flow_figures(flows).items() if job is None or n == job}
    sec = next((x for x in doc.sections if x.title == "Flows"), None) if job is None else None
    sec = sec or doc.section("Flows" if job is None else f"Flows of job {job}")
    sec.tables.append(Table("Flows per job (measured; FCT from the scheduled start)",
                            ("job", "flows", "unfinished", "MiB", "FCT p50", "FCT p99", "FCT max",
                             "slowdown p50", "slowdown p99"), tuple(
        (n, str(f["flows"]), str(f["unfinished"]), num(f["bytes"] / 2**20), us(f["fct_scheduled_ns"].p50),
         us(f["fct_scheduled_ns"].p99), us(f["fct_scheduled_ns"].max), num(f["slowdown"].p50),
         num(f["slowdown"].p99)) for n, f in figures.items())))


def _fabric_section(doc: Document, summary: RunSummary, figs: dict[str, Figure], max_ports: int = 40) -> None:
    fab = summary.fabric
    sec = doc.section("Fabric")
    busiest = fab.port(fab.busiest_port)
    sec.facts.extend([
        ("busiest port", f"{busiest.name} ({pct(busiest.utilisation)} utilised)" if busiest else NA),
        ("peak queue (max over switch ports)", f"{kib(fab.max_peak_queue_bytes)} KiB"),
        ("mean queue (mean over switch ports)", f"{kib(fab.mean_queue_bytes)} KiB"),
        ("ECN marks", num(fab.ecn_marks)),
        ("drops", num(fab.drops)),
        ("PFC pause time", us(fab.pause_time_ns)),
    ])
    if fab.lost_packets:
        sec.facts.append(("injected loss (fabric.loss, every link)", num(fab.lost_packets)))
    ports = sorted(fab.ports, key=lambda p: -(p.utilisation or 0.0))
    rows = tuple((str(p.name if p.name is not None else p.port), p.kind or "", num((p.rate_bps or 0) / 1e9, 1),
                  pct(p.utilisation), kib(p.peak_queue_bytes), kib(p.mean_queue_bytes),
                  str(p.marked_packets or 0), str(p.dropped_packets or 0), us(p.paused_time_ns))
                 for p in ports[:max_ports])
    note = "kind host = a NIC's uplink queue (the sender's own backlog; left out of the figures above)"
    if len(ports) > max_ports:
        note += f"; {counted(len(ports) - max_ports, 'less busy port')} not shown"
    sec.tables.append(Table("Ports, busiest first", ("port", "kind", "Gb/s", "util", "peak KiB", "mean KiB",
                                                     "ECN marks", "drops", "paused"), rows, note=note))
    if "busiest_port" in figs:
        sec.figures.append(figs["busiest_port"])


def _generator_section(doc: Document, summary: RunSummary) -> None:
    g = summary.generator
    sec = doc.section("Generator health")
    sec.facts.extend([
        ("flow start delay (first packet − ready, emulated time)", _dist_line(g.lag_ns)),
        (f"flows started > {us(g.late_threshold_ns)} after ready",
         f"{g.flows_late} of {g.started} ({pct(g.late_fraction)})"),
        ("flows never started", str(g.not_started)),
        ("packets late / skipped / unsent", f"{g.packets_late} / {g.packets_skipped} / {g.packets_unsent}"),
    ])
    sec.notes.append("ready = the flow's dependencies were met; the delay includes waiting behind the sender's "
                     "other flows (queue pair order, NIC) and DCQCN pacing, so it is not the machine's lateness: "
                     "on loopback, driver: fidelity (senders' and switch's lateness beyond the switch's horizon) is.")
    drv = g.driver
    for k in sorted(drv):
        v = drv[k]
        if not isinstance(v, (dict, list)):
            sec.facts.append((f"driver: {k}", num(v) if isinstance(v, (int, float)) else str(v)))


def _slo_section(doc: Document, res: Any) -> None:
    slos = res.doc.get("slo") or []
    if not slos:
        return
    sec = doc.section("SLOs")
    sec.tables.append(Table("Service-level objectives", ("SLO", "value", "verdict"), tuple(
        (str(s.get("text", s.get("metric"))), _slo_value(s), "ok" if s.get("ok") else "BROKEN") for s in slos)))


def _slo_value(slo: Mapping[str, Any]) -> str:
    """An SLO's measured value in the unit of its limit (``983.14 us``, ``14.67%``), as the run printed it."""
    from emulator.report.console import format_value

    value = slo.get("value")
    return num(value) if value is None or not slo.get("unit") else format_value(value, str(slo["unit"]))


def build_document(res: Any, with_figures: bool = False,
                   drawn: Sequence[tuple[str, str, bytes]] | None = None, job: str | None = None) -> Document:
    """The report of a :class:`~emulator.results.Results` (figures drawn only when asked; ``drawn`` = the
    already drawn :func:`emulator.report.figures.figures` of ``res``, so a caller writing them too draws once;
    ``job``: the run facts and that job's sections only, see :func:`job_names`)."""
    summary = res.summary
    if job is not None:
        doc = Document(f"Emulator run report: {res.doc.get('name') or res.path.name}, job {job}")
        _run_section(doc, res)
        _jobs_section(doc, summary, job)
        _job_flow_section(doc, res, job)
        return doc
    doc = Document(f"Emulator run report: {res.doc.get('name') or res.path.name}")
    warnings = list(res.doc.get("warnings") or []) + list(summary.warnings)
    doc.warnings.extend(dict.fromkeys(str(w) for w in warnings))
    figs: dict[str, Figure] = {}
    if with_figures and drawn is None:
        from emulator.report.figures import figures

        drawn = figures(res)
    if with_figures:
        figs = {stem: Figure(stem, caption, png) for stem, caption, png in drawn or ()}
    _run_section(doc, res)
    _fabric_config_section(doc, res)
    _iteration_section(doc, summary)
    _jobs_section(doc, summary)
    from emulator.report.console import line_rate_bps

    _collective_section(doc, summary, figs, line_rate_bps(res.doc))
    _groups_section(doc, summary)
    _straggler_section(doc, summary, figs)
    _flow_section(doc, summary, figs)
    _job_flow_section(doc, res, None)
    _fabric_section(doc, summary, figs)
    _generator_section(doc, summary)
    _slo_section(doc, res)
    return doc


def job_names(res: Any, job: str) -> None:
    """Refuse a ``--job`` that names no job of the run (ResultsError listing the run's jobs)."""
    from emulator.errors import ResultsError

    names = list(res.summary.jobs or ())
    if job not in names:
        have = f"its jobs are {', '.join(names)}" if names else "it ran no workload.jobs"
        raise ResultsError(f"--job {job}: not a job of {res.path} ({have})")
