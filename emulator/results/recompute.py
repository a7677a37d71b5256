"""Recompute every summary of a results directory from its raw records and schedule.

The summaries in ``results.json`` are a cache: :func:`recompute` rebuilds them from ``records.npz``,
``schedule.bin``, the driver's raw fabric counters and health (kept in ``results.json`` under
``driver``), the stored perturbations (the straggler attribution, :mod:`emulator.stats.attribution`) and the
stored :class:`~emulator.stats.analysis_options.AnalysisOptions` — optionally with other
options (e.g. another straggler factor ``k``). With the stored options the result equals the stored
summary exactly.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from emulator.results.io import Results, read_results
from emulator.stats.attribution import with_attribution
from emulator.stats.run_summary import compute_summary
from emulator.stats.summary_types import RunSummary


def recompute(results: Results | str | os.PathLike[str], **overrides: Any) -> RunSummary:
    """The summary recomputed from raw records (``overrides`` replace AnalysisOptions fields)."""
    res = results if isinstance(results, Results) else read_results(results)
    opts = res.analysis
    if overrides:
        opts = replace(opts, **overrides)
    driver = res.doc.get("driver", {})
    schedule, records = res.schedule(), res.records()
    summary = compute_summary(schedule, records, driver.get("fabric", {}), driver.get("health", {}), opts)
    return with_attribution(summary, schedule, records, res.doc.get("perturbations"))
