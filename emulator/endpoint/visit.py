"""The sender's one-packet visit: the sim driver's per-packet send, without the general poll around it.

On the sim driver (per-packet pacing: no stamp spread, no full batches, no model-time service, no reused
buffers) almost every visit of the send heap sends one packet: the pacers release a packet, the heap's top
queue pair sends it, and the next visit is due a packet time later. :meth:`PacketVisit.visit_one` does
exactly that visit — the same pacer and NIC charges, PSN, AckReq bit, counters, controller call, events,
timers and send-heap entries, in the same order, as :meth:`~emulator.endpoint.sender.SenderSide.poll`
would — when it can tell beforehand that the visit is such a one-packet one (a first, middle or last
packet of a message, not a re-send, no ICRC, tokens for fewer than two full packets or the message's last
packet); otherwise it changes nothing (but the pacers' refill to ``now_ns``, which the general path would
do the same) and says so, and the caller takes the general path.
"""

from __future__ import annotations

import heapq
import struct

from emulator.endpoint.events import FlowEvent, OpEventKind, Transmit
from emulator.endpoint.middles import ACK_REQ, W0_MIDDLE
from emulator.pacing.pacer import UNITS_PER_BYTE as _UNITS
from emulator.wire import message_packets
from emulator.wire.psn import PSN_MASK

_EV_STARTED = int(OpEventKind.OP_STARTED)
_tx = tuple.__new__  # _tx(Transmit, fields): a Transmit without its __new__'s Python frame
#: BTH word 0 of a FIRST packet: RC RDMA WRITE FIRST, no SE/MigReq/pad, TVer 0, default P_Key
W0_FIRST = (0x06 << 24) | 0xFFFF
#: payload bytes of a header-only FIRST or MIDDLE packet: the send-time stamp alone
STAMP_ONLY = 8
#: a header-only MIDDLE packet: the BTH, the send-time stamp and the zero ICRC of a full-MTU MIDDLE without the
#: zero payload between them; ``pack(W0_MIDDLE, dest_qp, PSN word, stamp_ns + 1)`` as ``MiddleWriter.one``. The
#: sim's senders write these (:func:`header_only_packets`); its ports and receivers count them as full packets
SHORT_MIDDLE = struct.Struct("!IIIQ4x")
#: its length (24 bytes), which no packet of opcode MIDDLE but these has (a MIDDLE packet carries a full MTU)
SHORT_MIDDLE_BYTES = SHORT_MIDDLE.size
#: a header-only FIRST packet (40 bytes): BTH, RETH, stamp, zero ICRC; ``pack(W0_FIRST, dest_qp, PSN word, va, 0,
#: message_bytes, stamp_ns + 1)`` as :func:`first_packer`'s
SHORT_FIRST = struct.Struct("!IIIQIIQ4x")
#: a header-only LAST packet (22 bytes): BTH (with the full packet's pad count), stamp, and the full packet's length
#: (BTH + payload + pad + ICRC) where the payload would go on; ``pack(W0_LAST[pad], dest_qp, PSN word, stamp_ns + 1,
#: length)``. No RoCEv2 packet has this length (theirs are multiples of 4): its receiver tells it by the length alone
SHORT_LAST = struct.Struct("!IIIQH")
#: its length
SHORT_LAST_BYTES = SHORT_LAST.size
#: BTH word 0 of a LAST packet by its pad count: RC RDMA WRITE LAST, default P_Key
W0_LAST = tuple((0x08 << 24) | (pad << 20) | 0xFFFF for pad in range(4))


def first_packer(mtu_bytes: int):
    """The packer of a full-MTU FIRST packet: the bytes ``BatchWriter.write`` gives for a message's stamped first
    packet alone (zero payload after the stamp, zero ICRC), from the same arguments as ``SHORT_FIRST.pack``."""
    return struct.Struct(f"!IIIQIIQ{mtu_bytes - 4}x").pack


def header_only_packets(eps: list) -> int:
    """The endpoints ``eps`` (a sim's) write the FIRST, MIDDLE and LAST packets of their one-packet visits
    header-only (``SHORT_FIRST``, ``SHORT_MIDDLE``, ``SHORT_LAST``: no zero payload to make per packet) and take
    such packets for full ones; returns the bytes a header-only FIRST or MIDDLE stands for beyond its own (MTU −
    stamp; a header-only LAST carries its full length)."""
    for ep in eps:
        ep._tx.middle_one = SHORT_MIDDLE.pack
        ep._tx.first_one = SHORT_FIRST.pack
        ep._tx.last_one = SHORT_LAST.pack
        ep._rx.short_payload = STAMP_ONLY
    return eps[0]._tx.mtu - STAMP_ONLY if eps else 0


