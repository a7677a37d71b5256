"""Compiled checks of the fluid driver's array completions (:mod:`emulator.drivers.fluid_events`): one pass where
numpy makes some sixty small calls a run, with the results of those calls (tests/drivers/
test_fluid_event_kernels.py pins it to the numpy form on random inputs). Compiled by numba once and cached on
disk (``cache=True``); it reads and writes only the arrays it is given."""

from __future__ import annotations

import numpy as np
from numba import njit

from emulator.schedule.model import OP_DELAY, OP_SEND


@njit(cache=True)
def plain_children(ops: np.ndarray, t_ops: np.ndarray, child_ptr: np.ndarray, child_idx: np.ndarray,
                   pending: np.ndarray, kind: np.ndarray, not_before: np.ndarray, op_flow: np.ndarray,
                   arrived: np.ndarray, arriving: np.ndarray, check_arriving: bool, part_ptr: np.ndarray,
                   part_qp: np.ndarray, work: np.ndarray) -> tuple:  # fmt: skip
    """What completing ``ops`` in order (op ``j`` at ``t_ops[j]``) makes ready, where every child it makes
    ready is plain (:meth:`~emulator.drivers.fluid_events.DriverEvents._complete_plain`): ``(plain, ch, now,
    t_now, recv, parts, qp, t_parts)`` — the ops' children in order, the children made ready and their times,
    the flows of the RECVs among them, the SENDs' parts, their queue pairs and times. ``plain`` is False where
    a child made ready is a DELAY, is not released by its time, is a RECV whose flow has arrived (or is among
    ``arriving`` when ``check_arriving``), or where two parts share a queue pair. ``work``: a scratch array
    indexed by op, flow and queue pair ids, overwritten."""
    n_ch = 0
    for op in ops:
        n_ch += child_ptr[op + 1] - child_ptr[op]
    ch = np.empty(n_ch, np.int64)
    owner = np.empty(n_ch, np.int64)
    k = 0
    for j in range(ops.size):
        op = ops[j]
        for i in range(child_ptr[op], child_ptr[op + 1]):
            ch[k] = child_idx[i]
            owner[k] = j
            k += 1
    for c in ch:
        work[c] = 0
    made = np.zeros(n_ch, np.bool_)
    for k in range(n_ch):  # a child is made ready by the completion that brings its pending parents to 0
        c = ch[k]
        work[c] += 1
        made[k] = pending[c] == work[c]
    n_now = 0  # now = ch[made], t_now = t_ops[owner[made]] as loops (a mask index compiles code of its own)
    for k in range(n_ch):
        n_now += made[k]
    now = np.empty(n_now, np.int64)
    t_now = np.empty(n_now, t_ops.dtype)
    m = 0
    for k in range(n_ch):
        if made[k]:
            now[m], t_now[m] = ch[k], t_ops[owner[k]]
            m += 1
    no = np.zeros(0, np.int64)
    fail = (False, ch, now, t_now, no, no, no, np.zeros(0))
    n_recv = 0
    n_parts = 0
    for i in range(now.size):
        c = now[i]
        if kind[c] == OP_DELAY or not_before[c] > t_now[i]:
            return fail
        if kind[c] == OP_SEND:
            f = op_flow[c]
            n_parts += part_ptr[f + 1] - part_ptr[f]
        else:
            n_recv += 1
    recv = np.empty(n_recv, np.int64)
    parts = np.empty(n_parts, np.int64)
    t_parts = np.empty(n_parts)
    r = 0
    m = 0
    for i in range(now.size):
        c = now[i]
        f = op_flow[c]
        if kind[c] == OP_SEND:
            for p in range(part_ptr[f], part_ptr[f + 1]):
                parts[m] = p
                t_parts[m] = t_now[i]
                m += 1
        else:
            if arrived[f]:
                return fail
            recv[r] = f
            r += 1
    if check_arriving and n_recv:
        for f in recv:
            work[f] = 0
        for f in arriving:
            work[f] = 1
        for f in recv:
            if work[f]:
                return fail
    qp = np.empty(parts.size, part_qp.dtype)  # part_qp[parts]
    for j in range(parts.size):
        qp[j] = part_qp[parts[j]]
    for j in range(qp.size):
        work[qp[j]] = j
    for j in range(qp.size):
        if work[qp[j]] != j:
            return fail
    return True, ch, now, t_now, recv, parts, qp, t_parts


@njit(cache=True)
def first_starts(p: np.ndarray, ts: np.ndarray, flow: np.ndarray, send_op: np.ndarray, recv_op: np.ndarray,
                 start: np.ndarray, lat_ns: np.ndarray, first_pkt_ns: np.ndarray) -> None:  # fmt: skip
    """The start records of parts ``p`` starting at ``ts`` (:meth:`~emulator.drivers.fluid._Run.start_parts`):
    a flow starts with its first part to start — its SEND's ``start`` at ``rint(t)``, its RECV's at
    ``rint(t + hops × latency + first packet's serialisation)`` — where its SEND has not started yet."""
    for i in range(p.size):
        f = flow[p[i]]
        so = send_op[f]
        if start[so] >= 0:
            continue
        start[so] = np.int64(np.rint(ts[i]))
        r = recv_op[f]
        if r >= 0:
            start[r] = np.int64(np.rint(ts[i] + lat_ns[p[i]] + first_pkt_ns[p[i]]))


