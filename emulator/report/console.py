"""The short text `emulator run` prints: a summary table, SLO verdicts, warnings, how to get the reports.

The header names the port rate; the collective table has one ``all sizes`` row per type (CCT over every
instance, busbw/algbw byte-weighted over them) and one row per size (the nccl-tests figures at the mean
CCT), every bandwidth with its share of the port rate; columns are sized to their cells (times
auto-scaled). Error lines of an incomplete run are not part of the summary: the pipeline prints each
once, on standard error.

Besides the per-collective table, every run prints its job view (``iterations: JCT p50/p99/max`` over the
measured run iterations, from ``iteration.*``) and, when it has point-to-point flows, a ``p2p:`` line, so a
run of SEND/RECV only (no collective instances) still says how long the job took.

SLO lines read ``SLO broken: all_reduce.cct.p99 = 7.20 ms, limit < 5.00 ms`` with values in the SLO's
own unit (durations, %, rates, sizes); a metric that is absent or has no samples is broken too, with
the reason (``SLO broken: all_to_all.cct.p99: metric has no value (no samples)``). Evaluation itself
is :func:`emulator.stats.check_slo` on the typed summary. Tables are laid out by
:func:`emulator.report.text.render_table`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from emulator.stats import check_slo
from emulator.stats.summary_types import RunSummary, StragglerFigures
from emulator.units import format_bytes, format_duration_ns, format_rate_bps


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 rank``, ``2 ranks``: ``n`` and ``noun``, plural (``noun + 's'`` unless given) unless ``n`` is 1."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


#: what the ``generator.lag_ns`` figures measure, for the summary's "flow start delay" line
START_DELAY_WHAT = "first packet − ready, emulated time; includes queueing behind the sender's own flows and DCQCN pacing"


def format_value(value: float | None, unit: str) -> str:
    """``value`` in ``unit`` (ns, fraction, bps, bytes, x, or none) as the summary prints it: ``983.14 us``, ``14.67%``."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if unit == "ns":
        return format_duration_ns(value)
    if unit == "fraction":
        return f"{100 * value:.2f}%"
    if unit == "bps":
        return format_rate_bps(value)
    if unit == "bytes":
        return format_bytes(value)
    if unit == "x":
        return f"{value:.2f}×"
    return f"{value:.6g}"


_fmt = format_value


class SloSpec(Protocol):
    """What an SLO verdict needs of a profile's SLO (``emulator.config.Slo`` is one)."""

    text: str
    metric: str
    op: str
    value: float
    unit: str


def evaluate_slos(slos: Iterable[SloSpec], summary: RunSummary | Mapping[str, Any]) -> list[dict[str, Any]]:
    """One dict per SLO: text, metric, op, threshold, unit, value, ok, message (one line)."""
    out = []
    for s in slos:
        r = check_slo(summary, s.metric, s.op, s.value)
        value, ok = r.value, r.ok
        verdict = "ok" if ok else "broken"
        if r.reason is not None:
            message = f"SLO {verdict}: {s.metric}: {r.reason} (limit {s.op} {_fmt(s.value, s.unit)})"
        else:
            message = f"SLO {verdict}: {s.metric} = {_fmt(value, s.unit)}, limit {s.op} {_fmt(s.value, s.unit)}"
        out.append({"text": s.text, "metric": s.metric, "op": s.op, "threshold": s.value, "unit": s.unit,
                    "value": value, "ok": ok, "message": message})
    return out


