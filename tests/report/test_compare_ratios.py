"""compare: metric expressions, per-row baselines and ratios on typed run summaries built from hand-written figures."""

from __future__ import annotations

import json
import math

import pytest

from emulator.report.compare import (
    compare_summaries,
    comparison_table,
    default_metrics,
    format_value,
    metric_unit,
    metric_value,
)
from emulator.stats.summary_types import RunSummary

AR_ALONE = RunSummary.from_dict({
    "all_reduce": {"count": 20, "cct": {"p50": 1000, "p99": 1100, "max": 1100, "cv": 0.01}, "busbw_gbps": 2.0,
                   "completion": {"p50": 900, "p99": 990}},
    "flows": {"slowdown": {"p99": 2.0}},
    "stragglers": {"slow_ranks": [], "instances_with_slow_rank": 0, "max_skew": 0.05},
    "fabric": {"ecn_marks": 100, "drops": 0},
    "ranks": {"0": {"cnps_sent": 3, "retransmits": 0}, "1": {"cnps_sent": 4, "retransmits": 0}},
})
A2A_ALONE = RunSummary.from_dict({
    "all_to_all": {"count": 20, "cct": {"p50": 400, "p99": 420, "max": 420, "cv": 0.02}, "busbw_gbps": 3.0,
                   "completion": {"p50": 380, "p99": 400}},
    "flows": {"slowdown": {"p99": 3.0}},
    "stragglers": {"slow_ranks": [], "instances_with_slow_rank": 0, "max_skew": 0.04},
    "fabric": {"ecn_marks": 300, "drops": 0},
    "ranks": {"0": {"cnps_sent": 10, "retransmits": 0}, "1": {"cnps_sent": 20, "retransmits": 0}},
})
MIXED = RunSummary.from_dict({
    "all_reduce": {"count": 20, "cct": {"p50": 1500, "p99": 3000, "max": 3000, "cv": 0.25}, "busbw_gbps": 1.5,
                   "completion": {"p50": 1400, "p99": 2800}},
    "all_to_all": {"count": 20, "cct": {"p50": 600, "p99": 1200, "max": 1200, "cv": 0.3}, "busbw_gbps": 1.0,
                   "completion": {"p50": 500, "p99": 1100}},
    "flows": {"slowdown": {"p99": 9.0}},
    "stragglers": {"slow_ranks": [3, 5, 6], "instances_with_slow_rank": 4, "max_skew": 0.5},
    "fabric": {"ecn_marks": 1000, "drops": 7},
    "ranks": {"0": {"cnps_sent": 50, "retransmits": 2}, "1": {"cnps_sent": 70, "retransmits": 1}},
})
RUNS = [("ar", AR_ALONE), ("a2a", A2A_ALONE), ("mixed", MIXED)]


def test_metric_expressions() -> None:
    assert metric_value(MIXED, "all_reduce.cct.p99") == 3000
    assert metric_value(MIXED, "all_to_all.cct.p99/all_to_all.cct.p50") == pytest.approx(2.0)
    assert metric_value(MIXED, "ranks.*.cnps_sent") == 120
    assert metric_value(MIXED, "stragglers.slow_ranks") == 3  # a list counts its items
    assert metric_value(AR_ALONE, "all_to_all.cct.p99") is None  # absent → None, never 0
    assert metric_value(AR_ALONE, "fabric.drops/fabric.drops") is None  # 0/0
    assert metric_value({"x": {"p": None}}, "x.p") is None
    assert metric_value({"x": float("nan")}, "x") is None


