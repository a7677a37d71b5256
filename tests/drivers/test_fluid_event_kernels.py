"""The fluid driver's compiled completion check (emulator/drivers/fluid_event_kernels.py) gives what the numpy
form of DriverEvents._complete_plain gave, on random schedules' dependency arrays."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.drivers.fluid_event_kernels import acks_counted, delivered_events, first_starts, plain_children
from emulator.drivers.fluid_events import _ACKED, _ARRIVE, _distinct, _last_each, _occurrence
from emulator.schedule.model import OP_DELAY, OP_RECV, OP_SEND


def _numpy_form(ops, t, child_ptr, child_idx, pending, kind, not_before, op_flow, arrived, arriving, part_ptr,
                part_qp, work):  # fmt: skip
    """_complete_plain's checks as numpy expressions (the form the kernel replaced)."""
    lo, n = child_ptr[ops], child_ptr[ops + 1] - child_ptr[ops]
    ends = np.cumsum(n)
    at = np.repeat(lo - (ends - n), n) + np.arange(int(ends[-1]) if n.size else 0, dtype=np.int64)
    ch, owner = child_idx[at], np.repeat(np.arange(ops.size), n)
    made = pending[ch] == _occurrence(ch, work)
    now = ch[made]
    t_now = t if np.ndim(t) == 0 else t[owner[made]]
    k = kind[now]
    if (k == OP_DELAY).any() or (not_before[now] > t_now).any():
        return None
    flow = op_flow[now]
    recv = flow[k != OP_SEND]
    if arrived[recv].any():
        return None
    if arriving is not None and recv.size:
        work[recv] = 0
        work[arriving] = 1
        if work[recv].any():
            return None
    sends = flow[k == OP_SEND]
    n = part_ptr[sends + 1] - part_ptr[sends]
    parts = np.repeat(part_ptr[sends] - np.cumsum(n) + n, n) + np.arange(int(n.sum()), dtype=np.int64)
    qp = part_qp[parts]
    if not _distinct(qp, work):
        return None
    t_parts = np.broadcast_to(t, parts.shape) if np.ndim(t) == 0 else np.repeat(t_now[k == OP_SEND], n)
    return ch, now, np.broadcast_to(t_now, now.shape), recv, parts, qp, t_parts


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(1, 4), st.booleans(), st.booleans(),
       st.floats(0.0, 0.3))  # fmt: skip
def test_plain_children_is_the_numpy_form(seed: int, n_ops: int, fan: int, per_op_t: bool, with_arriving: bool,
                                          odd: float) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    n_flows = n_ops
    kind = rng.choice([OP_SEND, OP_RECV, OP_DELAY], n_ops, p=[0.45, 0.45, 0.1] if odd else [0.5, 0.5, 0.0])
    op_flow = rng.permutation(n_flows).astype(np.int64)
    n_child = rng.integers(0, fan + 1, n_ops)
    child_ptr = np.concatenate(([0], np.cumsum(n_child))).astype(np.int64)
    child_idx = rng.integers(0, n_ops, int(n_child.sum())).astype(np.int64)
    pending = rng.integers(1, 3, n_ops).astype(np.int64)
    not_before = np.where(rng.random(n_ops) < odd, 10_000, 0).astype(np.int64)
    arrived = (rng.random(n_flows) < odd).astype(np.uint8)
    n_parts = rng.integers(1, 3, n_flows)
    part_ptr = np.concatenate(([0], np.cumsum(n_parts))).astype(np.int64)
    part_qp = rng.integers(0, max(2, int(4 * n_parts.sum() * (1 - odd))), int(n_parts.sum())).astype(np.int64)
    ops = rng.choice(n_ops, rng.integers(1, n_ops + 1), replace=False).astype(np.int64)
    t = np.sort(rng.random(ops.size) * 20_000) if per_op_t else 5_000.0
    arriving = rng.integers(0, n_flows, rng.integers(0, 4)).astype(np.int64) if with_arriving else None
    size = max(n_ops, n_flows, int(part_qp.max()) + 1)
    want = _numpy_form(ops, t, child_ptr, child_idx, pending, kind, not_before, op_flow, arrived, arriving,
                       part_ptr, part_qp, np.zeros(size, np.int32))  # fmt: skip
    t_ops = np.full(ops.size, t) if np.ndim(t) == 0 else t
    got = plain_children(ops, t_ops, child_ptr, child_idx, pending, kind, not_before, op_flow, arrived,
                         arriving if arriving is not None else np.zeros(0, np.int64), arriving is not None,
                         part_ptr, part_qp, np.zeros(size, np.int32))  # fmt: skip
    assert got[0] == (want is not None)
    if want is not None:
        for x, y in zip(got[1:], want, strict=True):
            assert np.array_equal(x, y)
    else:  # the children are found all the same
        lo, n = child_ptr[ops], child_ptr[ops + 1] - child_ptr[ops]
        assert np.array_equal(got[1], np.concatenate([child_idx[a:a + b] for a, b in zip(lo, n, strict=True)]))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 60), st.integers(1, 3), st.booleans(), st.floats(0.0, 1.0))
