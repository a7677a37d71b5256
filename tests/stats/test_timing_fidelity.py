"""The timing-fidelity verdict of socket runs: lag p99 of senders and switch against one MTU's time."""

from __future__ import annotations

from emulator.drivers.loopback.calibrate import rerun_time_dilation
from emulator.drivers.sockets.supervisor import add_fidelity
from emulator.instruments.fidelity import timing_fidelity
from emulator.report.console import _fidelity_line


def _lag(p99: int | None) -> dict:
    return {"p50": None if p99 is None else p99 // 2, "p99": p99, "max": None if p99 is None else 2 * p99}


def test_faithful_when_every_p99_is_within_one_mtu_time():
    f = timing_fidelity(_lag(100_000), _lag(150_000), 167_000, time_dilation=4.0)
    assert f["faithful"] and f["verdict"] == "timing faithful" and f["warning"] is None
    assert f["lag_p99_ns"] == 150_000 and f["time_dilation"] == 4.0 and f["reference_ns"] == 167_000


def test_the_worst_p99_beyond_the_reference_makes_times_upper_bounds():
    f = timing_fidelity(_lag(2_000_000), _lag(50_000), 167_000, behind=("endpoints fell behind: 20%",))
    assert not f["faithful"] and f["lag_p99_ns"] == 2_000_000
    assert f["verdict"].startswith("lag p99 2.00 ms exceeds 167.00 us") and f["verdict"].endswith("upper bounds")
    assert f["warning"] == f["verdict"] + " (endpoints fell behind: 20%)"


def test_no_switch_and_no_samples_is_not_called_faithful():
    """A run interrupted before its processes reported has no lag at all: its summary must not say
    "timing faithful" (it did, with "senders -" next to it), and no re-run is asked for."""
    for switch in (None, _lag(None)):
        f = timing_fidelity(_lag(None), switch, 1000)
        assert not f["faithful"] and not f["measured"] and f["lag_p99_ns"] == 0
        assert f["verdict"].startswith("timing not measured") and f["warning"] == f["verdict"]
    assert rerun_time_dilation(10.0, f, 1000.0, 5.0) is None
    f = timing_fidelity(_lag(None), _lag(10), 1000)
    assert f["faithful"] and f["measured"] and f["verdict"] == "timing faithful"


def test_fell_behind_warnings_become_part_of_the_verdict():
    health = {"warnings": ["endpoints fell behind: 30% of timer wake-ups", "rank sockets dropped 3 datagrams",
                           "software switch fell behind: 5% of packets"]}
    add_fidelity(health, _lag(900_000), _lag(10), 167_000, 1.0)
    w = health["warnings"]
    assert len(w) == 2 and w[1] == "rank sockets dropped 3 datagrams"
    assert w[0].startswith("lag p99 900.00 us exceeds") and "endpoints fell behind" in w[0] and "switch fell" in w[0]
    assert health["fidelity"]["faithful"] is False and health["time_dilation"] == 1.0
    ok = {"warnings": []}
    add_fidelity(ok, _lag(1_000), None, 167_000, 2.0)
    assert ok["warnings"] == [] and ok["fidelity"]["verdict"] == "timing faithful"
    line = _fidelity_line(ok["fidelity"], None)
    assert line.startswith("fidelity: timing faithful") and "time dilation 2" in line
    assert "machine lateness p99, emulated time: senders 1.00 us" in line  # what it measures, in which time base


def test_fell_behind_warnings_scale_their_times():
    from emulator.drivers.sockets.supervisor import endpoint_warnings

    health = {"endpoint_timer_lag_ns": {"p99": 18_809_000}, "endpoint_timer_wakeups": 100,
              "endpoint_late_wakeups": 33, "endpoint_socket_drops": 0, "endpoint_send_errors": 0}
    assert endpoint_warnings(health, 500_000) == [
        "endpoints fell behind: 33.0% of timer wake-ups more than 500.00 us late (p99 lag 18.81 ms)"]


def _tail(p99: int, p999: int) -> dict:
    return {"p50": p99 // 4, "p99": p99, "p999": p999, "max": 2 * p999}


def test_a_congested_schedule_is_judged_on_the_lag_tail():
    # sim_incast_7to1 on loopback at K = 1,600 (2026-12-01, idle): p99 inside one MTU (1.34 µs), p99.9 beyond
    # it, gather CCT 1.24x the sim's; the p99 verdict said "timing faithful"
    sender, switch = _tail(0, 933), _tail(639, 1_853)
    assert timing_fidelity(sender, switch, 1336)["faithful"]
    f = timing_fidelity(sender, switch, 1336, congested=True)
    assert not f["faithful"] and f["judged"] == "p99.9" and f["lag_judged_ns"] == 1_853 and f["lag_p99_ns"] == 639
    assert f["verdict"].startswith("lag p99.9 1.85 us exceeds 1.34 us") and "congested port" in f["verdict"]
    assert f["switch_lag_ns"]["p999"] == 1_853
    # K = 3,300: the tail too within one MTU
    ok = timing_fidelity(_tail(0, 0), _tail(556, 1_226), 1336, congested=True)
    assert ok["faithful"] and ok["verdict"] == "timing faithful"
    line = _fidelity_line(f, None)
    assert "machine lateness p99.9, emulated time: senders 933 ns, switch 1.85 us" in line, line
    health = {"warnings": []}
    add_fidelity(health, sender, switch, 1336, 1600.0, congested=True)
    assert health["fidelity"]["faithful"] is False and health["warnings"] == [f["verdict"]]


def _tail(p99: int, p999: int) -> dict:
    return {"p50": p99 // 4, "p99": p99, "p999": p999, "max": 2 * p999}


def test_a_stall_that_shifts_the_schedule_is_not_faithful_though_the_p99_is_low():
    # quickstart on the VM of 2026-12-07 (K 24): p99 107 us, switch p99.9 1.56 ms; 812 marks where the sim has 0
    f = timing_fidelity(_tail(50_000, 224_000), _tail(107_000, 1_560_000), 167_000, time_dilation=24.0)
    assert not f["faithful"] and f["judged"] == "p99.9" and f["lag_judged_ns"] == 1_560_000
    assert f["limit_ns"] == 8 * 167_000 and f["lag_p99_ns"] == 107_000
    assert f["verdict"].startswith("lag p99.9 1.56 ms exceeds 1.34 ms (8 MTU times at the port rate: a stall")
    assert f["verdict"].endswith("times are upper bounds")


def test_a_lag_tail_within_the_stall_bound_stays_faithful():
    # same VM, a run whose results matched the sim: p99 81 us, p99.9 936 us
    f = timing_fidelity(_tail(0, 0), _tail(81_000, 936_000), 167_000)
    assert f["faithful"] and f["judged"] == "p99" and f["limit_ns"] == 167_000
    p99_fails = timing_fidelity(_tail(0, 0), _tail(200_000, 5_000_000), 167_000)  # the p99 is judged first
    assert not p99_fails["faithful"] and p99_fails["judged"] == "p99" and p99_fails["lag_judged_ns"] == 200_000
