"""Two jobs on every fabric: sim, loopback and direct (real UDP on 127.0.0.0/8, bounded by the profile's
timeout); per-job summaries, every byte delivered, the job of each flow in flows.csv, ``report --job`` and
``compare --flows --job``."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from emulator.cli import main
from emulator.results import read_results

TWO = {
    "name": "two", "seed": 2, "warmup": 0, "iterations": 2, "timeout": "30s",
    "workload": {"jobs": [
        {"name": "ar", "workload": {"collectives": [
            {"type": "all_reduce", "group": "0-3", "size": "32KiB", "algorithm": "ring"}]}},
        {"name": "a2a", "start_offset": "10us", "workload": {"collectives": [
            {"type": "all_to_all", "group": "0-2", "size": "24KiB"}]}},
    ]},
}


def _run(tmp_path: Path, kind: str) -> Path:
    f = tmp_path / f"{kind}.yaml"
    f.write_text(yaml.safe_dump({**TWO, "fabric": {"kind": kind, "ports": {"rate": "1Gbps"}}}))
    out = tmp_path / kind
    assert main(["run", str(f), "-o", str(out), "--quiet"]) == 0
    return out


def _check_jobs(out: Path) -> None:
    doc = read_results(out).doc
    s = doc["summary"]
    assert doc["complete"] and s["totals"]["bytes_delivered"] == s["totals"]["bytes_scheduled"] > 0
    ar, a2a = s["jobs"]["ar"], s["jobs"]["a2a"]
    assert ar["hosts"] == [0, 1, 2, 3] and a2a["hosts"] == [4, 5, 6]
    assert ar["count"] == a2a["count"] == 2 and ar["incomplete"] == a2a["incomplete"] == 0
    assert ar["flows_unfinished"] == a2a["flows_unfinished"] == 0
    assert ar["bytes_finished"] == ar["bytes_scheduled"] == 2 * 4 * 2 * 3 * 8192  # ring: 2(N−1) × S/N per rank
    assert a2a["bytes_finished"] == a2a["bytes_scheduled"] == 2 * 3 * 2 * 8192  # A2A: (N−1) × S/N per rank
    assert ar["cct"]["count"] == a2a["cct"]["count"] == 2


@pytest.mark.parametrize("kind", ["loopback", "direct"])
def test_two_jobs_on_a_socket_fabric_deliver_every_byte_with_per_job_summaries(tmp_path: Path, kind: str) -> None:
    _check_jobs(_run(tmp_path, kind))


def test_flows_csv_names_each_flows_job_and_report_and_compare_filter_by_job(tmp_path: Path, capsys) -> None:
    sim = _run(tmp_path, "sim")
    _check_jobs(sim)
    with open(sim / "flows.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    hosts = {"ar": {0, 1, 2, 3}, "a2a": {4, 5, 6}}
    assert {r["job"] for r in rows} == {"ar", "a2a"}
    for r in rows:
        assert {int(r["src"]), int(r["dst"])} <= hosts[r["job"]]
    assert sum(r["job"] == "ar" for r in rows) == 2 * 4 * 6 and sum(r["job"] == "a2a" for r in rows) == 2 * 6
    capsys.readouterr()
    assert main(["report", str(sim)]) == 0
    out = capsys.readouterr().out
    table = out[out.index("Flows per job"):]
    assert "\n ar " in table and "\n a2a " in table
    assert main(["report", str(sim), "--job", "a2a"]) == 0
    out = capsys.readouterr().out
    assert "job a2a" in out and "Flows per job" in out and "\n a2a " in out and "\n ar " not in out
    assert main(["report", str(sim), "--job", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--job nope" in err[0] and "ar, a2a" in err[0]
    # the same schedule on the sim twice: per-flow compare cut to one job
    again = tmp_path / "again"
    assert main(["run", str(tmp_path / "sim.yaml"), "-o", str(again), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["compare", str(sim), str(again), "--flows", "--job", "a2a", "--labels", "x,y"]) == 0
    out = capsys.readouterr().out
    assert "12 measured flows matched" in out and "over 2 instances" in out and "a2a/" in out and "ar/" not in out
    assert main(["compare", str(sim), str(again), "--flows", "--job", "nope"]) == 2
    assert main(["compare", str(sim), str(again), "--job", "ar"]) == 2


def test_loopback_flows_with_two_qps_per_peer_end_after_they_start(tmp_path: Path) -> None:
    """Every part of a flow is sent before it is held: with Q = 2 on loopback a flow's end (last part held at
    the receiver) is never before its start (first packet sent), on the same model clock."""
    f = tmp_path / "q2.yaml"
    f.write_text(yaml.safe_dump({**TWO, "fabric": {"kind": "loopback", "ports": {"rate": "1Gbps"},
                                                   "transport": {"qps_per_peer": 2}}}))
    out = tmp_path / "q2"
    assert main(["run", str(f), "-o", str(out), "--quiet"]) == 0
    _check_jobs(out)
    with open(out / "flows.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and all(len(r["qp_bytes"].split()) == 2 for r in rows)
    late = [r["flow"] for r in rows if int(r["end_ns"]) < int(r["actual_start_ns"])]
    assert late == []
