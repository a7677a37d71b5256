"""Checks made before a run starts, so that bad input costs no run time and loses no earlier results.

Theory of operation
-------------------
*Results directory.* A run writes a fixed set of files (:data:`RUN_FILES`: results.json, the CSV files,
the raw records, and the report files ``report.html``, ``timeline.json`` and the figures
``plots/{cct_cdf,busiest_port,fct_slowdown,stragglers_<type>}.png``). A directory
*holds results* when any of them is in it. :func:`claim_results_dirs` checks every directory a run or a
matrix sweep will write (the sweep: its base and one subdirectory per combination) and refuses with one
``error:`` line when one holds results, unless ``overwrite`` is set: then it deletes exactly those files
(and a ``plots`` directory left empty) and returns them; anything else is left alone, other
subdirectories (earlier runs beside the new ones) included.

*SLO metric paths.* A path must first name a metric the summary declares
(:func:`emulator.stats.summary_types.metric_path_error`: a typo is one ``error:`` line with a did-you-mean,
found without computing anything). Which declared paths a summary has then depends on the workload
(collective types, process groups, ranks), not on the measurements. :func:`check_slo_metrics` computes, with the run's own code,
the summary of one iteration of the workload in which every op ended (:func:`finished_records`: no
driver, under a second for 340 000 ops) and looks every SLO path up in it; a path that is absent there is
one ``error:`` line naming the SLO and the closest existing path. Paths into lists and into
:data:`OPEN_METRICS` (mappings whose keys depend on what is measured) are accepted unchecked.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TextIO

import numpy as np

from emulator.config import Profile
from emulator.endpoint.records import RankRecords
from emulator.errors import ConfigError
from emulator.results.io import FILES, RESULTS_FILE
from emulator.schedule.model import Schedule
from emulator.stats.nccl import collective_name
from emulator.stats.slo import missing_metric

#: what a run (and ``emulator report``) writes into a results directory, besides the figures in ``plots/``
RUN_FILES = (*FILES.values(), f".{RESULTS_FILE}.tmp", "report.html", "timeline.json")
PLOTS_DIR = "plots"
#: the names of the PNG files ``emulator report --format plots`` writes (see emulator.report.figures.figures)
_RUN_PLOT = re.compile(r"(?:cct_cdf|busiest_port|fct_slowdown|stragglers_\w+)\.png")
#: summary mappings whose keys depend on the measurements, not on the workload
OPEN_METRICS = ("generator.driver", "stragglers.last_finisher_histogram",
                "iteration.stragglers.last_finisher_histogram")


def previous_results(d: Path) -> list[Path]:
    """The run-written files in ``d`` (see module docstring; empty when ``d`` does not exist)."""
    if not d.is_dir():
        return []
    found = [d / name for name in RUN_FILES if (d / name).is_file()]
    plots = d / PLOTS_DIR
    if plots.is_dir():
        found.extend(sorted(p for p in plots.glob("*.png") if p.is_file() and _RUN_PLOT.fullmatch(p.name)))
    return found


def _describe(base: Path, files: list[Path]) -> str:
    names = [str(p.relative_to(base)) for p in files]
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def claim_results_dirs(base: Path, dirs: list[Path], overwrite: bool) -> list[Path]:
    """Make sure none of ``dirs`` (``base`` or below it) holds earlier results: refuse with a ConfigError,
    or with ``overwrite`` delete those files (nothing else) and return them. Nothing is deleted unless
    every directory can be used."""
    files: list[Path] = []
    for d in dirs:
        if d.exists() and not d.is_dir():
            raise ConfigError(f"-o {d}: exists and is not a directory")
        files.extend(previous_results(d))
    if not files:
        return []
    if not overwrite:
        raise ConfigError(f"-o {base}: already holds the results of an earlier run ({_describe(base, files)}); "
                          "choose another directory or pass --overwrite to replace them")
    try:
        for p in files:
            p.unlink()
        plots = {p.parent for p in files if p.parent.name == PLOTS_DIR and p.suffix == ".png"}
        for d in plots:
            if not any(d.iterdir()):
                d.rmdir()
    except OSError as exc:
        raise ConfigError(f"-o {base}: cannot remove the earlier results: {exc.strerror or exc}") from None
    return files


def overwrite_notice(base: Path, removed: list[Path]) -> str:
    """The line that says what ``--overwrite`` removed below ``base``."""
    return f"--overwrite: removed {len(removed)} file(s) of an earlier run from {base}: {_describe(base, removed)}"


#: bytes per op of a run's records (emulator.endpoint.records.OP_COLUMNS, int64 each)
RECORD_BYTES_PER_OP = 8 * 10
#: peak memory of repeat_schedule ÷ the arrays it returns (1.87 GB for 0.48 GB: sim_mixed_ar_a2a × 10,001)
REPEAT_PEAK_FACTOR = 4


def run_memory_bytes(kind: str, flows: int, ops: int, edges: int, iterations: int) -> int:
    """Peak memory a run of ``iterations`` copies of a workload iteration (``flows``, ``ops``, ``edges``) needs
    beyond its compile, about: the fluid fabric's own measure per flow (emulator.drivers.fluid), else the
    repeated schedule's arrays and the records (a packet fabric's per-packet state is not counted)."""
    run_flows = flows * iterations
    if kind == "fluid":
        from emulator.drivers.fluid import memory_estimate_flows

        return memory_estimate_flows(run_flows)
    return (repeat_peak_bytes(flows, ops, edges) + RECORD_BYTES_PER_OP * ops) * iterations


def repeat_peak_bytes(flows: int, ops: int, edges: int) -> int:
    """Peak memory of building one more copy of a workload iteration (``flows``, ``ops``, ``edges``):
    :func:`~emulator.schedule.compose.repeat_schedule` and ``sequence_schedules`` peak at about
    :data:`REPEAT_PEAK_FACTOR` × the arrays they make."""
    return REPEAT_PEAK_FACTOR * (32 * flows + 41 * ops + 4 * edges)


def check_job_memory(profile: Profile, index: int, flows: int, ops: int, edges: int, iterations: int) -> None:
    """ScheduleError (one line) when job ``index``'s ``iterations`` repeats of its compiled workload (``flows``,
    ``ops``, ``edges`` each) would not fit in memory, before they are built."""
    from emulator.schedule.estimate import check_fits, si

    need = repeat_peak_bytes(flows, ops, edges) * iterations
    what = (f"{profile.source or profile.name}: workload.jobs[{index}] repeats {si(flows)} flows {iterations:,} times"
            f" = {si(flows * iterations)} flows")
    check_fits(need, what, "fewer job iterations, ranks or collectives")


def check_run_memory(profile: Profile, flows: int, ops: int, edges: int, *, largest: str = "",
                     limit: tuple[int, str] | None = None, notice: TextIO | None = None) -> None:
    """ScheduleError (one line) when the run of ``profile`` on a workload iteration of that size would not fit
    in memory; ``largest``: the compile estimate's largest part (the workload is not compiled yet). A run of
    ``NOTICE_FLOWS`` flows or more says so on ``notice``."""
    from emulator.schedule.estimate import NOTICE_FLOWS, check_fits, si, size_text

    n_iter = profile.iterations + profile.warmup
    kind = profile.fabric.kind
    need = run_memory_bytes(kind, flows, ops, edges, n_iter)
    what = (f"{profile.source or profile.name}: the run on {kind} of {profile.iterations:,} iteration(s)"
            f"{f' + {profile.warmup:,} warmup' if profile.warmup else ''} × {'about ' if largest else ''}"
            f"{si(flows)} flows{f' (the most: {largest})' if largest else ''} = {si(flows * n_iter)} flows")
    check_fits(need, what, "fewer iterations, ranks, chunks or collectives", limit)
    if notice is not None and flows * n_iter >= NOTICE_FLOWS:
        print(f"building {n_iter:,} iterations: {si(flows * n_iter)} flows (~{size_text(need)})", file=notice,
              flush=True)


def finished_records(schedule: Schedule) -> dict[int, RankRecords]:
    """Records of a run in which every op of ``schedule`` ended (op ``i`` of a rank at ``i + 1`` ns): the
    summary's paths, not its values, are what :func:`check_slo_metrics` needs."""
    out = {}
    for r in range(schedule.world_size):
        n = int(schedule.rank_op_ptr[r + 1] - schedule.rank_op_ptr[r])
        rec = RankRecords(r, n)
        rec.ready_ns[:] = 0
        rec.start_ns[:] = 0
        rec.end_ns[:] = np.arange(1, n + 1, dtype=np.int64)
        out[r] = rec
    return out


