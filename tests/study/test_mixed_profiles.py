"""The shipped mixed examples show mixing: sim_mixed_ar_a2a.yaml runs the loopback twin's workload on
the study's oversubscribed fabric (so the mix queues, marks and skews), and sweep_sim_mixed_cc.yaml's
congestion-control presets give different ECN/CNP figures. The sweep's three 25 Gbps runs are made
once; its connectx run is sim_mixed_ar_a2a.yaml with one measured iteration."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from emulator.config import load_profile, load_profiles
from emulator.report.compare import metric_value
from emulator.run.pipeline import run_profile

PROFILES = Path(__file__).resolve().parents[2] / "profiles"
SWEEP = PROFILES / "sweep_sim_mixed_cc.yaml"
SIM_MIXED = PROFILES / "sim_mixed_ar_a2a.yaml"
RATE_BPS = 25_000_000_000


def _sweep_at_25g() -> dict[str, object]:
    runs = {p.congestion_control.preset: p for p in load_profiles(SWEEP, env={}) if p.fabric.ports.rate_bps == RATE_BPS}
    assert set(runs) == {"connectx", "paper", "none"}
    return runs


@pytest.fixture(scope="module")
def sweep_summaries(tmp_path_factory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("sweep")
    summaries = {}
    for preset, prof in _sweep_at_25g().items():
        rep = run_profile(prof, out_dir=out / preset, quiet=True, stdout=io.StringIO(), stderr=io.StringIO())
        assert rep.exit_code == 0 and rep.doc["complete"], (preset, rep.doc.get("errors"))
        summaries[preset] = rep.doc["summary"]
    return summaries


def test_sim_twin_runs_the_loopback_workload_on_the_study_fabric() -> None:
    loop = load_profile(PROFILES / "mixed_ar_a2a.yaml", env={})
    sim = load_profile(SIM_MIXED, env={})
    study = load_profile(PROFILES / "study_mixed.yaml", env={})
    assert loop.fabric.kind == "loopback" and sim.fabric.kind == "sim"
    assert sim.workload == loop.workload
    assert {c.type for c in sim.workload.collectives} == {"all_reduce", "all_to_all"}
    assert sim.fabric == study.fabric and sim.ranks == study.ranks
    assert sim.congestion_control == study.congestion_control
    assert sim.fabric.topology.kind == "leaf_spine" and sim.fabric.topology.oversubscription > 1


def test_sweeps_connectx_run_is_sim_mixed_with_one_iteration() -> None:
    sim = load_profile(SIM_MIXED, overrides=["warmup=0", "iterations=1", "output.formats=[text,json,csv]"], env={})
    cx = _sweep_at_25g()["connectx"]
    assert dataclasses.replace(sim, name=cx.name, description=cx.description, source=cx.source) == cx


@pytest.mark.slow
def test_sim_mixed_shows_mixing(sweep_summaries) -> None:
    s = sweep_summaries["connectx"]
    assert metric_value(s, "fabric.ecn_marks") > 100
    assert metric_value(s, "ranks.*.cnps_sent") > 100
    # measured at seed 1: 4235 marks, 2788 CNPs, max skew 5.2 %, All-to-All CCT cv 0.066 (single switch: 0, 0, 0, 0.0006)
    assert metric_value(s, "stragglers.max_skew") > 0.02
    assert metric_value(s, "all_to_all.cct.cv") > 0.02


@pytest.mark.slow
def test_sweep_presets_give_different_ecn_and_cnp_figures(sweep_summaries) -> None:
    figures = {p: (metric_value(s, "fabric.ecn_marks"), metric_value(s, "ranks.*.cnps_sent"))
               for p, s in sweep_summaries.items()}
    assert all(marks > 0 and cnps > 0 for marks, cnps in figures.values()), figures
    assert len({m for m, _ in figures.values()}) == 3 and len({c for _, c in figures.values()}) == 3, figures
    assert figures["none"][0] > figures["connectx"][0] > figures["paper"][0], figures  # no rate cuts: most marks
