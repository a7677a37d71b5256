"""Long runs: results.json distributions switch to histograms above AnalysisOptions.exact_limit, and the
per-iteration list stays bounded. A jittered ideal-fabric run is summarised twice — exactly, and with a
tiny ``exact_limit`` — and every histogram-based Distribution must agree with its exact twin within the
stated relative error, inside [min, max], with exact count/min/max/mean.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emulator.config import profile_from_dict
from emulator.drivers.ideal import run_ideal
from emulator.errors import ResultsError
from emulator.results import read_results, recompute
from emulator.run.workload import load_workload, run_schedule
from emulator.schema import dump
from emulator.stats.analysis_options import AnalysisOptions
from emulator.stats.run_summary import compute_summary
from emulator.stats.summary_types import RunSummary

STORED = Path(__file__).resolve().parents[1] / "data" / "results_v1"
DIST_KEYS = {"count", "min", "p50", "p90", "p99", "p999", "max", "mean", "stdev", "cv"}


@pytest.fixture(scope="module")
def jittered_run():
    data = {"name": "long", "ranks": {"count": 4}, "warmup": 2, "iterations": 120,
            "workload": {"collectives": [{"type": "all_reduce", "size": "16KiB", "group": [0, 1, 2, 3]},
                                         {"type": "all_to_all", "size": "8KiB", "group": [0, 1]}]}}
    p = profile_from_dict(data)
    s = run_schedule(load_workload(p), p)
    res = run_ideal(s, rate_bps=8e9, latency_ns=1000)
    rng = np.random.default_rng(7)
    for rec in res.records.values():
        done = rec.end_ns >= 0
        # a heavy-tailed extra delay per op so percentiles differ from each other
        rec.end_ns[done] += (rng.pareto(1.5, int(done.sum())) * 2000).astype(np.int64)
    return s, res


def _dists(tree: Any, path: str = "") -> dict[str, dict[str, Any]]:
    """Every Distribution dict in a summary, by dotted path."""
    out: dict[str, dict[str, Any]] = {}
    if isinstance(tree, RunSummary):
        tree = dump(tree)
    if isinstance(tree, dict):
        if DIST_KEYS <= set(tree):
            out[path] = tree
        else:
            for k, v in tree.items():
                out.update(_dists(v, f"{path}.{k}" if path else str(k)))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out.update(_dists(v, f"{path}[{i}]"))
    return out


def test_above_the_limit_distributions_are_marked_and_within_the_error(jittered_run) -> None:
    s, res = jittered_run
    exact = compute_summary(s, res.records, options=AnalysisOptions(rate_bps=8e9))
    approx = compute_summary(s, res.records, options=AnalysisOptions(rate_bps=8e9, exact_limit=50))
    de, da = _dists(exact), _dists(approx)
    assert de.keys() == da.keys()
    marked = 0
    for path, a in da.items():
        e = de[path]
        assert "approx" not in e, path  # the default limit (10^6) keeps this run exact
        if e["count"] <= 50:
            assert a == e, path  # a grouping at or below the limit stays exact
            continue
        if "approx" not in a:
            assert a == e, path  # belongs to a grouping that is small as a whole
            continue
        marked += 1
        err = a["approx"]["relative_error"]
        assert err == 2**-8
        assert (a["count"], a["min"], a["max"]) == (e["count"], e["min"], e["max"]), path
        assert a["mean"] == pytest.approx(e["mean"], rel=1e-12), path
        if e["cv"] is not None:
            assert a["cv"] == pytest.approx(e["cv"], rel=1e-6, abs=1e-12), path
        for k in ("p50", "p90", "p99", "p999"):
            assert e["min"] <= a[k] <= e["max"], (path, k)  # never above max nor below min
            assert abs(a[k] - e[k]) <= err * abs(e[k]) + 0.5, (path, k, a[k], e[k])
    for must in ("all_reduce.cct", "all_reduce.completion", "groups.all_reduce#0.cct", "ranks.0.completion",
                 "stragglers.skew_ns", "stragglers.straggler_delay", "flows.fct_scheduled_ns", "flows.slowdown",
                 "iteration.jct", "iteration.completion", "iteration.ranks.3.completion", "generator.lag_ns"):
        assert "approx" in da[must], must
    assert marked >= 20
    # the bandwidth at the median still comes from a real instance near the (approximate) p50
    assert approx.collectives["all_reduce"].busbw_gbps == pytest.approx(exact.collectives["all_reduce"].busbw_gbps, rel=0.01)
    json.dumps(dump(approx), allow_nan=False)


def test_per_iteration_list_is_capped_to_first_and_last(jittered_run) -> None:
    s, res = jittered_run
    full = compute_summary(s, res.records).iteration
    capped = compute_summary(s, res.records, options=AnalysisOptions(per_iteration_limit=9)).iteration
    assert full.count == 120 == full.per_iteration_total == capped.per_iteration_total
    assert full.per_iteration_omitted == 0 and len(full.per_iteration) == 120
    assert capped.per_iteration_omitted == 111 and len(capped.per_iteration) == 9
    assert capped.per_iteration == full.per_iteration[:5] + full.per_iteration[-4:]
    assert [r.iteration for r in capped.per_iteration] == [2, 3, 4, 5, 6, 118, 119, 120, 121]
    # the distributions still cover every iteration
    assert capped.jct == full.jct and capped.stragglers == full.stragglers


def test_analysis_options_round_trip_and_old_results_stay_exact(stored_part) -> None:
    opts = AnalysisOptions(exact_limit=123, histogram_sub_bucket_bits=5, per_iteration_limit=7)
    assert AnalysisOptions.from_dict(opts.to_dict()) == opts
    assert opts.policy.exact_limit == 123 and opts.policy.relative_error == 2**-6
    for key, bad in (("exact_limit", -1), ("exact_limit", "many"), ("histogram_sub_bucket_bits", 0),
                     ("histogram_sub_bucket_bits", 21), ("per_iteration_limit", 0)):
        with pytest.raises(ResultsError, match=f"analysis.{key}"):
            AnalysisOptions.from_dict({key: bad})
    res = read_results(STORED)
    stored = res.doc["analysis"]
    assert "exact_limit" not in stored  # written before the option existed: the defaults apply
    again = recompute(res)
    assert stored_part(dump(again), res.doc["summary"]) == res.doc["summary"]
    assert not any("approx" in d for d in _dists(again).values())


def test_histogram_layout_option_changes_the_stated_error(jittered_run) -> None:
    s, res = jittered_run
    out = compute_summary(s, res.records, options=AnalysisOptions(exact_limit=50, histogram_sub_bucket_bits=4))
    d = out.collectives["all_reduce"].cct
    assert d.approx_relative_error == 2**-5
    assert math.isfinite(d.p99) and d.min <= d.p99 <= d.max