@njit(cache=True)
def delivered_events(p: np.ndarray, t: float, grid_ns: float, drain_ns: np.ndarray, delivered_ns: np.ndarray,
                     hop_ser_ns: np.ndarray, lat_ns: np.ndarray, part_flow: np.ndarray, part_qp: np.ndarray,
                     to_arrive: np.ndarray, recv_op: np.ndarray, cnps_sent: np.ndarray, np_marks: np.ndarray,
                     np_given: np.ndarray, ce_given: np.ndarray, op_cnps: np.ndarray, op_ce: np.ndarray,
                     work: np.ndarray, kind_acked: int, kind_arrive: int) -> tuple:  # fmt: skip
    """:meth:`~emulator.drivers.fluid_events.DriverEvents.delivered` of parts ``p`` at ``t``: the events
    ``(times, kinds, ids)`` in push order — each part's acknowledgement, then its flow's arrival where it is
    the flow's last part to arrive — and, in place, the flows' parts to arrive and each delivering queue pair's
    CNP and CE-mark shares given to its first part's RECV. A part's last byte arrives ``lat`` after the fluid
    delivered it (``delivered_ns``) plus the store-and-forward of the levels after its last queued one, not
    before ``t``; its acknowledgement ``lat`` later; with ``grid_ns``, both to the nearest grid point, not
    before ``t``. ``work``: a scratch array indexed by flow and queue pair ids, overwritten."""
    k = p.size
    arrive = np.empty(k)
    acked = np.empty(k)
    f = np.empty(k, np.int64)
    for i in range(k):
        q = p[i]
        after = 1
        for lv in range(3, -1, -1):  # after the last level where the part's last bytes queued
            if np.isfinite(drain_ns[q, lv]):
                after = lv + 1
                break
        ser = 0.0
        for lv in range(1, 4):
            ser = ser + (hop_ser_ns[q, lv] if lv >= after else 0.0)
        lat = lat_ns[q]
        a = delivered_ns[i] + lat + ser
        a = a if a >= t or a != a else t
        b = a + lat
        if grid_ns:
            a = np.rint(a / grid_ns) * grid_ns
            a = t if t >= a or t != t else a
            b = np.rint(b / grid_ns) * grid_ns
            b = t if t >= b or t != t else b
        arrive[i], acked[i] = a, b
        f[i] = part_flow[q]
        to_arrive[f[i]] -= 1
    for i in range(k):  # a flow's last part here: the position its flow's work entry keeps
        work[f[i]] = i
    n_arr = 0
    arrives = np.zeros(k, np.bool_)
    for i in range(k):
        if work[f[i]] == i and to_arrive[f[i]] == 0:
            arrives[i] = True
            n_arr += 1
    times = np.empty(k + n_arr)
    kinds = np.empty(k + n_arr, np.int8)
    ids = np.empty(k + n_arr, np.int64)
    j = 0
    for i in range(k):
        times[j], kinds[j], ids[j] = acked[i], kind_acked, p[i]
        j += 1
        if arrives[i]:
            times[j], kinds[j], ids[j] = arrive[i], kind_arrive, f[i]
            j += 1
    for i in range(k):  # a queue pair's shares go to its first part here with a RECV
        if recv_op[f[i]] >= 0:
            work[part_qp[p[i]]] = 0
    for i in range(k):
        r = recv_op[f[i]]
        q = part_qp[p[i]]
        if r >= 0 and work[q] == 0:
            work[q] = 1
            now_np, now_ce = cnps_sent[q], np_marks[q]
            op_cnps[r] += now_np - np_given[q]
            op_ce[r] += np.int64(np.rint(now_ce) - np.rint(ce_given[q]))
            np_given[q] = now_np
            ce_given[q] = now_ce
    return times, kinds, ids


@njit(cache=True)
def acks_counted(q: np.ndarray, f: np.ndarray, now: np.ndarray, part_qp: np.ndarray, send_op: np.ndarray,
                 op_cnps: np.ndarray, rp_given: np.ndarray, to_ack: np.ndarray, work: np.ndarray) -> np.ndarray:  # fmt: skip
    """:meth:`~emulator.drivers.fluid_events.DriverEvents._acks_counted` of acknowledged parts ``q`` (of flows
    ``f``; ``now``: each one's queue pair's CNPs): each part's SEND gets its queue pair's CNPs since the previous
    acknowledgement on that queue pair (in ``q``, or ``rp_given``, which keeps the last), the flows' parts to
    acknowledge count down; returns the positions whose SEND completes (its flow's last part here, its count
    at 0), ascending. ``work``: a scratch array indexed by flow ids, overwritten."""
    for i in range(q.size):
        qp = part_qp[q[i]]
        op_cnps[send_op[f[i]]] += now[i] - rp_given[qp]
        rp_given[qp] = now[i]
        to_ack[f[i]] -= 1
    for i in range(q.size):
        work[f[i]] = i
    n = 0
    for i in range(q.size):
        if work[f[i]] == i and to_ack[f[i]] == 0:
            n += 1
    out = np.empty(n, np.int64)
    n = 0
    for i in range(q.size):
        if work[f[i]] == i and to_ack[f[i]] == 0:
            out[n] = i
            n += 1
    return out
