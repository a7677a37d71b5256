"""The typed run summary: JSON round trips, stored summaries read, bad values and metric-path typos named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulator.instruments.percentiles import Distribution
from emulator.schema import SchemaError, dump
from emulator.stats.summary_types import CollectiveSummary, RunSummary, metric_path_error

DATA = Path(__file__).resolve().parents[1] / "data"


def _stored(name: str) -> dict:
    return json.loads((DATA / name / "results.json").read_text())["summary"]


def test_summary_written_by_main_round_trips_to_the_same_json() -> None:
    raw = _stored("results_main")
    summary = RunSummary.from_dict(raw)
    assert json.dumps(dump(summary)) == json.dumps(raw)  # same keys, same order, same number kinds
    assert RunSummary.from_dict(dump(summary)) == summary
    assert summary.collective_types() == ["all_reduce", "all_to_all", "gather"]
    assert isinstance(summary.collectives["all_reduce"], CollectiveSummary)
    assert summary.collectives["all_reduce"].cct.p99 == raw["all_reduce"]["cct"]["p99"]
    assert summary.fabric.extra == {"kind": "sim"}


def test_older_summary_reads_and_round_trips() -> None:
    summary = RunSummary.from_dict(_stored("results_v1"))
    assert RunSummary.from_dict(dump(summary)) == summary
    assert summary.nccl_table[0].root == "-"  # written before the root column existed


def test_a_bad_value_is_an_error_naming_its_key_path() -> None:
    raw = _stored("results_main")
    raw["all_reduce"]["cct"]["p99"] = "fast"
    with pytest.raises(SchemaError) as exc:
        RunSummary.from_dict(raw)
    assert exc.value.path == "summary.all_reduce.cct.p99"
    raw = _stored("results_main")
    raw["flows"]["fct_sheduled_ns"] = {}
    with pytest.raises(SchemaError, match="did you mean 'fct_scheduled_ns'"):
        RunSummary.from_dict(raw)


_num = st.one_of(st.none(), st.integers(-10**12, 10**12), st.floats(allow_nan=False, allow_infinity=False))


@given(st.integers(0, 10**9), st.lists(_num, min_size=9, max_size=9),
       st.one_of(st.none(), st.floats(1e-6, 0.5)))
def test_distribution_round_trips(count: int, values: list, err: float | None) -> None:
    d = Distribution(count, *values, approx_relative_error=err)
    assert Distribution.schema_load(dump(d), "d") == d


@pytest.mark.parametrize("path", ["all_reduce.cct.p99", "stragglers.max_skew", "ranks.3.cnps_sent",
                                  "nccl_table.0.busbw_gbps", "fabric.ports.2.utilisation", "groups.tp.0.cct.p50",
                                  "iteration.stragglers.last_finisher_counts.2", "stragglers.slow_ranks",
                                  "flows.slowdown_by_size.0.p99_slowdown", "generator.driver.anything"])
def test_valid_metric_paths_pass(path: str) -> None:
    assert metric_path_error(path) is None


@pytest.mark.parametrize(("path", "hint"), [
    ("all_reduce.cct.p99x", "did you mean 'all_reduce.cct.p99'"),
    ("allreduce.cct.p99", "did you mean 'all_reduce.cct.p99'"),
    ("stragglers.max_skw", "did you mean 'stragglers.max_skew'"),
    ("iteration.jct.p50.x", "is a value"),
    ("ranks.0.cnps", "did you mean 'ranks.0.cnps_sent'"),
])
def test_metric_path_typos_are_named(path: str, hint: str) -> None:
    why = metric_path_error(path)
    assert why is not None and hint in why


def test_wildcards_only_where_asked() -> None:
    assert metric_path_error("ranks.*.cnps_sent", wildcard=True) is None
    assert metric_path_error("ranks.*.cnps_snt", wildcard=True) is not None


def test_report_csv_of_the_golden_directory_lists_the_same_metrics(capsys) -> None:
    """``emulator report -f csv`` flattens the typed summary to exactly what main wrote for the same directory."""
    from emulator.cli import main

    assert main(["report", str(DATA / "results_main"), "--format", "csv"]) == 0
    assert capsys.readouterr().out == (DATA / "results_main.summary.csv").read_text()


def test_a_straggler_attribution_reads_dumps_and_renders() -> None:
    """Runs with perturbations carry ``straggler_attribution`` (ranks, lines); runs without it have none."""
    from emulator.report.console import render_run_summary

    raw = _stored("results_main")
    assert RunSummary.from_dict(raw).straggler_attribution is None
    raw["straggler_attribution"] = {"ranks": [{"rank": 3, "last_count": 2}], "lines": ["rank 3 last in 2 of 15"]}
    summary = RunSummary.from_dict(raw)
    assert dump(summary) == raw and summary.straggler_attribution["ranks"][0]["rank"] == 3
    text = render_run_summary({"name": "x"}, summary)
    assert "straggler attribution: rank 3 last in 2 of 15" in text
    assert metric_path_error("straggler_attribution.ranks.0.rank") is None
