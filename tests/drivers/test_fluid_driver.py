"""The fluid driver behind ``emulator run``: same results directory, reports, compare and SLOs as the
sim; CCT close to the packet sim on shipped profiles; options it cannot model are one error line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from emulator.cli import main

PROFILES = Path(__file__).parents[2] / "profiles"


def _cct_ns(results: Path) -> np.ndarray:
    """CCT of every measured collective instance (collectives.csv: one row per rank of an instance)."""
    seen: dict[str, float] = {}
    with open(results / "collectives.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["warmup"] == "0" and row["cct_ns"]:
                seen[row["instance"]] = float(row["cct_ns"])
    return np.array(list(seen.values()))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[tuple[str, str], Path]:
    base = tmp_path_factory.mktemp("fluid")
    out = {}
    for name in ("sim_ring_allreduce_8", "sim_incast_7to1"):
        for fabric in ("sim", "fluid"):
            d = base / f"{name}_{fabric}"
            assert main(["run", str(PROFILES / f"{name}.yaml"), "--fabric", fabric, "-o", str(d), "--quiet"]) == 0
            out[(name, fabric)] = d
    return out


def _fct_ns(results: Path) -> np.ndarray:
    with open(results / "flows.csv", newline="") as fh:
        return np.array([float(r["fct_scheduled_ns"]) for r in csv.DictReader(fh) if r["warmup"] == "0"])


def _end_ns(results: Path) -> int:
    return json.loads((results / "results.json").read_text())["driver"]["health"]["end_ns"]


def test_ring_cct_p50_close_to_the_packet_sim(runs) -> None:
    name = "sim_ring_allreduce_8"
    sim, fluid = _cct_ns(runs[(name, "sim")]), _cct_ns(runs[(name, "fluid")])
    assert sim.size == fluid.size > 0
    assert abs(np.median(fluid) / np.median(sim) - 1) <= 0.15, (np.median(fluid), np.median(sim))


def test_incast_fct_and_run_time_close_to_the_packet_sim(runs) -> None:
    """Incast: flow FCT p50 and the whole run's length agree; the per-instance CCT does not yet (how far
    consecutive gathers overlap differs, see bench/RESULTS.md), so it is not asserted here."""
    name = "sim_incast_7to1"
    sim, fluid = _fct_ns(runs[(name, "sim")]), _fct_ns(runs[(name, "fluid")])
    assert sim.size == fluid.size > 0
    assert abs(np.median(fluid) / np.median(sim) - 1) <= 0.15, (np.median(fluid), np.median(sim))
    assert abs(_end_ns(runs[(name, "fluid")]) / _end_ns(runs[(name, "sim")]) - 1) <= 0.15


def test_results_directory_labels_estimates(runs) -> None:
    d = runs[("sim_incast_7to1", "fluid")]
    doc = json.loads((d / "results.json").read_text())
    assert doc["fabric_kind"] == "fluid" and doc["complete"]
    assert "expected values of the fluid model" in doc["driver"]["fabric"]["estimates"]
    assert any("fluid" in w for w in doc["warnings"])
    ports = {p["name"]: p for p in doc["summary"]["fabric"]["ports"]}
    assert ports["sw0->host0"]["marked_packets"] > 0  # the incast port marks
    assert {p.name for p in d.iterdir()} >= {"results.json", "flows.csv", "collectives.csv", "records.npz"}


def test_report_and_compare_flows_work_on_fluid(runs, capsys, tmp_path) -> None:
    d = runs[("sim_incast_7to1", "fluid")]
    assert main(["report", str(d), "--format", "html", "-o", str(tmp_path / "r.html")]) == 0
    capsys.readouterr()
    assert main(["compare", str(runs[("sim_incast_7to1", "sim")]), str(d), "--flows"]) == 0
    out = capsys.readouterr().out
    assert "42 measured flows matched, 42 finished in both" in out
    assert "(fluid)" in out


def test_slo_evaluated_on_fluid(tmp_path, capsys) -> None:
    d = tmp_path / "q"
    rc = main(["run", str(PROFILES / "quickstart.yaml"), "--fabric", "fluid", "-o", str(d), "--quiet",
               "--set", "fabric.topology=single_switch"])
    doc = json.loads((d / "results.json").read_text())
    assert rc == 0 and doc["slo"] and all(s["ok"] and s["value"] > 0 for s in doc["slo"]), doc["slo"]


@pytest.mark.parametrize(("key", "value"), [("fabric.loss", "0.01"), ("fabric.transport.icrc", "compute")])
def test_options_without_meaning_are_one_error_line(tmp_path, capsys, key, value) -> None:
    rc = main(["run", str(PROFILES / "sim_incast_7to1.yaml"), "--fabric", "fluid", "--set", f"{key}={value}",
               "-o", str(tmp_path / "x"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("error:") and key in err[0], err
    assert not (tmp_path / "x").exists()


def test_pfc_on_fluid_pauses_the_incast_senders(tmp_path) -> None:
    """``fabric.pfc.enabled`` on fluid: the incast's senders are paused, nothing is dropped."""
    d = tmp_path / "pfc"
    argv = ["run", str(PROFILES / "sim_incast_7to1.yaml"), "--fabric", "fluid", "-o", str(d), "--quiet",
            "--set", "fabric.pfc.enabled=true", "--set", "fabric.ports.buffer=300KB"]
    assert main(argv) == 0
    doc = json.loads((d / "results.json").read_text())
    ports = {p["name"]: p for p in doc["summary"]["fabric"]["ports"]}
    assert doc["complete"] and all(p["dropped_packets"] == 0 for p in ports.values())
    assert ports["sw0->host0"]["xoff_time_ns"] > 0
    assert all(ports[f"host{i}->sw0"]["paused_time_ns"] > 0 for i in range(1, 8))


def test_profile_kind_fluid(tmp_path) -> None:
    """``fabric.kind: fluid`` in a profile, on a leaf–spine with 2:1 uplinks and ECMP (as the study fabric)."""
    d = tmp_path / "ls"
    sets = ["fabric.kind=fluid", "fabric.topology.kind=leaf_spine", "fabric.topology.leaves=2",
            "fabric.topology.spines=2", "fabric.topology.oversubscription=2", "warmup=0", "iterations=1"]
    argv = ["run", str(PROFILES / "sim_ring_allreduce_8.yaml"), "-o", str(d), "--quiet"]
    for kv in sets:
        argv += ["--set", kv]
    assert main(argv) == 0
    doc = json.loads((d / "results.json").read_text())
    assert doc["fabric_kind"] == "fluid" and doc["complete"]
    names = {p["name"] for p in doc["summary"]["fabric"]["ports"] if p["dequeued_bytes"] > 0}
    assert any(n.startswith("leaf0->spine") for n in names) and any(n.startswith("spine") for n in names)


def test_workload_too_large_for_memory_fails_before_the_run(tmp_path, capsys, monkeypatch) -> None:
    import emulator.drivers.fluid as fluid

    monkeypatch.setattr(fluid, "available_memory_bytes", lambda: 64 << 20)
    rc = main(["run", str(PROFILES / "sim_incast_7to1.yaml"), "--fabric", "fluid", "-o", str(tmp_path / "x"),
               "--quiet"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("error: fluid: the workload has") and "GiB" in err[0], err
    assert "available" in err[0]
    assert not (tmp_path / "x" / "results.json").exists()
