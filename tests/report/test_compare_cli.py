"""'emulator compare' on copies of the stored results directory with hand-edited summaries."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from emulator.cli import main

STORED = Path(__file__).resolve().parents[1] / "data" / "results_v1"


def _copy(tmp_path: Path, name: str, edit=None, version: int | None = None) -> Path:
    d = tmp_path / name
    shutil.copytree(STORED, d)
    doc = json.loads((d / "results.json").read_text())
    doc["name"] = name
    if edit:
        edit(doc["summary"])
    if version is not None:
        doc["results_version"] = version
    (d / "results.json").write_text(json.dumps(doc))
    return d


def _slower(s: dict) -> None:
    s["all_reduce"]["cct"]["p99"] *= 3
    s["all_reduce"]["cct"]["cv"] = 0.5
    s["fabric"]["ecn_marks"] = 2 * s["fabric"]["ecn_marks"] + 10


def test_json_ratios_through_the_cli(tmp_path, capsys) -> None:
    a, b = _copy(tmp_path, "alone"), _copy(tmp_path, "mixed", _slower)
    base = json.loads((a / "results.json").read_text())["summary"]
    assert main(["compare", str(a), str(b), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in out["runs"]] == ["alone", "mixed"]
    m = out["metrics"]
    p99 = m["all_reduce.cct.p99"]
    assert p99["unit"] == "ns" and p99["baseline"] == "alone"
    assert p99["values"]["mixed"] == 3 * p99["values"]["alone"] == 3 * base["all_reduce"]["cct"]["p99"]
    assert p99["ratios"] == {"alone": 1.0, "mixed": pytest.approx(3.0)}
    cv = m["all_reduce.cct.cv"]
    assert cv["ratios"]["mixed"] == pytest.approx(0.5 / base["all_reduce"]["cct"]["cv"])
    ecn = m["fabric.ecn_marks"]
    assert ecn["ratios"]["mixed"] == pytest.approx((2 * base["fabric"]["ecn_marks"] + 10) / base["fabric"]["ecn_marks"])
    # default rows: every collective type of the run, tails, stragglers, fabric
    for key in ("all_to_all.cct.p99/all_to_all.cct.p50", "gather.busbw_gbps", "flows.slowdown.p99",
                "stragglers.max_skew", "ranks.*.cnps_sent", "fabric.drops"):
        assert key in m


def test_table_and_metric_selection(tmp_path, capsys) -> None:
    a, b = _copy(tmp_path, "alone"), _copy(tmp_path, "mixed", _slower)
    assert main(["compare", str(a), str(b), "-m", "all_reduce.cct.p99,all_reduce.cct.cv", "--labels", "A,B"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if not ln.startswith("# ")]
    assert lines[0].split() == ["#metric", "A", "B", "B", "÷", "base", "baseline"]
    assert len(lines) == 3
    assert lines[1].split()[0] == "all_reduce.cct.p99" and "3.000x" in lines[1]


def test_refuses_newer_and_bad_arguments(tmp_path, capsys) -> None:
    a, newer = _copy(tmp_path, "alone"), _copy(tmp_path, "newer", version=2)
    assert main(["compare", str(a), str(newer)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "newer" in err
    assert main(["compare", str(a), str(a), "--labels", "x"]) == 2
    assert "--labels" in capsys.readouterr().err
    assert main(["compare", str(a), str(a), "--baseline", "5"]) == 2
    assert "--baseline" in capsys.readouterr().err
    assert main(["compare", str(a), str(a), "-m", "all_reduce.cct.p99,all_reduce.cct.p99x"]) == 2  # a typo
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'all_reduce.cct.p99x'" in err and "did you mean 'all_reduce.cct.p99'" in err
    # a typo is named from the summary's declaration, before any directory is read
    assert main(["compare", str(tmp_path / "none"), str(a), "-m", "stragglers.max_skw/flows.slowdown.p99"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean 'stragglers.max_skew'" in err and "none" not in err
    # a declared metric no run has: named after reading
    assert main(["compare", str(a), str(a), "-m", "all_gather.cct.p99"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'all_gather.cct.p99': not found" in err


def test_same_name_runs_get_distinct_labels(tmp_path, capsys) -> None:
    a = _copy(tmp_path, "x")
    b = tmp_path / "y"
    shutil.copytree(a, b)  # same run name inside: labels fall back to directory names
    assert main(["compare", str(a), str(b), "--json"]) == 0
    assert [r["label"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["x", "y"]


def test_one_directory_is_an_error(tmp_path, capsys) -> None:
    a = _copy(tmp_path, "alone")
    assert main(["compare", str(a)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: compare needs two or more") and str(a) in err


def test_default_busbw_row_is_the_figure_the_summary_prints(tmp_path, capsys) -> None:
    """The run's summary and reports print a type's busbw as the byte-weighted mean over its instances;
    compare's default busbw row is that figure, not the median instance's (which differ)."""

    def weighted(s: dict) -> None:
        for t in ("all_reduce", "all_to_all"):
            s[t]["busbw_weighted_gbps"] = 0.75 * s[t]["busbw_gbps"]

    a, b = _copy(tmp_path, "a", weighted), _copy(tmp_path, "b", weighted)
    base = json.loads((a / "results.json").read_text())["summary"]
    assert main(["compare", str(a), str(b), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["metrics"]
    row = m["all_reduce.busbw_weighted_gbps"]
    assert row["values"]["a"] == base["all_reduce"]["busbw_weighted_gbps"]
    assert "all_reduce.busbw_gbps" not in m
