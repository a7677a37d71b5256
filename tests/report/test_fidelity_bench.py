"""bench/fidelity.py: which profiles it runs and how it judges the issue 10 targets (synthetic summaries)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "fidelity.py"


@pytest.fixture(scope="module")
def fidelity():
    spec = importlib.util.spec_from_file_location("fidelity_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


def _summary(jct: float, cct: float, busbw_gbps: float, marks: int, packets: int, cnps: int) -> dict:
    return {
        "iteration": {"jct": {"p50": jct, "p99": jct}},
        "all_reduce": {"count": 3, "cct": {"p50": cct, "p99": cct * 1.1}, "busbw_gbps": busbw_gbps},
        "fabric": {"ecn_marks": marks, "drops": 0, "ports": [{"name": "sw0->host0", "rate_bps": 200e6}]},
        "flows": {"achieved_rate_bps": {"p50": 150e6}},
        "ranks": {"0": {"packets_sent": packets, "cnps_sent": cnps}},
    }


def _run(fidelity, summary: dict):
    return fidelity.Run("x", Path("."), 0, 1.0, 1.0, 0.5, summary=summary)


def test_every_shipped_loopback_profile_is_selected(fidelity) -> None:
    names = {p.stem for p in fidelity.loopback_profiles(None)}
    assert set(fidelity.CONTENTION_FREE) | set(fidelity.CONGESTED) <= names
    assert not any(n.startswith("sim_") or n.startswith("direct_") for n in names)


def test_contention_free_targets(fidelity) -> None:
    sim = _run(fidelity, _summary(100e6, 50e6, 0.024, 0, 1000, 0))
    good = _run(fidelity, _summary(108e6, 54e6, 0.023, 5, 1000, 0))  # 8 % slower, 92 % of line, 0.5 % marks
    _, v = fidelity.profile_rows("ring_allreduce_8", sim, good, None)
    assert v == {"JCT p50": True, "all_reduce CCT p50": True, "all_reduce busbw % of line rate": True,
                 "ECN marks ÷ data packets": True}
    bad = _run(fidelity, _summary(120e6, 50e6, 0.020, 20, 1000, 0))  # 20 % slower JCT, 80 % of line, 2 % marks
    _, v = fidelity.profile_rows("ring_allreduce_8", sim, bad, None)
    assert v == {"JCT p50": False, "all_reduce CCT p50": True, "all_reduce busbw % of line rate": False,
                 "ECN marks ÷ data packets": False}


def test_congested_targets_and_zero_marks(fidelity) -> None:
    sim = _run(fidelity, _summary(100e6, 50e6, 0.01, 0, 1000, 40))
    lb = _run(fidelity, _summary(100e6, 56e6, 0.01, 0, 1000, 90))  # CCT +12 %, marks 0 = 0, CNPs 2.25×
    rows, v = fidelity.profile_rows("incast_7to1", sim, lb, None)
    assert v == {"all_reduce CCT p50": True, "all_reduce CCT p99": True, "ECN marks": True, "CNPs sent": False}
    assert any(r.startswith("| CNPs sent | 40 | 90 | 2.250× | within 2× | **missed** |") for r in rows)
    lb2 = _run(fidelity, _summary(100e6, 50e6, 0.01, 7, 1000, 40))  # marks where the sim has none
    _, v = fidelity.profile_rows("incast_7to1", sim, lb2, None)
    assert v["ECN marks"] is False and v["CNPs sent"] is True


def test_set_overrides_reach_the_loopback_command_only(fidelity, monkeypatch, tmp_path) -> None:
    seen = []

    class _Done:
        returncode = 0

    monkeypatch.setattr(fidelity.subprocess, "run", lambda cmd, **kw: seen.append(cmd) or _Done())
    fidelity.run_once(Path("p.yaml"), "loopback", tmp_path / "a", 5.0, ("fabric.time_dilation=8",))
    fidelity.run_once(Path("p.yaml"), "sim", tmp_path / "b", 5.0)
    assert seen[0][-2:] == ["--set", "fabric.time_dilation=8"] and "--set" not in seen[1]


def test_seed_spread_rows_show_the_sims_range_and_where_the_loopback_falls(fidelity) -> None:
    sim = _run(fidelity, _summary(100e6, 50e6, 0.01, 10, 1000, 5))
    others = [_run(fidelity, _summary(100e6, c, 0.01, 10, 1000, 5)) for c in (40e6, 60e6, 45e6, 55e6)]
    inside = fidelity.seed_spread_rows(sim, others, _run(fidelity, _summary(100e6, 58e6, 0.01, 10, 1000, 5)))
    assert inside[0].startswith("| sim over 5 seeds: all_reduce CCT p50 | 40.00 ms – 60.00 ms (max ÷ min 1.500) | "
                                "58.00 ms (inside) | 1.160× of the seeds' median |")
    above = fidelity.seed_spread_rows(sim, others, _run(fidelity, _summary(100e6, 61e6, 0.01, 10, 1000, 5)))
    assert "(above)" in above[0] and len(above) == 2  # p50 and p99
    assert fidelity.seed_spread_rows(sim, [], sim) == []  # one seed: no spread to show


def test_busy_loops_compete_during_the_run_and_end_with_it(fidelity, monkeypatch, tmp_path) -> None:
    hogs = []

    class _Hog:
        def __init__(self, cmd):
            self.cmd, self.alive = cmd, True
            hogs.append(self)

        def kill(self):
            self.alive = False

        def wait(self):
            return -9

    class _Done:
        returncode = 0

    during = []
    monkeypatch.setattr(fidelity.subprocess, "Popen", _Hog)
    monkeypatch.setattr(fidelity.subprocess, "run", lambda cmd, **kw: during.append([h.alive for h in hogs]) or _Done())
    fidelity.run_once(Path("p.yaml"), "loopback", tmp_path / "a", 5.0, busy=2)
    assert during == [[True, True]] and not any(h.alive for h in hogs)
    assert all(h.cmd[-1] == "5.0" for h in hogs)  # each bounded by the run's timeout too


def test_the_cnps_acted_on_late_are_shown(fidelity) -> None:
    sim = _run(fidelity, _summary(100e6, 50e6, 0.01, 10, 1000, 10))
    lb = _run(fidelity, _summary(100e6, 50e6, 0.01, 10, 1000, 10))
    lb.doc = {"driver": {"health": {"time_dilation": 1.0, "fidelity": {
        "verdict": "timing faithful", "cnps_timed": 10, "cnps_acted_late": 1, "cnp_lag_max_ns": 2_500_000}}}}
    rows, _ = fidelity.profile_rows("incast_7to1", sim, lb, None)
    assert "| CNPs acted on > one MTU late / on model time, max CNP lag | | 1 / 10, 2.50 ms | | | |" in rows


def test_a_faithful_verdict_with_marks_the_sim_has_not_is_a_miss_and_late_posts_are_shown(fidelity) -> None:
    sim = _run(fidelity, _summary(100e6, 50e6, 0.01, 0, 1000, 0))
    lb = _run(fidelity, _summary(100e6, 50e6, 0.01, 112, 1000, 100))
    fid = {"verdict": "timing faithful", "faithful": True, "posts_timed": 200, "posts_late": 3,
           "post_lag_max_ns": 400_000}
    lb.doc = {"driver": {"health": {"time_dilation": 6.0, "fidelity": fid}}}
    rows, v = fidelity.profile_rows("mixed_ar_a2a", sim, lb, None)
    assert v["verdict vs marks the sim has not"] is False
    assert "| sends posted > one MTU late / on model time, max post lag | | 3 / 200, 400.00 us | | | |" in rows \
        or any(r.startswith("| sends posted > one MTU late") and "3 / 200" in r for r in rows)
    lb.doc["driver"]["health"]["fidelity"] = {**fid, "faithful": False, "verdict": "lag p99 ..."}
    _, v = fidelity.profile_rows("mixed_ar_a2a", sim, lb, None)
    assert v["verdict vs marks the sim has not"] is True
    clean = _run(fidelity, _summary(100e6, 50e6, 0.01, 0, 1000, 0))
    clean.doc = {"driver": {"health": {"fidelity": fid}}}
    _, v = fidelity.profile_rows("mixed_ar_a2a", sim, clean, None)
    assert v["verdict vs marks the sim has not"] is True
