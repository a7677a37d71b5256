"""The fluid fabric's view brought up to date from the last one (fluid_view.updated, a compiled merge) holds
the arrays of the view built afresh from the same active flows, through random starts and ends."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fluid_view import assert_same_view as _same

from emulator.fabric.fluid_view import COMPILED_FROM, UPDATE_UP_TO, _View, updated


def _fabric(rng: np.random.Generator, n_flows: int, n_qp: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    path = np.full((n_flows, 4), -1, np.int64)
    path[:, 0] = rng.integers(0, 64, n_flows)
    hops = rng.integers(0, 4, n_flows)  # 0–3 switch levels (a flow within a host's NIC has none)
    for lv in (1, 2, 3):
        on = hops >= lv
        path[on, lv] = rng.integers(64 * lv, 64 * lv + 40, int(on.sum()))
    flow_qp = rng.integers(0, n_qp, n_flows).astype(np.int64)
    fb = (2 * (hops + 1) - 1) * 1000.0 + rng.random(n_flows)  # per flow: a queue pair's flows differ
    return path, flow_qp, fb


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), shared=st.booleans(), rounds=st.integers(1, 8))
def test_updated_view_is_the_view_built_afresh(seed: int, shared: bool, rounds: int) -> None:
    rng = np.random.default_rng(seed)
    n_flows = 3000
    path, flow_qp, fb = _fabric(rng, n_flows, 400 if shared else n_flows)
    if not shared:
        flow_qp = rng.permutation(n_flows).astype(np.int64)
    is_active = np.zeros(n_flows, bool)
    active: dict[int, None] = {}

    def start(flows: np.ndarray, not_again: frozenset = frozenset()) -> None:
        for f in flows.tolist():
            if not is_active[f] and f not in not_again:
                active[f] = None
                is_active[f] = True

    start(rng.choice(n_flows, 600, replace=False))
    v = _View(np.array(sorted(active), np.int64), path, flow_qp, fb, shared)
    for _ in range(rounds):
        on = np.flatnonzero(is_active)
        gone = rng.choice(on, int(rng.integers(0, on.size - COMPILED_FROM)), replace=False)
        is_active[gone] = False  # ended (flows that ended in earlier rounds may start again)
        for f in gone.tolist():
            del active[f]
        start(rng.choice(n_flows, int(rng.integers(0, 300)), replace=False), frozenset(gone.tolist()))
        got = updated(v, is_active, active, path, flow_qp, fb, shared)
        want = _View(np.array(sorted(active), np.int64), path, flow_qp, fb, shared)
        assert got is not None
        _same(got, want)
        v = got


@pytest.mark.parametrize("restart_last", [False, True])
def test_a_flow_that_ended_unseen_and_started_again(restart_last: bool) -> None:
    """A flow of the last view that ended and started again before the view was asked for (the calm regime
    ends flows without a slice) is still active: where it is among the last started it is both kept and
    started, not distinct flows, so no update (the fabric builds afresh); else the update holds it once."""
    rng = np.random.default_rng(5)
    path, flow_qp, fb = _fabric(rng, 1000, 100)
    active = dict.fromkeys(range(300))
    is_active = np.zeros(1000, bool)
    is_active[:300] = True
    v = _View(np.arange(300, dtype=np.int64), path, flow_qp, fb, True)
    if not restart_last:
        del active[7]
        active[7] = None  # ended and started again: at the end of the insertion order
    active[400] = None
    is_active[400] = True
    if restart_last:
        del active[7]
        active[7] = None
    got = updated(v, is_active, active, path, flow_qp, fb, True)
    if restart_last:
        assert got is None
    else:
        assert got is not None
        _same(got, _View(np.array(sorted(active), np.int64), path, flow_qp, fb, True))


@pytest.mark.parametrize("size", [COMPILED_FROM - 1, 100])
def test_views_below_compiled_size_are_built_afresh(size: int) -> None:
    rng = np.random.default_rng(1)
    path, flow_qp, fb = _fabric(rng, 1000, 100)
    active = dict.fromkeys(range(size))
    is_active = np.zeros(1000, bool)
    is_active[:size] = True
    v = _View(np.arange(size, dtype=np.int64), path, flow_qp, fb, True)
    active[999] = None
    is_active[999] = True
    assert updated(v, is_active, active, path, flow_qp, fb, True) is None


def test_views_above_the_update_size_are_built_afresh() -> None:
    rng = np.random.default_rng(2)
    n = UPDATE_UP_TO + 1
    path, flow_qp, fb = _fabric(rng, n + 10, 1000)
    active = dict.fromkeys(range(n))
    is_active = np.zeros(n + 10, bool)
    is_active[:n] = True
    v = _View(np.arange(n, dtype=np.int64), path, flow_qp, fb, True)
    is_active[3] = False
    del active[3]
    assert updated(v, is_active, active, path, flow_qp, fb, True) is None