def _iteration_lines(s: RunSummary) -> list[str]:
    """The job view (``iteration.*``) and the point-to-point flows (``p2p.*``); nothing for old results."""
    lines = []
    it = s.iteration
    if it is not None:
        j, c, st = it.jct, it.completion, it.stragglers
        if j.count:
            lines.append(f"iterations: JCT p50 {_fmt(j.p50, 'ns')}, p99 {_fmt(j.p99, 'ns')}, "
                         f"max {_fmt(j.max, 'ns')} (n={j.count}, cv {_fmt(j.cv, 'fraction')}); "
                         f"rank completion p50 {_fmt(c.p50, 'ns')}, max {_fmt(c.max, 'ns')}; "
                         f"skew max {_fmt(st.max_skew, 'fraction')} of JCT; "
                         f"most often last of an iteration: {most_often_last(st, 'iterations')}")
        if not j.count or it.incomplete:
            lines.append(f"iterations: {it.count} measured complete, {it.incomplete} incomplete, {it.warmup} warmup")
    p = s.p2p
    if p is not None and p.flows:
        fct, slow = p.fct_scheduled_ns, p.slowdown
        lines.append(f"p2p: {counted(p.flows, 'flow')} ({p.unfinished} unfinished), {format_bytes(p.bytes or 0)}; "
                     f"FCT p50 {_fmt(fct.p50, 'ns')}, p99 {_fmt(fct.p99, 'ns')} (from scheduled start); "
                     f"slowdown p50 {_fmt(slow.p50, 'x')}, p99 {_fmt(slow.p99, 'x')}")
    return lines


def job_lines(s: RunSummary) -> list[str]:
    """``jobs.<name>.*`` side by side, one row per job (nothing for a run without jobs)."""
    if not s.jobs:
        return []
    width = max(4, *(len(n) for n in s.jobs))
    rows = [f"#{'job':<{width - 1}}  {'hosts':<16} {'iters':>5} {'incompl':>7} {'JCT p50':>10} {'JCT max':>10} "
            f"{'CCT p50':>10} {'CCT p99':>10} {'skew max':>8}  slow ranks"]
    for name, j in s.jobs.items():
        hosts = ",".join(map(str, j.hosts))
        hosts = hosts if len(hosts) <= 16 else f"{j.hosts[0]}..{j.hosts[-1]} ({len(j.hosts)})"
        slow = ",".join(map(str, j.stragglers.slow_ranks)) or "none"
        rows.append(f"{name:<{width}}  {hosts:<16} {j.count:>5} {j.incomplete:>7} {_fmt(j.jct.p50, 'ns'):>10} "
                    f"{_fmt(j.jct.max, 'ns'):>10} {_fmt(j.cct.p50, 'ns'):>10} {_fmt(j.cct.p99, 'ns'):>10} "
                    f"{_fmt(j.stragglers.max_skew, 'fraction'):>8}  {slow}")
    return rows


def delivered(s: RunSummary) -> str:
    """``X delivered of Y scheduled``; when flows did not finish, the bytes the receivers took in all too (the
    delivered figure counts finished flows only, so an incomplete run is not shown as having moved nothing)."""
    tot = s.totals
    text = f"{format_bytes(tot.bytes_delivered)} delivered of {format_bytes(tot.bytes_scheduled)} scheduled"
    received = sum(r.bytes_received for r in s.ranks.values())
    if tot.flows_incomplete and received > tot.bytes_delivered:
        text = (f"{format_bytes(tot.bytes_delivered)} delivered in finished flows "
                f"({format_bytes(received)} received in all) of {format_bytes(tot.bytes_scheduled)} scheduled")
    return text


def next_steps(results_dir: object) -> str:
    """The line printed after a run: how to get the HTML report and the plots of ``results_dir``."""
    return (f"report: emulator report {results_dir} --format html   "
            f"(plots: --format plots, Perfetto timeline: --format timeline)")


def line_rate_bps(doc: Mapping[str, Any]) -> float | None:
    """The host port rate the run was analysed at (``analysis.rate_bps``, else the profile's ports rate)."""
    rate = (doc.get("analysis") or {}).get("rate_bps")
    if rate is None:
        rate = (((doc.get("profile") or {}).get("fabric") or {}).get("ports") or {}).get("rate")
    try:
        return float(rate) if rate is not None and float(rate) > 0 else None
    except (TypeError, ValueError):
        return None


def gbps_with_line(gbps: float | None, rate_bps: float | None) -> str:
    """``2.86 GB/s (91.5 %)``: a bandwidth in GB/s (10^9 B/s) and its share of the port rate (of line)."""
    if gbps is None or not math.isfinite(gbps):
        return "-"
    text = f"{gbps:.3g} GB/s"
    if rate_bps:
        share = 100 * gbps * 8e9 / rate_bps
        text += f" ({share:.1f} %)" if share >= 0.1 or share == 0 else " (<0.1 %)"
    return text


