"""The fluid fabric's compiled per-slice loops give bit for bit what the numpy expressions they replace gave,
and the slice calls the FIFO-tail and queue-pair-order rules only where they can change something."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.fabric import fluid_kernels as K
from emulator.fabric.fluid import FluidFabric, _qp_in_order, _View
from emulator.fabric.fluid_fifo import fifo_service, stopped_flows

SEEDS = st.integers(0, 2**32 - 1)


@settings(max_examples=80, deadline=None)
@given(SEEDS, st.integers(1, 300), st.integers(1, 9), st.floats(0.0, 1.0))
def test_serve_is_the_numpy_fifo_service(seed: int, n: int, n_ports: int, tails: float) -> None:
    """K.serve on the rows that can hold a tail gives bit for bit what fluid_fifo.fifo_service gives on every
    row: stopped tails first, proportional service, spare capacity to the tails, paused ports (cap 0)."""
    rng = np.random.default_rng(seed)
    ph = rng.integers(0, n_ports, n)
    content = np.where(rng.random(n) < 0.2, 0.0, rng.random(n) * 10_000)
    stopped = (rng.random(n) < tails) & (content > 0)
    drain = np.where(stopped, np.where(rng.random(n) < 0.4, 500.0, 5_000.0), np.inf)
    bpns = np.where(stopped, rng.random(n) * 20, 0.0).astype(np.float32)
    cap = np.where(rng.random(n_ports) < 0.3, rng.random(n_ports) * 500, rng.random(n_ports) * 50_000)
    cap[rng.random(n_ports) < 0.15] = 0.0  # paused
    t_end, dt = 1_000.0, 700.0
    want = fifo_service(ph, content, stopped, drain, bpns, t_end, dt, cap, n_ports)
    at = np.flatnonzero(stopped | (rng.random(n) < 0.2))  # the rule's rows: stopped or with a drain time once
    out, rest, total, queue = K.serve(ph, content, at, stopped[at], drain[at], bpns[at], t_end, dt, cap, n_ports)
    assert np.array_equal(out, want)
    assert np.array_equal(rest, content - want)
    assert np.array_equal(total, np.bincount(ph, content, n_ports))
    assert np.array_equal(queue, np.bincount(ph, content - want, n_ports))
    rest2, queue2 = K.remainder(ph, content, want, n_ports)
    assert np.array_equal(rest2, rest) and np.array_equal(queue2, queue)


@settings(max_examples=80, deadline=None)
@given(SEEDS, st.integers(1, 300), st.integers(1, 9))
def test_epoch_service_without_history_is_proportional(seed: int, n: int, n_ports: int) -> None:
    """With no queue from earlier slices every byte is of one epoch: K.fifo_epochs serves each port's flows in
    proportion to their content, at most the port's capacity (paused ports: cap 0); K.remainder agrees."""
    rng = np.random.default_rng(seed)
    ph = rng.integers(0, n_ports, n)
    inflow = np.where(rng.random(n) < 0.2, 0.0, rng.random(n) * 10_000)
    cap = np.where(rng.random(n_ports) < 0.3, rng.random(n_ports) * 500, rng.random(n_ports) * 50_000)
    cap[rng.random(n_ports) < 0.15] = 0.0  # paused
    ep, head, used, tot = np.zeros((n, 8), np.float32), np.zeros(n_ports, np.int64), np.ones(n_ports, np.int64), \
        np.zeros((n_ports, 8))  # fmt: skip
    out, rest, total, queue = K.fifo_epochs(ph, np.arange(n), np.arange(n), inflow.copy(), inflow, ep, head, used, tot,
                                            np.zeros(n_ports), cap, n_ports, 7.0)  # fmt: skip
    held = np.bincount(ph, inflow, n_ports)
    share = np.divide(cap, np.maximum(held, cap), out=np.ones(n_ports), where=held > 0)
    assert np.allclose(out, inflow * share[ph], rtol=1e-6, atol=1e-9)  # the epochs' weights are float32
    assert np.array_equal(total, held)
    assert np.array_equal(rest, inflow - out)
    rest2, queue2 = K.remainder(ph, inflow, out, n_ports)
    assert np.array_equal(rest2, rest) and np.array_equal(queue2, queue)


