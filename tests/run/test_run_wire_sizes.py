"""`emulator run` with messages of 2 GiB and more, sizes nothing can hold, and ``icrc: compute``."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.cli import main
from emulator.results import read_results

ROOT = Path(__file__).resolve().parents[2]
SIM_AR8 = ROOT / "profiles" / "sim_ring_allreduce_8.yaml"


def test_16_gib_all_reduce_on_8_ranks_runs_instead_of_crashing(tmp_path: Path, capsys) -> None:
    """2 GiB ring chunks: the first message already used to crash the batch builder (traceback, exit 1).
    Now it runs; a 2 ms virtual time limit stops it early (exit 3, incomplete, results written)."""
    out = tmp_path / "r"
    rc = main(["run", str(SIM_AR8), "--set", "workload.collectives[0].size=16GiB", "--set", "timeout=2ms",
               "--set", "warmup=0", "--set", "iterations=1", "-o", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 3, err
    assert "internal error" not in err and "Traceback" not in err
    totals = read_results(out).summary.totals
    assert totals.bytes_scheduled == 2 * 2 * 7 * (16 << 30)  # 2 instances, 2(n-1) steps of S/n on 8 ranks
    assert totals.bytes_delivered == 0 and totals.flows_incomplete > 0


@pytest.mark.parametrize("size", ["8193TiB", "100000000TiB"])
def test_a_size_beyond_what_can_run_is_one_error_line(tmp_path: Path, capsys, size: str) -> None:
    rc = main(["run", str(SIM_AR8), "--set", f"workload.collectives[0].size={size}", "-o", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and "workload.collectives[0].size" in err
    assert not (tmp_path / "r").exists()


def test_icrc_compute_runs_on_the_sim(tiny_profile, tmp_path: Path) -> None:
    p = tiny_profile(fabric={"kind": "sim", "ports": {"rate": "25Gbps", "latency": "1us"},
                             "transport": {"icrc": "compute"}})
    out = tmp_path / "r"
    assert main(["run", str(p), "-o", str(out), "--quiet"]) == 0
    res = read_results(out)
    assert res.doc["profile"]["fabric"]["transport"]["icrc"] == "compute"
    assert res.summary.totals.bytes_delivered == res.summary.totals.bytes_scheduled


def test_a_generator_size_beyond_what_can_run_is_one_error_line(tmp_path: Path, capsys) -> None:
    """It used to overflow int64 while the schedule was assembled (a traceback)."""
    rc = main(["run", str(ROOT / "profiles" / "sim_moe_generated.yaml"), "--set",
               "workload.generate.options.a2a_size=10000000TiB", "-o", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("error: ") and "a2a_size" in err and "2^53" in err
