"""time_dilation auto: K from a short calibration, never below 1 or above the cap, figures recorded."""

from __future__ import annotations

from emulator.drivers.loopback import calibrate as cal


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
