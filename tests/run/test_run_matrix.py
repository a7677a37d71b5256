"""`emulator run` on a profile with a matrix runs every combination into its own results directory."""

from __future__ import annotations

from pathlib import Path

from emulator.cli import main
from emulator.results import read_results


def test_matrix_runs_every_combination(tiny_profile, tmp_path: Path, capsys) -> None:
    out = tmp_path / "sweep"
    profile = tiny_profile(matrix={"fabric.ports.rate": ["10Gbps", "25Gbps"], "seed": [1, 2]})
    assert main(["run", str(profile), "-o", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    dirs = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(dirs) == 4
    rates = sorted(read_results(d).doc["profile"]["fabric"]["ports"]["rate"] for d in dirs)
    assert rates == [10**10, 10**10, 25 * 10**9, 25 * 10**9]
    assert all(read_results(d).doc["complete"] for d in dirs)
    assert "sweep of 4 runs" in printed and "emulator compare" in printed
    assert all("[" not in d.name for d in dirs)


def test_matrix_exit_code_is_the_worst_run(tiny_profile, tmp_path: Path, capsys) -> None:
    out = tmp_path / "sweep"
    # the SLO holds at 25 Gb/s and breaks at 10 Mb/s
    profile = tiny_profile(matrix={"fabric.ports.rate": ["25Gbps", "10Mbps"]}, slo=["all_reduce.cct.p99 < 5ms"])
    assert main(["run", str(profile), "-o", str(out), "--quiet"]) == 1
    printed = capsys.readouterr().out
    assert "SLO broken" in printed and printed.count(" ok ") >= 1
