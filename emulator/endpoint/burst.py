"""The sender's poll for a socket driver's constant-rate queue pairs: a visit's run of batches in one frame.

With a socket driver (``socket_sends`` with ``pace_full_batches``) and a constant-rate controller (cc ``none``
or ``fixed``: the collectives' case) a visit sends every batch the QP's tokens allow, across its messages
(:mod:`~emulator.endpoint.sender`, "socket mode"). :meth:`BurstVisit.poll_bursts` is
:meth:`~emulator.endpoint.sender.SenderSide.poll` for such a sender with no stamp spread, MIDDLE runs
written into the reused arena and handed out as one :class:`~emulator.endpoint.events.TransmitRun`, a
message's FIRST and LAST batches of two packets or more in the arena too (the FIRST packet, 16 bytes longer
than a row, a send of its own; the LAST one a row's head, :meth:`~emulator.endpoint.middles.MiddleArena.write_last`), zero
ICRC and a plain NIC bucket: the general poll, ``_send_batch``, ``_burst_goes_on`` and ``schedule`` folded
into one frame per poll, with the NIC bucket's arithmetic, a message's payload and a steady-state wait cost
inline, and the branches this configuration never takes (model-time service, stamp spread, rate changes,
per-batch transmits) left out. The packets, their order, the transmits and every counter, event, pacer,
timer and send-heap entry are the general path's (tests/endpoint/test_sender_burst_poll.py drives both
through the same lossy schedules); what it saves is the interpreter's calls per visit (a visit cost ~45
Python calls on the general path, bench/RESULTS.md dpoll15).
"""

from __future__ import annotations

from heapq import heappop, heapreplace

from emulator.endpoint.events import FlowEvent, OpEventKind, Transmit, TransmitRun
from emulator.pacing.pacer import UNITS_PER_BYTE as _UNITS
from emulator.wire import message_packets

_ev = tuple.__new__  # an event without the named tuple's __new__ frame
_tx = tuple.__new__  # a Transmit / TransmitRun without its __new__'s frame
_EV_STARTED = int(OpEventKind.OP_STARTED)


