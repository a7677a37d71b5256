"""Compiled per-slice loops of the fluid fabric (:mod:`emulator.fabric.fluid`): one pass over the active flows
where numpy would make several, with the same floating-point operations in the same order.

Each kernel is the fused form of a few numpy expressions of :meth:`FluidFabric._step` (named in its
docstring); a per-port sum is a loop in flow order, as :func:`numpy.bincount` adds its weights, so the
results are bit for bit those of the numpy expressions. Compiled by numba once and cached on disk
(``cache=True``); sans-IO like the fabric.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_INF = np.inf


@njit(cache=True)
def offered(left: np.ndarray, rc: np.ndarray, qa: np.ndarray, credit: np.ndarray, a: np.ndarray,
            rate: np.ndarray, host: np.ndarray, batch: bool) -> np.ndarray:  # fmt: skip
    """``want``: ``where(left > 0, rc[qa], 0)``, and with a NIC batch ``rate[host]`` where credit is left."""
    n = left.size
    want = np.empty(n)
    for i in range(n):
        w = rc[qa[i]] if left[i] > 0 else 0.0
        if batch and credit[a[i]] > 0 and left[i] > 0:
            w = rate[host[i]]
        want[i] = w
    return want


@njit(cache=True)
def port_sum(ports: np.ndarray, w: np.ndarray, n_ports: int) -> np.ndarray:
    """``np.bincount(ports, w, n_ports)`` (same order of additions)."""
    out = np.zeros(n_ports)
    for i in range(ports.size):
        out[ports[i]] += w[i]
    return out


@njit(cache=True)
def level_sum(backlog: np.ndarray, flows: np.ndarray, ports: np.ndarray, n_ports: int) -> np.ndarray:
    """``np.bincount(ports, backlog[flows], n_ports)``: a level's queues from its flows' backlogs."""
    out = np.zeros(n_ports)
    for i in range(ports.size):
        out[ports[i]] += backlog[flows[i]]
    return out


@njit(cache=True)
def level_queues(backlog: np.ndarray, f1: np.ndarray, p1: np.ndarray, f2: np.ndarray, p2: np.ndarray, f3: np.ndarray,
                 p3: np.ndarray, n_ports: int) -> np.ndarray:  # fmt: skip
    """The ports' queues from the backlogs (``[4, flows]``) of the view's levels 1–3 (flows and ports; a level
    without flows: empty): ``zeros + level_sum(1) + level_sum(2) + level_sum(3)`` over the levels with flows,
    added in that order (as the sum of the levels' :func:`level_sum` arrays)."""
    q = np.zeros(n_ports)
    for lv, flows, ports in ((1, f1, p1), (2, f2, p2), (3, f3, p3)):
        if flows.size:
            s = level_sum(backlog[lv], flows, ports, n_ports)
            for p in range(n_ports):
                q[p] = q[p] + s[p]
    return q


@njit(cache=True)
def qp_sums(inv: np.ndarray, n_qps: int, marked: np.ndarray, inflow: np.ndarray, sent: np.ndarray) -> tuple:
    """``np.bincount(inv, w, n_qps)`` of each of ``marked``, ``inflow`` and ``sent`` in one pass (same order of
    additions): per queue pair the sums over its flows."""
    m, i_, s = np.zeros(n_qps), np.zeros(n_qps), np.zeros(n_qps)
    for i in range(inv.size):
        q = inv[i]
        m[q] += marked[i]
        i_[q] += inflow[i]
        s[q] += sent[i]
    return m, i_, s


@njit(cache=True)
def nic_send(left: np.ndarray, x: np.ndarray, dt: float, per_bit_ns: float) -> tuple[np.ndarray, np.ndarray]:
    """What each flow's NIC sends in the slice (``minimum(left, x·dt·B)``, all of it for a flow within
    ``1e-12`` of finishing) and which flows finish; ``left`` is not changed."""
    n = left.size
    sent = np.empty(n)
    finishing = np.zeros(n, np.bool_)
    tol = 1 - 1e-12
    for i in range(n):
        s = min(left[i], x[i] * dt * per_bit_ns)
        if left[i] > 0 and s >= left[i] * tol:
            finishing[i] = True
            s = left[i]
        sent[i] = s
    return sent, finishing


@njit(cache=True)
def left_after(left: np.ndarray, sent: np.ndarray, finishing: np.ndarray) -> np.ndarray:
    """``where(finishing, 0, left - sent)``."""
    n = left.size
    out = np.empty(n)
    for i in range(n):
        out[i] = 0.0 if finishing[i] else left[i] - sent[i]
    return out


@njit(cache=True)
def release_credit(credit: np.ndarray, a: np.ndarray, rc: np.ndarray, qa: np.ndarray, left: np.ndarray,
                   sent: np.ndarray, dt: float, per_bit_ns: float, batch: float) -> None:  # fmt: skip
    """``credit[a] = where(left > 0, clip(credit[a] + rc[qa]·dt·B − sent, 0, batch), 0)`` in place."""
    for i in range(a.size):
        if left[i] > 0:
            c = credit[a[i]] + rc[qa[i]] * dt * per_bit_ns - sent[i]
            credit[a[i]] = min(max(c, 0.0), batch)
        else:
            credit[a[i]] = 0.0


@njit(cache=True)
def level_in(backlog: np.ndarray, drain: np.ndarray, flows: np.ndarray, rows: np.ndarray,
             inflow: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """At one level: ``content = backlog[flows] + inflow[rows]`` and the rows whose FIFO tail can be at stake
    (input stopped with bytes held, or a drain time already set), in order."""
    n = rows.size
    content = np.empty(n)
    tail = np.empty(n, np.int64)
    k = 0
    for i in range(n):
        f = flows[i]
        x = inflow[rows[i]]
        c = backlog[f] + x
        content[i] = c
        if (x <= 0 and c > 0) or drain[f] != _INF:
            tail[k] = i
            k += 1
    return content, tail[:k]


@njit(cache=True)
def serve(ph: np.ndarray, content: np.ndarray, at: np.ndarray, stopped: np.ndarray, drain_ns: np.ndarray,
          drain_bpns: np.ndarray, t_end: float, dt: float, cap: np.ndarray,
          n_ports: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """A level's port service, :func:`emulator.fabric.fluid_fifo.fifo_service` on rows ``at`` (increasing; all
    other rows not stopped): the stopped rows' tails first (``drain_bpns`` bytes per ns, float32 as stored,
    all of the content once ``drain_ns`` has come; each of ``stopped``, ``drain_ns``, ``drain_bpns`` one
    value per row of ``at``), the others in proportion to content, the tails again with what those leave;
    each port at most ``cap``. Returns ``out`` and ``rest = content − out`` per row, ``total`` (content) and
    ``queue`` (rest) per port."""
    n = ph.size
    total = np.zeros(n_ports)
    if not stopped.any():  # no tail: proportional service, one pass to sum and one to serve
        for i in range(n):
            total[ph[i]] += content[i]
        share = _share(cap, total)
        out = np.empty(n)
        rest = np.empty(n)
        queue = np.zeros(n_ports)
        for i in range(n):
            p = ph[i]
            o = content[i] * share[p]
            out[i] = o
            r = content[i] - o
            rest[i] = r
            queue[p] += r
        return out, rest, total, queue
    arriving = np.zeros(n_ports)
    is_tail = np.zeros(n, np.bool_)
    tail = np.zeros(at.size)
    first = np.zeros(n_ports)
    dt32 = np.float32(dt)
    for j in range(at.size):
        if stopped[j]:
            i = at[j]
            is_tail[i] = True
            c = content[i]
            x = c if drain_ns[j] <= t_end else min(c, float(drain_bpns[j] * dt32))
            tail[j] = x
            first[ph[i]] += x
    for i in range(n):
        p = ph[i]
        total[p] += content[i]
        if not is_tail[i]:
            arriving[p] += content[i]
    share = _share(cap, first)
    taken = np.zeros(n_ports)
    for j in range(at.size):
        if stopped[j]:
            p = ph[at[j]]
            tail[j] *= share[p]
            taken[p] += tail[j]
    room = np.empty(n_ports)
    spare = np.empty(n_ports)
    for p in range(n_ports):
        room[p] = max(cap[p] - taken[p], 0.0)
        spare[p] = max(room[p] - arriving[p], 0.0)  # what the arriving flows leave unused
    share = _share(room, arriving)
    out = np.empty(n)
    for i in range(n):
        out[i] = content[i] * share[ph[i]]
    more = np.zeros(at.size)
    held = np.zeros(n_ports)
    for j in range(at.size):
        if stopped[j]:
            i = at[j]
            out[i] = tail[j]
            more[j] = content[i] - tail[j]
            held[ph[i]] += more[j]
    extra = _share(spare, held)
    for j in range(at.size):
        if stopped[j] and more[j] > 0:
            out[at[j]] += more[j] * extra[ph[at[j]]]
    rest = np.empty(n)
    queue = np.zeros(n_ports)
    for i in range(n):
        r = content[i] - out[i]
        rest[i] = r
        queue[ph[i]] += r
    return out, rest, total, queue


@njit(cache=True)
def _share(give: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per port ``min(1, give / want)`` as ``give / max(want, give)``, 1 where nothing is wanted."""
    out = np.ones(want.size)
    for p in range(want.size):
        if want[p] > 0:
            out[p] = give[p] / max(want[p], give[p])
    return out


@njit(cache=True)
def remainder(ph: np.ndarray, content: np.ndarray, out: np.ndarray, n_ports: int) -> tuple[np.ndarray, np.ndarray]:
    """``rest = content − out`` per row and its per-port sum (the ports' queues)."""
    n = ph.size
    rest = np.empty(n)
    queue = np.zeros(n_ports)
    for i in range(n):
        r = content[i] - out[i]
        rest[i] = r
        queue[ph[i]] += r
    return rest, queue


@njit(cache=True)
def level_out(backlog: np.ndarray, flows: np.ndarray, rows: np.ndarray, ph: np.ndarray, rest: np.ndarray,
              out: np.ndarray, inflow: np.ndarray, unmarked: np.ndarray, p_mark: np.ndarray) -> None:  # fmt: skip
    """``backlog[flows] = rest``, ``unmarked[rows] *= 1 − p_mark[ph]``, ``inflow[rows] = out``, in place."""
    for i in range(rows.size):
        r = rows[i]
        backlog[flows[i]] = rest[i]
        unmarked[r] *= 1.0 - p_mark[ph[i]]
        inflow[r] = out[i]


@njit(cache=True)
def level_out_marks(backlog: np.ndarray, flows: np.ndarray, rows: np.ndarray, ph: np.ndarray, rest: np.ndarray,
                    out: np.ndarray, inflow: np.ndarray, unmarked: np.ndarray, p_mark: np.ndarray,
                    fifo_out: np.ndarray) -> None:  # fmt: skip
    """:func:`level_out` with the port's marks placed as a FIFO would serve them (``FluidConfig.mark_epochs``):
    ``unmarked[rows] *= 1 − marked_fraction(p_mark, ph, fifo_out, out)``
    (:func:`emulator.fabric.fluid_fifo.marked_fraction`: ``min(p_mark[ph] · fifo_out / out, 1)``, ``p_mark[ph]``
    where ``out`` is 0), in place."""
    for i in range(rows.size):
        r = rows[i]
        o = out[i]
        backlog[flows[i]] = rest[i]
        m = p_mark[ph[i]] * (fifo_out[i] / o if o > 0 else 1.0)
        if m > 1.0:  # np.minimum(m, 1.0); a NaN stays NaN
            m = 1.0
        unmarked[r] *= 1.0 - m
        inflow[r] = o


@njit(cache=True)
def delivered(left: np.ndarray, backlog: np.ndarray, a: np.ndarray, done_bytes: float) -> np.ndarray:
    """Rows of flows that have sent everything (``left <= 0``) and hold less than ``done_bytes`` in queues
    (``backlog[a].sum(axis=1)``: levels 0..3 added in order)."""
    n = left.size
    keep = np.zeros(n, np.bool_)
    for i in range(n):
        if left[i] <= 0:
            f = a[i]
            keep[i] = backlog[0, f] + backlog[1, f] + backlog[2, f] + backlog[3, f] < done_bytes
    return np.flatnonzero(keep)


@njit(cache=True)
def mark_probability(q: np.ndarray, kmin: float, kmax: float, pmax: float) -> np.ndarray:
    """RED: 0 up to ``kmin``, ``pmax`` at ``kmax`` (linear between, clipped), 1 above ``kmax``."""
    span = max(kmax - kmin, 1)
    p = np.empty(q.size)
    for i in range(q.size):
        if q[i] <= kmin:
            p[i] = 0.0
        elif q[i] > kmax:
            p[i] = 1.0
        else:
            p[i] = min(max((q[i] - kmin) / span, 0.0), 1.0) * pmax
    return p


@njit(cache=True)
def cnps_due(cnp_due_ns: np.ndarray, cnp_next_ns: np.ndarray, qps: np.ndarray, t_end: float) -> np.ndarray:
    """The queue pairs of ``qps`` (in order) whose CNP has arrived by ``t_end``; their due times become those of
    the CNPs fired behind them (``cnp_next_ns``, cleared), at most one CNP per queue pair and slice."""
    due = np.empty(qps.size, np.int64)
    k = 0
    for i in range(qps.size):
        q = qps[i]
        if cnp_due_ns[q] <= t_end:
            due[k] = q
            k += 1
            cnp_due_ns[q] = cnp_next_ns[q]
            cnp_next_ns[q] = _INF
    return due[:k]


@njit(cache=True)
def marks(inflow: np.ndarray, unmarked: np.ndarray, pkt_bytes: float, flow_ce: np.ndarray,
          a: np.ndarray) -> np.ndarray:  # fmt: skip
    """Expected CE-marked packets per flow (``inflow / pkt · (1 − unmarked)``), added to ``flow_ce[a]``."""
    n = a.size
    m = np.empty(n)
    for i in range(n):
        v = inflow[i] / pkt_bytes * (1.0 - unmarked[i])
        m[i] = v
        flow_ce[a[i]] += v
    return m


@njit(cache=True)
def packet_phase(phase: np.ndarray, qps: np.ndarray, marked: np.ndarray,
                 arrived: np.ndarray) -> np.ndarray:  # fmt: skip
    """The paced stream's whole packets of the slice: ``floor(phase + arrived)`` where marks are expected
    (``phase[qps]`` keeps the part of a packet that has come, in place)."""
    n = qps.size
    whole = np.empty(n)
    for i in range(n):
        q = qps[i]
        ph = phase[q] + (arrived[i] if marked[i] > 0 else 0.0)
        w = np.floor(ph)
        whole[i] = w
        phase[q] = ph - w
    return whole


@njit(cache=True)
def np_cnps(mark_acc: np.ndarray, last_cnp_ns: np.ndarray, qps: np.ndarray, marked: np.ndarray, t_end: float,
            tau: float, defer: bool, np_marks: np.ndarray) -> np.ndarray:  # fmt: skip
    """The NP's CNPs per queue pair of ``qps`` (``mark_acc[qps]`` updated and ``marked`` added to
    ``np_marks[qps]`` in place); see FluidFabric._notify."""
    n = qps.size
    cnp = np.zeros(n)
    for i in range(n):
        q = qps[i]
        np_marks[q] += marked[i]
        acc = mark_acc[q] + marked[i]
        if tau <= 0:
            k = np.floor(acc)
            acc -= k
            cnp[i] = k
        else:
            quiet = t_end < last_cnp_ns[q] + tau
            fire = acc >= 1.0 and not quiet
            cnp[i] = 1.0 if fire else 0.0
            if defer:
                if fire:
                    acc = 0.0
            else:
                acc -= np.floor(acc)
        mark_acc[q] = acc
    return cnp


@njit(cache=True)
def fifo_epochs(ph: np.ndarray, flows: np.ndarray, rows: np.ndarray, content: np.ndarray, inflow: np.ndarray,
                ep: np.ndarray, head: np.ndarray, used: np.ndarray, tot: np.ndarray, queue_bytes: np.ndarray,
                cap: np.ndarray, n_ports: int, spans: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """A level's port service as a FIFO of arrival epochs (:mod:`emulator.fabric.fluid_fifo`).

    ``ep[f, k]``: the bytes (float32 weights) of flow ``f`` queued from epoch slot ``k`` of its port (a ring
    of ``K`` slots per port: the oldest at ``head[p]``, ``used[p]`` in use, ``tot[p, k]`` their bytes);
    ``queue_bytes[p]``: the port's queue at the slice's start. What arrives joins the port's newest epoch (a
    new one opens once the newest holds a ``1 / (K − 1)`` share of the queue and a slot is free); each flow's
    slots are scaled to its ``content``; the port serves its epochs oldest first (at most ``cap``), each epoch's
    flows in proportion to their bytes in it. All state is updated in place. Returns ``out`` and ``rest``
    per row, ``total`` and ``queue`` per port, as :func:`serve`."""
    n = ph.size
    k_slots = tot.shape[1]
    seen = np.zeros(n_ports, np.bool_)
    total = np.zeros(n_ports)
    fresh = np.zeros((n_ports, k_slots))
    for i in range(n):
        p = ph[i]
        if not seen[p]:  # open a new epoch where the newest holds its share of the queue and a slot is free
            seen[p] = True
            u = used[p]
            cur = _wrap(head[p] + u - 1, k_slots)
            if u < k_slots and tot[p, cur] > 0 and tot[p, cur] * spans >= queue_bytes[p]:
                used[p] = u + 1
                tot[p, _wrap(cur + 1, k_slots)] = 0.0
        f = flows[i]
        c = content[i]
        total[p] += c
        h, u = head[p], used[p]
        cur = _wrap(h + u - 1, k_slots)
        if u == 1:  # one epoch: it holds all of the flow's bytes
            ep[f, cur] = c
            fresh[p, cur] += ep[f, cur]
            continue
        ep[f, cur] += inflow[rows[i]]
        w = 0.0
        k = h
        for _ in range(u):
            w += ep[f, k]
            k = _wrap(k + 1, k_slots)
        if w <= 0:
            ep[f, cur] = c
            fresh[p, cur] += ep[f, cur]
            continue
        scale = c / w if abs(w - c) > 1e-6 * c else 1.0  # the weights follow the backlog (tail drop, order)
        k = h
        for _ in range(u):
            if scale != 1.0:
                ep[f, k] *= scale
            fresh[p, k] += ep[f, k]
            k = _wrap(k + 1, k_slots)
    frac = np.zeros((n_ports, k_slots))
    whole = np.zeros(n_ports, np.bool_)  # the port serves all it holds
    for p in range(n_ports):
        if total[p] <= 0:
            continue
        whole[p] = cap[p] >= total[p]
        room = cap[p]
        k = head[p]
        for _ in range(used[p]):
            e = fresh[p, k]
            if room >= e:
                frac[p, k] = 1.0
                room -= e
            else:
                frac[p, k] = room / e
                break
            k = _wrap(k + 1, k_slots)
    out = np.empty(n)
    rest = np.empty(n)
    queue = np.zeros(n_ports)
    for i in range(n):
        p = ph[i]
        f = flows[i]
        k = head[p]
        if whole[p]:
            for _ in range(used[p]):
                ep[f, k] = 0.0
                k = _wrap(k + 1, k_slots)
            out[i] = content[i]
            rest[i] = 0.0
            continue
        o = 0.0
        for _ in range(used[p]):  # oldest first: served whole, then one in part, then none
            fr = frac[p, k]
            x = ep[f, k]
            if fr >= 1.0:
                o += x
                ep[f, k] = 0.0
            else:
                y = x * fr
                o += y
                ep[f, k] = x - y
                break
            k = _wrap(k + 1, k_slots)
        o = min(o, content[i])
        out[i] = o
        r = content[i] - o
        rest[i] = r
        queue[p] += r
    for p in range(n_ports):
        if total[p] <= 0:
            continue
        k = head[p]
        for _ in range(used[p]):
            tot[p, k] = fresh[p, k] * (1.0 - frac[p, k]) if frac[p, k] < 1.0 else 0.0
            k = _wrap(k + 1, k_slots)
        while used[p] > 1 and tot[p, head[p]] <= 0:  # drained epochs free their slots
            head[p] = _wrap(head[p] + 1, k_slots)
            used[p] -= 1
    return out, rest, total, queue


@njit(cache=True, inline="always")
def _wrap(k: int, k_slots: int) -> int:
    """Slot ``k`` of a ring of ``k_slots`` (``0 <= k < 2 · k_slots``)."""
    return k - k_slots if k >= k_slots else k