def test_first_starts_is_the_numpy_form(seed: int, n_flows: int, q_per: int, one_t: bool, started: float) -> None:
    """first_starts sets the SEND and RECV start records of the flows whose first part starts (start_parts' numpy
    form: first occurrences of a flow among the parts, where its SEND has not started)."""
    rng = np.random.default_rng(seed)
    flow = np.repeat(np.arange(n_flows, dtype=np.int64), q_per)
    n_parts = flow.size
    p = rng.choice(n_parts, rng.integers(1, n_parts + 1), replace=False).astype(np.int64)
    ts = np.broadcast_to(np.asarray(rng.random() * 1e6 if one_t else 0.0), p.shape) if one_t \
        else rng.random(p.size) * 1e6 + 0.5  # fmt: skip
    send_op = rng.permutation(2 * n_flows)[:n_flows].astype(np.int64)
    recv_op = np.setdiff1d(np.arange(2 * n_flows), send_op).astype(np.int64)
    recv_op[rng.random(n_flows) < 0.2] = -1
    start = np.full(2 * n_flows, -1, np.int64)
    start[send_op[rng.random(n_flows) < started]] = 7
    lat = rng.integers(1_000, 4_000, n_parts).astype(np.int64)
    first_pkt = rng.random(n_parts) * 100
    want = start.copy()
    f = flow[p]
    so = send_op[f]
    _, first = np.unique(f, return_index=True)
    first = np.sort(first)
    first = first[want[so[first]] < 0]  # (4112d2f masked the sorted positions with the unsorted ones' test)
    want[so[first]] = np.rint(ts[first])
    r = recv_op[f[first]]
    at = np.rint(ts[first] + lat[p[first]] + first_pkt[p[first]]).astype(np.int64)
    want[r[r >= 0]] = at[r >= 0]
    first_starts(p, ts, flow, send_op, recv_op, start, lat, first_pkt)
    assert np.array_equal(start, want)


def test_start_parts_starts_the_flow_whose_first_part_starts_when_parts_come_out_of_flow_order() -> None:
    """Parts of flows 1 and 0 (two each, qps_per_peer 2) start in the order 1, 0, 1, 0 while flow 0's SEND has
    started: flow 1's SEND and RECV get their start records, flow 0's keep theirs (4112d2f tested the flows'
    first parts in flow order but set them in position order: flow 0's start moved, flow 1's stayed unset)."""
    from support.sim import incast

    from emulator.drivers.fluid import _Run
    from emulator.drivers.sim_types import SimConfig
    from emulator.endpoint import EndpointConfig
    from emulator.fabric.fluid import FluidConfig

    s = incast(2, 100_000)
    run = _Run(s, SimConfig(), EndpointConfig(qps_per_peer=2), FluidConfig(), None)
    ptr = run.parts.ptr
    f0, f1 = list(range(ptr[0], ptr[1])), list(range(ptr[1], ptr[2]))
    start = run.op_array("start")
    send0, send1 = (int(np.flatnonzero((s.op_kind == OP_SEND) & (s.op_flow == f))[0]) for f in (0, 1))
    recv1 = int(np.flatnonzero((s.op_kind == OP_RECV) & (s.op_flow == 1))[0])
    start[send0] = 5
    run.start_parts(np.array([f1[0], f0[0], f1[1], f0[1]], np.int64), 1_000.0)
    assert start[send0] == 5 and start[send1] == 1_000 and start[recv1] > 1_000


