"""The progress line: silent off a terminal; on one: virtual time, bytes, flows, rates, warmup and ETA."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest

from emulator.config import load_profiles
from emulator.run.progress import ProgressLine
from emulator.run.runner import endpoint_config, make_driver, sim_config
from emulator.run.workload import load_workload, run_schedule


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_silent_when_not_a_terminal() -> None:
    stream = io.StringIO()
    with ProgressLine("run", stream=stream, interval_s=0.001) as p:
        p.update({"ranks": 4, "ranks_done": 1})
    assert not p.enabled and stream.getvalue() == ""


def test_draws_and_erases_on_a_terminal() -> None:
    stream = _Tty()
    with ProgressLine("quickstart on loopback", stream=stream, ops_per_iteration=10, iterations=3,
                      interval_s=0.001) as p:
        p.update({"ranks": 4, "ranks_done": 2, "ops_done": 15})
        text = p.render()
    assert p.enabled
    assert text.startswith("quickstart on loopback:") and "ranks done 2/4" in text and "iteration 2/3" in text
    out = stream.getvalue()
    drawn = out.rfind("quickstart on loopback:")
    assert drawn >= 0 and "\x1b[2K" in out[drawn:], "the last line drawn is erased at the end"
    assert out.endswith("\x1b[2K") and "\x1b[?25h" in out[drawn:]  # erased, cursor shown again


@pytest.mark.serial  # the redraw thread must draw within 50 ms of real time
def test_a_line_wider_than_the_terminal_wraps_and_is_redrawn_in_place() -> None:
    stream = _Tty()
    with ProgressLine("a run with a long name on loopback", stream=stream, bytes_total=10**12, flows_total=10**6,
                      interval_s=0.001, width=60) as p:
        p.update({"ranks": 1024, "ranks_done": 512, "flows_done": 123_456, "bytes_delivered": 4 * 10**11,
                  "packets_delivered": 10**8})
        assert len(p.render()) > 60
        time.sleep(0.05)
    out = stream.getvalue()
    rows = [r for r in re.split(r"\r|\n|\x1b\[[0-9;?]*[A-Za-z]", out) if r.strip()]
    assert any(r.startswith("a run with a long name") for r in rows) and any("ETA" in r for r in rows)
    assert all(len(r) <= 60 for r in rows), rows
    redraws = out.count("a run with a long name")
    assert redraws >= 2 and out.count("\x1b[1A") >= redraws, "each redraw first moves up over the wrapped row"


def test_warmup_iterations_are_named_and_not_counted_as_measured() -> None:
    p = ProgressLine("run", ops_per_iteration=10, iterations=3, warmup=1, enabled=False)
    seen = []
    for ops in (0, 9, 10, 25, 39, 40):
        p.update({"ops_done": ops})
        seen.append(p.render().split(" · ")[-1])
    assert seen == ["warmup 1/1", "warmup 1/1", "iteration 1/3", "iteration 2/3", "iteration 3/3", "iteration 3/3"]


def test_sim_line_shows_virtual_time_bytes_flows_rates_and_eta() -> None:
    clock = _Clock()
    p = ProgressLine("big on sim", bytes_total=1_000_000_000, flows_total=4000, enabled=False, clock=clock)
    clock.t += 150.0
    p.update({"virtual_ns": 2_000_000, "ranks": 8, "ranks_done": 0, "flows_done": 1000,
              "bytes_delivered": 250_000_000, "packets_delivered": 60_000})
    text = p.render()
    assert text.split(" · ") == [
        "big on sim: 2 min 30 s", "virtual 2.00 ms", "ranks done 0/8", "flows 1,000/4,000", "25.0 % of bytes",
        "1000.00 Gbit/s delivered (virtual time)", "400 simulated packets/s", "ETA 7 min 30 s"]
    clock.t += 10.0  # the rates are those since the previous redraw
    p.update({**p.info, "virtual_ns": 3_000_000, "bytes_delivered": 260_000_000, "packets_delivered": 61_000})
    assert "80.00 Gbit/s delivered (virtual time) · 100 simulated packets/s" in p.render()


def test_socket_line_shows_delivered_bytes_once_in_gbit_per_s_and_packets_per_s() -> None:
    clock = _Clock()
    p = ProgressLine("q on loopback", bytes_total=10_000_000, enabled=False, clock=clock)
    clock.t += 2.0
    p.update({"ranks": 8, "ranks_done": 0, "bytes_delivered": 5_000_000, "packets_delivered": 1250,
              "progress": 10_001_250})  # the stall counter (bytes sent + received + ACKs) is not shown
    text = p.render()
    assert "50.0 % of bytes · 0.02 Gbit/s delivered · 625 packets/s · ETA 2.0 s" in text
    assert "events/s" not in text and "virtual" not in text


def _tiny_schedule(path: Path):
    profile = load_profiles(str(path))[0]
    return profile, run_schedule(load_workload(profile), profile)


def test_sim_driver_reports_progress_and_the_run_does_not_change(tiny_profile) -> None:
    from emulator.drivers.sim import run_sim

    profile, schedule = _tiny_schedule(tiny_profile())
    cfg, ecfg = sim_config(profile), endpoint_config(profile)
    infos: list[dict] = []
    watched = run_sim(schedule, cfg, ecfg, seed=3, progress=infos.append, progress_interval_s=0.0)
    plain = run_sim(schedule, cfg, ecfg, seed=3)
    assert len(infos) >= 3
    for key in ("virtual_ns", "bytes_delivered", "packets_delivered", "flows_done", "ops_done", "ranks_done"):
        values = [i[key] for i in infos]
        assert values == sorted(values), key
    total = int(schedule.flow_size_bytes.sum())
    last = infos[-1]
    assert last["bytes_delivered"] == total and last["flows_done"] == schedule.n_flows
    assert last["ops_done"] == schedule.n_ops and last["ranks_done"] == last["ranks"] == schedule.world_size
    assert last["virtual_ns"] == watched.health["end_ns"]
    assert watched.health["end_ns"] == plain.health["end_ns"]
    assert all((watched.records[r].end_ns == plain.records[r].end_ns).all() for r in plain.records)


def test_the_sim_fabric_of_a_run_gets_the_progress_callback(tiny_profile, monkeypatch) -> None:
    import emulator.drivers.sim as sim

    profile, schedule = _tiny_schedule(tiny_profile())
    seen: dict = {}
    real = sim.run_sim

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(sim, "run_sim", spy)
    infos: list[dict] = []
    make_driver(profile, "sim").run(schedule, infos.append)
    assert seen["progress"] == infos.append and infos[-1]["bytes_delivered"] == int(schedule.flow_size_bytes.sum())


@pytest.mark.serial  # a loopback run
def test_loopback_reports_each_delivered_byte_once(tiny_profile) -> None:
    path = tiny_profile(fabric={"kind": "loopback", "ports": {"rate": "200Mbps", "latency": "1us"}})
    profile, schedule = _tiny_schedule(path)
    infos: list[dict] = []
    res = make_driver(profile, "loopback").run(schedule, infos.append)
    assert res.complete, res.errors
    total = int(schedule.flow_size_bytes.sum())
    assert infos and all(0 <= i["bytes_delivered"] <= total for i in infos)
    last = infos[-1]
    assert last["ranks_done"] == last["ranks"] and last["bytes_delivered"] == total
    assert last["packets_delivered"] >= total // profile.fabric.mtu_bytes