@settings(max_examples=60, deadline=None)
@given(SEEDS, st.integers(1, 200), st.floats(0.0, 2.0), st.booleans())
def test_notification_point_is_the_numpy_one(seed: int, n: int, tau_us: float, defer: bool) -> None:
    rng = np.random.default_rng(seed)
    n_qp = n + 5
    qps = rng.permutation(n_qp)[:n]
    acc0 = rng.random(n_qp) * 3
    last = np.where(rng.random(n_qp) < 0.5, -np.inf, rng.random(n_qp) * 3_000)
    marked = np.where(rng.random(n) < 0.3, 0.0, rng.random(n) * 2)
    arrived = rng.random(n) * 5
    tau, t_end = tau_us * 1_000, 2_000.0
    # numpy, as FluidFabric._notify wrote it
    quiet = t_end < last[qps] + tau
    acc = acc0[qps] + marked
    if tau <= 0:
        cnp = np.floor(acc)
        acc -= cnp
    elif defer:
        cnp = ((acc >= 1.0) & ~quiet).astype(float)
        acc = np.where(cnp > 0, 0.0, acc)
    else:
        cnp = ((acc >= 1.0) & ~quiet).astype(float)
        acc -= np.floor(acc)
    got_acc, seen0 = acc0.copy(), rng.random(n_qp) * 7
    seen = seen0.copy()
    assert np.array_equal(K.np_cnps(got_acc, last, qps, marked, t_end, tau, defer, seen), cnp)
    assert np.array_equal(got_acc[qps], acc)
    want_seen = seen0.copy()
    want_seen[qps] += marked
    assert np.array_equal(seen, want_seen)  # the CE marks the NP saw, per queue pair
    phase0 = rng.random(n_qp)
    phase = phase0[qps] + np.where(marked > 0, arrived, 0.0)
    got_phase = phase0.copy()
    assert np.array_equal(K.packet_phase(got_phase, qps, marked, arrived), np.floor(phase))
    assert np.array_equal(got_phase[qps], phase - np.floor(phase))


class _Tail:
    """Just what FluidFabric._fifo_tail reads: drain times and rates per (level, flow), queues and rates per port."""

    def __init__(self, drain: np.ndarray, bpns: np.ndarray, queue: np.ndarray, rate: np.ndarray) -> None:
        self._drain, self._drain_bpns, self.queue, self.rate = drain, bpns, queue, rate


