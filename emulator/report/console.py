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
is :func:`emulator.stats.check_slo` on the summary dict.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from emulator.config import Slo
from emulator.stats import check_slo
from emulator.units import format_bytes, format_duration_ns, format_rate_bps

_SKIP = {"totals", "nccl_table", "nccl_avg_busbw_gbps", "groups", "stragglers", "ranks", "flows", "fabric",
         "generator", "warnings", "iteration", "p2p"}


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


def evaluate_slos(slos: Iterable[Slo], summary: Mapping[str, Any]) -> list[dict[str, Any]]:
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


def collective_types(summary: Mapping[str, Any]) -> list[str]:
    return [k for k, v in summary.items() if k not in _SKIP and isinstance(v, dict) and "cct" in v]


def _iteration_lines(s: Mapping[str, Any]) -> list[str]:
    """The job view (``iteration.*``) and the point-to-point flows (``p2p.*``); nothing for old results."""
    lines = []
    it = s.get("iteration") or {}
    if it:
        j, c = it.get("jct") or {}, it.get("completion") or {}
        st = it.get("stragglers") or {}
        if j.get("count"):
            cv = j.get("cv")
            lines.append(f"iterations: JCT p50 {_fmt(j.get('p50'), 'ns')}, p99 {_fmt(j.get('p99'), 'ns')}, "
                         f"max {_fmt(j.get('max'), 'ns')} (n={j['count']}, cv {_fmt(cv, 'fraction')}); "
                         f"rank completion p50 {_fmt(c.get('p50'), 'ns')}, max {_fmt(c.get('max'), 'ns')}; "
                         f"skew max {_fmt(st.get('max_skew'), 'fraction')} of JCT; "
                         f"most often last of an iteration: {most_often_last(st, 'iterations')}")
        if not j.get("count") or it.get("incomplete"):
            lines.append(f"iterations: {it.get('count', 0)} measured complete, {it.get('incomplete', 0)} "
                         f"incomplete, {it.get('warmup', 0)} warmup")
    p = s.get("p2p") or {}
    if p.get("flows"):
        fct, slow = p.get("fct_scheduled_ns") or {}, p.get("slowdown") or {}
        lines.append(f"p2p: {counted(p['flows'], 'flow')} ({p.get('unfinished', 0)} unfinished), {format_bytes(p.get('bytes', 0))}; "
                     f"FCT p50 {_fmt(fct.get('p50'), 'ns')}, p99 {_fmt(fct.get('p99'), 'ns')} (from scheduled start); "
                     f"slowdown p50 {_fmt(slow.get('p50'), 'x')}, p99 {_fmt(slow.get('p99'), 'x')}")
    return lines


def delivered(s: Mapping[str, Any]) -> str:
    """``X delivered of Y scheduled``; when flows did not finish, the bytes the receivers took in all too (the
    delivered figure counts finished flows only, so an incomplete run is not shown as having moved nothing)."""
    tot = s.get("totals") or {}
    text = f"{format_bytes(tot.get('bytes_delivered', 0))} delivered of {format_bytes(tot.get('bytes_scheduled', 0))} scheduled"
    received = sum(int(r.get("bytes_received") or 0) for r in (s.get("ranks") or {}).values())
    if tot.get("flows_incomplete") and received > tot.get("bytes_delivered", 0):
        text = (f"{format_bytes(tot.get('bytes_delivered', 0))} delivered in finished flows "
                f"({format_bytes(received)} received in all) of {format_bytes(tot.get('bytes_scheduled', 0))} scheduled")
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


def most_often_last(st: Mapping[str, Any], unit: str = "") -> str:
    """Who was most often the last finisher: ``rank 6 (54×)``, ``ranks 2, 5 tied (3× each)``, ``all ranks
    tied (4× each)``, or ``none`` when no rank finished later than the algorithm's own order. With ``unit``
    (``iterations``, ``collective instances``) the count says what it is out of: ``rank 6 (3 of 3 iterations)``."""
    counts = {int(k): int(v) for k, v in (st.get("last_finisher_counts") or {}).items()}
    top = int(st.get("most_often_last_count") or 0)
    if st.get("most_often_last_rank") is None:
        return "-"
    if top == 0:
        one = unit[:-1] if unit.endswith("s") else "instance"
        return f"none (every {one} finished in the algorithm's order)" if st.get("basis") == "ideal" else "none"
    n = st.get("instances")
    times = f"{top} of {n} {unit}" if unit and n else f"{top}×"
    tied = sorted(r for r, c in counts.items() if c == top) or [int(st["most_often_last_rank"])]
    if len(tied) == 1:
        return f"rank {tied[0]} ({times})"
    if len(tied) == len(counts):
        return f"all ranks tied ({times} each)"
    shown = ", ".join(map(str, tied[:8])) + (f" and {len(tied) - 8} more" if len(tied) > 8 else "")
    return f"ranks {shown} tied ({times} each)"


