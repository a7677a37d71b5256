"""Emulation fidelity (issue 10): every shipped loopback profile against its sim twin on the same schedule.

For each ``profiles/*.yaml`` whose fabric is ``loopback`` the profile runs twice, one run after the other:
on the sim fabric (``--fabric sim``: the same schedule, port rates, buffers, ECN and DCQCN settings, in
virtual time — the reference) and as shipped on the loopback fabric. The two results directories must
have the same ``schedule_hash``; ``emulator compare --flows`` logic
(:func:`emulator.report.flowcompare.compare_flows`) then matches their flows. Printed per profile, sim
vs loopback and loopback ÷ sim:

* JCT p50/p99 (``iteration.jct``) and CCT p50/p99 of every collective type;
* % of line rate: busbw at the median CCT ÷ port rate, per collective type, and the median flow's
  achieved rate ÷ port rate (the line-rate target of a trace of point-to-point flows);
* ECN marks ÷ data packets (``fabric.ecn_marks`` ÷ packets sent by all ranks) and CNPs sent;
* the flow compare: FCT ratio p50/p90/p99, Spearman rank correlation of FCTs, CCT ratio p50/p99;
* congested profiles: the sim's own CCT spread over ``--sim-seeds`` seeds (RED marks are random draws, so
  an incast's CCT moves by a third with the seed alone) and where the loopback run falls in it;
* the machine: 1-minute load average before each run, wall and CPU seconds of each run, the run's
  warnings (``fell behind`` ...); the CNPs the loopback's senders acted on more than one MTU time after
  their model time, of those timed on it, and the largest such lag;
* with ``--busy N``: N busy loops (normal priority, bounded by the run's timeout) compete for the CPU
  during each loopback run, to see what the machine's load moves.

Next to the figures stand the issue 10 targets: contention-free workloads (``trace_custom_ring``,
``ring_allreduce_8``) — loopback JCT/CCT p50 within 10 % of the sim's, ≥ 90 % of line rate, ECN marks
≤ 1 % of data packets; congested ones (``incast_7to1``, ``alltoall_8``, ``mixed_ar_a2a``, ``quickstart``) —
CCT p50 and p99 within 15 %, ECN marks and CNPs within 2× of the sim's. Where the sim has none, "within
2×" is met only by none: a single mark or CNP on the loopback is ∞× and a miss (the loopback's marks must
come from the model, which marks nothing there, not from the machine's jitter). Other loopback profiles get
figures without targets. Every profile whose sim run marks nothing has one more check: a loopback run with
any ECN mark must not be judged "timing faithful" by its own verdict. The targets assume an idle 2-core
machine: read the load column.

Bounded in time: each run has ``--run-timeout`` seconds; once ``--budget`` seconds have passed, the
remaining profiles are skipped and listed. Output is Markdown (what ``--record`` appends to
bench/RESULTS.md, with the command, commit and ``uptime``).

    python bench/fidelity.py [--profiles quickstart,incast_7to1] [--budget 1200] [--sim-seeds 5] [--keep DIR] [--record]
                             [--set fabric.time_dilation=8]   # loopback runs only, repeatable
                             [--busy 2]                       # competing busy loops during the loopback runs
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from emulator.errors import EmulatorError  # noqa: E402
from emulator.report.flowcompare import FlowComparison, compare_flows, flow_run  # noqa: E402
from emulator.results import read_results  # noqa: E402

CONTENTION_FREE = ("trace_custom_ring", "ring_allreduce_8")
CONGESTED = ("incast_7to1", "alltoall_8", "mixed_ar_a2a", "quickstart")
CF_WITHIN, CG_WITHIN, CF_LINE, CF_MARKS, CG_FACTOR = 0.10, 0.15, 0.90, 0.01, 2.0


@dataclass
class Run:
    fabric: str
    path: Path
    rc: int | None  # None: timed out
    wall_s: float
    cpu_s: float
    load_before: float
    summary: dict[str, Any] = field(default_factory=dict)
    doc: dict[str, Any] = field(default_factory=dict)


def loopback_profiles(names: list[str] | None) -> list[Path]:
    """The shipped profiles whose effective fabric is loopback (optionally only ``names``)."""
    from emulator.config import load_profile

    out = []
    for p in sorted((REPO / "profiles").glob("*.yaml")):
        if names and p.stem not in names:
            continue
        try:
            if load_profile(p).fabric.kind == "loopback":
                out.append(p)
        except EmulatorError:
            continue  # a matrix or fragment: not one run
    return out


#: a competing CPU hog: spins at normal priority until killed, or for at most argv[1] seconds
_BUSY = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass"


def run_once(profile: Path, fabric: str, out: Path, timeout_s: float, sets: tuple[str, ...] = (),
             busy: int = 0) -> Run:
    """One run of ``profile`` on ``fabric``; with ``busy``, that many busy loops compete for the CPU meanwhile."""
    cmd = [sys.executable, "-m", "emulator", "run", str(profile), "--fabric", fabric, "-o", str(out), "--quiet"]
    for kv in sets:
        cmd += ["--set", kv]
    load = os.getloadavg()[0]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    hogs = [subprocess.Popen([sys.executable, "-c", _BUSY, str(timeout_s)]) for _ in range(busy)]
    t0 = time.monotonic()
    try:
        rc: int | None = subprocess.run(cmd, cwd=REPO, timeout=timeout_s, capture_output=True, text=True).returncode
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    wall = time.monotonic() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    run = Run(fabric, out, rc, wall, cpu, load)
    if (out / "results.json").is_file():
        run.doc = json.loads((out / "results.json").read_text())
        run.summary = run.doc.get("summary", {})
    return run


# ------------------------------------------------------------------------------------------ figures


def _get(d: Any, *path: str) -> Any:
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def types_of(summary: dict[str, Any]) -> list[str]:
    from emulator.config import COLLECTIVE_TYPES

    return [t for t in COLLECTIVE_TYPES if (_get(summary, t, "count") or 0) > 0]


def port_rate_bps(summary: dict[str, Any]) -> float | None:
    rates = [p.get("rate_bps") for p in (_get(summary, "fabric", "ports") or []) if p.get("rate_bps")]
    return float(min(rates)) if rates else None


def data_packets(summary: dict[str, Any]) -> int:
    return sum(int(r.get("packets_sent") or 0) for r in (summary.get("ranks") or {}).values())


def cnps(summary: dict[str, Any]) -> int:
    return sum(int(r.get("cnps_sent") or 0) for r in (summary.get("ranks") or {}).values())


def marks_fraction(summary: dict[str, Any]) -> float | None:
    pk = data_packets(summary)
    marks = _get(summary, "fabric", "ecn_marks")
    return marks / pk if pk and marks is not None else None


def line_fraction(summary: dict[str, Any], t: str) -> float | None:
    bw, rate = _get(summary, t, "busbw_gbps"), port_rate_bps(summary)
    return bw * 8e9 / rate if bw is not None and rate else None


def flow_line_fraction(summary: dict[str, Any]) -> float | None:
    """Median per-flow achieved rate (size ÷ FCT from the scheduled start) ÷ port rate."""
    bps, rate = _get(summary, "flows", "achieved_rate_bps", "p50"), port_rate_bps(summary)
    return bps / rate if bps is not None and rate else None


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    if a == 0:
        return 1.0 if b == 0 else math.inf
    return b / a


def within(r: float | None, tol: float) -> bool | None:
    return None if r is None else abs(r - 1) <= tol + 1e-12


def within_factor(r: float | None, factor: float) -> bool | None:
    return None if r is None else (1 / factor <= r <= factor)


def fmt(v: Any, kind: str = "") -> str:
    if v is None:
        return "n/a"
    if kind == "ms":
        return f"{v / 1e6:.2f} ms"
    if kind == "x":
        return "∞" if v == math.inf else f"{v:.3f}×"
    if kind == "%":
        return f"{100 * v:.2f} %"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def mark(ok: bool | None) -> str:
    return "—" if ok is None else ("met" if ok else "**missed**")


def profile_rows(name: str, sim: Run, lb: Run, comp: FlowComparison | None) -> tuple[list[str], dict[str, bool]]:
    """Markdown table rows (figure | sim | loopback | loopback ÷ sim | target | met) and the verdicts."""
    s, l_ = sim.summary, lb.summary
    cf, cg = name in CONTENTION_FREE, name in CONGESTED
    rows: list[str] = []
    verdicts: dict[str, bool] = {}

    def row(label: str, a: Any, b: Any, kind: str, target: str = "", ok: bool | None = None,
            r: float | None = None, show_ratio: bool = True) -> None:
        rr = r if r is not None else (ratio(a, b) if show_ratio else None)
        rows.append(f"| {label} | {fmt(a, kind)} | {fmt(b, kind)} | {fmt(rr, 'x') if show_ratio else ''} | "
                    f"{target} | {mark(ok) if target else ''} |")
        if target and ok is not None:
            verdicts[f"{label}"] = ok

    for q in ("p50", "p99"):
        a, b = _get(s, "iteration", "jct", q), _get(l_, "iteration", "jct", q)
        if a is None and b is None:
            continue
        r = ratio(a, b)
        tgt = "within 10 %" if cf and q == "p50" else ""
        row(f"JCT {q}", a, b, "ms", tgt, within(r, CF_WITHIN) if tgt else None)
    for t in types_of(s) or types_of(l_):
        for q in ("p50", "p99"):
            a, b = _get(s, t, "cct", q), _get(l_, t, "cct", q)
            r = ratio(a, b)
            if cf and q == "p50":
                row(f"{t} CCT {q}", a, b, "ms", "within 10 %", within(r, CF_WITHIN))
            elif cg:
                row(f"{t} CCT {q}", a, b, "ms", "within 15 %", within(r, CG_WITHIN))
            else:
                row(f"{t} CCT {q}", a, b, "ms")
        lf = line_fraction(l_, t)
        row(f"{t} busbw % of line rate", line_fraction(s, t), lf, "%", "loopback ≥ 90 %" if cf else "",
            (lf >= CF_LINE) if cf and lf is not None else None, show_ratio=False)
    fa, fb = flow_line_fraction(s), flow_line_fraction(l_)
    flow_target = cf and not (types_of(s) or types_of(l_))  # a trace of point-to-point flows: no busbw
    row("flow achieved rate p50 % of line rate", fa, fb, "%", "loopback ≥ 90 %" if flow_target else "",
        (fb >= CF_LINE) if flow_target and fb is not None else None, show_ratio=False)
    ma, mb = marks_fraction(s), marks_fraction(l_)
    row("ECN marks ÷ data packets", ma, mb, "%", "loopback ≤ 1 %" if cf else "",
        (mb <= CF_MARKS) if cf and mb is not None else None, show_ratio=False)
    ea, eb = _get(s, "fabric", "ecn_marks"), _get(l_, "fabric", "ecn_marks")
    row("ECN marks", ea, eb, "", "within 2×" if cg else "", within_factor(ratio(ea, eb), CG_FACTOR) if cg else None)
    row("CNPs sent", cnps(s), cnps(l_), "", "within 2×" if cg else "",
        within_factor(ratio(cnps(s), cnps(l_)), CG_FACTOR) if cg else None)
    row("data packets sent (incl. retransmits)", data_packets(s), data_packets(l_), "")
    row("drops", _get(s, "fabric", "drops"), _get(l_, "fabric", "drops"), "")
    if comp is not None:
        fr = comp.fct_ratio
        rows.append(f"| flow FCT ratio loopback ÷ sim | p50 {fmt(fr['p50'], 'x')}, p90 {fmt(fr['p90'], 'x')}, "
                    f"p99 {fmt(fr['p99'], 'x')} | {comp.compared} of {comp.flows} flows | | | |")
        rho = f"n/a ({comp.spearman_note})" if comp.spearman is None else f"{comp.spearman:.3f}"
        rows.append(f"| FCT rank correlation (Spearman) | {rho} | | | | |")
        cr = comp.cct_ratio
        rows.append(f"| instance CCT ratio loopback ÷ sim | p50 {fmt(cr['p50'], 'x')}, p99 {fmt(cr['p99'], 'x')} | "
                    f"{len(comp.instances)} instances | | | |")
    rows.append(f"| wall / CPU s | {sim.wall_s:.1f} / {sim.cpu_s:.1f} | {lb.wall_s:.1f} / {lb.cpu_s:.1f} | | | |")
    rows.append(f"| load avg (1 min) before | {sim.load_before:.2f} | {lb.load_before:.2f} | | | |")
    health = _get(lb.doc, "driver", "health") or {}
    verdict = _get(health, "fidelity", "verdict") or "n/a"
    rows.append(f"| loopback time dilation K / timing verdict | | {fmt(health.get('time_dilation'))} | | {verdict} | |")
    fid = health.get("fidelity") or {}
    if "cnps_timed" in fid:  # CNPs the senders acted on after their service passed their model time
        rows.append(f"| CNPs acted on > one MTU late / on model time, max CNP lag | | {fid['cnps_acted_late']} / "
                    f"{fid['cnps_timed']}, {fmt(fid['cnp_lag_max_ns'], 'ms')} | | | |")
    if "posts_timed" in fid:  # SENDs posted after their service passed their model time (delivery read late)
        rows.append(f"| sends posted > one MTU late / on model time, max post lag | | {fid['posts_late']} / "
                    f"{fid['posts_timed']}, {fmt(fid['post_lag_max_ns'], 'ms')} | | | |")
    ea, eb = _get(s, "fabric", "ecn_marks"), _get(l_, "fabric", "ecn_marks")
    if ea == 0 and eb is not None and fid:  # marks the model does not make: the verdict must not say faithful
        honest = not (fid.get("faithful") and eb > 0)
        rows.append(f"| verdict vs marks the sim has not | 0 | {eb}, {'faithful' if fid.get('faithful') else 'not faithful'}"
                    f" | | not faithful if any | {mark(honest)} |")
        verdicts["verdict vs marks the sim has not"] = honest
    return rows, verdicts


def seed_spread_rows(sim: Run, others: list[Run], lb: Run) -> list[str]:
    """Rows of the sim's own spread over seeds (the reference run and ``others``) next to the loopback's CCTs.

    RED marking draws from the seed, so a congested schedule's CCTs move with it on the sim alone; a loopback
    run is a draw of the same kind (its packets meet the marker in another order). Figures only, no target.
    """
    runs = [r for r in [sim, *others] if r.summary]
    if len(runs) < 2:
        return []
    rows = []
    for t in types_of(sim.summary):
        for q in ("p50", "p99"):
            vals = sorted(v for v in (_get(r.summary, t, "cct", q) for r in runs) if v is not None)
            b = _get(lb.summary, t, "cct", q)
            if len(vals) < 2 or b is None:
                continue
            med = statistics.median(vals)
            where = "inside" if vals[0] <= b <= vals[-1] else ("below" if b < vals[0] else "above")
            rows.append(f"| sim over {len(vals)} seeds: {t} CCT {q} | {fmt(vals[0], 'ms')} – {fmt(vals[-1], 'ms')} "
                        f"(max ÷ min {vals[-1] / vals[0]:.3f}) | {fmt(b, 'ms')} ({where}) | {fmt(ratio(med, b), 'x')} "
                        f"of the seeds' median | | |")
    return rows


#: seconds of a loopback run's timeout kept out of its time-dilation budget (start-up, writing results)
BUDGET_MARGIN_S = 15.0


def _with_budget(sets: tuple[str, ...], timeout_s: float) -> tuple[str, ...]:
    """``sets`` with ``fabric.time_dilation_budget`` set to what the run's ``timeout_s`` leaves (unless set): an
    ``auto`` run's re-run then fits the time the benchmark gives the run."""
    if any(kv.startswith("fabric.time_dilation_budget=") for kv in sets):
        return sets
    return (*sets, f"fabric.time_dilation_budget={max(1.0, timeout_s - BUDGET_MARGIN_S):.0f}s")