def _numpy_delivered(p, t, grid_ns, drain_ns, delivered_ns, hop_ser_ns, lat_np, part_flow, part_qp, to_arrive,
                     recv_op, cnps_sent, np_marks, np_given, ce_given, op_cnps, op_ce, work):  # fmt: skip
    """DriverEvents.delivered's numpy form (the form delivered_events replaced): its events, and its updates."""
    k = p.shape[0]
    queued = np.isfinite(drain_ns[p])  # levels where the part's last bytes queued
    after = np.where(queued.any(axis=1), 4 - np.argmax(queued[:, ::-1], axis=1), 1)
    hop = hop_ser_ns[p]
    ser = np.zeros(k)
    for lv in range(1, 4):
        ser = ser + np.where(lv >= after, hop[:, lv], 0.0)
    lat = lat_np[p]
    arrive = np.maximum(delivered_ns + lat + ser, t)
    acked = arrive + lat
    if grid_ns:
        arrive = np.maximum(t, np.rint(arrive / grid_ns) * grid_ns)
        acked = np.maximum(t, np.rint(acked / grid_ns) * grid_ns)
    qps, f = part_qp[p], part_flow[p]
    np.subtract.at(to_arrive, f, 1)
    arrives = _last_each(f, work) & (to_arrive[f] == 0)
    n_ev = k + int(arrives.sum())
    at_ack = np.arange(k) + np.cumsum(arrives) - arrives
    times, kinds, ids = np.empty(n_ev), np.full(n_ev, _ACKED, np.int8), np.empty(n_ev, np.int64)
    times[at_ack], ids[at_ack] = acked, p
    at_arr = at_ack[arrives] + 1
    times[at_arr], kinds[at_arr], ids[at_arr] = arrive[arrives], _ARRIVE, f[arrives]
    r = recv_op[f]
    on = np.flatnonzero(r >= 0)
    if on.size:
        q = qps[on]
        if not _distinct(q, work):
            _, first = np.unique(q, return_index=True)
            on, q = on[first], q[first]
        np_now, ce_now = cnps_sent[q], np_marks[q]
        np.add.at(op_cnps, r[on], np_now - np_given[q])
        np.add.at(op_ce, r[on], (np.rint(ce_now) - np.rint(ce_given[q])).astype(np.int64))
        np_given[q], ce_given[q] = np_now, ce_now
    return times, kinds, ids


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 50), st.integers(1, 3), st.sampled_from([0.0, 100.0, 250.0]),
       st.floats(0.0, 1.0))  # fmt: skip
