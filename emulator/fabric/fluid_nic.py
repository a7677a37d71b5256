"""The fluid fabric's NIC: what a queue pair's pacer lets it send at line rate when a flow starts
(:func:`start_credit`), and how it shares its line rate as the packet sim's NIC round robin does — its own
batch first in posting order (:class:`NicBatch`), then max-min fair in the rates its queue pairs want
(:func:`max_min_share`: the due queue pairs take one packet each per turn), the last round in posting order
(:func:`last_round`).

The packet sim's queue-pair pacer (:class:`~emulator.pacing.pacer.TokenBucketPacer`, as
:mod:`emulator.endpoint.sender` builds it) is a token bucket of one GSO batch filled at the controller's
rate: it starts full, keeps filling while the queue pair has nothing to send, and what it holds leaves
back to back at the NIC's line rate. A flow longer than what the bucket holds at its start is paced: it
leaves the bucket empty at its last byte, so a flow posted right after it (the next message of a chain,
started when the last one's ACK came) starts at the controller's rate, not with a batch at line rate. A
flow that the bucket holds whole leaves the rest in it (one batch: 15 packets of 4 KiB; a ring step of 8
packets leaves 7), which the next flow of its queue pair finds there with what the bucket earned since.
One posted on a queue pair idle for a batch's time or more, or on a new queue pair, starts with a full batch.
A run whose queue pairs carry one flow each (an All-to-All) keeps no per-queue-pair clock: none restarts.

The per-queue-pair clock (:func:`idle_clock`) is when the bucket was last empty, in the rate of the moment:
what it holds at ``t`` is ``rc × (t − clock)``, at most one batch. A paced flow sets it to ``+inf`` at its
start (nothing is left for another flow of its queue pair until its last byte) and to its last byte's time
there (:func:`sent_last`); a flow the bucket holds whole moves it on by the flow's bytes at its start.
"""

from __future__ import annotations

import numpy as np

_BYTES_PER_BIT_NS = 1e-9 / 8


def idle_clock(n_qps: int, restarts: bool) -> np.ndarray | None:
    """Per queue pair, when its pacer's bucket was last empty (``-inf``: never; ``+inf``: a paced flow is
    sending); None if no queue pair has more than one flow (``restarts`` False)."""
    return np.full(n_qps, -np.inf) if restarts else None


def sending_count(n_qps: int, restarts: bool) -> np.ndarray | None:
    """Per queue pair, how many of its flows have started and not sent their last byte (:func:`start_credit`
    counts up, :func:`sent_last` down); None with no clock."""
    return np.zeros(n_qps, np.int64) if restarts else None


def sent_last(idle_ns: np.ndarray | None, qp: np.ndarray, t_ns: np.ndarray | float,
              sending: np.ndarray | None = None) -> None:  # fmt: skip
    """Flows of queue pairs ``qp`` sent their last byte at ``t_ns``: the bucket of a queue pair that a paced
    flow emptied fills from the last byte of its last flow still sending (``sending``: the counts of
    :func:`sending_count`; without it, each such flow is taken to be its queue pair's last); a flow the
    bucket held whole was charged at its start."""
    if idle_ns is None:
        return
    q = np.asarray(qp, np.int64).ravel()
    t = np.broadcast_to(np.asarray(t_ns, float), np.shape(qp)).ravel()
    if sending is not None:
        np.subtract.at(sending, q, 1)
        ready = (idle_ns[q] == np.inf) & (sending[q] <= 0)
    else:
        ready = idle_ns[q] == np.inf
    if ready.any():
        qr = q[ready]
        idle_ns[qr] = -np.inf
        np.maximum.at(idle_ns, qr, t[ready])


