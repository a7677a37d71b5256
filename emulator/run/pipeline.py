"""One run end to end: profile → schedule → driver → results directory → verdict (exit code).

Theory of operation
-------------------
:func:`run_profile` is what ``emulator run`` does, minus argument parsing:

0. refuse a results directory that holds an earlier run's files (``overwrite`` deletes them, once the
   input is known good) and SLOs on metrics the workload's summary cannot have
   (:mod:`emulator.run.preflight`);
1. compile the workload (or load ``--schedule``) into one iteration, repeat it ``warmup + iterations``
   times (:mod:`emulator.run.workload`);
2. run it on the driver of the profile's fabric (:mod:`emulator.run.runner`), with a progress line;
3. compute every summary from the raw records (:func:`emulator.results.compute_summary`), evaluate the
   profile's SLOs on it, and write the results directory (:func:`emulator.results.write_results`) —
   also when the run was incomplete or interrupted (with what was measured);
4. return the exit code: 130 interrupted (Ctrl-C) > 3 incomplete (a rank died, hung, timed out) >
   1 an SLO broken > 0.

A driver that replaced a run by a second one (the loopback fabric under ``time_dilation: auto`` re-runs
a run whose timing was not faithful, ``DriverResult.previous_attempt``) has its first run written too,
whole, as a results directory of its own in :data:`FIRST_ATTEMPT_DIR` inside the run's; the exit code
and the printed summary are the second run's.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from emulator.config import Profile
from emulator.report.console import evaluate_slos, next_steps, render_run_summary
from emulator.results import write_results
from emulator.results.io import host_facts
from emulator.run.perturbations import perturbed_run_schedule
from emulator.run.preflight import check_run_memory, check_slo_metrics, claim_results_dirs, overwrite_notice
from emulator.run.progress import ProgressLine
from emulator.run.runner import Driver, endpoint_config, execute, make_driver, start_compiling, utc_now
from emulator.run.workload import load_workload
from emulator.schedule.io import schedule_hash
from emulator.stats.attribution import with_attribution
from emulator.stats.run_summary import AnalysisOptions, compute_summary
from emulator.stats.stragglers import DEFAULT_SLOW_FACTOR

EXIT_OK, EXIT_SLO, EXIT_BAD_INPUT, EXIT_INCOMPLETE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
#: the results directory of a replaced first run, inside the run's own
FIRST_ATTEMPT_DIR = "first_attempt"


@dataclass
class RunReport:
    exit_code: int
    results_dir: Path
    doc: dict[str, Any]
    slo: list[dict[str, Any]]


def safe_name(name: str) -> str:
    """A profile name made filesystem-safe (matrix names hold brackets: ``x[a.b=1,c=2]`` → ``x_a.b=1,c=2``)."""
    return re.sub(r"[^A-Za-z0-9._=,-]+", "_", name or "run").strip("_") or "run"


def default_results_dir(profile: Profile, base: str | Path = "results", *, name: str | None = None) -> Path:
    """``results/<profile name>-<UTC timestamp>`` (name made filesystem-safe; ``-2``, ``-3`` on collision)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = safe_name(name if name is not None else profile.name)
    d = Path(base) / f"{name}-{stamp}"
    k = 2
    while d.exists():
        d = Path(base) / f"{name}-{stamp}-{k}"
        k += 1
    return d


def analysis_options(profile: Profile, world_size: int, slow_factor: float = DEFAULT_SLOW_FACTOR) -> AnalysisOptions:
    f = profile.fabric
    leaf = ()
    if f.topology.kind == "leaf_spine" and len(profile.ranks.hosts) >= world_size:
        leaf = tuple(profile.leaf_of(r) for r in range(world_size))
    return AnalysisOptions(
        slow_factor=float(slow_factor),
        late_threshold_ns=endpoint_config(profile).late_threshold_ns,
        rate_bps=float(f.ports.rate_bps),
        latency_ns=int(f.ports.latency_ns),
        mtu_bytes=int(f.mtu_bytes),
        uplink_rate_bps=float(f.topology.uplink_rate_bps) if f.topology.uplink_rate_bps else None,
        rank_leaf=leaf,
    )


def prepare_sweep(profiles: list[Profile], base: Path, *, schedule_path: str | None = None,
                  overwrite: bool = False, stderr: TextIO | None = None) -> None:
    """The checks of :func:`run_profile` for every combination of a matrix at once, before the first runs
    (results directories: ``base`` and ``base/<combination>``; SLO paths: once per distinct workload)."""
    dirs = [base, *(base / safe_name(p.name) for p in profiles)]
    if not overwrite:
        claim_results_dirs(base, dirs, overwrite=False)
    checked: set[str] = set()
    for p in profiles:
        key = repr((p.workload, p.ranks, p.seed, p.slo))
        if p.slo and key not in checked:
            check_slo_metrics(p, load_workload(p, schedule_path).schedule)
            checked.add(key)
    if overwrite:
        removed = claim_results_dirs(base, dirs, overwrite=True)
        if removed:
            print(overwrite_notice(base, removed), file=stderr or sys.stderr)


