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
    c = cal.calibrate_time_dilation(8, 200e6, 4096 + 16 + 66, max_k=10_000, budget_s=0.02, stall_probe_s=0.02)
    assert c.time_dilation >= 1 and c.cpu_s_per_packet > 0 and c.packet_time_ns == int((4096 + 82) * 8e9 / 200e6)
    assert c.time_dilation >= min(10_000, max(c.k_cpu, c.k_lag))
    assert "auto -> K = " in c.describe() and c.to_dict()["time_dilation"] == c.time_dilation
    # a wake-up lag of 1 ms against 1.3 µs packets (25 Gbps) needs K in the thousands; the cap holds
    monkeypatch.setattr(cal, "_wakeup_lag_p99_ns", lambda **_: 1_000_000)
    fast = cal.calibrate_time_dilation(8, 25e9, 4096 + 82, max_k=500, budget_s=0.02, stall_probe_s=0.02)
    assert fast.k_lag > 1000 and fast.time_dilation == 500


def test_wakeups_are_measured_at_the_fabrics_real_time_priority(monkeypatch):
    calls = []
    monkeypatch.setattr(cal.os, "sched_getscheduler", lambda pid: 0)
    monkeypatch.setattr(cal.os, "sched_getparam", lambda pid: cal.os.sched_param(0))
    monkeypatch.setattr(cal.os, "sched_setscheduler", lambda pid, policy, param: calls.append((policy, param.sched_priority)))
    cal.calibrate_time_dilation(8, 200e6, 4096 + 82, max_k=10_000, budget_s=0.01, stall_probe_s=0.02, scheduling="fifo")
    assert calls == [(cal.os.SCHED_FIFO, 1), (0, 0)]  # real-time for the measurement, then restored
    calls.clear()
    cal.calibrate_time_dilation(8, 200e6, 4096 + 82, max_k=10_000, budget_s=0.01, stall_probe_s=0.02, scheduling="normal")
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
           "packet_time_ns": st.floats(1.0, 1e6), "port_load": st.floats(0.0, 64.0),
           "stall_lateness_ns": st.floats(0.0, 1e8)}


@settings(deadline=None)  # arithmetic only; a loaded CI machine must not fail it on time
@given(st.fixed_dictionaries(FIGURES), st.sampled_from(sorted(FIGURES)), st.floats(1.0, 10.0),
       st.floats(1.0, 10_000.0))
def test_k_is_bounded_and_never_smaller_for_a_harder_job(figures, key, factor, max_k):
    k, k_cpu, k_lag, k_stall = cal.choose_time_dilation(**figures, max_k=max_k)
    assert 1.0 <= k <= max_k and (k == max_k or k >= max(k_cpu, k_lag, k_stall))
    harder = dict(figures)
    # harder: more load, more CPU per packet, fewer idle CPUs, later wake-ups, shorter packets, longer
    # stalls, more fan-in
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
    c = cal.calibrate_time_dilation(8, 200e6, 4096 + 82, max_k=10_000, budget_s=0.01, stall_probe_s=0.02, port_load=7.0)
    assert c.port_load == 7.0 and "a port offered 7× its rate: × 2" in c.describe()


# -- stalls: the spinning probe's gaps and the K they need ---------------------------------------------------


def test_stall_lateness_is_what_is_left_of_the_gaps_at_the_quantile():
    ms = 1_000_000
    assert cal.stall_lateness_ns([], 10**9, 0.01) == 0
    assert cal.stall_lateness_ns([10 * ms], 10**9, 0.01) == 0  # 1 % of the time stopped: the p99 is on time
    assert cal.stall_lateness_ns([20 * ms], 10**9, 0.01) == 10 * ms  # the last 10 ms of the gap are the top 1 %
    assert cal.stall_lateness_ns([20 * ms, 4 * ms], 10**9, 0.01) == 10 * ms  # the 4 ms gap is all below
    assert cal.stall_lateness_ns([20 * ms, 15 * ms], 10**9, 0.01) == 12_500_000  # 7.5 + 2.5 ms above it
    assert cal.stall_lateness_ns([20 * ms, 15 * ms], 10**9, 0.001) == 19 * ms  # p99.9: the top 1 ms of one


@settings(deadline=None)
@given(st.lists(st.integers(0, 10**8), max_size=40), st.integers(10**6, 10**11), st.floats(1e-4, 0.5))
def test_stall_lateness_leaves_the_share_above_it(gaps, observed, share):
    x = cal.stall_lateness_ns(gaps, observed, share)
    above = sum(max(0, g - x) for g in gaps)
    assert x >= 0 and above <= share * observed + len(gaps)  # ceil: within 1 ns per gap
    if x > 0:  # the smallest such lateness: 1 ns less leaves more than the share above it
        assert sum(max(0, g - (x - 1)) for g in gaps) > share * observed - len(gaps)


def _figures(monkeypatch, gaps: list[int], observed_ns: int) -> None:
    """The calibration's measurements injected: 35 µs CPU per packet over the two hops, wake-ups 54 µs
    late, an idle 2-CPU machine, and the stall probe's ``gaps``."""
    monkeypatch.setattr(cal, "_socket_cpu_per_packet", lambda *a: 35e-6)
    monkeypatch.setattr(cal, "_wakeup_lag_p99_ns", lambda **_: 54_000)
    monkeypatch.setattr(cal, "_stall_probe", lambda s, rt: (gaps, observed_ns))
    monkeypatch.setattr(cal.os, "getloadavg", lambda: (0.2, 0.2, 0.2))
    monkeypatch.setattr(cal.os, "sched_getaffinity", lambda pid: {0, 1})


