"""The fluid reaction point's order of a CNP and the DCQCN clocks due at the same time (FluidConfig.cnp_after_ticks)."""

from __future__ import annotations

import numpy as np
import pytest

from emulator.fabric.fluid_cc import FluidDcqcn
from emulator.pacing import get_controller, get_params

RATE = 400e9


def _train(fl: FluidDcqcn, ref, every_ns: int, until_ns: int) -> list[tuple[float, float]]:
    """CNPs every ``every_ns`` up to 40 µs, as the fluid fabric delivers them (on_cnp, then advance, at a slice's
    end), to both controllers; (fluid, packet) rate at every µs."""
    idx = np.array([0])
    out = []
    for t in range(0, until_ns, 1_000):
        if t <= 40_000 and t % every_ns == 0:
            ref.on_cnp(t)
            fl.on_cnp(idx, float(t))
        ref.on_timer(t)
        fl.advance(idx, np.zeros(1), float(t))
        out.append((fl.rc[0], ref.rate_bps))
    return out


@pytest.mark.parametrize("compiled", [False, True])
def test_a_cnp_train_one_monitor_period_apart_cuts_every_period_as_the_packet_controller(compiled: bool) -> None:
    """ConnectX's monitor period is 4 µs, the NP's interval too: a CNP at a monitor tick comes after it, so each
    CNP of the train has its own cut (the packet sim: 400 → 207 → 108 → 58 → 31 → 17 Gb/s ...)."""
    params = get_params("connectx", RATE)
    ref = get_controller("connectx", RATE)
    fl = FluidDcqcn(1, RATE, params, ticks_first=True)
    if compiled:
        fl.use_compiled()
    rates = _train(fl, ref, 4_000, 100_000)
    assert fl.cuts[0] == ref.state().cuts == 10  # 11 CNPs: the first arms, each later one cuts at the next tick
    for got, want in rates:
        assert abs(got - want) <= 0.02 * want + 1e6
    assert rates[-1][0] < 0.01 * RATE


def test_with_cnps_first_a_cnp_at_a_due_tick_was_merged_into_its_cut() -> None:
    """``cnp_after_ticks`` off (the default): the CNP that arrives at the tick its predecessor's cut is due is absorbed."""
    params = get_params("connectx", RATE)
    fl = FluidDcqcn(1, RATE, params)
    _train(fl, get_controller("connectx", RATE), 4_000, 100_000)
    assert fl.cuts[0] == 5


def test_the_fluid_config_knob_reaches_the_reaction_point() -> None:
    from support.sim import incast

    from emulator.drivers.fluid import fluid_model
    from emulator.drivers.sim_types import SimConfig
    from emulator.endpoint import EndpointConfig
    from emulator.fabric.fluid import FluidConfig

    for on in (False, True):
        fab = fluid_model(incast(2, 1 << 16), SimConfig(), EndpointConfig(cc="connectx"), FluidConfig(cnp_after_ticks=on))
        assert fab.cc.ticks_first is on