def bench(profiles: list[Path], work: Path, budget_s: float, run_timeout_s: float,
          lb_sets: tuple[str, ...] = (), sim_seeds: int = 1, busy: int = 0) -> tuple[list[str], dict[str, Any]]:
    lines: list[str] = []
    verdict_table: dict[str, Any] = {}
    t_start = time.monotonic()
    skipped = []
    for p in profiles:
        left = budget_s - (time.monotonic() - t_start)
        if left <= 0:
            skipped.append(p.stem)
            continue
        name = p.stem
        print(f"[fidelity] {name}: sim, then loopback (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
        sim = run_once(p, "sim", work / f"{name}-sim", min(run_timeout_s, left))
        lb_timeout_s = min(run_timeout_s, max(1.0, budget_s - (time.monotonic() - t_start)))
        lb = run_once(p, "loopback", work / f"{name}-loopback", lb_timeout_s, _with_budget(lb_sets, lb_timeout_s), busy)
        others = []
        if name in CONGESTED and sim_seeds > 1 and sim.summary:
            base = int(sim.doc.get("seed") or 0)
            for k in range(1, sim_seeds):
                if time.monotonic() - t_start > budget_s:
                    break
                others.append(run_once(p, "sim", work / f"{name}-sim-seed{base + k}", run_timeout_s,
                                       (f"seed={base + k}",)))
        lines.append(f"### {name}")
        lines.append("")
        problems = [f"{r.fabric}: {'timed out' if r.rc is None else f'exit {r.rc}'}" for r in (sim, lb)
                    if r.rc not in (0, 1)]
        if not sim.summary or not lb.summary:
            lines += [f"no results ({'; '.join(problems) or 'results.json missing'})", ""]
            verdict_table[name] = {"error": "; ".join(problems) or "no results"}
            continue
        comp = None
        ha, hb = sim.doc.get("schedule_hash"), lb.doc.get("schedule_hash")
        try:
            ra, rb = read_results(sim.path), read_results(lb.path)
            comp = compare_flows(("sim", "loopback"), str(ha), (flow_run(ra), flow_run(rb)))
        except EmulatorError as exc:
            problems.append(f"flow compare: {exc}")
        if ha != hb:
            problems.append(f"schedule hashes differ: {ha} vs {hb}")
        rows, verdicts = profile_rows(name, sim, lb, comp)
        rows += seed_spread_rows(sim, others, lb)
        lines += ["| figure | sim | loopback | loopback ÷ sim | issue 10 target | |", "|---|---|---|---|---|---|", *rows]
        warns = [f"{r.fabric}: {w}" for r in (sim, lb) for w in (r.summary.get("warnings") or [])]
        lines += [""] + [f"- {w}" for w in problems + warns] + ([""] if problems or warns else [])
        verdict_table[name] = {"met": sum(verdicts.values()), "targets": len(verdicts),
                               "missed": [k for k, v in verdicts.items() if not v], "problems": problems}
    if skipped:
        lines += [f"Skipped (budget of {budget_s:.0f} s spent): {', '.join(skipped)}", ""]
    return lines, {"profiles": verdict_table, "skipped": skipped, "wall_s": time.monotonic() - t_start}


def _sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", help="comma-separated profile names (default: every loopback profile)")
    ap.add_argument("--budget", type=float, default=1200.0, help="seconds for the whole bench (default 1200)")
    ap.add_argument("--run-timeout", type=float, default=240.0, help="seconds per run (default 240)")
    ap.add_argument("--keep", type=Path, help="keep the results directories here (default: a temp dir)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="override a profile key in the loopback runs only (repeatable), e.g. fabric.time_dilation=auto")
    ap.add_argument("--sim-seeds", type=int, default=5, metavar="N",
                    help="congested profiles: also run the sim with the next N-1 seeds and show its spread (default 5)")
    ap.add_argument("--busy", type=int, default=0, metavar="N",
                    help="N busy loops (normal priority) compete for the CPU during each loopback run (default 0)")
    ap.add_argument("--record", action="store_true", help="append the Markdown to bench/RESULTS.md")
    ap.add_argument("--heading", default="Fidelity, loopback vs sim on the same schedule",
                    help="with --record: the section heading (the UTC date and time are added)")
    ap.add_argument("--note", default="", help="with --record: a line on the conditions (e.g. a shared machine)")
    args = ap.parse_args()
    names = [n.strip() for n in args.profiles.split(",")] if args.profiles else None
    profiles = loopback_profiles(names)
    if not profiles:
        print("error: no loopback profile selected", file=sys.stderr)
        return 2
    uptime_before = _sh(["uptime"])
    commit = _sh(["git", "rev-parse", "--short", "HEAD"])
    dirty = " (uncommitted changes)" if _sh(["git", "status", "--porcelain", "--untracked-files=no"]) else ""
    with tempfile.TemporaryDirectory(prefix="fidelity-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        lines, verdicts = bench(profiles, work, args.budget, args.run_timeout, tuple(args.sets), args.sim_seeds,
                               args.busy)
    uptime_after = _sh(["uptime"])
    shown = [f"--profiles {args.profiles}"] if args.profiles else []
    shown += [f"--budget {args.budget:g}", f"--run-timeout {args.run_timeout:g}", f"--sim-seeds {args.sim_seeds}"]
    shown += [f"--set {kv}" for kv in args.sets] + ([f"--busy {args.busy}"] if args.busy else [])
    cmd = "python bench/fidelity.py " + " ".join(shown)
    head = ([args.note, ""] if args.note else []) + [f"Command: `{cmd}` at commit {commit}{dirty}; {os.cpu_count()} CPUs; "
            f"wall {verdicts['wall_s']:.0f} s.", "",
            f"- uptime before: `{uptime_before}`", f"- uptime after: `{uptime_after}`", "",
            "| profile | targets met | missed |", "|---|---|---|"]
    for name, v in verdicts["profiles"].items():
        if "error" in v:
            head.append(f"| {name} | error | {v['error']} |")
        else:
            head.append(f"| {name} | {v['met']} of {v['targets']} | {', '.join(v['missed']) or '—'} |")
    text = "\n".join(head + [""] + lines)
    print(text)
    if args.record:
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        with open(HERE / "RESULTS.md", "a", encoding="utf-8") as fh:
            fh.write(f"\n## {args.heading} ({stamp}) — issue 10\n\n{text}\n")
        print("appended to bench/RESULTS.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
