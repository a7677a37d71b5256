"""time_dilation auto learns from the run: a run whose timing was not faithful runs once more at a K chosen
from its lag, the first attempt kept whole; faithful, incomplete or fixed-K runs run once. The machine is
injected (calibration and runs faked): no timing here."""

from __future__ import annotations

from dataclasses import replace

import pytest

from emulator.config import profile_from_dict
from emulator.drivers.contract import DriverResult
from emulator.drivers.loopback import LoopbackConfig, LoopbackDriver
from emulator.drivers.loopback import calibrate as cal
from emulator.drivers.loopback import driver as drv
from emulator.endpoint.config import EndpointConfig
from emulator.instruments.fidelity import timing_fidelity
from emulator.run.workload import load_workload, run_schedule

REF_NS = 167_120  # one 4 KiB MTU at 200 Mbps


def _schedule():
    p = profile_from_dict({"name": "x", "ranks": {"count": 4}, "warmup": 0, "iterations": 1,
                           "workload": {"collectives": [{"group": "0-3", "size": "64KiB", "type": "all_reduce",
                                                         "algorithm": "ring"}]}})
    return run_schedule(load_workload(p), p)


def _calibration(k: float) -> cal.Calibration:
    return cal.Calibration(k, k, 0.7, 47_870.0, 1.4e-4, 1.8, 54_000, REF_NS, 0.5)


@pytest.fixture
def machine(monkeypatch):
    """The runs the driver makes, faked: ``lag_at[K]`` is the switch's lag p99 a run at K shows (not
    faithful above ``REF_NS``); ``complete`` whether the runs complete. Records each run's K and RTO."""
    state = {"lag_at": {}, "complete": True, "runs": []}

    def fake_run(schedule, cfg, ecfg, *, seed, timeout_s, progress=None):
        k = cfg.time_dilation
        state["runs"].append((k, ecfg.retransmit_timeout_ns))
        fid = timing_fidelity({"p99": 0}, {"p99": state["lag_at"][k]}, REF_NS, time_dilation=k)
        return DriverResult("loopback", records={}, health={"fidelity": fid, "time_dilation": k},
                            complete=state["complete"], wall_ns=int(k * 1e9))

    monkeypatch.setattr(drv, "run_loopback", fake_run)
    monkeypatch.setattr(cal, "calibrate_time_dilation", lambda *a, **kw: _calibration(10.0))
    return state


def _driver(max_k: float | None = 10_000.0, k: float = 1.0, budget_s: float | None = None) -> LoopbackDriver:
    return LoopbackDriver(LoopbackConfig(time_dilation=k), EndpointConfig(), 1, 30.0, calibrate_max_time_dilation=max_k,
                          retransmit_timeout_for=lambda k: max(1_000_000, int(20_000_000 / k)), budget_s=budget_s)


def test_an_unfaithful_auto_run_runs_once_more_at_a_k_from_its_lag(machine):
    machine["lag_at"] = {10.0: 588_000, 40.0: 40_000}  # the quickstart on the VM of 2026-12-07, then faithful
    res = _driver().run(_schedule())
    assert machine["runs"] == [(10.0, 2_000_000), (40.0, 1_000_000)]  # the RTO follows K
    assert res.health["time_dilation"] == 40.0 and res.health["fidelity"]["faithful"]
    first = res.previous_attempt
    assert first is not None and first.health["time_dilation"] == 10.0 and not first.health["fidelity"]["faithful"]
    assert first.previous_attempt is None and first.wall_ns == 10 * 10**9  # kept whole
    rerun = res.health["time_dilation_rerun"]
    assert rerun["first_time_dilation"] == 10.0 and rerun["time_dilation"] == 40.0
    assert rerun["first_lag_judged_ns"] == 588_000 and rerun["first_wall_ns"] == 10 * 10**9
    assert rerun["text"].startswith("re-run at K = 40: the first attempt at K = 10 was not faithful (lag p99 ")
    calibration = res.health["time_dilation_calibration"]
    assert calibration == first.health["time_dilation_calibration"] and calibration["time_dilation"] == 10.0


def test_at_most_one_rerun_even_when_it_is_not_faithful_either(machine):
    machine["lag_at"] = {10.0: 588_000, 40.0: 400_000}
    res = _driver().run(_schedule())
    assert [k for k, _ in machine["runs"]] == [10.0, 40.0] and not res.health["fidelity"]["faithful"]


def test_no_rerun_when_faithful_incomplete_at_the_cap_or_k_fixed(machine):
    machine["lag_at"] = {10.0: 100_000, 20.0: 100_000}
    res = _driver().run(_schedule())
    assert len(machine["runs"]) == 1 and res.previous_attempt is None and "time_dilation_rerun" not in res.health
    machine["lag_at"], machine["runs"] = {10.0: 588_000}, []
    machine["complete"] = False  # a run that did not complete: its verdict is not the machine's alone
    assert _driver().run(_schedule()).previous_attempt is None and len(machine["runs"]) == 1
    machine["complete"], machine["runs"] = True, []
    assert _driver(max_k=10.0).run(_schedule()).previous_attempt is None and len(machine["runs"]) == 1
    machine["lag_at"], machine["runs"] = {20.0: 588_000}, []
    res = _driver(max_k=None, k=20.0).run(_schedule())  # a fixed K is the user's: run as asked
    assert res.previous_attempt is None and machine["runs"] == [(20.0, 1_000_000)]