def test_delivered_events_is_the_numpy_form(seed: int, n_flows: int, q_per: int, grid_ns: float, odd: float) -> None:
    """delivered_events gives delivered's numpy form: each part's acknowledgement then its flow's arrival (a
    flow's last part to arrive), times after the queued levels' store-and-forward, not before now, on the merge
    grid; the flows' parts to arrive and the first part per queue pair's CNP and mark shares."""
    rng = np.random.default_rng(seed)
    n_parts = n_flows * q_per
    part_flow = np.repeat(np.arange(n_flows, dtype=np.int64), q_per)
    n_qp = max(1, int(n_parts * (1.2 - odd)))
    part_qp = rng.integers(0, n_qp, n_parts).astype(np.int64)
    p = rng.choice(n_parts, rng.integers(1, n_parts + 1), replace=False).astype(np.int64)
    t = 1e6 + float(rng.random()) * 1e4
    drain = np.where(rng.random((n_parts, 4)) < 0.4, t - rng.random((n_parts, 4)) * 1e4, np.inf)
    drain_ns = np.ascontiguousarray(drain.T).T  # the fabric's per-flow view of its per-level rows
    delivered_ns = t - rng.random(p.size) * 5e3 * (rng.random(p.size) < odd)
    hop_ser_ns = rng.random((n_parts, 4)) * 100
    lat_np = rng.integers(1_000, 4_000, n_parts).astype(np.int64)
    recv_op = np.where(rng.random(n_flows) < 0.2, -1, rng.permutation(n_flows) + 3).astype(np.int64)
    cnps_sent = rng.integers(0, 50, n_qp).astype(np.int64)
    np_marks = rng.random(n_qp) * 80
    state = (rng.integers(1, q_per + 2, n_flows).astype(np.int64), rng.integers(0, 20, n_qp).astype(np.int32),
             rng.random(n_qp) * 30, np.zeros(n_flows + 3, np.int64), np.zeros(n_flows + 3, np.int64))  # fmt: skip
    want_state = [a.copy() for a in state]
    got_state = [a.copy() for a in state]
    size = max(n_flows, n_qp)
    common = (p, t, grid_ns, drain_ns, delivered_ns, hop_ser_ns, lat_np, part_flow, part_qp)
    to_arrive, np_given, ce_given, op_cnps, op_ce = want_state
    want = _numpy_delivered(*common, to_arrive, recv_op, cnps_sent, np_marks, np_given, ce_given, op_cnps, op_ce,
                            np.zeros(size, np.int32))  # fmt: skip
    to_arrive, np_given, ce_given, op_cnps, op_ce = got_state
    got = delivered_events(*common, to_arrive, recv_op, cnps_sent, np_marks, np_given, ce_given, op_cnps, op_ce,
                           np.zeros(size, np.int32), _ACKED, _ARRIVE)  # fmt: skip
    for x, y in zip(got, want, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    for x, y in zip(got_state, want_state, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)


def _numpy_acks(q, f, now, part_qp, send_op, op_cnps, given, to_ack, work):
    """DriverEvents._acks_counted's numpy form (the form acks_counted replaced)."""
    op, qp = send_op[f], part_qp[q]
    order = np.argsort(qp, kind="stable")
    qs, ns = qp[order], now[order]
    first = np.ones(qs.size, bool)
    first[1:] = qs[1:] != qs[:-1]
    prev = np.empty_like(ns)
    prev[1:] = ns[:-1]
    prev[first] = given[qs[first]]
    share = np.empty_like(ns)
    share[order] = ns - prev
    np.add.at(op_cnps, op, share)
    end = np.ones(qs.size, bool)
    end[:-1] = first[1:]
    given[qs[end]] = ns[end]
    np.subtract.at(to_ack, f, 1)
    return np.flatnonzero(_last_each(f, work) & (to_ack[f] == 0))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 50), st.integers(1, 3), st.floats(0.0, 1.0))
def test_acks_counted_is_the_numpy_form(seed: int, n_flows: int, q_per: int, shared: float) -> None:
    """acks_counted gives _acks_counted's numpy form: per acknowledged part its queue pair's CNPs since the previous
    acknowledgement on it, the last count kept per queue pair, parts to acknowledge counted down, and the
    positions whose SEND completes."""
    rng = np.random.default_rng(seed)
    n_parts = n_flows * q_per
    part_flow = np.repeat(np.arange(n_flows, dtype=np.int64), q_per)
    n_qp = max(1, int(n_parts * (1.1 - shared)))
    part_qp = rng.integers(0, n_qp, n_parts).astype(np.int64)
    q = rng.choice(n_parts, rng.integers(1, n_parts + 1), replace=False).astype(np.int64)
    f = part_flow[q]
    given0 = rng.integers(0, 20, n_qp).astype(np.int32)
    now = given0[part_qp[q]] + np.cumsum(rng.integers(0, 3, q.size)).astype(np.int64)
    send_op = rng.permutation(2 * n_flows)[:n_flows].astype(np.int64)
    to_ack0 = rng.integers(1, q_per + 2, n_flows).astype(np.int64)
    cnps0 = rng.integers(0, 9, 2 * n_flows).astype(np.int64)
    want = [cnps0.copy(), given0.copy(), to_ack0.copy()]
    got = [cnps0.copy(), given0.copy(), to_ack0.copy()]
    w = _numpy_acks(q, f, now, part_qp, send_op, want[0], want[1], want[2], np.zeros(n_flows, np.int32))
    g = acks_counted(q, f, now, part_qp, send_op, got[0], got[1], got[2], np.zeros(n_flows, np.int32))
    assert g.dtype == w.dtype and np.array_equal(g, w)
    for x, y in zip(got, want, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)