@settings(max_examples=60, deadline=None)
@given(SEEDS, st.integers(1, 200), st.booleans())
def test_fifo_service_on_the_rows_level_in_picks_is_the_rule_on_every_row(seed: int, n: int, shared: bool) -> None:
    """The slice applies the FIFO rule (stop detection, drain state) and the compiled service only on the rows
    level_in picks; on every row with numpy (fifo_service) the outcome and the stored drain state are the same,
    with queue pairs that have two flows at a port (the next flow arriving behind a stopped one) or not."""
    rng = np.random.default_rng(seed)
    n_flows, n_ports, lv, t_end, dt = n + 10, 7, 2, 5_000.0, 1_000.0
    flows = np.sort(rng.permutation(n_flows)[:n])
    rows = np.arange(n)
    ph = rng.integers(0, n_ports, n)
    drain = np.where(rng.random((4, n_flows)) < 0.3, rng.random((4, n_flows)) * 9_000, np.inf)
    bpns = np.where(np.isinf(drain[1:]), 0.0, rng.random((3, n_flows)) * 50).astype(np.float32)
    backlog = np.where(rng.random(n_flows) < 0.5, 0.0, rng.random(n_flows) * 4_000)
    inflow = np.where(rng.random(n) < 0.5, 0.0, rng.random(n) * 4_000)
    queue, rate = rng.random(n_ports) * 1e5, np.full(n_ports, 4e11)
    cap = rng.random(n_ports) * 30_000
    qp = rng.integers(0, max(1, n // 3), n) if shared else np.arange(n)
    key = qp * n_ports + ph
    every = _Tail(drain.copy(), bpns.copy(), queue, rate)
    content, at = K.level_in(backlog, drain[lv].copy(), flows, rows, inflow)
    assert np.array_equal(content, backlog[flows] + inflow)
    stop, dl, bp = FluidFabric._fifo_tail(every, flows, lv, ph, inflow, content, t_end, dt, (key, key[inflow > 0]))
    assert np.array_equal(stop, stopped_flows(inflow, content, key, key[inflow > 0]))
    want = fifo_service(ph, content, stop, dl, bp, t_end, dt, cap, n_ports)
    some = _Tail(drain.copy(), bpns.copy(), queue, rate)
    sa, da, ba = FluidFabric._fifo_tail(some, flows[at], lv, ph[at], inflow[at], content[at], t_end, dt,
                                        (key[at], key[inflow > 0]))  # fmt: skip
    got = K.serve(ph, content, at, sa, da, ba, t_end, dt, cap, n_ports)[0]
    assert np.array_equal(got, want)
    assert np.array_equal(some._drain, every._drain) and np.array_equal(some._drain_bpns, every._drain_bpns)


def test_queue_pair_order_is_called_only_where_a_queue_pair_has_two_flows_at_a_port() -> None:
    # flows 0, 1 on queue pair 0 (ports 5 then 6 at level 3: never together), flows 2, 3 on queue pair 1 (both at 7)
    path = np.array([[0, -1, -1, 5], [0, -1, -1, 6], [1, 4, 8, 7], [1, -1, -1, 7]])
    qp = np.array([0, 0, 1, 1])
    v = _View(np.arange(4), path, qp, np.zeros(4))
    assert [lv for lv, *_ in v.levels] == [1, 2, 3]
    assert v.in_order == [False, False, True]
    lv, rows, ph, flows = v.levels[2]
    out = np.array([1.0, 2.0, 3.0, 4.0])
    moved = _qp_in_order(qp[flows], flows, ph, np.array([5.0, 5.0, 5.0, 5.0]), out)
    assert not np.array_equal(moved, out)  # where it is called it can change something
    one = _View(np.array([0, 2]), path, qp, np.zeros(4))
    assert one.in_order == [False, False, False]
    lone = np.array([[0, -1, -1, 5], [1, -1, -1, 6]])
    out2 = np.array([1.0, 2.0])
    assert _qp_in_order(np.array([0, 0]), np.array([0, 1]), lone[:, 3], np.array([3.0, 3.0]), out2) is out2


@settings(max_examples=40, deadline=None)
@given(SEEDS, st.integers(0, 50), st.integers(1, 400_000), st.floats(0.0, 1.0))
def test_red_mark_probability_is_the_numpy_one(seed: int, kmin: int, width: int, pmax: float) -> None:
    rng = np.random.default_rng(seed)
    kmax = kmin + width - 1
    q = np.concatenate((rng.random(64) * (kmax + 100_000), [0.0, kmin, kmax, kmin + 0.5]))
    span = max(kmax - kmin, 1)
    p = np.clip((q - kmin) / span, 0.0, 1.0) * pmax
    p[q > kmax] = 1.0
    p[q <= kmin] = 0.0
    assert np.array_equal(K.mark_probability(q, float(kmin), float(kmax), pmax), p)


@settings(max_examples=40, deadline=None)
@given(SEEDS, st.integers(1, 120), st.booleans())
def test_a_view_without_delivered_flows_is_the_view_built_afresh(seed: int, n: int, shared: bool) -> None:
    rng = np.random.default_rng(seed)
    n_flows = n + 20
    path = rng.integers(0, 40, (n_flows, 4))
    path[:, 1:] = np.where(rng.random((n_flows, 3)) < 0.4, -1, path[:, 1:])
    qp = rng.integers(0, max(1, n // 3), n_flows) if shared else np.arange(n_flows)
    fb = rng.random(n_flows) * 5_000
    a = np.sort(rng.permutation(n_flows)[:n])
    gone = np.flatnonzero(rng.random(n) < 0.4)
    got = _View(a, path, qp, fb, shared).without(gone, fb, shared)
    want = _View(np.delete(a, gone), path, qp, fb, shared)
    for name in ("a", "qa", "host", "qps", "inv", "qp_fb_ns"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    assert got.in_order == want.in_order and len(got.levels) == len(want.levels)
    for x, y in zip(got.levels, want.levels, strict=True):
        assert x[0] == y[0] and all(np.array_equal(u, w) for u, w in zip(x[1:], y[1:], strict=True))


@settings(max_examples=40, deadline=None)
@given(SEEDS, st.integers(1, 300), st.booleans())
def test_offered_rates_compiled_are_the_numpy_ones(seed: int, n: int, batch: bool) -> None:
    rng = np.random.default_rng(seed)
    n_ports, n_qp = 9, n + 3
    left = np.where(rng.random(n) < 0.3, 0.0, rng.random(n) * 1e5)
    rc, credit = rng.random(n_qp) * 4e11, np.where(rng.random(n + 7) < 0.5, 0.0, rng.random(n + 7))
    qa, a = rng.integers(0, n_qp, n), np.sort(rng.permutation(n + 7)[:n])
    rate, host = rng.random(n_ports) * 4e11, rng.integers(0, n_ports, n)
    want = np.where(left > 0, rc[qa], 0.0)
    if batch:
        want = np.where((credit[a] > 0) & (left > 0), rate[host], want)
    got = K.offered(left, rc, qa, credit, a, rate, host, batch)
    assert np.array_equal(got, want)
    load = np.bincount(host, want, n_ports)
    assert np.array_equal(K.port_sum(host, want, n_ports), load)

