"""The NIC batch's compiled forms (emulator/fabric/fluid_nic_kernels.py) and its one-flow start in Python floats
give bit for bit what :class:`~emulator.fabric.fluid_nic.NicBatch`'s numpy forms give, on random inputs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.fabric.fluid_nic import NicBatch, start_credit, start_credit_one

SEEDS = st.integers(0, 2**32 - 1)
STATE = ("level", "t_ns", "seen", "head_sent", "head", "ahead", "ahead_seen", "took")


def _nic(rng: np.random.Generator, n_ports: int, n_flows: int, batch: float) -> NicBatch:
    """A NIC batch part-way into a run: buckets partly spent, clocks, counted bytes and heads set at random."""
    nic = NicBatch(n_ports, n_flows, batch, rng.choice([25e9, 100e9, 400e9], n_ports))
    nic.level = np.where(rng.random(n_ports) < 0.3, batch, rng.random(n_ports) * batch)
    nic.t_ns = np.where(rng.random(n_ports) < 0.2, 0.0, rng.random(n_ports) * 1e5)
    nic.head_sent = rng.random(n_ports) * 1e6
    nic.seen = rng.random(n_ports) * 1e6
    nic.ahead = np.where(rng.random(n_ports) < 0.4, 0.0, rng.random(n_ports) * batch)
    nic.ahead_seen = np.where(rng.random(n_ports) < 0.4, nic.ahead, rng.random(n_ports) * batch)
    nic.took = np.where(rng.random(n_flows) < 0.5, 0.0, rng.random(n_flows) * batch)
    nic.head = np.where(rng.random(n_flows) < 0.5, 0.0, rng.random(n_flows) * batch)
    nic.head[rng.random(n_flows) < 0.1] = 0.5  # less than a byte: goes with the shared rest
    nic.pending = float(nic.head.sum())
    return nic


def _twins(rng: np.random.Generator, n_ports: int, n_flows: int, batch: float) -> tuple[NicBatch, NicBatch]:
    state = rng.bit_generator.state
    ref = _nic(rng, n_ports, n_flows, batch)
    rng.bit_generator.state = state
    fast = _nic(rng, n_ports, n_flows, batch)
    fast.use_compiled()
    return ref, fast


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, np.float64).view(np.int64)


def _same_state(got: NicBatch, want: NicBatch) -> None:
    for name in STATE:
        assert np.array_equal(_bits(getattr(got, name)), _bits(getattr(want, name))), name
    assert got.pending == want.pending
    assert got.ahead_total == want.ahead_total


def _tx(rng: np.random.Generator, nic: NicBatch) -> np.ndarray:
    """The ports' sent bytes: at least the heads and what the bucket counted, mostly more."""
    return nic.head_sent + nic.seen + np.where(rng.random(nic.seen.size) < 0.3, 0.0, rng.random(nic.seen.size) * 1e5)


@settings(max_examples=60, deadline=None)
@given(SEEDS, st.integers(1, 12), st.integers(1, 40), st.sampled_from([4096.0 * 16, 65536.0, 1e5]))
def test_nic_give_is_the_numpy_give(seed: int, n_ports: int, n: int, batch: float) -> None:
    """nic_give hands out the heads the numpy form hands out (several flows per NIC, unsorted hosts, starts
    before and after the bucket's clock, credits of 0, bytes taken ahead of the wire since the last start, more
    or fewer than then, or as many) and leaves the bucket's arrays as it does."""
    rng = np.random.default_rng(seed)
    n_flows = n + 10
    ref, fast = _twins(rng, n_ports, n_flows, batch)
    tx = _tx(rng, ref)
    flows = rng.choice(n_flows, n, replace=False).astype(np.int64)
    hosts = rng.integers(0, n_ports, n).astype(np.int64)
    credit = np.where(rng.random(n) < 0.2, 0.0, rng.random(n) * batch * 1.2)
    credit[rng.random(n) < 0.2] = batch
    now = rng.random(n) * 2e5
    for nic in (ref, fast):
        nic.give(flows, hosts, credit.copy(), now.copy(), tx.copy())
    _same_state(fast, ref)


@settings(max_examples=60, deadline=None)
@given(SEEDS, st.integers(1, 6), st.floats(0.0, 2.0), st.floats(0.0, 2e5))
def test_give_one_is_the_numpy_give_of_one_flow(seed: int, n_ports: int, credit_share: float, now: float) -> None:
    """give_one (Python floats, no arrays) leaves the bucket and the head as give of a one-flow array does."""
    rng = np.random.default_rng(seed)
    batch = 65536.0
    ref, one = _twins(rng, n_ports, 8, batch)
    one._k = None
    tx = _tx(rng, ref)
    flow, host, credit = int(rng.integers(0, 8)), int(rng.integers(0, n_ports)), min(credit_share * batch, batch)
    ref.give(np.array([flow]), np.array([host]), np.array([credit]), np.array([now]), tx)
    one.give_one(flow, host, credit, now, tx)
    _same_state(one, ref)


