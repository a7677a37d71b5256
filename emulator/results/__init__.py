"""Versioned results directories: what ``emulator run`` writes and ``emulator report`` reads.

Public API::

    from emulator.results import RESULTS_VERSION, read_results, write_results, recompute

    res = read_results("results/quickstart-20260101T000000Z")   # ResultsError if newer/damaged
    res.summary.collectives["all_reduce"].cct.p99               # ns (a typed RunSummary)
    res.records(); res.schedule(); res.csv("flows"); res.timeseries()
    recompute(res) == res.summary                               # summaries from raw records only

The summary is computed by :func:`emulator.stats.run_summary.compute_summary` and typed by
:mod:`emulator.stats.summary_types`; this package stores and reads it. Files and keys:
:mod:`emulator.results.io`; metric paths: :mod:`emulator.stats.run_summary`; CSV columns:
:mod:`emulator.results.csvfiles`.
"""

from emulator.results.io import (
    FILES,
    RESULTS_FILE,
    RESULTS_VERSION,
    Results,
    read_results,
    upgrade,
    write_results,
)
from emulator.results.recompute import recompute

__all__ = [
    "FILES",
    "RESULTS_FILE",
    "RESULTS_VERSION",
    "Results",
    "read_results",
    "recompute",
    "upgrade",
    "write_results",
]