def _is_collective(name: str) -> bool:
    try:
        return collective_name(name) == name
    except ValueError:
        return False


#: an SLO threshold's canonical unit (emulator.config.slo) -> the metric units (emulator.report.compare) it fits
_SLO_UNIT_FITS = {"ns": ("ns",), "bytes": ("bytes",), "bps": ("bit/s",), "fraction": ("fraction", "x")}
_UNIT_WORDS = {"ns": "a duration", "bytes": "a size", "bit/s": "a rate in bit/s", "GB/s": "a rate in GB/s (plain number)",
               "fraction": "a fraction (%)", "x": "a ratio (plain number)"}


def _unit_error(metric: str, slo_unit: str) -> str | None:
    """Why a threshold's unit cannot be compared with the metric (a time against 1GB), or None."""
    from emulator.report.compare import metric_unit

    unit = metric_unit(metric)
    if not slo_unit or not unit or unit in _SLO_UNIT_FITS.get(slo_unit, ()):
        return None
    return f"the threshold is {_UNIT_WORDS[_SLO_UNIT_FITS[slo_unit][0]]} but {metric!r} is {_UNIT_WORDS[unit]}"


def check_slo_metrics(profile: Profile, workload_schedule: Schedule) -> None:
    """ConfigError when an SLO of ``profile`` names a metric the run's summary will not have."""
    if not profile.slo:
        return
    from dataclasses import replace

    from emulator.schema import dump
    from emulator.stats.summary_types import metric_path_error

    for i, slo in enumerate(profile.slo):
        why = metric_path_error(slo.metric) or _unit_error(slo.metric, slo.unit)
        if why is not None:
            raise ConfigError(f"{profile.source or profile.name}: slo[{i}] {slo.text!r}: {why}")

    from emulator.run.pipeline import analysis_options
    from emulator.schedule.compose import repeat_schedule
    from emulator.stats.run_summary import compute_summary

    schedule = repeat_schedule(workload_schedule, 1, 0)
    # the paths are the same on either straggler basis; 'median' spares the empty-fabric run ('ideal')
    opts = replace(analysis_options(profile, schedule.world_size), straggler_basis="median")
    summary = dump(compute_summary(schedule, finished_records(schedule), {},
                                   {"world_size": schedule.world_size, "warnings": []}, opts))
    types = sorted({collective_name(int(t)) for t in schedule.coll_type.tolist()})
    for i, slo in enumerate(profile.slo):
        why = missing_metric(summary, slo.metric, OPEN_METRICS)
        head = slo.metric.split(".")[0]
        if why is not None and head not in summary and _is_collective(head):
            why = (f"no metric {slo.metric!r}: the workload runs no {head} "
                   f"(its collectives: {', '.join(types) or 'none'})")
        if why is not None:
            raise ConfigError(f"{profile.source or profile.name}: slo[{i}] {slo.text!r}: {why} "
                              "(metric paths: docs/results.md)")
