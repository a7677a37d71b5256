"""The fluid driver's memory per flow: what a 1,024- or 4,096-rank run costs is this times millions of flows."""

from __future__ import annotations

import tracemalloc

import numpy as np
from support.endpoint import make_schedule, recv, send
from support.sim import collective_schedule

from emulator.drivers import fluid as fluid_driver
from emulator.drivers.sim_types import SimConfig
from emulator.endpoint import EndpointConfig
from emulator.fabric.fluid import FluidConfig
from emulator.pacing.red import RedParams
from emulator.trace.model import CollectiveType

RED = RedParams(kmin_bytes=5_000, kmax_bytes=200_000, pmax=0.01)


def _traced_bytes_per_flow(schedule) -> tuple[float, float]:
    """(peak bytes per flow while building the driver's state, peak bytes per flow while running)."""
    args = (SimConfig(), EndpointConfig(cc="connectx"), FluidConfig(), 1)
    # the same run once untraced: imports, and numba's compile (or cache load) of every kernel it reaches,
    # which with an empty cache (a fresh checkout) allocates MBs a smaller warm-up would not reach
    fluid_driver._Run(schedule, *args).run(10**10, None)
    tracemalloc.start()
    try:
        run = fluid_driver._Run(schedule, *args)
        init = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        reason, _, _ = run.run(10**10, None)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert reason == "complete"
    return init / schedule.n_flows, peak / schedule.n_flows


def test_all_to_all_memory_per_flow():
    """An All-to-All has one flow per queue pair: no per-queue-pair queue objects, no Python object per op.

    Before per-op arrays and queues only for busy queue pairs: about 1,050 bytes per flow to build, 1,430
    to run (64 ranks, 4,032 flows); after them 680 and 600."""
    s = collective_schedule(64, CollectiveType.ALL_TO_ALL, 64 << 10)
    init, run = _traced_bytes_per_flow(s)
    assert init < 900
    assert run < 800


def test_a_compile_keeps_no_plan_alive():
    """The algorithms' plan cache serves one compile: a 1,024-rank All-to-All's plan is a million transfer
    objects (about 350 bytes a flow) that would otherwise stay in memory through the run."""
    from emulator.schedule.algorithms.base import _cached_plan

    collective_schedule(16, CollectiveType.ALL_TO_ALL, 64 << 10)
    assert _cached_plan.cache_info().currsize == 0


class _Recorder:
    """A numpy generator that records the means (packets × marked fraction) of every binomial draw."""

    def __init__(self, rng) -> None:
        self.rng, self.means = rng, []

    def binomial(self, n, p):
        self.means.append(np.asarray(n) * np.asarray(p))
        return self.rng.binomial(n, p)


def test_marks_are_drawn_only_where_expected():
    """With a seed, CE marks are binomial draws over a queue pair's whole packets; a queue pair without
    expected marks in a slice draws nothing (no draw where the mean is zero)."""
    flows = [(r, 0, 2_000_000, r - 1) for r in range(1, 8)] + [(1, 2, 200_000, 7)]
    ops = {0: [recv(f) for f in range(7)], 1: [send(0), send(7)], 2: [recv(7)],
           **{r: [send(r - 1)] for r in range(2, 8)}}  # fmt: skip
    run = fluid_driver._Run(make_schedule(8, flows, ops), SimConfig(red=RED), EndpointConfig(cc="connectx"),
                            FluidConfig(), 1)  # fmt: skip
    run.fab.rng = rec = _Recorder(run.fab.rng)
    reason, _, _ = run.run(10**10, None)
    assert reason == "complete"
    assert rec.means and sum(m.size for m in rec.means) > 0
    assert all((m > 0).all() for m in rec.means)