def most_often_last(st: StragglerFigures, unit: str = "") -> str:
    """Who was most often the last finisher: ``rank 6 (54×)``, ``ranks 2, 5 tied (3× each)``, ``all ranks
    tied (4× each)``, or ``none`` when no rank finished later than the algorithm's own order. With ``unit``
    (``iterations``, ``collective instances``) the count says what it is out of: ``rank 6 (3 of 3 iterations)``."""
    counts = {int(k): int(v) for k, v in (st.last_finisher_counts or {}).items()}
    top = int(st.most_often_last_count or 0)
    if st.most_often_last_rank is None:
        return "-"
    if top == 0:
        one = unit[:-1] if unit.endswith("s") else "instance"
        return f"none (every {one} finished in the algorithm's order)" if st.basis == "ideal" else "none"
    n = st.instances
    times = f"{top} of {n} {unit}" if unit and n else f"{top}×"
    tied = sorted(r for r, c in counts.items() if c == top) or [int(st.most_often_last_rank)]
    if len(tied) == 1:
        return f"rank {tied[0]} ({times})"
    if len(tied) == len(counts):
        return f"all ranks tied ({times} each)"
    shown = ", ".join(map(str, tied[:8])) + (f" and {len(tied) - 8} more" if len(tied) > 8 else "")
    return f"ranks {shown} tied ({times} each)"


def _collective_table(s: RunSummary, rate_bps: float | None) -> list[str]:
    """Per type (byte-weighted bandwidth) then per size (nccl-tests bandwidth at the mean CCT)."""
    from emulator.report.document import Table
    from emulator.report.text import render_table

    rows = []
    for t, e in s.collectives.items():
        c = e.cct
        rows.append((t, "all sizes", "", str(e.count), str(e.incomplete), _fmt(c.p50, "ns"), _fmt(c.p99, "ns"),
                     _fmt(c.max, "ns"), gbps_with_line(e.busbw_weighted_gbps, rate_bps),
                     gbps_with_line(e.algbw_weighted_gbps, rate_bps)))
        for r in s.nccl_table:
            if r.collective != t:
                continue
            rows.append(("", format_bytes(r.size_bytes), str(r.n_ranks), str(r.instances), "", _fmt(1e3 * r.p50_us, "ns"),
                         _fmt(1e3 * r.p99_us, "ns"), _fmt(1e3 * r.max_us, "ns"), gbps_with_line(r.busbw_gbps, rate_bps),
                         gbps_with_line(r.algbw_gbps, rate_bps)))
    note = ("algbw = S / CCT, busbw = algbw × nccl-tests factor; (%) = of the port rate; per size: at the mean CCT "
            "(nccl-tests); all sizes: byte-weighted mean over the instances")
    table = Table("", ("collective", "size", "ranks", "count", "incompl", "CCT p50", "CCT p99", "CCT max",
                       "busbw (% line)", "algbw (% line)"), tuple(rows), align="llrrrrrrrr", note=note)
    return render_table(table)


