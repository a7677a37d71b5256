"""The fluid DCQCN's compiled loops (emulator/fabric/fluid_cc_kernels.py) leave every state array bit for bit
as the numpy forms of FluidDcqcn leave it, for both DCQCN forms and their knobs, and return the same values."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.fabric import fluid_cc
from emulator.fabric.fluid_cc import FluidDcqcn
from emulator.pacing.params import DcqcnFirmwareParams, DcqcnPaperParams

SEEDS = st.integers(0, 2**32 - 1)
STATE = ("rc", "rt", "alpha", "anchor_ns", "t_stage", "b_stage", "byte_acc", "inc_next_ns", "armed", "alpha_flag",
         "dec_flag", "mon_next_ns", "cnps", "cuts", "t_last_ns")  # fmt: skip


@st.composite
def controllers(draw):
    """A controller of either form with drawn knobs and a drawn state, the time now and the rows to call on."""
    seed = draw(SEEDS)
    n = draw(st.integers(1, 120))
    line = draw(st.sampled_from([25e9, 100e9, 400e9]))
    if draw(st.booleans()):
        params = DcqcnPaperParams(byte_counter_bytes=draw(st.sampled_from([0, 4096, 10_000_000])),
                                  clamp_target_rate=draw(st.booleans()), alpha_update_before_cut=draw(st.booleans()),
                                  fast_recovery_steps=draw(st.integers(1, 6)), alpha_timer_us=draw(st.sampled_from([1.0, 55.0])),
                                  rate_increase_timer_us=draw(st.sampled_from([1.5, 55.0])),
                                  max_rate_mbps=draw(st.sampled_from([0.0, 10_000.0])))  # fmt: skip
    else:
        params = DcqcnFirmwareParams(rpg_byte_reset=draw(st.sampled_from([0, 16, 32767])),
                                     clamp_tgt_rate=draw(st.booleans()),
                                     clamp_tgt_rate_after_time_inc=draw(st.booleans()),
                                     first_cnp_cuts=draw(st.booleans()),
                                     rate_to_set_on_first_cnp_mbps=draw(st.sampled_from([0.0, 5_000.0])),
                                     rate_on_first_cnp_fraction=draw(st.sampled_from([1.0, 0.5])),
                                     rpg_gd=draw(st.integers(8, 12)), rpg_threshold=draw(st.integers(1, 5)),
                                     rpg_min_dec_fac_pct=draw(st.sampled_from([0.0, 50.0])),
                                     rpg_time_reset_us=draw(st.sampled_from([2.0, 300.0])))  # fmt: skip
    cc = FluidDcqcn(n, line, params)
    rng = np.random.default_rng(seed)
    hi, lo = cc.max_rate_bps, cc.min_rate_bps
    now = float(rng.integers(1, 10**7))
    inc = cc.inc_period_ns
    cc.rc[:] = np.where(rng.random(n) < 0.3, hi, lo + rng.random(n) * (hi - lo))
    cc.rt[:] = np.where(rng.random(n) < 0.5, hi, np.maximum(cc.rc, lo + rng.random(n) * (hi - lo)))
    cc.alpha[:] = rng.random(n)
    cc.anchor_ns[:] = now - rng.random(n) * 100 * cc.alpha_period_ns
    cc.t_last_ns[:] = np.where(rng.random(n) < 0.1, now + 5.0, now - rng.random(n) * 50 * inc)
    cc.t_stage[:] = rng.integers(0, 9, n)
    cc.b_stage[:] = rng.integers(0, 9, n)
    cc.byte_acc[:] = rng.random(n) * max(cc.byte_period, 1.0)
    kind = rng.integers(0, 4, n)  # none, far behind (> 64 periods: the replay's bound), just due, ahead
    cc.inc_next_ns[:] = np.select([kind == 0, kind == 1, kind == 2],
                                  [np.inf, now - rng.random(n) * 100 * inc, now - rng.random(n) * inc],
                                  now + rng.random(n) * inc)  # fmt: skip
    cc.armed[:] = rng.random(n) < 0.7
    cc.alpha_flag[:] = rng.random(n) < 0.5
    cc.dec_flag[:] = rng.random(n) < 0.5
    if cc.firmware:
        cc.mon_next_ns[:] = now + (rng.random(n) - 0.5) * 2 * cc.monitor_period_ns
    cc.cnps[:] = rng.integers(0, 5, n)
    cc.cuts[:] = rng.integers(0, 5, n)
    idx = rng.permutation(n)[: draw(st.integers(1, n))]
    sent = rng.random(idx.size) * 3 * max(cc.byte_period, 1.0)
    return cc, idx.astype(np.int64), sent, now


def _call(cc: FluidDcqcn, compiled: bool, method: str, *args):
    """``cc.method(*args)`` as the compiled loop or as numpy."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fluid_cc, "_COMPILED_FROM_QPS", 1 if compiled else 10**12)
        return getattr(cc, method)(*args)


