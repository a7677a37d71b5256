"""The sender's feedback half: ACK/NAK (go-back-N, the window), CNPs, and the rate and retransmit timers.

:class:`SenderFeedback` is the part of :class:`~emulator.endpoint.sender.SenderSide` that reacts to what
comes back from the receiver and to the sender's timers; the send path (posting, the send heap, batches)
is in :mod:`~emulator.endpoint.sender`.

* **ACK** (cumulative, PSN p): ``una ← p+1``; messages whose last PSN is below ``una`` complete their
  SEND op (last byte acknowledged). **NAK** (PSN sequence error, PSN p = receiver's expected PSN): acts
  as an ACK of p−1, then go-back-N: ``nxt ← p`` and every packet from p is sent again (counted as
  retransmits up to ``max_sent``).
* **Window** (``max_outstanding_bytes`` > 0, the direct driver): a QP whose sent, unacknowledged packets
  fill its window leaves the send heap until an ACK moves ``una``; a NAK halves the window (once per
  window of packets: NAKs below the ``max_sent`` of the last cut are of the same loss; never below one
  batch) and every window of acknowledged packets grows it by one packet (AIMD, as TCP Reno), so a
  receiver that falls behind is not overrun into go-back-N again and again. Cuts are counted in ``counters["window_cuts"]``.
* **RTO**: one timer per QP while packets are outstanding; after ``retransmit_timeout_ns × backoff``
  without progress: go back to ``una``, count a timeout, double the backoff (reset by ACK progress).
  Progress is an ACK that moves ``una``, a go-back (NAK or timeout), and a batch sent — except one sent
  in recovery once an ACK is owed. A QP that keeps sending needs no timer for a first loss: the next
  packet to arrive makes the receiver NAK; the timer covers the tail (a lost last packet, a lost NAK or
  ACK), and restarting it on sends keeps a slowly paced QP, whose ACKs are sparse, from timing out.
  *Recovery* lasts from a go-back until ``una`` reaches the ``max_sent`` of that go-back
  (``TxQp.recover``). The receiver NAKs once per sequence error, so a resend whose head is lost again
  brings no second NAK and every later packet is discarded: in recovery, a batch that starts
  ``ack_every_packets`` or more past ``una`` (an AckReq, and the receiver's own ACK count, are due
  before it) leaves the clock alone, so the QP times out ``retransmit_timeout_ns × backoff`` after the
  send that owed the ACK, however long it keeps sending (the IB transport timer restarts only on
  acknowledged progress); a slow QP in recovery still gets one RTO per ACK it owes.
* **CNP**: fed to the QP's rate controller; the controller's rate becomes the pacer's rate at once, its
  timers are returned to the endpoint's timer heap. A QP waiting in the send heap is re-timed
  (``SenderSide.retime``): one that was due and still is keeps its place in the NIC's round robin.
"""

from __future__ import annotations

from collections.abc import Callable

from emulator.endpoint.events import FlowEvent
from emulator.endpoint.records import EV_CNP_RECEIVED, EV_NAK_RECEIVED, EV_RETRANSMIT, EV_TIMEOUT, RankRecords
from emulator.endpoint.txqp import TxQp
from emulator.pacing.base import RateController
from emulator.wire.psn import PSN_HALF as _PSN_HALF
from emulator.wire.psn import PSN_MASK

#: timer kinds of the endpoint's timer heap owned by the sender
T_CTRL = 2
T_RTO = 3


