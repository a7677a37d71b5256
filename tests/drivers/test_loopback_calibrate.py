"""time_dilation auto: K from a short calibration and the schedule's port load, never below 1 or above the cap,
never smaller for a harder job; figures recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.config import profile_from_dict
from emulator.drivers.loopback import calibrate as cal
from emulator.run.workload import load_workload, run_schedule


def test_k_rounds_up_and_respects_the_bounds():
    assert cal._round_up(0.3) == 1.0 and cal._round_up(1.0) == 1.0 and cal._round_up(2.1) == 3.0
    assert cal._round_up(56.1) == 57.0 and cal._round_up(1849.1) == 1900.0


def test_calibration_measures_and_chooses(monkeypatch):
    c = cal.calibrate_time_dilation(8, 200e6, 4096 + 16 + 66, max_k=10_000, budget_s=0.02)
    assert c.time_dilation >= 1 and c.cpu_s_per_packet > 0 and c.packet_time_ns == int((4096 + 82) * 8e9 / 200e6)
    assert c.time_dilation >= min(10_000, max(c.k_cpu, c.k_lag))
    assert "auto -> K = " in c.describe() and c.to_dict()["time_dilation"] == c.time_dilation
    # a wake-up lag of 1 ms against 1.3 µs packets (25 Gbps) needs K in the thousands; the cap holds
    monkeypatch.setattr(cal, "_wakeup_lag_p99_ns", lambda **_: 1_000_000)
    fast = cal.calibrate_time_dilation(8, 25e9, 4096 + 82, max_k=500, budget_s=0.02)
    assert fast.k_lag > 1000 and fast.time_dilation == 500


def test_wakeups_are_measured_at_the_fabrics_real_time_priority(monkeypatch):
    calls = []
    monkeypatch.setattr(cal.os, "sched_getscheduler", lambda pid: 0)
    monkeypatch.setattr(cal.os, "sched_getparam", lambda pid: cal.os.sched_param(0))
    monkeypatch.setattr(cal.os, "sched_setscheduler", lambda pid, policy, param: calls.append((policy, param.sched_priority)))
    cal.calibrate_time_dilation(8, 200e6, 4096 + 82, max_k=10_000, budget_s=0.01, scheduling="fifo")
    assert calls == [(cal.os.SCHED_FIFO, 1), (0, 0)]  # real-time for the measurement, then restored
    calls.clear()
    cal.calibrate_time_dilation(8, 200e6, 4096 + 82, max_k=10_000, budget_s=0.01, scheduling="normal")
    assert calls == []


def test_the_shipped_loopback_profiles_dilate_time_automatically():
    from pathlib import Path

    from emulator.config import load_profile

    root = Path(__file__).resolve().parents[2] / "profiles"
    for name in ("quickstart", "ring_allreduce_8", "incast_7to1"):
        assert load_profile(root / f"{name}.yaml").fabric.time_dilation == "auto", name


# -- the schedule's port load and the K it needs ---------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def _schedule(collective: dict, ranks: int = 8):
    p = profile_from_dict({"name": "x", "ranks": {"count": ranks}, "warmup": 0, "iterations": 1,
                           "workload": {"collectives": [{"group": f"0-{ranks - 1}", "size": "64KiB", **collective}]}})
    return run_schedule(load_workload(p), p)


def test_port_load_is_the_fan_in_of_an_incast_and_1_for_rings_and_direct_all_to_all():
    assert cal.peak_port_load(_schedule({"type": "gather", "algorithm": "direct"})) == 7.0
    assert cal.peak_port_load(_schedule({"type": "gather", "algorithm": "direct"}, ranks=4)) == 3.0
    assert cal.peak_port_load(_schedule({"type": "all_to_all", "algorithm": "direct"})) == pytest.approx(1.0)
    assert cal.peak_port_load(_schedule({"type": "all_reduce", "algorithm": "ring"})) == 1.0


def test_the_shipped_profiles_port_loads():
    from emulator.config import load_profile

    def load(name: str) -> float:
        p = load_profile(REPO / "profiles" / f"{name}.yaml")
        return cal.peak_port_load(run_schedule(load_workload(p), p))

    assert load("sim_incast_7to1") == load("incast_7to1") == 7.0
    for name in ("quickstart", "sim_ring_allreduce_8", "alltoall_8", "mixed_ar_a2a"):
        assert load(name) == pytest.approx(1.0), name  # no port is offered more than its rate: K unchanged


FIGURES = {"offered_packets_per_s": st.floats(1.0, 1e7), "cpu_s_per_packet": st.floats(1e-7, 1e-3),
           "idle_cpus": st.floats(0.1, 64.0), "wakeup_lag_p99_ns": st.floats(0.0, 1e7),
           "packet_time_ns": st.floats(1.0, 1e6), "port_load": st.floats(0.0, 64.0)}


@settings(deadline=None)  # arithmetic only; a loaded CI machine must not fail it on time
@given(st.fixed_dictionaries(FIGURES), st.sampled_from(sorted(FIGURES)), st.floats(1.0, 10.0),
       st.floats(1.0, 10_000.0))
def test_k_is_bounded_and_never_smaller_for_a_harder_job(figures, key, factor, max_k):
    k, k_cpu, k_lag = cal.choose_time_dilation(**figures, max_k=max_k)
    assert 1.0 <= k <= max_k and (k == max_k or k >= max(k_cpu, k_lag))
    harder = dict(figures)
    # harder: more load, more CPU per packet, fewer idle CPUs, later wake-ups, shorter packets, more fan-in
    harder[key] = figures[key] / factor if key in ("idle_cpus", "packet_time_ns") else figures[key] * factor
    if key == "port_load":
        harder[key] = max(figures[key] * factor, figures[key] + factor - 1.0)
    assert cal.choose_time_dilation(**harder, max_k=max_k)[0] >= k


def test_an_oversubscribed_port_doubles_k():
    figures = dict(offered_packets_per_s=5_983_724.0, cpu_s_per_packet=169e-6, idle_cpus=1.3,
                   wakeup_lag_p99_ns=67_000, packet_time_ns=1336, max_k=10_000)
    # the idle machine's figures for sim_incast_7to1 (2026-12-01): K = 1,600 without the port load ...
    assert cal.choose_time_dilation(**figures, port_load=1.0)[0] == 1600
    # ... 3,200 with its 7:1 fan-in (faithful to 0.1 MTU at K = 3,300 where 1,600 left 0.1 % 1-5 MTU late)
    assert cal.choose_time_dilation(**figures, port_load=7.0)[0] == 3200
    c = cal.calibrate_time_dilation(8, 200e6, 4096 + 82, max_k=10_000, budget_s=0.01, port_load=7.0)
    assert c.port_load == 7.0 and "a port offered 7× its rate: × 2" in c.describe()
