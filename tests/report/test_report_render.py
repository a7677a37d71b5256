"""'emulator report' on the stored results directory tests/data/results_v1: every format, version refusal."""

from __future__ import annotations

import base64
import csv
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from emulator.cli import main
from emulator.report.build import build_document
from emulator.report.html import render_html
from emulator.report.text import render_text
from emulator.results import Results, read_results
from emulator.schema import build
from emulator.stats.summary_types import StragglerFigures
from emulator.units import format_duration_ns

STORED = Path(__file__).resolve().parents[1] / "data" / "results_v1"


@pytest.fixture(scope="module")
def res():
    return read_results(STORED)


def test_text_has_the_tables(capsys) -> None:
    assert main(["report", str(STORED)]) == 0
    out = capsys.readouterr().out
    for heading in ("Collective completion time", "nccl-tests-style table", "Stragglers", "Per rank", "Flows",
                    "FCT slowdown by flow size", "Fabric", "Ports, busiest first", "Generator health", "SLOs"):
        assert heading in out, heading
    assert re.search(r"#collective\s+size\s+count\s+type\s+redop\s+root\s+time\(us\)\s+algbw\(GB/s\)\s+% line\s+busbw\(GB/s\)\s+% line", out)
    summary = read_results(STORED).summary
    nccl = out.split("nccl-tests-style table")[1].split("Avg bus bandwidth")[0]
    for row in summary.nccl_table:  # every nccl-tests row, with the stored numbers
        line = next(ln for ln in nccl.splitlines() if ln.startswith(f" {row.collective} ") and str(row.size_bytes) in ln)
        assert f"{row.busbw_gbps:.2f}" in line and f"{row.time_us:.2f}" in line
    ar = summary.collectives["all_reduce"].cct
    assert format_duration_ns(ar.p50) in out
    assert "Avg bus bandwidth" in out


def test_text_says_na_not_zero_for_missing_values(res) -> None:
    doc = build_document(res)
    doc_text = render_text(doc)
    assert "n/a" not in doc_text.split("Collective completion time")[1].split("Process groups")[0]
    stored = res.doc["summary"]
    empty = Results(res.path, dict(res.doc, summary=dict(stored, all_reduce=dict(stored["all_reduce"], cct={"count": 0}))))
    text = render_text(build_document(empty))
    line = next(ln for ln in text.splitlines() if ln.startswith(" all_reduce ") and "n/a" in ln)
    assert " 0 " in line  # n = 0 ...
    assert line.count("n/a") >= 6  # ... and no silent zeros for the percentiles