def render_run_summary(doc: Mapping[str, Any], s: RunSummary) -> str:
    """The lines printed after a run: ``doc`` = results.json's metadata, ``s`` its typed summary (errors are
    printed apart)."""
    it = doc.get("iterations", {})
    status = "complete" if doc.get("complete") else "INCOMPLETE"
    rate = line_rate_bps(doc)
    ports = f", {format_rate_bps(rate)} ports" if rate else ""
    lines = [f"run {doc.get('name')}: {doc.get('fabric_kind')} fabric{ports}, {counted(len(s.ranks), 'rank')}, "
             f"{it.get('warmup', 0)} warmup + {it.get('measured', 0)} measured iterations, {status} "
             f"in {doc.get('wall_s', 0):.2f} s wall"]
    if s.collectives:
        lines.extend(_collective_table(s, rate))
    tot = s.totals
    lines.append(f"totals: {counted(tot.flows, 'flow')} ({tot.flows_incomplete} unfinished), {delivered(s)}, "
                 f"{tot.instances} collective instances ({tot.instances_measured} measured, "
                 f"{tot.instances_warmup} warmup; {tot.instances_incomplete} incomplete)")
    lines.extend(_iteration_lines(s))
    lines.extend(job_lines(s))
    f = s.flows
    if f.finished:
        lines.append(f"flows: FCT p50 {_fmt(f.fct_scheduled_ns.p50, 'ns')}, "
                     f"p99 {_fmt(f.fct_scheduled_ns.p99, 'ns')} (from scheduled start); "
                     f"slowdown p50 {_fmt(f.slowdown.p50, 'x')}, p99 {_fmt(f.slowdown.p99, 'x')}")
    st = s.stragglers
    if st.instances:
        slow = st.slow_ranks
        lines.append(f"stragglers: skew p50 {_fmt(st.median_skew_ns, 'ns')}, "
                     f"p99 {_fmt(st.p99_skew_ns, 'ns')}, max {_fmt(st.max_skew, 'fraction')} of CCT; "
                     f"slow ranks (k={st.slow_factor}): {', '.join(map(str, slow)) if slow else 'none'}; "
                     f"most often last of a collective: {most_often_last(st, 'collective instances')}{_excess(st)}")
    for line in (s.straggler_attribution or {}).get("lines", []):
        lines.append(f"straggler attribution: {line}")
    fab = s.fabric
    if fab.ports:
        lines.append(f"fabric: peak queue {_fmt(fab.max_peak_queue_bytes, 'bytes')}, "
                     f"ECN marks {fab.ecn_marks}, drops {fab.drops}, "
                     + (f"injected loss {fab.lost_packets}, " if fab.lost_packets else "")
                     + f"pause {_fmt(fab.pause_time_ns, 'ns')}, "
                     f"busiest port {fab.busiest_port_name or fab.busiest_port} at {_fmt(fab.max_utilisation, 'fraction')}")
    g = s.generator
    if g.started:
        lines.append(f"flow start delay ({START_DELAY_WHAT}): p50 {_fmt(g.lag_ns.p50, 'ns')}, "
                     f"p99 {_fmt(g.lag_ns.p99, 'ns')}; {g.flows_late} of "
                     f"{counted(g.started, 'flow')} > {_fmt(g.late_threshold_ns, 'ns')}")
    fid = g.driver.get("fidelity")
    if fid:
        lines.append(_fidelity_line(fid, g.driver.get("time_dilation_calibration"), g.driver.get("time_dilation_rerun")))
    for w in s.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def _excess(st: StragglerFigures) -> str:
    """``; late beyond the algorithm's order: p50 …, max …`` (nothing for results judged on the median)."""
    ex = st.excess_skew_ns
    if st.basis != "ideal" or ex is None or not ex.count:
        return ""
    return f"; late beyond the algorithm's own order: p50 {_fmt(ex.p50, 'ns')}, max {_fmt(ex.max, 'ns')}"


def _fidelity_line(fid: dict, calibration: dict | None, rerun: dict | None = None) -> str:
    """The timing verdict of a socket run: the machine's lateness at the quantile judged (p99, or p99.9 for
    a congested schedule; senders' packets reaching the switch after their pacer's time, the switch
    forwarding after its hold; both beyond the switch's horizon, in emulated time) against one MTU's time,
    the late arrivals that cost their port idle time (whose queue's marks the verdict also judges), and K;
    with ``rerun``, that this is a re-run and why (the first attempt's results are in ``first_attempt/``), or that
    the re-run failed and these are the first attempt's."""
    q = fid.get("judged", "p99")
    key = q.replace(".", "")
    sw = fid.get("switch_lag_ns")
    lags = f"senders {_fmt(fid['sender_lag_ns'].get(key), 'ns')}" + (f", switch {_fmt(sw.get(key), 'ns')}" if sw else "")
    k = calibration["text"] if calibration else f"time dilation {fid.get('time_dilation', 1.0):g}"
    late = f"; late arrivals that cost a port idle time: {fid['unplaced_late_batches']}" \
        if "unplaced_late_batches" in fid else ""
    kept = rerun and rerun.get("first_attempt_kept", True) and not rerun.get("skipped")
    again = "" if not rerun else f"; {rerun['text']}" + (" in first_attempt/" if kept else "")
    return f"fidelity: {fid['verdict']} (machine lateness {q}, emulated time: {lags}{late}; {k}{again})"
