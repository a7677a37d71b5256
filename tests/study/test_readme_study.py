"""The README's study table is exactly what ``python -m emulator.report.study ... --markdown`` prints for
the shipped study profiles at this commit (the sim is deterministic for a seed), and reproducing the study
writes no tracked file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from emulator.report.study import main as study_main

ROOT = Path(__file__).resolve().parents[2]
RUNS = ("study_ar_alone", "study_a2a_alone", "study_mixed")
BLOCK = re.compile(r"<!-- study-table[^\n]*-->\n(.*?)\n<!-- /study-table -->", re.S)


def _readme_table() -> str:
    m = BLOCK.search((ROOT / "README.md").read_text(encoding="utf-8"))
    assert m, "README.md has no <!-- study-table --> ... <!-- /study-table --> block"
    return m[1].strip()


@pytest.mark.slow
def test_readme_study_table_is_the_scripts_output(study, capsys) -> None:
    capsys.readouterr()
    assert study_main([*(str(study[n]) for n in RUNS), "--markdown"]) == 0
    generated = capsys.readouterr().out.strip()
    assert _readme_table() == generated, (
        "README.md's study table differs from the script's output; paste this between its markers:\n"
        + generated)


def test_markdown_writes_no_figures_and_default_figures_go_under_results(study, tmp_path, monkeypatch,
                                                                         capsys) -> None:
    monkeypatch.chdir(tmp_path)
    dirs = [str(study[n]) for n in RUNS]
    assert study_main([*dirs, "--markdown"]) == 0
    assert list(tmp_path.iterdir()) == []
    assert study_main(dirs) == 0
    assert (tmp_path / "results" / "study" / "study_summary.png").is_file()


def test_more_triples_add_claim_ranges(study, capsys) -> None:
    dirs = [str(study[n]) for n in RUNS]
    capsys.readouterr()
    assert study_main([*dirs, *dirs, "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "All-Reduce CCT cv: alone 0.0" in out and "(mixed ÷ alone" in out and "2 runs)" in out
    assert study_main(dirs[:2] + ["--markdown"]) == 2
    assert "error: expected results directories in triples" in capsys.readouterr().err


def test_readme_reproduction_writes_no_tracked_file() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [line for line in readme.splitlines() if "emulator.report.study" in line and "-o " in line]
    for line in commands:
        out = line.split("-o ", 1)[1].split()[0]
        assert out.startswith(("results/", "/tmp/")), f"the README reproduction writes into the repo: {line}"


def test_a_run_without_the_metric_is_one_error_line(study, capsys) -> None:
    ar = str(study["study_ar_alone"])  # no All-to-All in it
    capsys.readouterr()
    assert study_main([ar, ar, ar, "--markdown"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "all_to_all" in err and err.count("\n") == 1, err