def test_per_row_baseline_is_the_first_run_with_a_value() -> None:
    comp = compare_summaries(RUNS)
    ar_cv = comp.row("all_reduce.cct.cv")
    assert ar_cv.values == (0.01, None, 0.25)
    assert ar_cv.baseline == 0
    assert ar_cv.ratios[0] == 1.0 and ar_cv.ratios[1] is None
    assert ar_cv.ratios[2] == pytest.approx(25.0)
    a2a_tail = comp.row("all_to_all.cct.p99/all_to_all.cct.p50")
    assert a2a_tail.baseline == 1  # the All-to-All rows compare against the All-to-All-alone run
    assert a2a_tail.ratios[0] is None and a2a_tail.ratios[1] == 1.0
    assert a2a_tail.ratios[2] == pytest.approx((1200 / 600) / (420 / 400))
    cnps = comp.row("ranks.*.cnps_sent")
    assert cnps.values == (7, 30, 120)
    assert cnps.ratios == (1.0, pytest.approx(30 / 7), pytest.approx(120 / 7))
    drops = comp.row("fabric.drops")
    assert drops.ratios == (1.0, 1.0, None)  # 0 → 0 is no change; 7 / 0 has no finite ratio


def test_fixed_baseline() -> None:
    comp = compare_summaries(RUNS, metrics=["fabric.ecn_marks", "all_to_all.cct.p50"], baseline=2)
    ecn = comp.row("fabric.ecn_marks")
    assert ecn.baseline == 2
    assert ecn.ratios == (pytest.approx(0.1), pytest.approx(0.3), 1.0)
    a2a = comp.row("all_to_all.cct.p50")
    assert a2a.ratios == (None, pytest.approx(400 / 600), 1.0)
    with pytest.raises(ValueError):
        compare_summaries(RUNS, baseline=3)
    with pytest.raises(ValueError):
        compare_summaries([("a", AR_ALONE), ("a", MIXED)])


def test_default_rows_cover_types_present_and_fabric() -> None:
    rows = default_metrics([AR_ALONE, A2A_ALONE])
    for t in ("all_reduce", "all_to_all"):
        for m in ("count", "cct.p50", "cct.p99", "cct.max", "cct.cv", "busbw_gbps"):
            assert f"{t}.{m}" in rows
        assert f"{t}.cct.p99/{t}.cct.p50" in rows
    assert "all_gather.cct.p50" not in rows
    for m in ("flows.slowdown.p99", "stragglers.slow_ranks", "fabric.ecn_marks", "ranks.*.cnps_sent", "fabric.drops"):
        assert m in rows


def test_units_and_formatting() -> None:
    assert metric_unit("all_reduce.cct.p99") == "ns"
    assert metric_unit("groups.allreduce.cct.p50") == "ns"
    assert metric_unit("all_reduce.cct.cv") == ""
    assert metric_unit("all_reduce.count") == ""
    assert metric_unit("all_reduce.busbw_gbps") == "GB/s"
    assert metric_unit("stragglers.max_skew") == "fraction"
    assert metric_unit("fabric.max_peak_queue_bytes") == "bytes"
    assert metric_unit("a.cct.p99/a.cct.p50") == "x"
    assert format_value(1_500_000, "ns") == "1.50 ms"
    assert format_value(2500, "ns") == "2.50 us"
    assert format_value(0.125, "fraction") == "12.50%"
    assert format_value(None, "ns") == "n/a"
    assert format_value(3.0, "") == "3"


def test_table_and_json_shapes() -> None:
    comp = compare_summaries(RUNS, metrics=["all_reduce.cct.cv", "fabric.drops"])
    cols, rows = comparison_table(comp)
    assert cols == ("metric", "ar", "a2a", "mixed", "a2a ÷ base", "mixed ÷ base", "baseline")
    assert rows[0] == ("all_reduce.cct.cv", "0.01", "n/a", "0.25", "n/a", "25.000x", "ar")
    doc = json.loads(json.dumps(comp.to_dict(), allow_nan=False))
    m = doc["metrics"]["all_reduce.cct.cv"]
    assert m["values"] == {"ar": 0.01, "a2a": None, "mixed": 0.25}
    assert m["baseline"] == "ar"
    assert math.isclose(m["ratios"]["mixed"], 25.0)
    assert [r["label"] for r in doc["runs"]] == ["ar", "a2a", "mixed"]