class PacketVisit:
    """:meth:`visit_one` of :class:`~emulator.endpoint.sender.SenderSide` (its attributes are the sender's)."""

    __slots__ = ()

    def one_packet_visits(self) -> bool:
        """This sender's visits may take :meth:`visit_one` (per-packet pacing, fresh buffers, no bursts)."""
        return (not self.model_time and not self.full_batches and not self.spread_ns and self.arena is None
                and not self.bursts and self.fast and (self.batch > 1 or not self.const_rate) and self.nic.plain)

    def visit_one(self, now_ns: int, max_batches: int, out: list[Transmit]) -> bool:
        """Serve the send heap at ``now_ns`` as ``poll(now_ns, max_batches, out)`` would, when its first visit
        sends one packet (module docstring); False, having changed nothing, when it would not."""
        heap = self.heap
        if not heap:
            return False
        t, seq, qs = heap[0]
        if qs.send_seq != seq or t > now_ns or qs.icrc is not None or qs.max_sent != qs.nxt:
            return False
        cur = qs.cur
        msgs = qs.msgs
        if cur < len(msgs):
            start, n_pkts, op, flow, size, _ = msgs[cur]
            j = qs.nxt - start
        elif qs.queue:
            n_pkts = message_packets(qs.queue[0][2], self.mtu)
            j = 0
        else:
            return False
        cost1 = qs.wcost
        # the NIC's and the QP's available_bytes(now_ns), inline: both are plain buckets (one_packet_visits)
        nic = self.nic
        tokens = nic._tokens
        if now_ns > nic._t_ns:
            if tokens < nic._cap:
                tokens += nic._rate * (now_ns - nic._t_ns)
                if tokens > nic._cap:
                    tokens = nic._cap
                nic._tokens = tokens
            nic._t_ns = now_ns
        nic_avail = tokens // _UNITS
        if nic_avail < cost1:
            return False
        pacer = qs.pacer
        tokens = pacer._tokens
        if now_ns > pacer._t_ns:
            if tokens < pacer._cap:
                tokens += pacer._rate * (now_ns - pacer._t_ns)
                if tokens > pacer._cap:
                    tokens = pacer._cap
                pacer._tokens = tokens
            pacer._t_ns = now_ns
        avail = tokens // _UNITS
        if nic_avail < avail:
            avail = nic_avail
        if avail < cost1 or (avail >= 2 * self.full_cost and n_pkts - j > 1):
            return False
        # one packet goes: as poll → _send_batch → schedule, for k = 1 (its heap entry is taken off below, where the
        # QP's next one is known: nothing between reads or changes the send heap)
        qs.send_seq = None
        if cur == len(msgs):  # start the next message of the QP
            op, flow, size, first, last = qs.queue.popleft()
            msgs.append((qs.nxt, n_pkts, op, flow, size, last))
            qs.starts.append(qs.nxt)
            if first:
                self.events.append(_tx(FlowEvent, (_EV_STARTED, now_ns - self.t0_ns, qs.qp, 0, 0, op, 0)))
        ends = j + 1 == n_pkts
        since = qs.since_ackreq + 1
        ack_req = ends or since >= self.ack_every
        qs.since_ackreq = 0 if ack_req else since
        nxt = qs.nxt
        if j and not ends:  # a full MIDDLE packet
            buf = self.middle_one(W0_MIDDLE, qs.dqpn, (nxt & PSN_MASK) | ACK_REQ if ack_req else nxt & PSN_MASK, t + 1)
            out.append(_tx(Transmit, (qs.dst, buf, 0, self.data_tos, t, 0)))
            cost = self.mid_row + self.overhead
            payload = self.mtu
        elif not ends:  # a message's FIRST packet (full MTU): RETH address the flow, length the message's
            buf = self.first_one(W0_FIRST, qs.dqpn, (nxt & PSN_MASK) | ACK_REQ if ack_req else nxt & PSN_MASK, flow, 0,
                                 size, t + 1)
            out.append(_tx(Transmit, (qs.dst, buf, 0, self.data_tos, t, 0)))
            cost = self.mid_row + 16 + self.overhead
            payload = self.mtu
        elif j and self.last_one is not None and (payload := size - j * self.mtu) >= STAMP_ONLY:
            # a message's LAST packet, header-only (SHORT_LAST): the stamp, then the full packet's length
            pad = -payload & 3
            length = payload + pad + 16  # BTH 12 + payload + pad + ICRC 4
            buf = self.last_one(W0_LAST[pad], qs.dqpn, (nxt & PSN_MASK) | ACK_REQ if ack_req else nxt & PSN_MASK,
                                t + 1, length)
            out.append(_tx(Transmit, (qs.dst, buf, 0, self.data_tos, t, 0)))
            cost = length + self.overhead
        else:
            buf, sends = self.batches(qs.dqpn, nxt, size, j, 1, flow, ack_req, t, 0)
            _, length, seg = sends[0]
            out.append(_tx(Transmit, (qs.dst, buf, 0 if length == seg else seg, self.data_tos, t, 0)))
            cost = len(buf) + self.overhead
            payload = self._payload(size, j, j + 1)
        self.op_packets[op] += 1
        counters = self.rec.counters
        counters["packets_sent"] += 1
        counters["bytes_sent"] += payload
        qs.nxt = qs.max_sent = nxt + 1
        if ends:
            qs.cur = cur + 1
        if cost <= avail:  # both buckets, refilled to now_ns above, hold it: their spend(cost), inline
            units = cost * _UNITS
            nic._tokens -= units
            nic.bytes_sent += cost
            pacer._tokens -= units
            pacer.bytes_sent += cost
            nic_avail -= cost
        else:
            if nic.try_send(cost, now_ns):
                nic_avail -= cost
            pacer.try_send(cost, now_ns)
        if qs.una >= qs.recover or nxt - qs.una < self.ack_every:  # unless an ACK is owed in recovery (feedback)
            qs.last_progress_ns = now_ns
        # False: the controller's rate and timer are still those of its making, which the QP holds: nothing to sync
        ctrl = qs.ctrl
        if ctrl is self.idle_ctrl:  # the sender's idle DCQCN controller (no CNP yet): its on_bytes_sent, inline
            if now_ns > ctrl._t_ns:
                ctrl._t_ns = now_ns
        elif ctrl.on_bytes_sent(cost, now_ns) is not False and not self.const_rate:
            self.sync_rate(qs, now_ns)
        if qs.rto_seq is None:
            self.arm_rto(qs, now_ns + self.rto * qs.backoff)
        if ends:  # (send_seq is still None: sync_rate re-times only a QP in the heap)
            heapq.heappop(heap)
            self.schedule(qs, now_ns)
        elif qs.wnd and qs.nxt - qs.una >= qs.wnd:  # window full: an ACK that moves una reschedules it
            heapq.heappop(heap)
        else:  # schedule(qs, now_ns) for the message's next packet: its cost as _wait_cost gives it
            rest = size - (j + 1) * self.mtu
            cost = qs.wcost = (rest if rest < self.mtu else self.mtu) + self.later_hdr
            if now_ns > pacer._t_ns:  # the controller moved the bucket's clock? (ready_ns would refill)
                due = pacer.ready_ns(cost, now_ns)
            else:  # ready_ns(cost, now_ns) of the plain bucket, inline
                need = cost * _UNITS - pacer._tokens
                if cost > pacer.burst_bytes:
                    due = None
                elif need <= 0:
                    due = pacer._t_ns
                else:
                    due = pacer._t_ns - (-need // pacer._rate) if pacer._rate else None
            if due is None:  # cannot happen with a positive rate; keep the QP alive anyway
                due = now_ns + 1_000_000
            self.seq = seq = self.seq + 1
            qs.send_seq = seq
            qs.due_ns = due
            heapq.heapreplace(heap, (due, seq, qs))  # in the place of the entry this visit took
        if max_batches > 1 and heap:
            # the general poll would look at the heap again: its top is stale, or due and within the NIC's tokens
            # (nic_avail: the NIC's bytes at now_ns, as available_bytes would count them after this packet)
            t, seq, top = heap[0]
            if top.send_seq != seq or not (top.cur < len(top.msgs) or top.queue) or (
                    t <= now_ns and nic_avail >= top.wcost):
                self.poll(now_ns, max_batches - 1, out)  # another visit is due: the general loop goes on
        return True