def test_a_machine_without_stalls_keeps_the_cpu_term(monkeypatch):
    _figures(monkeypatch, [60_000] * 150, 10**9)  # a timer tick's 60 µs, 150 times a second: 0.9 %
    c = cal.calibrate_time_dilation(8, 200e6, 4096 + 82, max_k=10_000)
    assert c.stall_lateness_ns == 0 and c.k_stall == 0 and c.stall_share == 0.009
    assert c.time_dilation == 8 == cal._round_up(c.k_cpu)  # 47,870 packets/s × 4 × 35 µs on 1.8 idle CPUs


def test_a_vm_whose_vcpus_stop_for_milliseconds_raises_k(monkeypatch):
    # the firecracker VM of 2026-12-07, a bursty second: gaps of 3–17 ms on one vCPU, 3.8 % of the time
    ms = 1_000_000
    _figures(monkeypatch, [17 * ms, 11 * ms, 6 * ms, 6 * ms, 6 * ms, 4 * ms, 3 * ms, 3 * ms, 60_000], 10**9)
    c = cal.calibrate_time_dilation(8, 200e6, 4096 + 82, max_k=10_000)
    assert c.stall_lateness_ns == 9 * ms and c.stall_max_ns == 17 * ms  # (17 − 9) + (11 − 9) = 1 % of 1 s
    assert c.k_stall == pytest.approx(9 * ms / 167_120, abs=1e-3) and c.time_dilation == 54  # not 8
    assert c.stall_share == 0.05606
    assert "stalls: lateness p99 9000 µs, max 17000 µs, 5.61 % of the time" in c.describe()
    assert "K ≥ 53.9" in c.describe()
    # a congested port judges the p99.9: the top 1 ms of the 17 ms gap; × 2 for the port, rounded up
    incast = cal.calibrate_time_dilation(8, 200e6, 4096 + 82, max_k=10_000, port_load=7.0)
    assert incast.stall_lateness_ns == 16 * ms and incast.time_dilation == 200


def test_the_stall_probe_spins_on_every_cpu():
    gaps, observed = cal._stall_probe(0.02, realtime=False)
    n = len(cal.os.sched_getaffinity(0))
    assert n * 15_000_000 <= observed <= n * 1_000_000_000 and all(g > cal._GAP_NS for g in gaps)


# -- the one re-run of a run whose timing was not faithful ---------------------------------------------------


def _fid(faithful: bool, lag_ns: int, ref_ns: int = 167_000) -> dict:
    return {"faithful": faithful, "lag_judged_ns": lag_ns, "reference_ns": ref_ns}


def test_rerun_k_comes_from_the_first_attempts_lag():
    assert cal.rerun_time_dilation(10.0, _fid(True, 40_000), 10_000) is None
    # lag p99 300 µs against 167 µs at K = 10: 1.5 × 1.8 × 10
    assert cal.rerun_time_dilation(10.0, _fid(False, 300_000), 10_000) == 27
    # 588 µs (2026-12-07): 1.5 × 3.52 × 10 = 53, but at most 4 × K; a CPU's backlog at K = 3 (8.7 ms): 12
    assert cal.rerun_time_dilation(10.0, _fid(False, 588_000), 10_000) == 40
    assert cal.rerun_time_dilation(3.0, _fid(False, 8_749_000), 10_000) == 12
    # just over the reference, or not faithful for its marks or late CNPs: twice K
    assert cal.rerun_time_dilation(10.0, _fid(False, 200_000), 10_000) == 20
    assert cal.rerun_time_dilation(11.0, _fid(False, 50_000), 10_000) == 22
    assert cal.rerun_time_dilation(4000.0, _fid(False, 588_000), 10_000) == 10_000  # capped ...
    assert cal.rerun_time_dilation(10_000.0, _fid(False, 588_000), 10_000) is None  # ... and never past it


def test_the_rerun_keeps_within_the_wall_time_left():
    lag = _fid(False, 588_000)  # × 4 unbounded
    assert cal.rerun_time_dilation(10.0, lag, 10_000, first_wall_s=10.0, wall_left_s=60.0) == 40  # 40 s: fits
    assert cal.rerun_time_dilation(25.0, lag, 10_000, first_wall_s=20.0, wall_left_s=60.0) == 75  # 3 × K: 60 s
    assert cal.rerun_time_dilation(26.0, lag, 10_000, first_wall_s=29.0, wall_left_s=60.0) == 54  # 2.07 × K
    assert cal.rerun_time_dilation(28.0, lag, 10_000, first_wall_s=31.0, wall_left_s=60.0) is None  # not 2 × K
    # mixed_ar_a2a, 2026-12-07: a 43 s first attempt, "upper bounds"; 180 s budget, ~0.5 s of calibration
    assert cal.rerun_time_dilation(10.0, lag, 10_000, first_wall_s=43.0, wall_left_s=136.5) == 32  # 3.17 × K
    assert cal.rerun_time_dilation(10.0, lag, 10_000, first_wall_s=43.0) == 40  # no wall bound: × 4
    assert cal.rerun_skipped_text(28.0, 31.0, 29.0, 60.0) == (
        "not re-run at K = 56: it would take about 62 s, more than the 29 s left of fabric.time_dilation_budget "
        "(60 s)")


def test_a_rerun_after_a_stall_scales_k_by_the_tail_over_the_stall_bound():
    fid = {"faithful": False, "lag_judged_ns": 1_560_000, "reference_ns": 167_000, "limit_ns": 8 * 167_000}
    # 1.5 × 1.56 / 1.336 = 1.75 → at least twice K, not the 4× the tail over one MTU time would ask
    assert cal.rerun_time_dilation(24.0, fid, 10_000.0, 20.0) == 48.0
