"""The compiled pieces of the fluid slice (emulator/fabric/fluid_step_kernels.py) give bit for bit what the numpy
expressions and the Python functions they stand for give, on random inputs."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fluid_view import assert_same_view as _same

from emulator.fabric import fluid, fluid_view
from emulator.fabric import fluid_step_kernels as SK
from emulator.fabric.fluid import FluidFabric, _qp_in_order
from emulator.fabric.fluid_config import FluidConfig
from emulator.fabric.fluid_nic import max_min_share, proportional_share
from emulator.fabric.fluid_view import _View

SEEDS = st.integers(0, 2**32 - 1)


def _paths(rng: np.random.Generator, n_flows: int, n_ports: int) -> np.ndarray:
    path = rng.integers(0, n_ports, (n_flows, 4))
    path[rng.random((n_flows, 4)) < 0.3] = -1
    path[:, 0] = rng.integers(0, n_ports, n_flows)
    path[rng.random(n_flows) < 0.5, 1:3] = -1  # flows within a leaf
    return path


def _views(monkeypatch: pytest.MonkeyPatch, a: np.ndarray, path: np.ndarray, qp: np.ndarray, fb: np.ndarray,
           shared: bool) -> tuple[_View, _View]:  # fmt: skip
    monkeypatch.setattr(fluid_view, "COMPILED_FROM", 10**9)
    numpy_view = _View(a, path, qp, fb, shared)
    monkeypatch.setattr(fluid_view, "COMPILED_FROM", 0)
    return numpy_view, _View(a, path, qp, fb, shared)


@settings(max_examples=25, deadline=None)
@given(SEEDS, st.integers(0, 400), st.integers(1, 60), st.integers(1, 12), st.booleans())
def test_the_compiled_view_is_the_numpy_view(seed: int, n: int, n_qp: int, n_ports: int, shared: bool) -> None:
    """view_levels and qp_index build the arrays the numpy view builds (levels, unique queue pairs, their first
    flows' feedback delays, which levels hold a queue pair twice at a port), afresh and without delivered rows."""
    rng = np.random.default_rng(seed)
    n_flows = n + 20
    path = _paths(rng, n_flows, n_ports)
    qp = rng.integers(0, n_qp, n_flows) if shared else rng.permutation(n_flows)
    fb = rng.random(n_flows) * 1e4
    a = np.sort(rng.choice(n_flows, n, replace=False)).astype(np.int64)
    with pytest.MonkeyPatch.context() as mp:
        want, got = _views(mp, a, path, qp, fb, shared)
        _same(got, want)
        if n:
            gone = np.flatnonzero(rng.random(n) < 0.3)
            w2 = want.without(gone, fb, shared)
            _same(got.without(gone, fb, shared), w2)
            mp.setattr(fluid_view, "COMPILED_FROM", 10**9)
            _same(w2, _View(a[np.setdiff1d(np.arange(n), gone)], path, qp, fb, shared))


def test_a_queue_pair_twice_at_one_port_is_seen_on_that_level_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flows 0 and 1 share queue pair 7 and the spine port 5 (level 2) but not their level-1 ports."""
    path = np.array([[0, 3, 5, 9], [0, 4, 5, 9], [1, 3, 6, 8]], np.int64)
    qp = np.array([7, 7, 2], np.int64)
    want, got = _views(monkeypatch, np.arange(3, dtype=np.int64), path, qp, np.ones(3), True)
    _same(got, want)
    assert got.in_order == [False, True, True]


@settings(max_examples=40, deadline=None)
@given(SEEDS, st.integers(1, 300), st.integers(1, 9), st.floats(0.0, 1.0))
def test_nic_share_is_the_numpy_share(seed: int, n: int, n_ports: int, idle: float) -> None:
    """nic_share: each flow's want times its NIC's min(1, rate / load), 0 at a paused NIC, 1 where nothing is offered."""
    rng = np.random.default_rng(seed)
    host = rng.integers(0, n_ports, n)
    want = np.where(rng.random(n) < idle, 0.0, rng.random(n) * 4e11)
    rate = rng.choice([25e9, 100e9, 400e9], n_ports)
    paused = rng.random(n_ports) < 0.2
    load = np.bincount(host, want, n_ports)
    share = np.minimum(1.0, np.divide(rate, load, out=np.ones_like(load), where=load > 0))
    assert np.array_equal(SK.nic_share(want, host, rate, paused), np.where(paused[host], 0.0, want * share[host]))
    assert np.array_equal(SK.nic_share(want, host, rate, paused), proportional_share(want, host, rate, paused)[0])


@settings(max_examples=50, deadline=None)
@given(SEEDS, st.integers(1, 300), st.integers(1, 20), st.integers(1, 6), st.booleans(), st.booleans())
def test_qp_in_order_is_the_python_rule(seed: int, n: int, n_qp: int, n_ports: int, shuffled: bool,
                                        wide: bool) -> None:  # fmt: skip
    """qp_in_order gives what fluid._qp_in_order gives: a queue pair's service at a port to its lowest flow id
    first, up to what each holds (flows in any order — the view's ascending ones without a sort by flow; one
    flow per queue pair and port: ``out`` unchanged; queue pair ids too wide to pack with a position)."""
    rng = np.random.default_rng(seed)
    flows = np.sort(rng.choice(10 * n, n, replace=False)).astype(np.int64)
    if shuffled:
        flows = rng.permutation(flows)
    qp = rng.integers(0, n_qp, n) + (1 << 40 if wide else 0)
    ph = rng.integers(0, n_ports, n)
    content = np.where(rng.random(n) < 0.2, 0.0, rng.random(n) * 10_000)
    out = content * rng.random(n)
    assert np.array_equal(SK.qp_in_order(qp, flows, ph, content, out), _qp_in_order(qp, flows, ph, content, out))


@settings(max_examples=40, deadline=None)
@given(SEEDS, st.integers(1, 40), st.floats(0.0, 1.0))
def test_port_account_is_the_numpy_accounting(seed: int, n_ports: int, full: float) -> None:
    """port_account: served bytes and marks added, queues of the ports that held bytes set (clipped to the buffer
    where the slice dropped), the others kept — as the slice's numpy expressions."""
    rng = np.random.default_rng(seed)
    total = np.where(rng.random(n_ports) < 0.3, 0.0, rng.random(n_ports) * 2e6)
    queue = total * rng.random(n_ports)
    buffer = 1e6 if rng.random() < full else 1e9
    port_queue, tx, marked = (rng.random(n_ports) * 1e5 for _ in range(3))
    p_mark = rng.random(n_ports)
    want_q, want_tx, want_m = port_queue.copy(), tx.copy(), marked.copy()
    served = total - queue
    q = np.minimum(queue, buffer) if (queue - buffer > 0).any() else queue
    used = total > 0
    want_q[used] = q[used]
    want_tx += served
    want_m += served / 4_160.0 * p_mark
    SK.port_account(total, queue, buffer, port_queue, tx, marked, 4_160.0, p_mark)
    for got, want in ((port_queue, want_q), (tx, want_tx), (marked, want_m)):
        assert np.array_equal(got, want)


@settings(max_examples=50, deadline=None)
@given(SEEDS, st.integers(1, 300), st.integers(1, 20), st.integers(1, 8), st.booleans())
def test_fifo_tail_is_the_numpy_tail(seed: int, n: int, n_qp: int, n_ports: int, in_order: bool) -> None:
    """fifo_tail leaves the level's drain times and rates and returns the stopped rows, drain times and rates
    that the slice's numpy form (FluidFabric._fifo_tail) gives: stopped where nothing arrives and bytes are held (with
    in-order queue pairs, unless the queue pair's next flow brings bytes to the port), set at the stop, kept
    while stopped, cleared otherwise."""
    rng = np.random.default_rng(seed)
    n_flows, n_slice, lv = 2 * n + 5, n + 3, int(rng.integers(1, 4))
    rows = np.sort(rng.choice(n_slice, n, replace=False)).astype(np.int64)
    flows = rng.choice(n_flows, n, replace=False).astype(np.int64)
    ph = rng.integers(0, n_ports, n)
    inflow = np.where(rng.random(n_slice) < 0.5, 0.0, rng.random(n_slice) * 1e4)
    content = np.where(rng.random(n) < 0.2, 0.0, inflow[rows] + rng.random(n) * 1e5)
    at = np.flatnonzero(rng.random(n) < 0.7).astype(np.int64)
    fabs = []
    for _ in range(2):
        fab = FluidFabric.__new__(FluidFabric)
        r = np.random.default_rng(seed)
        fab.qp, fab.n_ports = r.integers(0, n_qp, n_flows), n_ports
        fab._drain = np.where(r.random((4, n_flows)) < 0.5, np.inf, r.random((4, n_flows)) * 1e6)
        fab._drain_bpns = (r.random((3, n_flows)) * 50).astype(np.float32)
        fab.queue = np.where(r.random(n_ports) < 0.3, 0.0, r.random(n_ports) * 1e6)
        fab.rate = r.choice([25e9, 100e9, 400e9], n_ports)
        fabs.append(fab)
    want_fab, got_fab = fabs
    t_end, dt = 5e6 + float(rng.random()) * 1e4, float(rng.choice([1.0, 1000.0, 1e5]))
    arriving = None
    if in_order:  # the slice's numpy form: the queue pair × port keys of the rows and of those bringing bytes
        key = want_fab.qp[flows] * n_ports + ph
        arriving = (key[at], key[inflow[rows] > 0])
    want = want_fab._fifo_tail(flows[at], lv, ph[at], inflow[rows[at]], content[at], t_end, dt, arriving)
    got = SK.fifo_tail(at, flows, rows, ph, inflow, content, got_fab.qp, in_order, got_fab._drain[lv],
                       got_fab._drain_bpns[lv - 1], got_fab.queue, got_fab.rate, t_end, dt)  # fmt: skip
    for x, y in zip(got, want, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    assert np.array_equal(got_fab._drain, want_fab._drain) and np.array_equal(got_fab._drain_bpns, want_fab._drain_bpns)


@settings(max_examples=50, deadline=None)
@given(SEEDS, st.integers(1, 200), st.booleans(), st.sampled_from([0.0, 4000.0]), st.booleans(), st.booleans())
def test_notify_compiled_is_the_numpy_notify(seed: int, n: int, drawn: bool, tau: float, defer: bool,
                                             behind: bool) -> None:  # fmt: skip
    """FluidFabric._notify over a view of compiled size (to_draw, np_fire) leaves the notification point's state
    and the random generator as its numpy form does: whole packets, binomial draws of the marked ones, CNPs per
    interval, their counts, times and due times (with ``cnps_behind``, those of the CNPs fired behind one in flight)."""
    rng = np.random.default_rng(seed)
    n_qp = n + 7
    qps = np.sort(rng.choice(n_qp, n, replace=False)).astype(np.int64)
    marked = np.where(rng.random(n) < 0.3, 0.0, rng.random(n) * 6)
    arrived = np.where(rng.random(n) < 0.1, 0.0, marked + rng.random(n) * 20)
    t_end = 1e6 + float(rng.random()) * 1e4
    v = SimpleNamespace(qps=qps, qp_fb_ns=rng.random(n) * 5e3)
    fabs = []
    for _ in range(2):
        r = np.random.default_rng(seed + 1)
        fab = FluidFabric.__new__(FluidFabric)
        fab.rng = np.random.default_rng(seed) if drawn else None
        fab.pkt_phase, fab.mark_acc, fab.np_marks = r.random(n_qp), r.random(n_qp) * 2, r.random(n_qp) * 10
        fab.last_cnp_ns = np.where(r.random(n_qp) < 0.5, -np.inf, t_end - r.random(n_qp) * 8e3)
        fab.cnp_due_ns = np.where(r.random(n_qp) < 0.7, np.inf, t_end + r.random(n_qp) * 1e3)
        fab.cnp_next_ns = np.where(np.isfinite(fab.cnp_due_ns) & (r.random(n_qp) < 0.5), t_end + 2e3, np.inf)
        fab.cnps_sent = r.integers(0, 9, n_qp)
        fab.cfg = FluidConfig(cnps_behind=behind)
        fab.np_interval_ns, fab.np_defer = tau, defer
        fabs.append(fab)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fluid, "COMPILED_FROM", 10**9)
        v.a = qps
        fabs[0]._notify(v, marked, arrived, t_end)
        mp.setattr(fluid, "COMPILED_FROM", 0)
        fabs[1]._notify(v, marked, arrived, t_end)
    want, got = fabs
    for name in ("pkt_phase", "mark_acc", "np_marks", "last_cnp_ns", "cnp_due_ns", "cnp_next_ns", "cnps_sent"):
        x, y = getattr(got, name), getattr(want, name)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), name
    if drawn:
        assert got.rng.random() == want.rng.random()