def _collective_table(s: Mapping[str, Any], rate_bps: float | None) -> list[str]:
    """Per type (byte-weighted bandwidth) then per size (nccl-tests bandwidth at the mean CCT)."""
    from emulator.report.document import Table
    from emulator.report.text import render_table

    rows = []
    nccl = s.get("nccl_table") or []
    for t in collective_types(s):
        e = s[t]
        c = e["cct"]
        rows.append((t, "all sizes", "", str(e["count"]), str(e["incomplete"]), _fmt(c["p50"], "ns"), _fmt(c["p99"], "ns"),
                     _fmt(c["max"], "ns"), gbps_with_line(e.get("busbw_weighted_gbps"), rate_bps),
                     gbps_with_line(e.get("algbw_weighted_gbps"), rate_bps)))
        for r in nccl:
            if r.get("collective") != t:
                continue
            rows.append(("", format_bytes(r["size_bytes"]), str(r.get("n_ranks", "")), str(r.get("instances")), "", _fmt(1e3 * r["p50_us"], "ns"), _fmt(1e3 * r["p99_us"], "ns"),
                         _fmt(1e3 * r["max_us"], "ns"), gbps_with_line(r.get("busbw_gbps"), rate_bps),
                         gbps_with_line(r.get("algbw_gbps"), rate_bps)))
    note = ("algbw = S / CCT, busbw = algbw × nccl-tests factor; (%) = of the port rate; per size: at the mean CCT "
            "(nccl-tests); all sizes: byte-weighted mean over the instances")
    table = Table("", ("collective", "size", "ranks", "count", "incompl", "CCT p50", "CCT p99", "CCT max",
                       "busbw (% line)", "algbw (% line)"), tuple(rows), align="llrrrrrrrr", note=note)
    return render_table(table)


def render_summary(doc: Mapping[str, Any]) -> str:
    """The table printed after a run (``doc`` = results.json as a dict; errors are printed apart)."""
    s = doc["summary"]
    it = doc.get("iterations", {})
    status = "complete" if doc.get("complete") else "INCOMPLETE"
    rate = line_rate_bps(doc)
    ports = f", {format_rate_bps(rate)} ports" if rate else ""
    lines = [f"run {doc.get('name')}: {doc.get('fabric_kind')} fabric{ports}, {counted(len(s.get('ranks', {})), 'rank')}, "
             f"{it.get('warmup', 0)} warmup + {it.get('measured', 0)} measured iterations, {status} "
             f"in {doc.get('wall_s', 0):.2f} s wall"]
    if collective_types(s):
        lines.extend(_collective_table(s, rate))
    tot = s.get("totals", {})
    lines.append(f"totals: {counted(tot.get('flows', 0), 'flow')} ({tot.get('flows_incomplete', 0)} unfinished), "
                 f"{delivered(s)}, "
                 f"{tot.get('instances', 0)} collective instances ({tot.get('instances_measured', 0)} measured, "
                 f"{tot.get('instances_warmup', 0)} warmup; {tot.get('instances_incomplete', 0)} incomplete)")
    lines.extend(_iteration_lines(s))
    f = s.get("flows", {})
    if f.get("finished"):
        lines.append(f"flows: FCT p50 {_fmt(f['fct_scheduled_ns']['p50'], 'ns')}, "
                     f"p99 {_fmt(f['fct_scheduled_ns']['p99'], 'ns')} (from scheduled start); "
                     f"slowdown p50 {_fmt(f['slowdown']['p50'], 'x')}, p99 {_fmt(f['slowdown']['p99'], 'x')}")
    st = s.get("stragglers", {})
    if st.get("instances"):
        slow = st.get("slow_ranks") or []
        lines.append(f"stragglers: skew p50 {_fmt(st.get('median_skew_ns'), 'ns')}, "
                     f"p99 {_fmt(st.get('p99_skew_ns'), 'ns')}, max {_fmt(st.get('max_skew'), 'fraction')} of CCT; "
                     f"slow ranks (k={st.get('slow_factor')}): {', '.join(map(str, slow)) if slow else 'none'}; "
                     f"most often last of a collective: {most_often_last(st, 'collective instances')}{_excess(st)}")
    fab = s.get("fabric", {})
    if fab.get("ports"):
        lines.append(f"fabric: peak queue {_fmt(fab.get('max_peak_queue_bytes'), 'bytes')}, "
                     f"ECN marks {fab.get('ecn_marks')}, drops {fab.get('drops')}, "
                     f"pause {_fmt(fab.get('pause_time_ns'), 'ns')}, "
                     f"busiest port {fab.get('busiest_port_name') or fab.get('busiest_port')} at {_fmt(fab.get('max_utilisation'), 'fraction')}")
    g = s.get("generator", {})
    if g.get("started"):
        lines.append(f"flow start delay ({START_DELAY_WHAT}): p50 {_fmt(g['lag_ns']['p50'], 'ns')}, "
                     f"p99 {_fmt(g['lag_ns']['p99'], 'ns')}; {g.get('flows_late', 0)} of "
                     f"{counted(g['started'], 'flow')} > {_fmt(g.get('late_threshold_ns'), 'ns')}")
    fid = g.get("driver", {}).get("fidelity")
    if fid:
        lines.append(_fidelity_line(fid, g["driver"].get("time_dilation_calibration")))
    for w in s.get("warnings", []):
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def _excess(st: Mapping[str, Any]) -> str:
    """``; late beyond the algorithm's order: p50 …, max …`` (nothing for results judged on the median)."""
    ex = st.get("excess_skew_ns") or {}
    if st.get("basis") != "ideal" or not ex.get("count"):
        return ""
    return (f"; late beyond the algorithm's own order: p50 {_fmt(ex.get('p50'), 'ns')}, "
            f"max {_fmt(ex.get('max'), 'ns')}")


def _fidelity_line(fid: dict, calibration: dict | None) -> str:
    """The timing verdict of a socket run: the machine's lateness p99 (senders' packets reaching the switch
    after their pacer's time, the switch forwarding after its hold; both beyond the switch's horizon, in
    emulated time) against one MTU's time, and K."""
    sw = fid.get("switch_lag_ns")
    lags = f"senders {_fmt(fid['sender_lag_ns']['p99'], 'ns')}" + (f", switch {_fmt(sw['p99'], 'ns')}" if sw else "")
    k = calibration["text"] if calibration else f"time dilation {fid.get('time_dilation', 1.0):g}"
    return f"fidelity: {fid['verdict']} (machine lateness p99, emulated time: {lags}; {k})"
