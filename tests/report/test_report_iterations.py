"""Reports show the job view (iterations) and point-to-point flows, and still render directories without them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from emulator.cli import main
from emulator.report.build import build_document
from emulator.report.compare import default_metrics
from emulator.report.console import render_run_summary
from emulator.report.html import render_html
from emulator.report.text import render_text
from emulator.results import read_results, recompute
from emulator.schema import dump
from emulator.units import format_duration_ns

STORED = Path(__file__).resolve().parents[1] / "data" / "results_v1"


def test_a_directory_written_before_the_job_view_still_renders(capsys) -> None:
    res = read_results(STORED)
    assert res.summary.iteration is None and res.summary.p2p is None
    text = render_text(build_document(res))
    assert "Collective completion time" in text and "Iterations (job completion)" not in text
    assert "iterations: JCT" not in render_run_summary(res.doc, res.summary)
    assert not any(m.startswith(("iteration.", "p2p.")) for m in default_metrics([res.summary]))
    assert main(["report", str(STORED), "--format", "html", "-o", "/dev/null"]) == 0
    assert main(["report", str(STORED), "--format", "csv"]) == 0
    assert "iteration." not in capsys.readouterr().out


def test_recomputed_summary_adds_the_iteration_section(tmp_path: Path, capsys) -> None:
    d = tmp_path / "r"
    shutil.copytree(STORED, d)
    doc = json.loads((d / "results.json").read_text())
    doc["summary"] = dump(recompute(read_results(d)))
    (d / "results.json").write_text(json.dumps(doc))
    res = read_results(d)
    it = res.summary.iteration
    text = render_text(build_document(res))
    section = text.split("Iterations (job completion)")[1].split("Collective completion time")[0]
    assert format_duration_ns(it.jct.p50) in section and "3 measured complete, 0 incomplete, 1 warmup" in section
    for p in it.per_iteration:  # one row per measured iteration, with its JCT
        assert any(ln.split()[:3] == [str(p.iteration), *format_duration_ns(p.jct_ns).split()]
                   for ln in section.splitlines())
    assert "Per rank over iterations" in section
    assert "Iterations (job completion)" in render_html(build_document(res))
    assert "iterations: JCT p50" in render_run_summary(res.doc, res.summary)
    assert main(["report", str(d), "--format", "csv"]) == 0
    assert "iteration.jct.p99," in capsys.readouterr().out
    assert "iteration.jct.p99" in default_metrics([res.summary])