@settings(max_examples=60, deadline=None)
@given(SEEDS, st.integers(1, 300), st.integers(1, 9), st.floats(0.0, 1.0), st.integers(1, 4))
def test_nic_max_min_is_the_numpy_water_filling(seed: int, n: int, n_ports: int, idle: float, levels: int) -> None:
    """nic_max_min gives fluid_nic.max_min_share bit for bit: a few distinct wants (DCQCN's rates repeat) or
    random ones, idle flows, paused NICs; and the result is max-min fair (no NIC above its rate, a flow below
    its want only at its NIC's level)."""
    rng = np.random.default_rng(seed)
    host = rng.integers(0, n_ports, n)
    pool = rng.random(levels) * 4e11
    want = np.where(rng.random(n) < idle, 0.0, rng.choice(pool, n) if seed % 2 else rng.random(n) * 4e11)
    rate = rng.choice([25e9, 100e9, 400e9], n_ports)
    paused = rng.random(n_ports) < 0.2
    got, over = SK.nic_max_min(want, host, rate, paused)
    twin, twin_over = max_min_share(want, host, rate, paused)
    assert np.array_equal(got, twin) and np.array_equal(over, twin_over)
    assert np.array_equal(over, np.bincount(host, want, n_ports) > rate)
    assert (np.bincount(host, got, n_ports) <= rate * (1 + 1e-12)).all()
    assert (got <= want).all() and (got[paused[host]] == 0).all()
    short = (got < want) & ~paused[host]
    top = np.zeros(n_ports)
    np.maximum.at(top, host, got)
    assert np.allclose(got[short], top[host[short]], rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 300), st.sampled_from([1, 3, 50, 1 << 40]))
def test_the_compiled_stable_orders_are_numpys(seed: int, n: int, top: int) -> None:
    """stable_order and the NICs' counting sort by host give np.argsort(kind="stable"): ties in their order."""
    from emulator.fabric.fluid_nic_kernels import by_host

    key = np.random.default_rng(seed).integers(0, top, n).astype(np.int64)
    want = np.argsort(key, kind="stable")
    assert np.array_equal(SK.stable_order(key), want)
    if top < 1 << 20:
        assert np.array_equal(by_host(key, top), want)
