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
from emulator.fabric.fluid_view import _View
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