def start_credit(batch_bytes: float, wire_bytes: np.ndarray | float, rc_bps: np.ndarray,
                 idle_ns: np.ndarray | None, qp: np.ndarray | int, now_ns: float | np.ndarray,
                 sending: np.ndarray | None = None) -> np.ndarray | float:  # fmt: skip
    """Bytes a flow of queue pair ``qp`` may send at line rate from ``now_ns``: what the pacer's bucket holds at
    the rate ``rc_bps[qp]`` since ``idle_ns[qp]`` (``-inf`` or no clock: never used, a full bucket), at most
    one batch and the flow's ``wire_bytes``. The flow's bytes are charged to the bucket (``idle_ns`` updated in
    place; flows of one queue pair in order; the module docstring) and counted in ``sending``."""
    if idle_ns is None:
        return np.minimum(batch_bytes, wire_bytes)
    q = np.asarray(qp)
    if q.ndim == 0 or np.unique(q).size < q.size:  # one flow, or flows of one queue pair: in order
        shape = np.broadcast(q, np.asarray(wire_bytes), np.asarray(now_ns)).shape
        qs, ws, ts = (np.broadcast_to(np.asarray(x), shape).ravel() for x in (q, wire_bytes, now_ns))
        out = np.array([start_credit_one(batch_bytes, float(w), rc_bps, idle_ns, int(k), float(t), sending)
                        for k, w, t in zip(qs.tolist(), ws.tolist(), ts.tolist(), strict=True)])  # fmt: skip
        return out.reshape(shape) if shape else out[0]
    if sending is not None:
        sending[q] += 1
    rc = rc_bps[q]
    clock = idle_ns[q]
    with np.errstate(invalid="ignore"):  # a rate of 0 since -inf: never used, a full bucket
        earned = rc * np.maximum(now_ns - clock, 0.0) * _BYTES_PER_BIT_NS
    held = np.where(clock == -np.inf, batch_bytes, np.minimum(batch_bytes, earned))
    whole = (held >= wire_bytes) & (rc > 0)
    rest = np.divide(held - wire_bytes, rc * _BYTES_PER_BIT_NS, out=np.zeros_like(held), where=whole)
    idle_ns[q] = np.where(whole, now_ns - rest, np.inf)
    return np.minimum(np.minimum(batch_bytes, wire_bytes), held)


def start_credit_one(batch_bytes: float, wire_bytes: float, rc_bps: np.ndarray, idle_ns: np.ndarray | None, qp: int,
                     now_ns: float, sending: np.ndarray | None = None) -> float:  # fmt: skip
    """:func:`start_credit` of one flow in Python floats (the same operations in the same order)."""
    credit = batch_bytes if batch_bytes <= wire_bytes else wire_bytes
    if idle_ns is None:
        return credit
    if sending is not None:
        sending[qp] += 1
    rc = float(rc_bps[qp])
    clock = float(idle_ns[qp])
    if clock == -np.inf:
        held = batch_bytes
    else:
        d = now_ns - clock
        held = rc * (d if d >= 0.0 else 0.0) * _BYTES_PER_BIT_NS
        held = held if held <= batch_bytes else batch_bytes
    idle_ns[qp] = now_ns - (held - wire_bytes) / (rc * _BYTES_PER_BIT_NS) if held >= wire_bytes and rc > 0 else np.inf
    return credit if credit <= held else held