class BurstVisit:
    """:meth:`poll_bursts` of :class:`~emulator.endpoint.sender.SenderSide` (its attributes are the sender's)."""

    __slots__ = ()

    def burst_polls(self) -> bool:
        """This sender's polls may take :meth:`poll_bursts` (module docstring)."""
        return bool(self.bursts and not self.model_time and not self.spread_ns and self.run_tx and self.fast
                    and not self._icrc and self.nic.plain)

    def poll_bursts(self, now_ns: int, max_batches: int, out: list[Transmit]) -> None:
        """``poll(now_ns, max_batches, out)`` of a sender whose :meth:`burst_polls` holds: the same transmits
        and state, fewer interpreter calls (module docstring)."""
        heap = self.heap
        arena = self.arena
        arena._i = arena._pos = 0  # the driver sent the previous poll's batches: every row is free again
        if arena._patched:  # rows the last poll's LAST packets took: MIDDLE rows again (MiddleArena.reset)
            arena.restore()
        nic = self.nic
        n = 0
        while heap and n < max_batches:
            t, seq, qs = heap[0]
            msgs = qs.msgs
            if qs.send_seq != seq or not (qs.cur < len(msgs) or qs.queue):
                if qs.send_seq == seq:
                    qs.send_seq = None
                heappop(heap)
                continue
            if t > now_ns:
                return
            if now_ns > nic._t_ns:  # TokenBucketPacer.available_bytes of a plain bucket, inline
                tokens = nic._tokens
                if tokens < nic._cap:
                    tokens += nic._rate * (now_ns - nic._t_ns)
                    nic._tokens = tokens if tokens < nic._cap else nic._cap
                nic._t_ns = now_ns
            nic_avail = nic._tokens // _UNITS
            cost1 = qs.wcost
            if nic_avail < cost1:
                return
            # its entry stays on top while it is served (the visit pushes nothing on the send heap) and is
            # then replaced by the new one: the pop and the push of the general path in one call
            qs.send_seq = None
            n += self._burst(qs, now_ns, nic_avail, cost1, out, max_batches - n, t)
            # schedule(qs, now_ns), with the steady state's wait cost inline
            cur = qs.cur
            if cur < len(msgs):
                if qs.wnd and qs.nxt - qs.una >= qs.wnd:
                    heappop(heap)
                    continue
                start, n_pkts = msgs[cur][:2]
                cost = self.burst if qs.nxt - start + self.batch < n_pkts else self._wait_cost(qs)
            elif qs.queue:
                if qs.wnd and qs.nxt - qs.una >= qs.wnd:
                    heappop(heap)
                    continue
                cost = self._wait_cost(qs)
            else:
                heappop(heap)
                qs.pacer.idle(now_ns)
                continue
            qs.wcost = cost
            t = qs.pacer.ready_ns(cost, now_ns)
            if t is None:
                t = now_ns + 1_000_000
            self.seq += 1
            qs.send_seq = self.seq
            qs.due_ns = t
            heapreplace(heap, (t, self.seq, qs))

    def _burst(self, qs, now_ns: int, nic_avail: int, cost1: int, out: list[Transmit], room: int, t_ns: int) -> int:
        """``_send_batch`` of a visit of :meth:`poll_bursts` (its QP paced to go at ``t_ns`` ≤ ``now_ns``):
        every batch the QP's tokens (within the NIC's ``nic_avail``) allow, up to ``room``; returns how many."""
        avail = qs.pacer.available_bytes(now_ns)
        if nic_avail < avail:
            avail = nic_avail
        if avail < cost1:
            return 0
        tos = self.data_tos
        wnd = qs.wnd
        full_cost = self.full_cost
        batch = self.batch
        mtu = self.mtu
        ack_every = self.ack_every
        msgs = qs.msgs
        n_msgs = len(msgs)
        nxt0 = qs.nxt
        spent = sent = 0  # bytes and batches of this visit
        while True:
            if qs.cur == n_msgs:  # start the next message of the QP
                op, flow, size, first, last = qs.queue.popleft()
                n_pkts = message_packets(size, mtu)
                msgs.append((qs.nxt, n_pkts, op, flow, size, last))
                n_msgs += 1
                qs.starts.append(qs.nxt)
                if first:
                    self.events.append(_ev(FlowEvent, (_EV_STARTED, now_ns - self.t0_ns, qs.qp, 0, 0, op, 0)))
            start, n_pkts, op, flow, size, _ = msgs[qs.cur]
            j = qs.nxt - start
            left = n_pkts - j
            k = (avail - spent) // full_cost
            if k > batch:
                k = batch
            elif k < 1:
                k = 1
            if k > left:
                k = left
            if wnd:
                room_w = wnd - (qs.nxt - qs.una)
                if k > room_w:
                    k = room_w if room_w > 1 else 1
            ends = k == left
            ack_req = ends or qs.since_ackreq + k >= ack_every
            qs.since_ackreq = 0 if ack_req else qs.since_ackreq + k
            if j > 0 and not ends:  # a run of full MIDDLE batches (sender docstring, "fast path")
                rows = [k - 1] if ack_req else []  # the run's AckReq rows (the last row of each batch that asks)
                m = 1
                one = k * (self.mid_row + self.overhead)
                if k == batch and room - sent > 1:
                    need = k * full_cost
                    left_after = left - k
                    last_row = k - 1
                    while sent + m < room and left_after > k and avail - spent - m * one >= need and (
                            not wnd or qs.nxt - qs.una + (m + 1) * k <= wnd):
                        last_row += k
                        if qs.since_ackreq + k >= ack_every:
                            qs.since_ackreq = 0
                            rows.append(last_row)
                        else:
                            qs.since_ackreq += k
                        m += 1
                        left_after -= k
                buf = self.arena.write(qs.dqpn, qs.nxt, k * m, t_ns, 0, rows)
                seg = self.mid_row if k > 1 else 0
                if m == 1:
                    out.append(_tx(Transmit, (qs.dst, buf, seg, tos, t_ns, 0)))
                else:
                    out.append(_tx(TransmitRun, (qs.dst, buf, seg, tos, t_ns, 0, m)))
                cost = m * one
                k *= m
                payload = k * mtu
            elif k > 2 or (k == 2 and j):  # a message's FIRST and/or LAST batch, in the arena (not FIRST + one: a
                # packet shorter than the FIRST after it joins its GSO send)
                dst = qs.dst
                psn = qs.nxt
                rows_n = k
                cost = k * self.overhead
                if j == 0:  # the FIRST packet (its RETH makes it 16 bytes longer than a row): a send of its own
                    first, _ = self.batches(qs.dqpn, psn, size, 0, 1, flow, False, t_ns, 0)
                    out.append(_tx(Transmit, (dst, first, 0, tos, t_ns, 0)))
                    cost += len(first)
                    psn += 1
                    rows_n -= 1
                if ends:  # MIDDLE rows and the LAST packet: one GSO send (only the last segment shorter)
                    buf = self.arena.write_last(qs.dqpn, psn, rows_n, t_ns, ack_req, size - (n_pkts - 1) * mtu)
                else:
                    buf = self.arena.write(qs.dqpn, psn, rows_n, t_ns, 0, (rows_n - 1,) if ack_req else ())
                out.append(_tx(Transmit, (dst, buf, self.mid_row if rows_n > 1 else 0, tos, t_ns, 0)))
                cost += len(buf)
                payload = self._payload(size, j, j + k)
                m = 1
            else:  # one packet, or a FIRST and one more (one GSO send of the FIRST's segment size)
                buf, sends = self.batches(qs.dqpn, qs.nxt, size, j, k, flow, ack_req, t_ns, 0)
                cost = len(buf) + k * self.overhead
                if len(sends) == 1:
                    _, length, seg = sends[0]
                    out.append(_tx(Transmit, (qs.dst, buf, 0 if length == seg else seg, tos, t_ns, 0)))
                else:
                    mv = memoryview(buf)
                    for off, length, seg in sends:
                        out.append(_tx(Transmit, (qs.dst, mv[off : off + length], 0 if length == seg else seg, tos,
                                                  t_ns, 0)))
                payload = self._payload(size, j, j + k)
                m = 1
            self._book_run(qs, op, size, j, k, payload, ends, now_ns)
            spent += cost
            sent += m
            rest = avail - spent
            if sent >= room or rest < full_cost:
                break
            # _burst_goes_on: a packet to send, window room, tokens for the next whole batch
            if qs.cur < n_msgs:
                start, n_pkts = msgs[qs.cur][:2]
                left = n_pkts - (qs.nxt - start)
            elif qs.queue:
                left = message_packets(qs.queue[0][2], mtu)
            else:
                break
            if wnd and qs.nxt - qs.una >= wnd:
                break
            if rest < (left if left < batch else batch) * full_cost:
                break
        nic = self.nic  # nic.try_send(spent, now_ns) of a plain bucket refilled to now_ns, inline
        units = spent * _UNITS
        if spent <= nic.burst_bytes and units <= nic._tokens:
            nic._tokens -= units
            nic.bytes_sent += spent
        qs.pacer.try_send(spent, now_ns)
        if qs.una >= qs.recover or nxt0 - qs.una < self.ack_every:  # the RTO clock restarts with a batch unless an ACK is owed in recovery (feedback docstring)
            qs.last_progress_ns = now_ns
        qs.ctrl.on_bytes_sent(spent, now_ns)  # a constant rate: no rate to sync
        if qs.rto_seq is None:
            self.arm_rto(qs, now_ns + self.rto * qs.backoff)
        return sent