def test_the_rerun_never_passes_the_cap(machine):
    machine["lag_at"] = {10.0: 588_000, 30.0: 50_000}
    res = _driver(max_k=30.0).run(_schedule())
    assert [k for k, _ in machine["runs"]] == [10.0, 30.0] and res.health["time_dilation"] == 30.0


def test_no_rerun_that_would_pass_the_budget_and_the_run_says_so(machine, monkeypatch):
    monkeypatch.setattr(cal, "calibrate_time_dilation", lambda *a, **kw: _calibration(31.0))
    machine["lag_at"] = {31.0: 588_000}  # the first attempt took 31 s: twice K would take 62 s more
    res = _driver(budget_s=60.0).run(_schedule())
    assert machine["runs"] == [(31.0, 1_000_000)] and res.previous_attempt is None
    assert not res.health["fidelity"]["faithful"]
    rerun = res.health["time_dilation_rerun"]
    assert rerun["skipped"] is True and rerun["budget_s"] == 60.0 and rerun["first_wall_ns"] == 31 * 10**9
    assert rerun["text"].startswith("not re-run at K = 62: it would take about 62 s, more than the ")
    assert rerun["text"].endswith(" s left of fabric.time_dilation_budget (60 s)")


def test_a_long_first_attempt_is_rerun_within_the_default_budget(machine, monkeypatch):
    # mixed_ar_a2a on 2026-12-07: 43 s, "upper bounds"; a fixed 60 s bound for the re-run alone gave none
    monkeypatch.setattr(cal, "calibrate_time_dilation", lambda *a, **kw: _calibration(43.0))
    machine["lag_at"] = {43.0: 588_000, 180.0: 40_000}
    res = _driver().run(_schedule())  # the fakes take no time: 180 s left, 4.2 × 43 s: × 4 (172, rounded up)
    assert [k for k, _ in machine["runs"]] == [43.0, 180.0]
    assert res.health["fidelity"]["faithful"] and res.previous_attempt is not None
    assert not res.health["time_dilation_rerun"].get("skipped")


def test_a_rerun_that_does_not_complete_leaves_the_first_attempt(machine):
    machine["lag_at"] = {10.0: 588_000, 40.0: 40_000}
    fake = drv.run_loopback

    def rerun_incomplete(schedule, cfg, ecfg, **kw):
        res = fake(schedule, cfg, ecfg, **kw)
        return replace(res, complete=len(machine["runs"]) == 1)

    drv.run_loopback = rerun_incomplete
    try:
        res = _driver().run(_schedule())
    finally:
        drv.run_loopback = fake
    assert res.complete and res.health["time_dilation"] == 10.0 and res.previous_attempt is None
    assert res.health["time_dilation_rerun"]["first_attempt_kept"] is False
    assert res.health["time_dilation_rerun"]["text"].startswith(
        "the re-run at K = 40 did not complete; these are the first attempt's results (K = 10, lag p99 ")


@pytest.mark.parametrize("exc", [OSError("address in use"), KeyboardInterrupt()])
def test_a_rerun_that_fails_or_is_interrupted_returns_the_first_attempt_whole(machine, monkeypatch, exc):
    machine["lag_at"] = {10.0: 588_000}
    fake = drv.run_loopback

    def first_then_raise(schedule, cfg, ecfg, **kw):
        if machine["runs"]:
            raise exc
        return fake(schedule, cfg, ecfg, **kw)

    monkeypatch.setattr(drv, "run_loopback", first_then_raise)
    res = _driver().run(_schedule())
    assert res.health["time_dilation"] == 10.0 and res.previous_attempt is None and res.complete
    assert res.interrupted == isinstance(exc, KeyboardInterrupt)  # Ctrl-C still ends the command as interrupted
    rerun = res.health["time_dilation_rerun"]
    assert rerun["first_attempt_kept"] is False and rerun["time_dilation"] == 40.0
    why = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else "failed: OSError: address in use"
    assert rerun["text"].startswith(f"the re-run at K = 40 {why}; these are the first attempt's results (K = 10, lag p99 ")


def test_the_first_attempt_is_handed_on_before_the_rerun_starts(machine):
    machine["lag_at"] = {10.0: 588_000, 40.0: 40_000}
    seen = []
    drv_ = replace(_driver(), on_first_attempt=lambda res: seen.append((res, len(machine["runs"]))))
    res = drv_.run(_schedule())
    assert len(seen) == 1 and seen[0][0] is res.previous_attempt and seen[0][1] == 1  # one run made so far
    machine["lag_at"], machine["runs"], seen[:] = {10.0: 100_000}, [], []
    drv_.run(_schedule())
    assert seen == []  # no re-run, nothing handed on