def proportional_share(want: np.ndarray, host: np.ndarray, rate_bps: np.ndarray,
                       paused: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Each flow's rate once its NIC shares its line rate in proportion to what its flows want (processor
    sharing, ``FluidConfig.nic_round_robin`` off), 0 at a paused NIC; and per NIC whether it is offered more
    than its line rate (:func:`max_min_share`'s round-robin counterpart)."""
    load = np.bincount(host, want, rate_bps.size)
    share = np.minimum(1.0, np.divide(rate_bps, load, out=np.ones_like(load), where=load > 0))
    return np.where(paused[host], 0.0, want * share[host]), share < 1.0


def max_min_share(want: np.ndarray, host: np.ndarray, rate_bps: np.ndarray,
                  paused: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Each flow's rate once its NIC serves its queue pairs round robin, one packet per due queue pair per
    turn, as the packet sim's NIC does: max-min fair in what they want (a queue pair whose pacer wants less
    than an equal share gets what it wants, the others share the rest equally), 0 at a paused NIC; and per
    NIC whether it is offered more than its line rate.

    The level of a NIC offered more than its line rate is found by water-filling from the equal share: the
    flows wanting less than the level keep their want, the level is what is left over the others, again
    until no flow joins (the level only rises, so at most one round per flow, a few in practice)."""
    n_ports = rate_bps.size
    load = np.bincount(host, want, n_ports)
    over = load > rate_bps
    if not over.any():
        return np.where(paused[host], 0.0, want), over
    n = np.bincount(host, minlength=n_ports).astype(float)
    sat_n = np.zeros(n_ports)
    level = np.divide(rate_bps, n, out=np.full(n_ports, np.inf), where=over)
    while True:
        below = want < level[host]
        cnt = np.bincount(host, below, n_ports).astype(float)
        if np.array_equal(cnt, sat_n):
            break
        sat_n = cnt
        sat = np.bincount(host, np.where(below, want, 0.0), n_ports)
        level = np.divide(rate_bps - sat, n - sat_n, out=np.full(n_ports, np.inf), where=over & (sat_n < n))
    return np.where(paused[host], 0.0, np.minimum(want, level[host])), over


def last_round(x: np.ndarray, want: np.ndarray, saturated: np.ndarray, left: np.ndarray, host: np.ndarray,
               pkt_bytes: float, dt_ns: float) -> np.ndarray:  # fmt: skip
    """Rates ``x`` with a saturated NIC's last round in order, as the packet sim's NIC round robin serves it.

    A NIC offered more than its line rate (``saturated[host]``) takes one packet of each due queue pair per
    round, in the order the queue pairs were posted, so flows of equal size that share it end one packet
    time apart in that order, where processor sharing (the fluid's share in proportion) ends them together.
    Here the flows in their last packet (``0 < left <= pkt_bytes``) pool the rates ``x`` they have at their
    NIC and take the pool in row order (the view's rows are in flow id order, the driver's posting order),
    each at most its pacer's ``want`` and what ends it within ``dt_ns``; what no row of the pool can use
    is left unused for the slice. Flows with more than a packet left keep their share."""
    if not saturated.any():
        return x
    rows = np.flatnonzero(left <= pkt_bytes)
    rows = rows[(left[rows] > 0) & saturated[host[rows]]]
    if rows.size < 2:
        return x
    h = host[rows]
    if (h[1:] < h[:-1]).any():  # rows of a NIC are mostly contiguous (flow ids run by source)
        order = np.argsort(h, kind="stable")
        rows, h = rows[order], h[order]
    first = np.r_[True, h[1:] != h[:-1]]
    gid = np.cumsum(first) - 1
    pool = np.bincount(gid, x[rows])
    need = np.minimum(want[rows], left[rows] / (dt_ns * _BYTES_PER_BIT_NS))
    ahead = np.cumsum(need) - need
    ahead -= ahead[np.flatnonzero(first)][gid]
    out = x.copy()
    out[rows] = np.clip(pool[gid] - ahead, 0.0, need)
    return out


class NicBatch:
    """A NIC's own pacer: a token bucket of one batch at its line rate, whose bytes leave in posting order.

    The packet sim's NIC (:class:`~emulator.pacing.pacer.TokenBucketPacer` of one batch, as
    :mod:`emulator.endpoint.sender` builds it) lets the queue pairs due at once commit what it holds back to
    back in the order they were posted (each its message or batch), and only then takes them round robin,
    one packet each per turn. Here a flow started at a NIC takes, in posting order, what the bucket holds as
    its *head*: bytes its NIC sends before the shared rest, in row order, at up to the line rate
    (:meth:`first`). The bucket is charged when heads are handed out and by what the NIC sends other than
    heads (the NIC port's sent bytes less the heads'), and refills at the line rate up to one batch; it is
    brought up to date only when a flow starts (between two starts a NIC can only go from busy to idle, so
    the cap at one batch is never missed).

    The packet sim's bucket is charged when its NIC *takes* packets, not when they reach the wire: while heads
    drain at line rate, its round robin goes on taking, behind them, the packets the queue pairs' pacers have
    let go beyond their heads (a pacer's credit at once, then its rate), as fast as the bucket refills, so the
    bucket stays empty. Here those queue pairs send nothing until the heads are out: what each flow's pacer
    let go beyond its head and it has not sent (its credit beyond its head, at most its bytes beyond it) is
    taken *ahead* of the wire in each slice that its NIC sends heads, the NIC's takes at most the heads it
    sent (:meth:`sent`); those bytes stay ahead until the flow sends them. The bucket is charged for the
    bytes taken ahead at the next start (less those sent since, which are charged as the NIC's other bytes).
    So a flow started while its NIC stays busy gets no head, as in the packet sim, instead of a batch refilled
    while the heads drained (bench/RESULTS.md, fluidacc8, fluidacc9)."""

    def __init__(self, n_ports: int, n_flows: int, batch_bytes: float, rate_bps: np.ndarray) -> None:
        self.batch = float(batch_bytes)
        self.line = rate_bps * _BYTES_PER_BIT_NS  # bytes per ns, per port
        self.level = np.full(n_ports, self.batch)  # per NIC: what the bucket held at t_ns, heads handed out
        self.t_ns = np.zeros(n_ports)
        self.head_sent = np.zeros(n_ports)  # per NIC: head bytes it sent, in all
        self.seen = np.zeros(n_ports)  # per NIC: bytes it sent other than heads, counted at t_ns
        self.ahead = np.zeros(n_ports)  # per NIC: bytes its round robin took ahead of the wire, not yet sent
        self.ahead_seen = np.zeros(n_ports)  # per NIC: ``ahead`` at t_ns
        self.ahead_total = 0.0  # all NICs' bytes taken ahead of the wire, not yet sent
        self.n_flows = n_flows
        self.head = np.zeros(0)  # per flow: its head bytes not yet sent (allocated at the first start: memory)
        self.took = np.zeros(0)  # per flow: its bytes taken ahead of the wire, not yet sent (allocated with head)
        self.pending = 0.0  # all flows' head bytes not yet sent
        self._k = None  # the compiled forms (emulator.fabric.fluid_nic_kernels) once asked for

    def use_compiled(self) -> None:
        """Run every later :meth:`give`, :meth:`first` and :meth:`sent` as their compiled loops (same results; loads them now)."""
        if self._k is None and self.batch:
            from emulator.fabric import fluid_nic_kernels

            self._k = fluid_nic_kernels

    def give_one(self, flow: int, host: int, credit_bytes: float, now_ns: float, tx_bytes: np.ndarray) -> None:
        """:meth:`give` for one flow, in Python floats (the same operations in the same order)."""
        if not self.batch:
            return
        if not self.head.size:
            self.head, self.took = np.zeros(self.n_flows), np.zeros(self.n_flows)
        other = float(tx_bytes[host]) - float(self.head_sent[host])
        ahead = float(self.ahead[host])
        charge = other - float(self.seen[host]) + (ahead - float(self.ahead_seen[host]))
        t0 = float(self.t_ns[host])
        d = now_ns - t0
        level = float(self.level[host]) + float(self.line[host]) * (d if d >= 0.0 else 0.0) - charge
        level = level if level > 0.0 else 0.0
        level = level if level < self.batch else self.batch
        give = level if level > 0.0 else 0.0  # the clip of what is left once no flow is ahead
        give = give if give < credit_bytes else credit_bytes
        self.head[flow] = give
        self.pending += give
        self.level[host] = level - give
        self.t_ns[host] = now_ns if now_ns >= t0 else t0
        self.seen[host] = other
        self.ahead_seen[host] = ahead

    def give(self, flows: np.ndarray, hosts: np.ndarray, credit_bytes: np.ndarray, now_ns: np.ndarray,
             tx_bytes: np.ndarray) -> None:  # fmt: skip
        """Flows ``flows`` (posting order) start at NICs ``hosts`` at ``now_ns`` (the ports have sent ``tx_bytes``):
        each takes as its head what its NIC's bucket holds after those before it, at most what its queue pair's
        own pacer lets go at line rate (``credit_bytes``, :func:`start_credit`). The bucket is first charged for
        what the NIC sent other than heads and for what it took ahead of the wire since (the class docstring)."""
        if not self.batch or not flows.size:
            return
        if not self.head.size:
            self.head, self.took = np.zeros(self.n_flows), np.zeros(self.n_flows)
        if self._k is not None:
            give = self._k.nic_give(self.level, self.t_ns, self.seen, self.head_sent, self.line, tx_bytes, self.head,
                                    self.batch, flows, hosts, credit_bytes, now_ns, self.ahead, self.ahead_seen)  # fmt: skip
            self.pending += float(give.sum())
            return
        other = tx_bytes - self.head_sent
        order = np.argsort(hosts, kind="stable")
        f, h, w, t = flows[order], hosts[order], credit_bytes[order], now_ns[order]
        first = np.r_[True, h[1:] != h[:-1]]
        at = np.flatnonzero(first)
        gid = np.cumsum(first) - 1
        hu, tu = h[at], t[at]
        charge = other[hu] - self.seen[hu] + (self.ahead[hu] - self.ahead_seen[hu])
        level = self.level[hu] + self.line[hu] * np.maximum(tu - self.t_ns[hu], 0.0) - charge
        level = np.clip(level, 0.0, self.batch)
        before = np.cumsum(w) - w
        before -= before[at][gid]
        give = np.clip(level[gid] - before, 0.0, w)
        self.head[f] = give
        self.pending += float(give.sum())
        self.level[hu] = level - np.bincount(gid, give)
        self.t_ns[hu] = np.maximum(tu, self.t_ns[hu])
        self.seen[hu] = other[hu]
        self.ahead_seen[hu] = self.ahead[hu]

    def first(self, x: np.ndarray, want: np.ndarray, left: np.ndarray, a: np.ndarray, host: np.ndarray,
              rate_bps: np.ndarray, paused: np.ndarray, dt_ns: float) -> np.ndarray:  # fmt: skip
        """Rates ``x`` with the heads first: at a NIC holding heads, rows ``a`` with a head take its line rate
        in row order (each at most its ``want`` — the line rate while its batch lasts, its mean over the slice when
        it starts part-way into it, 0 while stalled — and what sends its head within ``dt_ns``), the others share
        what is left max-min fair in their ``want`` (:func:`max_min_share`)."""
        if self.pending < 1.0:
            return x
        if self._k is not None:
            return self._k.nic_first(x, want, left, self.head, a, host, rate_bps, paused, dt_ns * _BYTES_PER_BIT_NS)
        hd = self.head[a]
        rows = np.flatnonzero(hd >= 1.0)  # a head's last fraction of a byte goes with the shared rest
        rows = rows[left[rows] > 0]
        if not rows.size:
            return x
        h = host[rows]
        order = np.argsort(h, kind="stable")
        rows, h = rows[order], h[order]
        first = np.r_[True, h[1:] != h[:-1]]
        gid = np.cumsum(first) - 1
        w, lr = want[rows], left[rows]
        need = np.minimum(w, np.minimum(hd[rows], lr) / (dt_ns * _BYTES_PER_BIT_NS))  # what its head takes of the slice
        ahead = np.cumsum(need) - need
        ahead -= ahead[np.flatnonzero(first)][gid]
        room = np.maximum(np.where(paused[h], 0.0, rate_bps[h]) - ahead, 0.0)
        took = np.minimum(room, need)
        # a flow whose head is all it has left ends in the slice at the rate its turn leaves it (its bytes, not
        # the slice, are what it takes of the NIC); the others send their head over the slice
        xh = np.where((lr <= hd[rows]) & (took >= need) & (need < w), np.minimum(w, room), took)
        n_ports = rate_bps.size
        used = np.bincount(h, took, n_ports)
        others = np.ones(x.size, bool)
        others[rows] = False
        others &= used[host] > 0
        more = np.where(lr > hd[rows], w - xh, 0.0)  # a head that ends in the slice: its flow goes on with the rest
        o, m = np.flatnonzero(others), np.flatnonzero(more > 0)
        rest = max_min_share(np.r_[want[o], more[m]], np.r_[host[o], h[m]], np.maximum(rate_bps - used, 0.0), paused)[0]
        out = x.copy()
        out[o] = rest[:o.size]
        out[rows] = xh
        out[rows[m]] += rest[o.size:]
        return out

    def held(self, flows: np.ndarray) -> np.ndarray:
        """Which of ``flows`` still hold head bytes to send."""
        return self.head[flows] >= 1.0 if self.pending >= 1.0 else np.zeros(flows.size, bool)

    def drop(self, flows: np.ndarray) -> None:
        """``flows`` send their heads as the rest (a NIC they do not share: at its line rate all the same)."""
        if self.pending >= 1.0:
            self.pending = max(self.pending - float(self.head[flows].sum()), 0.0)
            self.head[flows] = 0.0

    def sent(self, a: np.ndarray, host: np.ndarray, sent: np.ndarray, left: np.ndarray, credit_bytes: np.ndarray,
             rc_bps: np.ndarray, dt_ns: float) -> None:  # fmt: skip
        """Rows ``a`` (at NICs ``host``; at the slice's start ``left`` bytes to send, ``credit_bytes`` let go by
        their pacers, which let go ``rc_bps`` after) sent ``sent`` bytes in a ``dt_ns`` slice while heads are
        pending: their heads first, then the bytes their NIC took ahead of the wire. A NIC that sent heads took
        ahead, behind them, what its rows' pacers let go beyond their heads by the slice's end and they did not
        send, at most the heads it sent (the class docstring)."""
        if self._k is not None:
            hs, change = self._k.nic_sent(self.head, self.took, self.head_sent, self.ahead, a, host, sent, left,
                                          credit_bytes, rc_bps, dt_ns * _BYTES_PER_BIT_NS, self.batch)  # fmt: skip
            self.pending = max(self.pending - float(hs.sum()), 0.0)
            self.ahead_total = max(self.ahead_total + float(change.sum()), 0.0)
            return
        hd = self.head[a]
        hs = np.minimum(sent, hd)
        old = self.took[a]
        took = np.maximum(old - (sent - hs), 0.0)  # sent beyond the heads: the bytes taken ahead go first
        n = self.head_sent.size
        self.head[a] = hd - hs
        self.pending = max(self.pending - float(hs.sum()), 0.0)
        by_nic = np.bincount(host, hs, n)
        self.head_sent += by_nic
        # what the pacer let go beyond the head and not sent by the slice's end (as release_credit counts it)
        let_go = np.minimum(np.clip(credit_bytes + rc_bps * (dt_ns * _BYTES_PER_BIT_NS) - sent, 0.0, self.batch),
                            left - sent) - (hd - hs)  # fmt: skip
        new = np.where(by_nic[host] > 0, np.maximum(let_go - took, 0.0), 0.0)
        want = np.bincount(host, new, n)
        scale = np.divide(by_nic, want, out=np.ones(n), where=want > by_nic)  # the NIC takes at most its heads
        took += new * scale[host]
        self._count(a, host, took, old)

    def sent_ahead(self, a: np.ndarray, host: np.ndarray, sent: np.ndarray) -> None:
        """Rows ``a`` (at NICs ``host``) sent ``sent`` bytes in a slice with no head pending: the bytes their NIC
        took ahead of the wire go first (only the rows holding some are looked at)."""
        old = self.took[a]
        r = np.flatnonzero(old > 0)
        if r.size:
            hd, sr = self.head[a[r]], sent[r]
            self._count(a[r], host[r], np.maximum(old[r] - (sr - np.minimum(sr, hd)), 0.0), old[r])

    def _count(self, a: np.ndarray, host: np.ndarray, took: np.ndarray, old: np.ndarray) -> None:
        self.took[a] = took
        change = np.bincount(host, took - old, self.head_sent.size)
        self.ahead += change
        self.ahead_total = max(self.ahead_total + float(change.sum()), 0.0)