def run_profile(
    profile: Profile,
    *,
    schedule_path: str | None = None,
    out_dir: str | Path | None = None,
    driver: Driver | None = None,
    slow_factor: float = DEFAULT_SLOW_FACTOR,
    quiet: bool = False,
    overwrite: bool = False,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> RunReport:
    """Run ``profile`` and write its results directory (see module docstring)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    out = Path(out_dir) if out_dir is not None else (
        Path(profile.output.dir) if profile.output.dir else default_results_dir(profile))
    if not overwrite:
        claim_results_dirs(out, [out, out / FIRST_ATTEMPT_DIR], overwrite=False)  # refused before compiling
    start_compiling(profile)  # a large fluid run's kernels compile in a helper while the workload compiles
    workload = load_workload(profile, schedule_path)
    ws = workload.schedule  # the run's size, before its iterations are built
    check_run_memory(profile, ws.n_flows, ws.n_ops, int(ws.dep_idx.shape[0]), notice=stderr)
    check_slo_metrics(profile, workload.schedule)
    schedule, perturbed = perturbed_run_schedule(workload, profile)
    for w in workload.warnings:  # before the run: a misread trace is worth stopping early
        print(f"warning: {w}", file=stderr, flush=True)
    kind = profile.fabric.kind
    drv = driver or make_driver(profile, kind)
    if overwrite:  # only once the input is known good: a bad profile loses no earlier results
        removed = claim_results_dirs(out, [out, out / FIRST_ATTEMPT_DIR], overwrite=True)
        if removed:
            print(overwrite_notice(out, removed), file=stderr)
    opts = analysis_options(profile, schedule.world_size, slow_factor)
    run = schedule.meta["run"]
    profile_doc = profile.to_dict()
    if schedule_path is not None:  # --schedule replaced the profile's workload: the effective profile says so
        profile_doc["workload"] = {"schedule": str(Path(schedule_path).resolve())}
    host = host_facts()
    about = {  # results.json's keys after host and times, the same for the run and a replaced first attempt
        "name": profile.name,
        "profile": profile_doc,
        "fabric_kind": kind,
        "seed": profile.seed,
        "trace_hash": workload.trace_hash,
        "workload_schedule_hash": schedule_hash(workload.schedule),
        "workload": {"source": workload.source, "description": workload.description},
        "iterations": {"warmup": run["warmup"], "measured": run["iterations"],
                       "colls_per_iteration": run["colls_per_iteration"],
                       "flows_per_iteration": run["flows_per_iteration"]},
    }
    started_utc, first_written = utc_now(), []

    def write_first_attempt(first: Any) -> None:
        """The replaced first run's results directory, written as soon as the driver has it."""
        meta = {"host": host, "started_utc": started_utc, "finished_utc": utc_now(), "wall_s": first.wall_ns / 1e9,
                **about}
        _write_run(out / FIRST_ATTEMPT_DIR, meta, first, False, schedule, perturbed, profile, kind, workload.warnings,
                   opts)
        first_written.append(first)

    if hasattr(drv, "on_first_attempt"):
        drv = replace(drv, on_first_attempt=write_first_attempt)
    n_iter = run["iterations"] + run["warmup"]
    with ProgressLine(f"{profile.name} on {kind}", ops_per_iteration=schedule.n_ops // max(1, n_iter),
                      iterations=run["iterations"], warmup=run["warmup"],
                      bytes_total=int(schedule.flow_size_bytes.sum()), flows_total=schedule.n_flows,
                      stream=stderr, enabled=False if quiet else None) as progress:
        outcome = execute(schedule, drv, progress.update, kind)
    res = outcome.result
    meta = {"host": host, "started_utc": outcome.started_utc, "finished_utc": outcome.finished_utc,
            "wall_s": outcome.wall_s, **about}
    if res.previous_attempt is not None and not any(f is res.previous_attempt for f in first_written):
        write_first_attempt(res.previous_attempt)
    results, summary, slo = _write_run(out, meta, res, outcome.interrupted, schedule, perturbed, profile, kind,
                                       workload.warnings, opts)
    from emulator.report import write_run_outputs

    doc = results.doc
    extra = write_run_outputs(results, profile.output.formats)
    if not quiet:
        print(render_run_summary(doc, summary), file=stdout)
    else:  # no table, but what makes its numbers doubtful (the timing verdict, fell behind, overruns) is said
        for w in summary.warnings:
            print(f"warning: {w}", file=stderr)
    for s in slo:
        if not s["ok"]:
            print(s["message"], file=stdout)
    for e in res.errors:
        print(f"error: {e}", file=stderr)
    print(f"results: {out}" + (f" (+ {', '.join(p.name for p in extra)})" if extra else ""), file=stdout)
    if not quiet:
        print(next_steps(out), file=stdout)
    if outcome.interrupted:
        code = EXIT_INTERRUPTED
    elif not doc["complete"]:
        code = EXIT_INCOMPLETE
    elif any(not s["ok"] for s in slo):
        code = EXIT_SLO
    else:
        code = EXIT_OK
    return RunReport(code, out, doc, slo)


def _write_run(out: Path, meta: dict[str, Any], res: Any, interrupted: bool, schedule: Any, perturbed: Any,
               profile: Profile, kind: str, workload_warnings: list[str], opts: AnalysisOptions) -> tuple[Any, Any, list]:
    """Summarise one driver result, judge the SLOs and write its results directory: ``(results, summary,
    slo)``."""
    fabric = res.fabric_dict()
    summary = compute_summary(schedule, res.records, fabric, res.health, opts)
    summary = with_attribution(summary, schedule, res.records, perturbed)  # which rank was last, and why
    slo = evaluate_slos(profile.slo, summary)
    fabric_raw = {k: v for k, v in fabric.items() if k != "queue_samples"}
    meta = {
        **meta,
        "complete": bool(res.complete) and not interrupted,
        "interrupted": interrupted,
        "errors": list(res.errors),
        "warnings": [*workload_warnings, *summary.warnings],
        "driver": {"name": res.driver or kind, "fabric": fabric_raw, "health": res.health, "wall_ns": res.wall_ns},
        "slo": slo,
        **({"perturbations": perturbed} if perturbed is not None else {}),
    }
    return write_results(out, meta, schedule, res.records, fabric, summary, opts), summary, slo
