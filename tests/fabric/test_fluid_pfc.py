"""PFC on the fluid fabric: XOFF above the threshold pauses the upstream ports, XON below resumes them."""

from __future__ import annotations

import pytest
from support.sim import incast

from emulator.drivers.fluid import run_fluid
from emulator.drivers.sim import SimConfig, run_sim
from emulator.endpoint import EndpointConfig
from emulator.fabric.port import PfcParams

PFC = PfcParams(xoff_bytes=300_000, xon_bytes=200_000)
NO_CC = EndpointConfig(cc="none")


@pytest.fixture(scope="module")
def incast_runs():
    s = incast(4, 2_000_000)
    cfg = SimConfig(pfc=PFC, red=None)
    return run_fluid(s, cfg, NO_CC), run_sim(s, cfg, NO_CC, seed=1)


def test_pfc_incast_has_no_drops_and_pauses_the_senders(incast_runs) -> None:
    fluid, _ = incast_runs
    assert fluid.complete
    assert sum(p.dropped_bytes for p in fluid.fabric.ports) == 0
    bott = fluid.fabric.port_named("sw0->host4")
    assert bott.xoff_time_ns > 0 and bott.xoff_count >= 2  # paused, resumed at XON, paused again
    # one slice of four line-rate senders (1 µs at 25 Gbps each) is all that can pass XOFF
    assert PFC.xoff_bytes <= bott.peak_queue_bytes <= PFC.xoff_bytes + 4 * 3125
    assert all(fluid.fabric.port_named(f"host{i}->sw0").paused_time_ns > 0 for i in range(4))
    assert fluid.fabric.port_named("sw0->host0").paused_time_ns == 0  # nothing feeds the switch towards it


def test_pfc_incast_matches_the_packet_sim(incast_runs) -> None:
    fluid, sim = incast_runs
    assert abs(fluid.health["end_ns"] / sim.health["end_ns"] - 1) <= 0.05
    f, p = (r.fabric.port_named("sw0->host4") for r in incast_runs)
    assert abs(f.xoff_time_ns / p.xoff_time_ns - 1) <= 0.10
    for i in range(4):
        f, p = (r.fabric.port_named(f"host{i}->sw0") for r in incast_runs)
        assert abs(f.paused_time_ns / p.paused_time_ns - 1) <= 0.10


def test_without_pfc_the_same_incast_drops() -> None:
    res = run_fluid(incast(4, 2_000_000), SimConfig(red=None), NO_CC)
    assert res.complete and sum(p.dropped_bytes for p in res.fabric.ports) > 0
    assert all(p.paused_time_ns == 0 and p.xoff_time_ns == 0 for p in res.fabric.ports)
