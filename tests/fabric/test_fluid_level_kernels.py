"""A switch level in one compiled call (emulator/fabric/fluid_level_kernels.py) gives bit for bit what the slice's
calls one by one give at a level of compiled size, on random inputs: the returned arrays and every array written in
place, with and without a port over the buffer (then nothing but the FIFO tails' drain times is written)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.fabric import fluid_kernels as K
from emulator.fabric import fluid_step_kernels as SK
from emulator.fabric.fluid_level_kernels import level_step

SEEDS = st.integers(0, 2**32 - 1)


def _one_by_one(s: dict, in_order: bool, t_end: float, dt: float, buffer: float) -> tuple:
    """The slice's calls at a level of compiled size (emulator/fabric/fluid.py before the level was one call)."""
    n_ports = s["rate"].size
    content, at = K.level_in(s["backlog"], s["drain"], s["flows"], s["rows"], s["inflow"])
    stop, dl, bpns = np.zeros(0, bool), np.zeros(0), np.zeros(0, np.float32)
    if at.size:
        stop, dl, bpns = SK.fifo_tail(at, s["flows"], s["rows"], s["ph"], s["inflow"], content, s["qp"], in_order,
                                      s["drain"], s["drain_bpns"], s["queue"], s["rate"], t_end, dt)  # fmt: skip
    out, rest, total, queue = K.serve(s["ph"], content, at, stop, dl, bpns, t_end, dt, s["cap"], n_ports)
    if in_order:
        out = SK.qp_in_order(s["qp"][s["flows"]], s["flows"], s["ph"], content, out)
        rest, queue = K.remainder(s["ph"], content, out, n_ports)
    over = bool(queue.max(initial=0.0) > buffer)
    if not over:
        K.level_out(s["backlog"], s["flows"], s["rows"], s["ph"], rest, out, s["inflow"], s["unmarked"], s["p_mark"])
        SK.port_account(total, queue, buffer, s["queue"], s["tx"], s["marked"], 4_160.0, s["p_mark"])
    return over, out, rest, total, queue


@settings(max_examples=60, deadline=None)
@given(SEEDS, st.integers(1, 400), st.integers(1, 30), st.integers(1, 12), st.booleans(), st.booleans())
def test_level_step_is_the_calls_one_by_one(seed: int, n: int, n_qp: int, n_ports: int, in_order: bool,
                                            small_buffer: bool) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    n_flows, n_slice = 2 * n + 5, n + 3
    s = {"rows": np.sort(rng.choice(n_slice, n, replace=False)).astype(np.int64),
         "flows": np.sort(rng.choice(n_flows, n, replace=False)).astype(np.int64),
         "ph": rng.integers(0, n_ports, n).astype(np.int64), "qp": rng.integers(0, n_qp, n_flows).astype(np.int64),
         "backlog": np.where(rng.random(n_flows) < 0.4, 0.0, rng.random(n_flows) * 1e5),
         "drain": np.where(rng.random(n_flows) < 0.6, np.inf, rng.random(n_flows) * 1e6),
         "drain_bpns": (rng.random(n_flows) * 50).astype(np.float32),
         "inflow": np.where(rng.random(n_slice) < 0.4, 0.0, rng.random(n_slice) * 1e4),
         "queue": np.where(rng.random(n_ports) < 0.3, 0.0, rng.random(n_ports) * 1e6),
         "rate": rng.choice([25e9, 100e9, 400e9], n_ports), "unmarked": rng.random(n_slice),
         "tx": rng.random(n_ports) * 1e9, "marked": rng.random(n_ports) * 1e3, "p_mark": rng.random(n_ports) * 0.2}  # fmt: skip
    t_end, dt = 5e6 + float(rng.random()) * 1e4, float(rng.choice([1.0, 1000.0, 1e5]))
    s["cap"] = np.where(rng.random(n_ports) < 0.1, 0.0, s["rate"] * dt * 1e-9 / 8)
    buffer = 1e3 if small_buffer else 1e12
    want_s = {k: v.copy() for k, v in s.items()}
    want = _one_by_one(want_s, in_order, t_end, dt, buffer)
    got = level_step(s["backlog"], s["drain"], s["drain_bpns"], s["flows"], s["rows"], s["ph"], in_order, s["inflow"],
                     s["qp"], s["queue"], s["rate"], t_end, dt, s["cap"], buffer, s["tx"], s["marked"], 4_160.0,
                     s["p_mark"], s["unmarked"])  # fmt: skip
    assert bool(got[0]) == want[0]
    for x, y in zip(got[1:], want[1:], strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    for k in s:
        assert s[k].dtype == want_s[k].dtype and np.array_equal(s[k], want_s[k]), k


@settings(max_examples=60, deadline=None)
@given(SEEDS, st.integers(1, 500), st.integers(1, 40))
def test_qp_sums_are_the_bincounts(seed: int, n: int, n_qps: int) -> None:
    """qp_sums: np.bincount(inv, w, n_qps) of each of three weights, bit for bit (same order of additions); a
    slice has at least one flow (bincount of nothing is int64)."""
    rng = np.random.default_rng(seed)
    inv = rng.integers(0, n_qps, n).astype(np.int64)
    ws = [np.where(rng.random(n) < 0.3, 0.0, rng.random(n) * 10.0 ** rng.integers(-3, 9, n)) for _ in range(3)]
    got = K.qp_sums(inv, n_qps, *ws)
    for x, w in zip(got, ws, strict=True):
        want = np.bincount(inv, w, n_qps)
        assert x.dtype == want.dtype and np.array_equal(x, want)


@settings(max_examples=60, deadline=None)
@given(SEEDS, st.integers(1, 300), st.integers(1, 16), st.lists(st.booleans(), min_size=3, max_size=3))
def test_level_queues_is_the_sum_of_level_sums(seed: int, n_flows: int, n_ports: int, present: list[bool]) -> None:
    """level_queues: the sum, from zeros, of the levels' level_sum arrays in level order (the fabric's queues from
    its backlogs), bit for bit, levels without flows left out."""
    rng = np.random.default_rng(seed)
    backlog = np.where(rng.random((4, n_flows)) < 0.3, 0.0, rng.random((4, n_flows)) * 10.0 ** rng.integers(0, 7))
    args, want = [], np.zeros(n_ports)
    for lv in (1, 2, 3):
        k = int(rng.integers(1, n_flows + 1)) if present[lv - 1] else 0
        flows = np.sort(rng.choice(n_flows, k, replace=False)).astype(np.int64)
        ph = rng.integers(0, n_ports, k).astype(np.int64)
        args += [flows, ph]
        if k:
            want = want + K.level_sum(backlog[lv], flows, ph, n_ports)
    got = K.level_queues(backlog, *args, n_ports)
    assert np.array_equal(got, want)
