"""A flow started part-way into the fabric's next slice: it sends from its own start time, and the driver's
events inside a congested step start their flows there instead of cutting the step."""

from __future__ import annotations

import numpy as np
import pytest
from support.sim import collective_schedule, incast

from emulator.drivers import fluid as fluid_driver
from emulator.drivers.fluid import fluid_model
from emulator.drivers.sim_types import SimConfig
from emulator.endpoint import EndpointConfig
from emulator.fabric.fluid import FluidConfig
from emulator.fabric.topology import TopologyConfig
from emulator.pacing.red import RedParams
from emulator.trace.model import CollectiveType

RATE = 25e9
RED = RedParams(kmin_bytes=5_000, kmax_bytes=200_000, pmax=0.01)


def _congested_incast():
    """Flows 0 and 1 into one port for 5 µs (a queue builds); flow 2, from its own NIC, not started."""
    fab = fluid_model(incast(3, 1_000_000), SimConfig(red=RED), EndpointConfig(cc="connectx"), FluidConfig(), 1)
    fab.start(0, 1e6, 0.0)
    fab.start(1, 1e6, 0.0)
    t, _, _ = fab.advance(0.0, 5_000.0)
    assert t == 5_000.0 and fab.queue.max() > 0
    return fab, t


@pytest.mark.parametrize("late_ns", [0.0, 300.0, 999.0])
def test_a_flow_started_part_way_into_a_step_sends_from_its_start(late_ns):
    fab, t = _congested_incast()
    step = fab.fixed_step_ns()
    assert step == FluidConfig().step_ns  # a queue holds bytes: the next slice is a step, whatever starts
    fab.start(2, 1e6, t + late_ns)
    t2, _, _ = fab.advance(t, t + step)
    assert t2 == t + step
    # its NIC is its own: it sent at line rate from its start, not from the slice's
    assert fab.send_left[2] == pytest.approx(1e6 - RATE * (step - late_ns) * 1e-9 / 8, rel=1e-9)


def test_a_flow_that_starts_and_ends_inside_one_step_leaves_the_nic_at_its_own_time():
    fab, t = _congested_incast()
    fab.start(2, 500.0, t + 300.0)
    _, sent, _ = fab.advance(t, t + fab.fixed_step_ns())
    done = dict(sent)
    assert done[2] == pytest.approx(t + 300.0 + 500 * 8e9 / RATE)


def test_a_flow_started_ahead_of_an_uncongested_fabric_sends_from_its_start():
    fab = fluid_model(incast(3, 1_000_000), SimConfig(red=RED), EndpointConfig(cc="none"), FluidConfig(), 1)
    fab.start(0, 1e6, 0.0)
    t, _, _ = fab.advance(0.0, 2_000.0)
    assert fab.fixed_step_ns() == 0.0  # nothing queues: the start ends the slice it falls in
    fab.start(2, 1e6, t + 700.0)
    t2, _, _ = fab.advance(t, t + 5_000.0)
    assert t2 == t + 5_000.0
    assert fab.send_left[2] == pytest.approx(1e6 - RATE * 4_300 * 1e-9 / 8, rel=1e-9)


def test_a_congested_rings_arrivals_start_their_flows_without_cutting_its_steps():
    """16-rank ring All-Reduce on a 2:1 leaf–spine (ECMP collisions queue): once queues hold bytes, every
    advance of the fabric runs at least one whole step (the arrivals inside it start flows part-way)."""
    s = collective_schedule(16, CollectiveType.ALL_REDUCE, 4 << 20)
    cfg = SimConfig(topology=TopologyConfig(kind="leaf_spine", leaves=4, spines=2, hosts_per_leaf=4),
                    port_rate_bps=400e9, buffer_bytes=1 << 20, latency_ns=1000, red=RedParams())
    ecfg = EndpointConfig(mtu_bytes=4096, cc="connectx", line_rate_bps=400e9)
    run = fluid_driver._Run(s, cfg, ecfg, FluidConfig(), 1)
    fab, advance, spans = run.fab, run.fab.advance, []

    def spy(now_ns, limit_ns):
        congested = fab.fixed_step_ns() > 0
        out = advance(now_ns, limit_ns)
        spans.append((congested, out[0] - now_ns, bool(out[1] or out[2])))
        return out

    fab.advance = spy
    reason, _, _ = run.run(10**10, None)
    assert reason == "complete"
    # a congested advance ends early only where the fabric itself finishes a flow in its first slice
    short = [d for c, d, ended in spans if c and d < FluidConfig().step_ns - 1e-6 and not ended]
    assert sum(c for c, _, _ in spans) > 100 and not short, short[:5]
    starts = np.asarray(run.start)[s.op_kind == fluid_driver.OP_SEND]
    assert (starts % FluidConfig().step_ns != 0).mean() > 0.5  # flows start at their own times, off the grid