def test_html_is_one_self_contained_file(stored_reports) -> None:
    run = stored_reports["html"]  # tests/conftest.py: `emulator report --format html -o DIR/report.html`
    out = run.path
    assert run.code == 0
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert list(run.dir.iterdir()) == [out]  # nothing written beside it
    # no external references of any kind
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|file:)""", page, re.I)
    assert "<script" not in page.lower() and "<link" not in page.lower() and "@import" not in page
    srcs = re.findall(r'<img[^>]*src="([^"]+)"', page)
    assert len(srcs) >= 4  # CCT CDF, straggler heatmaps, busiest port, FCT slowdown
    for s in srcs:
        assert s.startswith("data:image/png;base64,")
        assert base64.b64decode(s.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    for heading in ("nccl-tests-style table", "Stragglers", "Fabric", "Generator health"):
        assert heading in page
    assert all(href.startswith("#") for href in re.findall(r'href="([^"]*)"', page))


def test_html_escapes_result_text(res) -> None:
    doc = build_document(res)
    doc.warnings.append("<script>alert(1)</script> & co")
    page = render_html(doc)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in page


def test_json_and_csv_parse(capsys) -> None:
    assert main(["report", str(STORED), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["results_version"] == 1 and doc["summary"]["all_reduce"]["count"] > 0
    assert main(["report", str(STORED), "--format", "csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0] == ["metric", "value"]
    flat = dict(rows[1:])
    assert int(flat["all_reduce.cct.p99"]) == doc["summary"]["all_reduce"]["cct"]["p99"]
    assert float(flat["nccl_table.0.busbw_gbps"]) == pytest.approx(doc["summary"]["nccl_table"][0]["busbw_gbps"])
    assert all(len(r) == 2 for r in rows)


def test_plots_format_writes_pngs(stored_reports) -> None:
    run = stored_reports["plots"]  # tests/conftest.py: `emulator report --format plots -o DIR/plots`
    assert run.code == 0
    names = sorted(p.name for p in run.path.iterdir())
    assert {"cct_cdf.png", "busiest_port.png", "fct_slowdown.png", "stragglers_all_reduce.png"} <= set(names)
    for p in run.path.iterdir():
        assert p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def _newer_copy(tmp_path: Path, version: int) -> Path:
    d = tmp_path / "newer"
    shutil.copytree(STORED, d)
    doc = json.loads((d / "results.json").read_text())
    doc["results_version"] = version
    (d / "results.json").write_text(json.dumps(doc))
    return d


@pytest.mark.parametrize("fmt", ["text", "html", "timeline", "csv"])
def test_newer_results_version_is_refused_in_one_line(tmp_path, capsys, fmt) -> None:
    d = _newer_copy(tmp_path, 99)
    assert main(["report", str(d), "--format", fmt, "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert "99" in err and "newer" in err
    assert not (tmp_path / "out").exists()


def test_missing_directory_is_one_line(tmp_path, capsys) -> None:
    assert main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a results directory" in err


def test_run_outputs_by_profile_formats(tmp_path) -> None:
    from emulator.report import write_run_outputs

    d = tmp_path / "r"
    shutil.copytree(STORED, d)
    paths = write_run_outputs(read_results(d), ["text", "json", "csv", "html", "timeline", "plots"])
    names = {p.relative_to(d).as_posix() for p in paths}
    assert {"report.html", "timeline.json", "plots/cct_cdf.png", "plots/busiest_port.png"} <= names
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    assert write_run_outputs(read_results(d), ["text", "csv"]) == []


def test_straggler_and_fabric_facts_say_what_they_cover(res) -> None:
    from emulator.report.build import most_often_last

    text = render_text(build_document(res))
    assert "peak queue (max over switch ports)" in text and "kind host = a NIC's uplink queue" in text
    cct = res.doc["summary"]["all_reduce"]["cct"]  # metrics.md §4: count, min, median, p99, max per type
    header = next(ln for ln in text.splitlines() if ln.startswith("#type ") and "incomplete" in ln)
    assert header.split()[3:6] == ["n", "min", "p50"]
    line = next(ln for ln in text.splitlines() if ln.startswith(" all_reduce "))
    assert line.split()[3:8] == [str(cct["count"]), *format_duration_ns(cct["min"]).split(),
                                 *format_duration_ns(cct["p50"]).split()]
    st = {"most_often_last_rank": 0, "most_often_last_count": 4, "last_finisher_counts": {"0": 4, "1": 4, "2": 1}}
    assert most_often_last(build(StragglerFigures, st)) == "ranks 0, 1 tied (4× each)"
    st["last_finisher_counts"]["1"] = 0
    assert most_often_last(build(StragglerFigures, st)) == "rank 0 (4×)"
    assert most_often_last(StragglerFigures()) == "n/a"


def test_tables_fit_every_cell_whatever_its_width() -> None:
    """rich lays the columns out: a cell wider than a terminal is neither cut nor wrapped, columns stay apart."""
    from emulator.report.document import Table
    from emulator.report.text import render_table

    wide = "x" * 150
    lines = render_table(Table("t", ("name", "value", "rate"), (("a", wide, "511.33 us"), ("bb", "1", "0.000962 GB/s")),
                               note="n"))
    assert lines[0] == "t" and lines[1].split() == ["#name", "value", "rate"] and lines[-1] == "# n"
    assert wide in lines[2] and " 511.33 us" in lines[2] and all(ln == ln.rstrip() for ln in lines)
    assert lines[3].endswith("  0.000962 GB/s") and len(lines[2]) == len(lines[3])  # numbers right-aligned