def _twins(cc: FluidDcqcn, method: str, *args):
    """``method(*args)`` as numpy on ``cc`` and compiled on a copy: (numpy result, compiled result, copy)."""
    twin = copy.deepcopy(cc)
    return _call(cc, False, method, *args), _call(twin, True, method, *args), twin


def _same_state(a: FluidDcqcn, b: FluidDcqcn) -> None:
    for name in STATE:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), name


@pytest.mark.parametrize("method", ["advance", "on_cnp"])
@settings(max_examples=150, deadline=None)
@given(drawn=controllers())
def test_a_compiled_update_leaves_the_numpy_state(method: str, drawn) -> None:
    cc, idx, sent, now = drawn
    args = (idx, sent, now) if method == "advance" else (idx, now)
    _, _, twin = _twins(cc, method, *args)
    _same_state(cc, twin)


@settings(max_examples=150, deadline=None)
@given(drawn=controllers())
def test_compiled_queries_answer_as_numpy(drawn) -> None:
    cc, idx, _, _ = drawn
    for method in ("next_deadline_ns", "idle", "bytes_to_next_increase"):
        want, got, twin = _twins(cc, method, idx)
        assert np.asarray(want).tobytes() == np.asarray(got).tobytes(), method
        _same_state(cc, twin)


@settings(max_examples=40, deadline=None)
@given(drawn=controllers(), slices=st.integers(1, 30), seed=SEEDS)
def test_slices_of_cnps_and_clocks_keep_the_twins_equal(drawn, slices: int, seed: int) -> None:
    """A run of slices (CNPs to some rows, then every clock) keeps the numpy and the compiled state equal."""
    cc, idx, _, now = drawn
    twin = copy.deepcopy(cc)
    rng = np.random.default_rng(seed)
    for _ in range(slices):
        now += float(rng.integers(1, 3000))
        due = np.flatnonzero(rng.random(cc.n) < 0.2)
        sent = rng.random(idx.size) * 50_000
        for c, compiled in ((cc, False), (twin, True)):
            _call(c, compiled, "on_cnp", due, now)
            _call(c, compiled, "advance", idx, sent, now)
        _same_state(cc, twin)


def _run_records(cc: str, compiled: bool) -> list[bytes]:
    """A 16-rank All-to-All over an oversubscribed leaf–spine (CNPs, cuts, increases) on the fluid fabric."""
    from emulator.drivers.fluid import run_fluid
    from emulator.drivers.sim import SimConfig
    from emulator.endpoint.config import EndpointConfig
    from emulator.fabric.topology import TopologyConfig
    from emulator.pacing.red import RedParams
    from emulator.schedule.compiler import compile_trace
    from emulator.trace.generators.collective import CollectiveOptions, collective_trace
    from emulator.trace.model import CollectiveType, RankGraph, Trace

    gen = collective_trace(CollectiveOptions(ranks=16, collectives=(CollectiveType.ALL_TO_ALL,), size_bytes=1 << 20,
                                             iterations=1))  # fmt: skip
    schedule = compile_trace(Trace(ranks={r: RankGraph(r, list(gen.nodes(r))) for r in range(16)},
                                   groups=dict(gen.groups)))  # fmt: skip
    topo = TopologyConfig(kind="leaf_spine", leaves=2, spines=2, hosts_per_leaf=8, oversubscription=4.0)
    scfg = SimConfig(topology=topo, port_rate_bps=25e9, buffer_bytes=1 << 20, latency_ns=1000, red=RedParams())
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fluid_cc, "_COMPILED_FROM_QPS", 1 if compiled else 10**12)
        res = run_fluid(schedule, scfg, EndpointConfig(mtu_bytes=4096, cc=cc, line_rate_bps=25e9), seed=1)
    assert res.complete and sum(int(r.cnps.sum()) for r in res.records.values()) > 0
    return [getattr(r, k).tobytes() for r in res.records.values()
            for k in ("ready_ns", "start_ns", "end_ns", "cnps", "ce_marks")]  # fmt: skip


@pytest.mark.parametrize("cc", ["connectx", "paper"])
def test_a_run_with_the_compiled_loops_records_what_numpy_records(cc: str) -> None:
    assert _run_records(cc, True) == _run_records(cc, False)


def test_use_compiled_runs_every_later_call_as_the_compiled_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    """After use_compiled (the fabric asks once it steps a view of compiled size) a call on a few queue pairs
    runs the compiled loop, not numpy; a controller without DCQCN has none to load."""
    calls = []
    kernels = fluid_cc._kernels()
    monkeypatch.setattr(kernels, "advance", lambda *a: calls.append(a[0].size))
    cc = FluidDcqcn(8, 25e9, DcqcnFirmwareParams())
    cc.advance(np.arange(3), np.ones(3), 1000.0)
    assert calls == []
    cc.use_compiled()
    cc.advance(np.arange(3), np.ones(3), 2000.0)
    assert calls == [3]
    off = FluidDcqcn(8, 25e9, None)
    off.use_compiled()
    assert off._c is None
