"""Versioned results directories: what ``emulator run`` writes and ``emulator report`` reads.

Public API::

    from emulator.results import RESULTS_VERSION, read_results, write_results, recompute, compute_summary

    res = read_results("results/quickstart-20260101T000000Z")   # ResultsError if newer/damaged
    res.summary["all_reduce"]["cct"]["p99"]                     # ns
    res.records(); res.schedule(); res.csv("flows"); res.timeseries()
    recompute(res) == res.summary                               # summaries from raw records only

Files and keys: :mod:`emulator.results.io`; metric paths: :mod:`emulator.results.summary`; CSV
columns: :mod:`emulator.results.csvfiles`.
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
from emulator.results.summary import AnalysisOptions, compute_summary

__all__ = [
    "FILES",
    "RESULTS_FILE",
    "RESULTS_VERSION",
    "AnalysisOptions",
    "Results",
    "compute_summary",
    "read_results",
    "recompute",
    "upgrade",
    "write_results",
]
