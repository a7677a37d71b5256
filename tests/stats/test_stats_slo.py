import math

import numpy as np
import pytest

from emulator.errors import ConfigError
from emulator.instruments.percentiles import summarize
from emulator.stats.slo import check_slos, lookup_metric, metric_paths, missing_metric


def evaluate_slos(metrics, slos):
    """The broken SLOs only, in input order."""
    return [r for r in check_slos(metrics, slos) if not r.ok]

METRICS = {
    "all_reduce": {"cct": {"p99": 6_200_000, "p50": 4_000_000, "count": 20}},
    "stragglers": {"max_skew": 0.12, "empty": None, "bad": float("nan"), "flag": True, "name": "x"},
    "ports": {"sw0.p1": {"drops": np.int64(3)}},
    "rows": [{"p99": 7}],
    "dist": summarize([1, 2, 3]),
}


def test_broken_and_holding():
    slos = [
        ("all_reduce.cct.p99", "<", 5e6),  # broken
        ("all_reduce.cct.p50", "<=", 4e6),  # holds (equal)
        ("stragglers.max_skew", "<", 0.2),  # holds
        ("all_reduce.cct.count", ">=", 30),  # broken
        ("stragglers.max_skew", ">", 0.12),  # broken (equal, strict)
    ]
    broken = evaluate_slos(METRICS, slos)
    assert [(r.path, r.op) for r in broken] == [
        ("all_reduce.cct.p99", "<"), ("all_reduce.cct.count", ">="), ("stragglers.max_skew", ">"),
    ]
    assert broken[0].value == 6_200_000 and not broken[0].ok
    assert broken[0].message == "SLO broken: all_reduce.cct.p99 = 6200000, needs < 5000000"
    assert all("\n" not in r.message for r in broken)
    every = check_slos(METRICS, slos)
    assert [r.ok for r in every] == [False, True, True, False, False]
    assert evaluate_slos(METRICS, []) == []


def test_missing_or_non_numeric_metrics_are_clear_failures():
    slos = [
        ("all_gather.cct.p99", "<", 1),
        ("all_reduce.cct.p999", "<", 1),
        ("stragglers.empty", "<", 1),
        ("stragglers.bad", "<", 1),
        ("stragglers.flag", "<", 1),
        ("stragglers.name", "<", 1),
        ("all_reduce.cct.p99.more", "<", 1),
    ]
    broken = evaluate_slos(METRICS, slos)
    assert len(broken) == len(slos) and all(r.value is None for r in broken)
    msgs = [r.message for r in broken]
    assert "metric not found (no key 'all_gather' under the top level)" in msgs[0]
    assert "no key 'p999' under 'all_reduce.cct'" in msgs[1]
    assert "no value" in msgs[2]
    assert "NaN" in msgs[3]
    assert "not a number" in msgs[4] and "not a number" in msgs[5]
    assert "not found" in msgs[6]


def test_dotted_keys_sequences_objects_and_numpy_scalars():
    assert lookup_metric(METRICS, "ports.sw0.p1.drops") == 3
    assert lookup_metric(METRICS, "rows.0.p99") == 7
    assert lookup_metric(METRICS, "dist.max") == 3
    with pytest.raises(KeyError):
        lookup_metric(METRICS, "rows.5.p99")
    assert evaluate_slos(METRICS, [("ports.sw0.p1.drops", "<=", 3)]) == []
    assert evaluate_slos(METRICS, [("dist.p50", ">", 1.5)]) == []
    r = evaluate_slos({"x": math.inf}, [("x", "<", 1e9)])
    assert r[0].value == math.inf


def test_unknown_operator_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown comparison"):
        evaluate_slos(METRICS, [("all_reduce.cct.p99", "=~", 1)])


def test_equality_slos_for_counters():
    assert [r.ok for r in check_slos(METRICS, [("ports.sw0.p1.drops", "==", 0), ("ports.sw0.p1.drops", "!=", 0),
                                               ("ports.sw0.p1.drops", "==", 3)])] == [False, True, True]
    missing = check_slos(METRICS, [("stragglers.empty", "!=", 0)])[0]
    assert not missing.ok and "no value" in missing.message  # a missing value never passes, even for !=


def test_missing_metric_names_the_closest_path_or_lets_open_paths_through():
    assert missing_metric(METRICS, "all_reduce.cct.p99") is None
    assert missing_metric(METRICS, "ports.sw0.p1.drops") is None  # dotted keys
    why = missing_metric(METRICS, "all_reduce.cct.p999")
    assert why == "no metric 'all_reduce.cct.p999' (no key 'p999' under 'all_reduce.cct'); did you mean 'all_reduce.cct.p99'?"
    assert "did you mean 'stragglers.max_skew'?" in missing_metric(METRICS, "stragglers.max_skw")
    assert "did you mean 'all_reduce.cct.p50'?" in missing_metric(METRICS, "allreduce.cct.p50")
    assert "keys there: all_reduce, stragglers, ports, rows, dist" in missing_metric(METRICS, "zzz")
    assert "is a value" in missing_metric(METRICS, "all_reduce.cct.p99.ms")
    assert missing_metric(METRICS, "rows.5.p99") is None  # a list index: known only after the run
    assert missing_metric(METRICS, "stragglers.hist.3") is not None
    assert missing_metric(METRICS, "stragglers.hist.3", open_keys=["stragglers"]) is None
    assert "all_reduce.cct.p99" in metric_paths(METRICS) and "rows" in metric_paths(METRICS)


def test_slos_evaluate_on_a_typed_summary():
    import json
    from pathlib import Path

    from emulator.stats.summary_types import RunSummary

    raw = json.loads((Path(__file__).resolve().parents[1] / "data" / "results_main" / "results.json").read_text())
    typed = RunSummary.from_dict(raw["summary"])
    slos = [("all_reduce.cct.p99", "<", 5e7), ("stragglers.max_skew", "<", 0.01), ("ranks.3.cnps_sent", ">=", 0),
            ("fabric.ports.4.utilisation", ">", 0.5), ("all_gather.cct.p99", "<", 1), ("p2p.fct_scheduled_ns.p99", "<", 1),
            ("nccl_table.0.busbw_gbps", ">", 0), ("flows.collectives", "<", 1)]
    on_dict, on_typed = check_slos(raw["summary"], slos), check_slos(typed, slos)
    assert [(r.ok, r.value, r.reason) for r in on_typed] == [(r.ok, r.value, r.reason) for r in on_dict]
    assert [r.ok for r in on_typed] == [True, False, True, True, False, False, True, False]