class SenderFeedback:
    """ACK/NAK/CNP handling and the rate/RTO timers of :class:`~emulator.endpoint.sender.SenderSide` (which
    supplies the state named below and the send path: ``schedule``, ``rate_sample``)."""

    __slots__ = ()

    qps: dict[int, TxQp]
    idle_ctrl: RateController | None
    rec: RankRecords
    events: list[FlowEvent]
    t0_ns: int
    line_rate: float
    rto: int
    max_backoff: int
    wnd_max: int
    wnd_min: int
    model_time: bool
    full_batches: bool
    const_rate: bool
    _rto_deferred: dict[int, int]
    _on_acked: Callable[[int, int], None]
    _push_timer: Callable[[int, int, object], int]
    _wait_cost: Callable[[TxQp], int]
    spread_ns: int
    schedule: Callable[[TxQp, int], None]
    packet_gap_ns: Callable[[TxQp], int]

    def on_ack(self, qpn: int, syndrome: int, psn: int, now_ns: int) -> None:
        qs = self.qps.get((qpn - 2) >> 1)
        counters = self.rec.counters
        if qs is None or not qpn & 1:
            counters["unknown_qp"] += 1
            return
        kind = (syndrome >> 5) & 3
        rel = ((psn - (qs.una & PSN_MASK) + _PSN_HALF) & PSN_MASK) - _PSN_HALF  # psn_diff(psn, una), inline
        if kind == 0:
            counters["acks_received"] += 1
            new_una = qs.una + rel + 1
        elif kind == 3 and syndrome & 0x1F == 0:
            counters["naks_received"] += 1
            new_una = qs.una + rel
            op = qs.msgs[qs.head][2] if qs.head < len(qs.msgs) else -1
            self.events.append(FlowEvent(EV_NAK_RECEIVED, now_ns - self.t0_ns, qs.qp, psn,
                                         max(0, qs.max_sent - max(new_una, qs.una)), op))
        else:
            counters["other_aeth"] += 1
            return
        if new_una > qs.max_sent or new_una < qs.una:
            counters["stale_acks"] += 1
            return
        if qs.wnd:
            self._window(qs, kind, new_una)
        if new_una > qs.una:
            self._advance(qs, new_una, now_ns)
        if kind == 3 and qs.nxt > new_una:
            self._go_back(qs, new_una, now_ns)
        elif qs.send_seq is None:
            self.schedule(qs, now_ns)

    def _window(self, qs: TxQp, kind: int, new_una: int) -> None:
        """AIMD on the QP's window: a NAK (a loss at or past ``wnd_recover``) halves it, down to one batch;
        every window of acknowledged packets grows it by one packet, up to ``max_outstanding_bytes``."""
        if kind == 3:
            if new_una >= qs.wnd_recover:
                qs.wnd = max(self.wnd_min, qs.wnd // 2)
                qs.wnd_recover = qs.max_sent
                self.rec.count("window_cuts")
        elif qs.wnd < self.wnd_max and new_una > qs.una:
            qs.wnd_acked += new_una - qs.una
            if qs.wnd_acked >= qs.wnd:  # one packet more per window of packets acknowledged (Reno)
                qs.wnd_acked = 0
                qs.wnd += 1

    def _advance(self, qs: TxQp, new_una: int, now_ns: int) -> None:
        qs.una = new_una
        qs.last_progress_ns = now_ns
        qs.backoff = 1
        msgs = qs.msgs
        h = qs.head
        n = len(msgs)
        while h < n and msgs[h][0] + msgs[h][1] <= new_una:
            if msgs[h][5]:  # the flow's last message: the SEND op is done
                self._on_acked(msgs[h][2], now_ns)
            h += 1
        qs.head = h
        if qs.nxt < new_una:  # acknowledged beyond a go-back point: skip what the receiver holds
            qs.nxt = new_una
            qs.cur = qs.locate(new_una)
            self._rewaited(qs)
        elif qs.cur < h:
            qs.cur = h
            self._rewaited(qs)
        if h > 64 and 2 * h > n:
            del msgs[:h]
            del qs.starts[:h]
            qs.cur -= h
            qs.head = 0

    def _rewaited(self, qs: TxQp) -> None:
        """The QP's next packet moved while it waits in the send heap: its wait cost follows."""
        if qs.send_seq is not None and (qs.cur < len(qs.msgs) or qs.queue):
            qs.wcost = self._wait_cost(qs)

    def _go_back(self, qs: TxQp, psn: int, now_ns: int) -> None:
        qs.nxt = psn
        qs.cur = qs.locate(psn)
        if psn < qs.max_sent:  # recovery until una reaches max_sent; its RTO clock runs from here
            qs.recover = qs.max_sent
            qs.last_progress_ns = now_ns
            op = qs.msgs[qs.cur][2] if qs.cur < len(qs.msgs) else -1
            qs.retx_ev = True
            self.events.append(FlowEvent(EV_RETRANSMIT, now_ns - self.t0_ns, qs.qp, psn & PSN_MASK, 0, op))
        if qs.send_seq is not None:
            qs.send_seq = None  # invalidate the old heap entry; reinsert at the pacer's time
        self.schedule(qs, now_ns)

    def on_cnp(self, qpn: int, now_ns: int) -> None:
        qs = self.qps.get((qpn - 2) >> 1)
        rec = self.rec
        if qs is None or not qpn & 1:
            rec.counters["unknown_qp"] += 1
            return
        rec.counters["cnps_received"] += 1
        op = -1
        if qs.head < len(qs.msgs):
            op = qs.msgs[qs.head][2]
        elif qs.queue:
            op = qs.queue[0][0]
        if op >= 0:
            rec.cnps[op] += 1
        self.events.append(FlowEvent(EV_CNP_RECEIVED, now_ns - self.t0_ns, qs.qp, qs.nxt & PSN_MASK, 0, op))
        ctrl = qs.ctrl
        if ctrl is self.idle_ctrl:  # the sender's shared idle controller (``SenderSide.idle_ctrl``): its own from now
            ctrl = qs.ctrl = ctrl.copy()
        ctrl.on_cnp(now_ns)
        self.sync_rate(qs, now_ns)

    # -- timers -------------------------------------------------------------------------------------
    def sync_rate(self, qs: TxQp, now_ns: int) -> None:
        """Propagate the controller's rate to the pacer and its next deadline to the timer heap."""
        ctrl = qs.ctrl
        rate = ctrl.rate_bps
        if rate != qs.rate_bps:
            qs.rate_bps = rate
            qs.pacer.set_rate(min(rate, self.line_rate), now_ns)
            self.rate_sample(qs, now_ns)
            if qs.send_seq is not None:  # re-timed, keeping its place in the round robin while it stays due
                self.retime(qs, now_ns)
        t = ctrl.next_timer_ns()
        if t != qs.ctrl_t:
            qs.ctrl_t = t
            if t is not None:
                qs.ctrl_seq = self._push_timer(t, T_CTRL, qs)

    def retime(self, qs: TxQp, now_ns: int) -> None:
        """``qs``'s rate changed while it waits in the send heap: its entry moves to the time its pacer now
        allows its next visit, but a QP due before and after the change keeps its entry — its place in the
        NIC's round robin (a backlogged QP re-keyed at ``now_ns`` would go behind every QP due before it)."""
        due = qs.due_ns
        if due <= now_ns:
            t = qs.pacer.ready_ns(qs.wcost, now_ns)
            if t is not None and t <= now_ns and not (
                    self.spread_ns and qs.stamp_last + self.packet_gap_ns(qs) - self.spread_ns > now_ns):
                return
        self.schedule(qs, now_ns)

    def restart_pacers(self, now_ns: int) -> int:
        """The rank's first poll's transmits go at ``now_ns`` (wall time, not model time): its queue pairs'
        pacers owe nothing for the time before (``TokenBucketPacer.restart``), and one still backlogged
        accrues again from here, so a late wake-up after it is repaid; returns the pacers restarted."""
        if self.model_time:  # the service runs on model time from the origin: nothing to restart
            return 0
        n = 0
        for qs in self.qps.values():
            p = qs.pacer
            if not p.bytes_sent:
                continue
            p.restart(now_ns)
            if qs.cur < len(qs.msgs) or qs.queue:
                p.ready_ns(min(qs.wcost, p.burst_bytes), now_ns)
            n += 1
        return n

    def sent_late(self, paced_ns: int, sent_ns: int) -> bool:
        """What the rank paced at ``paced_ns`` left only by ``sent_ns`` (a wall-time driver preempted before or
        inside its send): each deficit pacer below the line rate that spent at ``paced_ns`` counts its gate
        from ``sent_ns`` (``TokenBucketPacer.sent_late``), so the gate's refill during the preemption does not
        go right behind the late burst (bench/pacing_burst.py under busy loops: four batches back to back
        where the bound is three). A line-rate pacer's catch-up is the line's. Returns False, holding
        nothing, when the send was on time or the rank's pacers keep no deficit (not constant-rate whole
        batches)."""
        if sent_ns <= paced_ns or not (self.full_batches and self.const_rate):
            return False
        line = self.line_rate
        for qs in self.qps.values():
            if qs.pacer.rate_bps < line:
                qs.pacer.sent_late(paced_ns, sent_ns)
        return True

    def on_ctrl_timer(self, qs: TxQp, seq: int, now_ns: int) -> None:
        if qs.ctrl_seq != seq:
            return
        qs.ctrl_t = None
        qs.ctrl.on_timer(now_ns)
        self.sync_rate(qs, now_ns)

    def arm_rto(self, qs: TxQp, t_ns: int) -> None:
        qs.rto_seq = self._push_timer(t_ns, T_RTO, qs)

    def on_rto(self, qs: TxQp, seq: int, now_ns: int) -> None:
        if qs.rto_seq != seq:
            return
        qs.rto_seq = None
        if qs.una >= qs.max_sent:
            return
        deadline = qs.last_progress_ns + self.rto * qs.backoff
        grace = self.rto >> 3  # model time: a late look at a timeout is confirmed by another (sender docstring)
        if self.model_time and now_ns - deadline > grace and self._rto_deferred.get(qs.qp) != deadline:
            self._rto_deferred[qs.qp] = deadline  # a driver this late may hold the ACK unread: look again
            deadline = now_ns + grace
        elif now_ns >= deadline:
            rec = self.rec
            rec.counters["timeouts"] += 1
            op = -1
            if qs.head < len(qs.msgs):
                op = qs.msgs[qs.head][2]
                rec.timeouts[op] += 1
            self.events.append(FlowEvent(EV_TIMEOUT, now_ns - self.t0_ns, qs.qp, qs.una & PSN_MASK,
                                         qs.max_sent - qs.una, op))
            qs.backoff = min(qs.backoff * 2, self.max_backoff)
            qs.last_progress_ns = now_ns
            self._go_back(qs, qs.una, now_ns)
            deadline = now_ns + self.rto * qs.backoff
        self.arm_rto(qs, deadline)
