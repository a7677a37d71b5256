"""``run --quiet`` prints no summary table, but the run's warnings (what makes its numbers doubtful: the timing
verdict of a socket fabric, flows that did not finish) still go to stderr."""

from __future__ import annotations

from pathlib import Path

from emulator.cli import main

QUICKSTART = str(Path(__file__).resolve().parents[2] / "profiles" / "quickstart.yaml")


def test_a_quiet_run_still_says_what_makes_its_numbers_doubtful(tmp_path, capsys) -> None:
    rc = main(["run", QUICKSTART, "--fabric", "sim", "--set", "timeout=1ms", "-o", str(tmp_path / "r"), "--quiet"])
    cap = capsys.readouterr()
    assert rc == 3
    assert "warning: 1344 of 1344 flows did not finish" in cap.err.splitlines()
    assert "results: " in cap.out and "CCT" not in cap.out  # still no table
