"""Sweeps of a ``matrix:`` profile: every combination in order, in N local processes, or as a Slurm job array.

Each combination is one :func:`~emulator.run.pipeline.run_profile` into ``BASE/<combination name>``; the
combinations share nothing, so running them in ``jobs`` worker processes gives the same results
directories as running them one after the other (the seeds come from the profiles, not from the order).
A worker's printed summary is captured and printed whole when its run ends, in finishing order.

For a cluster, :func:`slurm_array_script` writes a job-array script: array task ``i`` runs combination
``i`` (``emulator run ... --combination i -o BASE``) into the same ``BASE``, and ``emulator compare
BASE/*/`` collects them once every task has finished.
"""

from __future__ import annotations

import io
import multiprocessing
import shlex
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.config import Profile
from emulator.errors import ConfigError

#: exit codes from least to most severe (130 stops a sweep at once)
_SEVERITY = (0, 1, 3)
EXIT_INTERRUPTED = 130
_VERDICT = {0: "ok", 1: "SLO broken", 3: "INCOMPLETE", EXIT_INTERRUPTED: "interrupted"}


@dataclass(frozen=True, slots=True)
class SweepRun:
    """One finished combination: its name, exit code, results directory and what its run printed."""

    name: str
    exit_code: int
    results_dir: Path
    printed: str = ""


def combination_dir(base: Path, profile: Profile) -> Path:
    """Where one combination of a sweep writes its results: ``base/<combination name, filesystem-safe>``."""
    from emulator.run.pipeline import safe_name

    return base / safe_name(profile.name)


#: in a worker process of :func:`_parallel`: the sweep's stop flag (set once the sweep was interrupted or ended)
_STOP: Any = None


def _init_worker(stop: Any) -> None:
    global _STOP
    _STOP = stop


def run_combination(profile: Profile, base: Path, *, schedule_path: str | None, slow_factor: float,
                    quiet: bool, capture: bool = False, overwrite: bool = False) -> SweepRun:  # fmt: skip
    """Run one combination into :func:`combination_dir`; with ``capture`` its printed text is returned, not printed.
    In a worker of a sweep that was stopped (Ctrl-C), a combination not yet started is not run (exit 130)."""
    from emulator.run.pipeline import run_profile

    if _STOP is not None and _STOP.is_set():
        return SweepRun(profile.name, EXIT_INTERRUPTED, combination_dir(base, profile), "not run: the sweep stopped\n")
    out = io.StringIO() if capture else None
    report = run_profile(profile, schedule_path=schedule_path, out_dir=combination_dir(base, profile),
                         slow_factor=slow_factor, quiet=quiet or capture, overwrite=overwrite,
                         stdout=out, stderr=out)  # fmt: skip
    return SweepRun(profile.name, report.exit_code, report.results_dir, out.getvalue() if out else "")


def run_sweep(profiles: Sequence[Profile], base: Path, *, jobs: int = 1, schedule_path: str | None = None,
              slow_factor: float, quiet: bool = False) -> list[SweepRun]:  # fmt: skip
    """Run every combination into ``base`` (``jobs`` worker processes when > 1); stops at a Ctrl-C."""
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: must be an integer >= 1")
    n = len(profiles)
    done: list[SweepRun] = []
    if jobs == 1 or n == 1:
        for i, profile in enumerate(profiles, 1):
            print(f"[{i}/{n}] {profile.name}", flush=True)
            run = run_combination(profile, base, schedule_path=schedule_path, slow_factor=slow_factor, quiet=quiet)
            done.append(run)
            if run.exit_code == EXIT_INTERRUPTED:
                break
        return done
    for run in _parallel(profiles, base, jobs, schedule_path, slow_factor):
        done.append(run)
        print(f"[{len(done)}/{n}] {run.name}", flush=True)
        if run.printed and not quiet:
            print(run.printed, end="" if run.printed.endswith("\n") else "\n", flush=True)
        if run.exit_code == EXIT_INTERRUPTED:
            break
    return done


def _parallel(profiles: Sequence[Profile], base: Path, jobs: int, schedule_path: str | None,
              slow_factor: float) -> Iterator[SweepRun]:  # fmt: skip
    """Finished combinations in finishing order, from ``jobs`` spawned worker processes."""
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no state of this one is shared
    stop = ctx.Event()  # combinations the pool already queued to its workers cannot be cancelled: they check it
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(profiles)), mp_context=ctx, initializer=_init_worker,
                               initargs=(stop,))
    pending: set[Future[SweepRun]] = set()
    try:
        for p in profiles:
            pending.add(pool.submit(run_combination, p, base, schedule_path=schedule_path,
                                    slow_factor=slow_factor, quiet=True, capture=True))  # fmt: skip
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                yield fut.result()
    finally:
        stop.set()
        for fut in pending:
            fut.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


def sweep_exit_code(runs: Sequence[SweepRun]) -> int:
    """The sweep's exit code: 130 if interrupted, else the most severe of its runs' (3 > 1 > 0)."""
    codes = [r.exit_code for r in runs]
    if EXIT_INTERRUPTED in codes:
        return EXIT_INTERRUPTED
    return max(codes, key=_SEVERITY.index) if codes else 0


def sweep_table(runs: Sequence[SweepRun], n_total: int, base: Path) -> str:
    """The closing table of a sweep: one line per run (name, verdict, directory) and the compare command."""
    from emulator.report.console import counted

    ordered = sorted(runs, key=lambda r: str(r.results_dir))
    width = max((len(r.name) for r in ordered), default=0)
    lines = [f"\nsweep of {counted(n_total, 'run')} ({len(runs)} ran) in {base}:"]
    for r in ordered:
        verdict = _VERDICT.get(r.exit_code, str(r.exit_code))
        lines.append(f"  {r.name:<{width}}  {verdict:<12} {r.results_dir}")
    lines.append("compare them: emulator compare " + " ".join(str(r.results_dir) for r in ordered))
    return "\n".join(lines)


def slurm_array_script(argv: Sequence[str], n_combinations: int, base: Path, *, job_name: str,
                       cwd: Path, python: str | None = None) -> str:  # fmt: skip
    """A Slurm job-array script: task ``i`` runs ``python -m emulator run ARGV --combination i -o BASE``
    in ``cwd``; every task's log goes to ``BASE/slurm-<job>_<task>.out``."""
    if n_combinations < 1:
        raise ConfigError("--emit-slurm-array: the profile has no combination to run")
    exe = shlex.quote(python or sys.executable)
    cmd = " ".join(shlex.quote(a) for a in argv)
    base_q = shlex.quote(str(base))
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in job_name)[:64] or "emulator-sweep"
    return "\n".join([
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --array=0-{n_combinations - 1}",
        "#SBATCH --ntasks=1",
        "#SBATCH --cpus-per-task=1",
        f"#SBATCH --output={base}/slurm-%A_%a.out",
        f"# {n_combinations} combination(s) of one matrix profile, one per array task, all into {base}.",
        "# Submit: sbatch THIS_FILE; when every task has ended: emulator compare " + f"{base_q}/*/",
        "set -eu",
        f"mkdir -p {base_q}",
        f"cd {shlex.quote(str(cwd))}",
        f'exec {exe} -m emulator run {cmd} --combination "$SLURM_ARRAY_TASK_ID" -o {base_q}',
        "",
    ])
