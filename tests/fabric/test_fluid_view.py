"""The fluid fabric's view of its active flows kept as one built afresh: flows delivered in a slice are
dropped from it when it is next asked for, or it is rebuilt when flows start before then."""

from __future__ import annotations

import numpy as np
import pytest
from support.sim import incast

from emulator.drivers.fluid import fluid_model
from emulator.drivers.sim_types import SimConfig
from emulator.endpoint import EndpointConfig
from emulator.fabric.fluid import FluidConfig
from emulator.fabric.fluid_view import _View, active_sorted
from emulator.pacing.red import RedParams


def _same(got: _View, want: _View) -> None:
    for name in ("a", "qa", "host", "qps", "inv", "qp_fb_ns"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    assert got.in_order == want.in_order and len(got.levels) == len(want.levels)
    for x, y in zip(got.levels, want.levels, strict=True):
        assert x[0] == y[0] and all(np.array_equal(u, w) for u, w in zip(x[1:], y[1:], strict=True))


@pytest.mark.parametrize("start_after", [False, True])
def test_the_view_after_deliveries_is_the_view_built_afresh(start_after: bool) -> None:
    fab = fluid_model(incast(6, 400_000), SimConfig(red=RedParams()), EndpointConfig(cc="connectx"), FluidConfig(), 1)
    for f in range(5):  # into one port: congested steps; flow 5 not started yet
        fab.start(f, 50_000.0 * (f + 1), 0.0)
    t, dl = 0.0, []
    while not dl:
        t, _, dl = fab.advance(t, 1e7)
    assert fab.active == 5 - len(dl) and fab._gone_rows is not None  # the view still holds them
    if start_after:
        fab.start(5, 10_000.0, t)
    want = _View(np.array(sorted(fab._active), np.int64), fab.path, fab.qp, fab.fb_delay_ns, fab._qp_shared)
    _same(fab._view(), want)
    assert fab._gone_rows is None and not fab._dirty


def _mask(active: dict[int, None], n: int) -> np.ndarray:
    m = np.zeros(n, bool)
    m[list(active)] = True
    return m


def test_active_sorted_keeps_the_last_views_flows_and_adds_the_new_ones() -> None:
    rng = np.random.default_rng(5)
    active = dict.fromkeys(rng.permutation(1_000)[:300].tolist())
    prev = np.sort(np.fromiter(active, np.int64))
    for _ in range(20):  # flows end (any of them) and start (new ones, at the dict's end)
        for f in rng.choice(list(active), 40, replace=False).tolist():
            del active[f]
        idle = np.setdiff1d(np.arange(1_000), np.fromiter(active, np.int64))
        active.update(dict.fromkeys(rng.choice(idle, 45, replace=False).tolist()))
        got = active_sorted(prev, _mask(active, 1_000), active)
        assert np.array_equal(got, np.sort(np.fromiter(active, np.int64)))
        prev = got


def test_active_sorted_where_a_flow_ended_and_started_again() -> None:
    active = dict.fromkeys([5, 9, 2, 7])
    prev = np.array([2, 5, 7, 9])
    del active[5]
    active[5] = None  # ended and started again: both in the last view and among the last entries
    active[11] = None
    assert np.array_equal(active_sorted(prev, _mask(active, 16), active), [2, 5, 7, 9, 11])
    del active[11], active[5]
    active[11] = None
    active[5] = None
    assert np.array_equal(active_sorted(prev, _mask(active, 16), active), [2, 5, 7, 9, 11])