@settings(max_examples=80, deadline=None)
@given(SEEDS, st.integers(1, 10), st.integers(1, 60), st.floats(1.0, 5e4), st.booleans())
def test_nic_first_is_the_numpy_first(seed: int, n_ports: int, n: int, dt_ns: float, any_paused: bool) -> None:
    """nic_first gives the rates the numpy form gives: heads first in row order at their NIC, those ending in
    the slice at the rate their turn leaves, the others and the heads' flows' rest max-min fair (a few distinct
    wants, rows without bytes left, paused NICs, heads of less than a byte)."""
    rng = np.random.default_rng(seed)
    n_flows = n + 10
    ref, fast = _twins(rng, n_ports, n_flows, 65536.0)
    a = np.sort(rng.choice(n_flows, n, replace=False)).astype(np.int64)
    host = rng.integers(0, n_ports, n).astype(np.int64)
    rate = ref.line / (1e-9 / 8)
    wants = np.array([0.0, 1e9, 5e9, 25e9, 100e9, 400e9])
    want = np.where(rng.random(n) < 0.5, rng.choice(wants, n), rng.random(n) * 400e9)
    left = np.where(rng.random(n) < 0.15, 0.0, rng.random(n) * 2e5)
    eq = rng.random(n) < 0.2  # a head that is all its flow has left
    left[eq] = ref.head[a[eq]]
    x = rng.random(n) * 400e9
    paused = rng.random(n_ports) < 0.3 if any_paused else np.zeros(n_ports, bool)
    got = fast.first(x.copy(), want, left, a, host, rate, paused, dt_ns)
    expect = ref.first(x.copy(), want, left, a, host, rate, paused, dt_ns)
    assert np.array_equal(_bits(got), _bits(expect))
    _same_state(fast, ref)


@settings(max_examples=80, deadline=None)
@given(SEEDS, st.sampled_from([0.0, 4096.0, 65536.0]), st.floats(0.0, 2e5), st.floats(0.0, 1e6), st.booleans(),
       st.booleans())  # fmt: skip
def test_start_credit_one_is_the_numpy_start_credit(seed: int, batch: float, wire: float, now: float, clock: bool,
                                                    never: bool) -> None:  # fmt: skip
    """start_credit_one (Python floats) gives start_credit's credit bit for bit: no clock, a queue pair that never
    sent (``-inf``), one idle since before or after ``now``, a batch of 0."""
    rng = np.random.default_rng(seed)
    rc = rng.choice([1e6, 1e9, 25e9, 400e9], 4) * np.where(rng.random(4) < 0.5, 1.0, rng.random(4) + 1e-3)
    idle = np.where(rng.random(4) < 0.5, rng.random(4) * 1e6, -np.inf) if clock else None
    if idle is not None and never:
        idle[:] = -np.inf
    qp = int(rng.integers(0, 4))
    idle2 = None if idle is None else idle.copy()
    got = start_credit_one(batch, wire, rc, idle, qp, now)
    want = np.atleast_1d(start_credit(batch, wire, rc, idle2, np.array([qp]), np.array([now])))[0]  # arrays
    assert _bits(np.array([got]))[0] == _bits(np.array([want]))[0]
    if idle is not None:  # the flow charged to the bucket alike
        assert np.array_equal(_bits(idle), _bits(idle2))


@settings(max_examples=60, deadline=None)
@given(SEEDS, st.integers(1, 6), st.integers(1, 40))
def test_sent_ahead_is_sent_with_no_head_pending(seed: int, n_ports: int, n: int) -> None:
    """With no head pending, sent_ahead (only the rows holding bytes taken ahead) counts them down as sent does:
    they go first, per flow and per NIC (rows sending more or less than they hold ahead, rows holding none)."""
    rng = np.random.default_rng(seed)
    n_flows = n + 10
    ref, fast = _twins(rng, n_ports, n_flows, 65536.0)
    at = rng.integers(0, n_ports, n_flows)
    for nic in (ref, fast):
        nic.head[:] = 0.0
        nic.pending = 0.0
        nic.ahead = np.bincount(at, nic.took, n_ports)
        nic.ahead_total = float(nic.ahead.sum())
    a = np.sort(rng.choice(n_flows, n, replace=False)).astype(np.int64)
    host = rng.integers(0, n_ports, n).astype(np.int64)
    sent = np.where(rng.random(n) < 0.3, 0.0, rng.random(n) * 1e5)
    left = sent + rng.random(n) * 1e5
    ref.sent(a, host, sent, left, rng.random(n) * 65536.0, rng.random(n) * 25e9, 1_000.0)
    fast.sent_ahead(a, host, sent)
    for name in ("took", "ahead"):
        assert np.array_equal(_bits(getattr(fast, name)), _bits(getattr(ref, name))), name
    assert fast.ahead_total == ref.ahead_total


@settings(max_examples=80, deadline=None)
@given(SEEDS, st.integers(1, 10), st.integers(1, 60), st.floats(1.0, 5e4))
def test_nic_sent_is_the_numpy_sent(seed: int, n_ports: int, n: int, dt_ns: float) -> None:
    """nic_sent leaves the heads, the bytes taken ahead and the NIC's sums as the numpy form does: rows sending
    more or less than their heads, credits above and below their heads, rows at NICs that sent no head, NICs
    whose rows' pacers let go more than the heads sent (scaled) or less."""
    rng = np.random.default_rng(seed)
    n_flows = n + 10
    ref, fast = _twins(rng, n_ports, n_flows, 65536.0)
    for nic in (ref, fast):
        nic.ahead_total = float(nic.ahead.sum())
    a = np.sort(rng.choice(n_flows, n, replace=False)).astype(np.int64)
    host = rng.integers(0, n_ports, n).astype(np.int64)
    hd = ref.head[a]
    sent = np.where(rng.random(n) < 0.3, hd, rng.random(n) * 1e5)
    sent[rng.random(n) < 0.2] = 0.0
    left = sent + np.where(rng.random(n) < 0.2, 0.0, rng.random(n) * 2e5)
    credit = np.where(rng.random(n) < 0.3, hd, rng.random(n) * 65536.0)
    rc = rng.choice([0.0, 1e9, 25e9], n) * rng.random(n)
    for nic in (ref, fast):
        nic.sent(a, host, sent.copy(), left.copy(), credit.copy(), rc.copy(), dt_ns)
    _same_state(fast, ref)
