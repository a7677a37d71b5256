"""`emulator run -o DIR` onto a directory with an earlier run's results: refused, or cleared with --overwrite."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import emulator.run.pipeline as pipeline
from emulator.cli import main
from emulator.drivers.ideal import run_ideal
from emulator.results import read_results


@pytest.fixture(autouse=True)
def _ideal_driver(monkeypatch) -> None:
    monkeypatch.setattr(pipeline, "make_driver", lambda profile, kind=None: SimpleNamespace(name="ideal", run=lambda s, progress: run_ideal(s)))


def _one_error_line(capsys, *needles: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert all(n in err for n in needles), err
    return err


def test_refuses_a_directory_with_results_and_leaves_it_alone(tiny_profile, tmp_path: Path, capsys,
                                                              monkeypatch) -> None:
    out = tmp_path / "r"
    assert main(["run", str(tiny_profile(output={"formats": ["text", "timeline"]})), "-o", str(out), "--quiet"]) == 0
    (out / "plots").mkdir()
    (out / "plots" / "cct_cdf.png").write_bytes(b"old")
    (out / "report.html").write_text("old report")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    monkeypatch.setattr(pipeline, "load_workload", lambda *a: pytest.fail("nothing may run"))
    assert main(["run", str(tiny_profile()), "-o", str(out)]) == 2
    _one_error_line(capsys, f"-o {out}: already holds the results of an earlier run", "results.json", "--overwrite")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_overwrite_removes_only_what_a_run_wrote_and_says_so(tiny_profile, tmp_path: Path, capsys) -> None:
    out = tmp_path / "r"
    first = tiny_profile(output={"formats": ["text", "timeline"]})
    assert main(["run", str(first), "-o", str(out), "--quiet"]) == 0
    (out / "plots").mkdir()
    (out / "plots" / "cct_cdf.png").write_bytes(b"old")
    (out / "report.html").write_text("old report")
    (out / "notes.txt").write_text("mine")
    (out / "mine").mkdir()
    (out / "mine" / "results.json").write_text("{}")  # a subdirectory is not the run's
    capsys.readouterr()
    assert main(["run", str(tiny_profile(output={"formats": ["text"]})), "-o", str(out), "--quiet", "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert f"--overwrite: removed 11 file(s) of an earlier run from {out}: results.json" in err
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert "report.html" not in left and "timeline.json" not in left and "plots" not in left
    assert "notes.txt" in left and "mine/results.json" in left and "results.json" in left
    assert read_results(out).doc["complete"]


def test_overwrite_keeps_the_old_results_when_the_profile_is_bad(tiny_profile, tmp_path: Path, capsys) -> None:
    out = tmp_path / "r"
    assert main(["run", str(tiny_profile()), "-o", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["run", str(tiny_profile(slo=["all_reduce.cct.p99x < 1s"])), "-o", str(out), "--overwrite"]) == 2
    _one_error_line(capsys, "all_reduce.cct.p99x")
    assert read_results(out).doc["complete"]


def test_a_file_is_not_a_results_directory(tiny_profile, tmp_path: Path, capsys) -> None:
    (tmp_path / "f").write_text("x")
    assert main(["run", str(tiny_profile()), "-o", str(tmp_path / "f"), "--overwrite"]) == 2
    _one_error_line(capsys, "exists and is not a directory")


def test_default_timestamped_directory_needs_no_overwrite(tiny_profile, tmp_path: Path, capsys,
                                                          monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(tiny_profile()), "--quiet"]) == 0
    assert main(["run", str(tiny_profile()), "--quiet"]) == 0
    assert len(list((tmp_path / "results").iterdir())) == 2


def test_matrix_sweep_is_refused_before_any_run_then_overwritten(tiny_profile, tmp_path: Path, capsys) -> None:
    out = tmp_path / "sweep"
    sweep = tiny_profile(matrix={"seed": [1, 2]})
    assert main(["run", str(sweep), "-o", str(out), "--quiet"]) == 0
    dirs = sorted(p for p in out.iterdir() if p.is_dir())
    stamps = {d: (d / "results.json").stat().st_mtime_ns for d in dirs}
    capsys.readouterr()
    assert main(["run", str(sweep), "-o", str(out), "--quiet"]) == 2
    _one_error_line(capsys, f"-o {out}: already holds", "results.json")
    assert "[1/2]" not in capsys.readouterr().out
    assert {d: (d / "results.json").stat().st_mtime_ns for d in dirs} == stamps
    assert main(["run", str(sweep), "-o", str(out), "--quiet", "--overwrite"]) == 0
    assert f"--overwrite: removed 18 file(s) of an earlier run from {out}: " in capsys.readouterr().err
    assert sorted(p for p in out.iterdir() if p.is_dir()) == dirs
    assert all(read_results(d).doc["complete"] for d in dirs)


def test_matrix_checks_every_combination_slo_before_the_first_run(tiny_profile, tmp_path: Path, capsys) -> None:
    sweep = tiny_profile(matrix={"seed": [1, 2]}, slo=["all_to_all.cct.p99 < 1s", "barrier.cct.p99 < 1s"])
    assert main(["run", str(sweep), "-o", str(tmp_path / "sweep"), "--quiet"]) == 2
    _one_error_line(capsys, "slo[1] 'barrier.cct.p99 < 1s'", "runs no barrier")
    assert not (tmp_path / "sweep").exists()


def test_a_users_own_pictures_in_plots_are_not_an_earlier_run(tiny_profile, tmp_path: Path, capsys) -> None:
    """plots/mine.png is not a figure a run writes: it neither makes -o refuse the directory nor is deleted by
    --overwrite; the run's own figures beside it are."""
    out = tmp_path / "r"
    (out / "plots").mkdir(parents=True)
    (out / "plots" / "mine.png").write_bytes(b"mine")
    assert main(["run", str(tiny_profile()), "-o", str(out), "--quiet"]) == 0
    (out / "plots" / "stragglers_all_reduce.png").write_bytes(b"old")
    assert main(["run", str(tiny_profile()), "-o", str(out), "--quiet", "--overwrite"]) == 0
    assert (out / "plots" / "mine.png").read_bytes() == b"mine"
    assert not (out / "plots" / "stragglers_all_reduce.png").exists()
