"""The sending half of a rank endpoint: queue pairs, pacing, GSO batches, ACK/NAK/CNP handling, go-back-N.

Theory of operation
-------------------
Every queue pair this rank sends on (``Schedule.flow_qp``) has a :class:`TxQp`. PSNs are kept as
unbounded integers internally (``una`` ≤ ``nxt`` ≤ ``max_sent``, from ``initial_psn``) and wrapped to 24 bits only on the wire,
so comparisons never need serial arithmetic except when a 24-bit ACK PSN is mapped back (relative to
``una``).

Per-QP state machine::

    idle ──post──▶ sending ──all sent──▶ waiting-ack ──ACK covers max_sent──▶ idle
                     ▲   ╲                   │
                     │    ╲ NAK(psn) / RTO    │ NAK(psn) / RTO: nxt ← psn (go-back-N)
                     │     ▼                 ▼
                     └── retransmitting (nxt < max_sent) ──reaches max_sent──▶ sending / waiting-ack

* **post**: a SEND op becomes ready; its flow joins the QP's FIFO (flows of a QP go out in the order
  their SEND ops became ready, i.e. post order) as one RDMA WRITE message, or as several when it is
  longer than ``EndpointConfig.message_bytes`` (the RETH DMA length is 32 bits: at most 2^31−1 bytes per
  message, cut at a multiple of the MTU as NCCL cuts chunks; every message carries the flow id as its
  virtual address; with ``qps_per_peer`` > 1 the endpoint posts each part of the flow on its own wire
  QP, :mod:`~emulator.endpoint.qpn`). A message gets its PSNs when its first packet is sent: it is appended to ``msgs``
  (start PSN, packet count, op, flow, size, last), kept sorted by PSN. The op starts with its flow's
  first message and completes when the last one (``last``) is acknowledged.
* **sending**: the QP sits in a heap keyed by the time its pacer allows the next packet. ``poll``
  pops QPs due by ``now`` (FIFO among equal times, so QPs share the NIC round-robin; a rate change moves a
  waiting QP's entry only if it changes when the QP is due, so a QP due before and after keeps its place:
  ``retime``) and builds one GSO
  batch per visit (in socket mode a burst of them, below): up to ``batch_packets`` consecutive packets of one message, as many as both the
  QP's token bucket (at the controller's rate) and the rank's NIC token bucket (line rate) allow.
  Buckets hold one full batch, or ``rate × constant_rate_burst_ns`` for the constant-rate ones (NIC,
  QPs without congestion control), so a late driver sends several batches in one ``poll``. A QP is due
  when one packet may go; with ``full_batches`` (set by the socket drivers through
  ``EndpointConfig.pace_full_batches``) when the next ``min(batch, packets left in the message)`` may go,
  so a driver loop faster than a packet time still sends whole GSO batches (same rate, coarser grain);
  the buckets then hold two batches, so a late wake-up of up to one batch time loses no tokens.
  In socket mode the line-rate buckets (the NIC's, a QP's under ``none``) hold at least
  ``EndpointConfig.line_rate_burst_batches`` (at most ``LINE_BURST_MAX_NS`` at the line rate): a driver
  short of CPU then pays a visit's fixed work once per that many batches.
  The tokens a QP waits for are computed once, when it enters the heap (``TxQp.wcost``), and used by
  ``poll`` and the endpoint's next wake (:mod:`~emulator.endpoint.wake`); what moves its next packet while it
  waits (a post, an ACK past a go-back point) recomputes them.
  With ``full_batches`` (a socket driver, which wakes up when the OS lets it) the pacers of constant-rate
  QPs (cc ``none``/``fixed``) keep the deficit of a late driver (``PACER_MAX_LAG_NS``,
  :mod:`emulator.pacing.pacer`): a wake-up later than the burst covers sends at most one burst at once,
  and the rest of what the schedule owes follows at up to a catch-up ratio × the QP's rate, so a
  flow below the line rate holds its rate over any window however its driver's wake-ups jitter. The ratio
  (``_catch_up_ratio``) is as high as the line leaves room for, between ``PACER_CATCH_UP_RATIO`` and
  ``PACER_CATCH_UP_RATIO_MAX``: the batch after a burst starts no sooner than the burst and that batch take
  at the line rate (``line × batch / ((burst + batch) × rate)``), so, above the floor, no run of batches back
  to back at the line reaches the burst plus one batch, even when the driver sends a burst up to a batch
  time after it was paced. A driver that runs ``on`` of every ``period`` keeps the rate while ``burst +
  ratio × rate × on ≥ rate × period`` (1 Gbit/s on 10 Gbit/s: ratio 10/3, enough for 1 ms in 4). A QP with nothing to send forgets its deficit. The NIC pacer
  stays a plain bucket (no catch-up exceeds the line rate), so do rate-controlled QPs (DCQCN's rate is what
  to send now; catching up above it would add congestion the controller did not ask for) and every pacer
  of the sim driver (never late: a NIC it holds back is backpressure, not lateness).
  With ``model_time_service`` (the loopback driver) ``poll`` serves the QPs as the sim's driver would call it:
  each visit acts at ``max(its QP's due time, the previous visit, the NIC bucket's ready time)``, not at the
  driver's wake-up — its pacer and NIC charges, its batch size, its events and its place in the round-robin
  are those of that time — and QPs are due per packet (``pace_full_batches`` is ignored), so a late wake-up
  sends what was due in the order and batches of an on-time sim endpoint (an idle NIC takes a full batch).
  Each batch is stamped when the NIC starts it (the previous batch's end at the line rate, as the sim's NIC
  FIFO): the switch's port model sees the sim's arrival process, however the wake-ups jitter. The retransmit
  clock runs from the poll that really sent the packets; a timeout found over RTO/8 late is looked at again
  RTO/8 later (the late driver may hold the ACK unread).
  With a stamp spread (``stamp_spread_ns`` > 0, set by the loopback driver through
  ``EndpointConfig.stamp_spread_ns``) the packets of a batch carry send-time stamps one packet time apart
  at the QP's pacing rate (``min(rate, line rate)``), not one stamp for the whole batch, so the switch's
  port model sees them arrive as a per-packet pacer would send them; and a batch holds at most
  ``1 + stamp_spread_ns // packet time`` packets (at least one), so no batch commits packets further
  than the spread ahead of the pacer's decision: a rate cut acts within it, as at a per-packet pacer.
  A QP's stamps are never closer than one packet time at its current rate (a burst the bucket allows is
  stamped at the QP's rate), and a QP is not due while its next stamp (its last one plus a packet time
  at its *current* rate: a rate raised after a cut acts at once) is more than the spread ahead of the
  clock.
  AckReq is set on a message's last packet and on a batch's last packet once ``ack_every_packets``
  packets went out since the previous AckReq.
* **ACK**, **NAK**, **Window**, **RTO**, **CNP**: :mod:`~emulator.endpoint.feedback`.

**Event log** (:mod:`emulator.endpoint.records`): a received CNP, a received NAK, each go-back-N rewind
(``retransmit``, whose packet count grows as the re-sent packets go out: RETRANSMITTED events grow it) and
each timeout append one row; nothing is logged per packet.

All work is per visit or per batch (one heap operation, one pacer charge, one controller call per visit;
one buffer built by :func:`emulator.wire.build_write_batch` per batch), never per byte.

**Fast path** (steady state of a long message): a batch of MIDDLE packets only (not the message's first
packet, not its last, zero ICRC) is written by :meth:`~emulator.endpoint.middles.MiddleWriter.write` with one ``struct`` pack (three
BTH words per row, PSN and AckReq stamped), skipping the batch planner; the bytes are identical to the
planner's (a property test holds both to it) and every counter, pacer and timer update is shared. When
that QP is the only one due and its rate is constant, the further full MIDDLE batches the tokens allow
go in the same visit with one pacer charge and one counter update — the same batches, in the same order,
with the same AckReq bits as one visit each (the same property test compares whole runs). A visit that
sends one packet (the sim's per-packet pacing) can be made without ``poll``: :mod:`~emulator.endpoint.visit`.

**Socket mode** (``EndpointConfig.socket_sends``: the driver sends every transmit before it polls again,
``sendmsg`` copying it): a MIDDLE run is written into buffers reused from poll to poll
(:class:`~emulator.endpoint.middles.MiddleArena`: the QP, PSN, AckReq and stamp columns of all its rows at
once, the rest of each row kept from its first use), and with ``full_batches`` a visit to a constant-rate QP
sends every batch its tokens (within the NIC's) allow, across its messages, before the next QP due gets its
turn: the round-robin grain is the burst, whose bound the pacers keep (bursts are whole batches there, so
no fraction of a batch waits for a later visit). Each QP's packets are the ones, in the order, that one
batch per visit puts on the wire (``tests/endpoint/test_sender_bursts.py`` compares whole runs). With
``EndpointConfig.run_transmits`` a MIDDLE run of several batches is handed out as one
:class:`~emulator.endpoint.events.TransmitRun` (its sends back to back in the reused buffer), not one
``Transmit`` per batch (``tests/drivers/test_socket_tx_compiled.py`` compares whole runs); such a sender's
``poll`` is :meth:`~emulator.endpoint.burst.BurstVisit.poll_bursts` (the same, in fewer interpreter calls).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from emulator.endpoint.burst import BurstVisit
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.events import FlowEvent, OpEventKind, Transmit, TransmitRun
from emulator.endpoint.feedback import SenderFeedback
from emulator.endpoint.half import RankHalf
from emulator.endpoint.middles import BatchWriter, MiddleArena, MiddleWriter
from emulator.endpoint.qpn import receiver_qpn, sender_qpn
from emulator.endpoint.records import RankRecords
from emulator.endpoint.txqp import TxQp
from emulator.endpoint.visit import PacketVisit, first_packer
from emulator.pacing.pacer import TokenBucketPacer, burst_for
from emulator.pacing.registry import controller_spec
from emulator.wire import build_write_batch, message_packets
from emulator.wire.psn import PSN_MASK

_ev = tuple.__new__  # _ev(FlowEvent, its seven fields): an event without the named tuple's __new__ frame
_MAX_HDR = 12 + 16 + 4 + 3  # BTH + RETH + ICRC + pad: a bound on any data packet's non-payload bytes
_EV_STARTED, _EV_RATE, _EV_RETRANSMITTED = int(OpEventKind.OP_STARTED), int(OpEventKind.RATE), int(OpEventKind.RETRANSMITTED)
#: how far behind its schedule a pacer may fall and still catch up: covers any single late wake-up seen
#: on a loaded machine, without storing up a long starvation (a sender short of CPU, not late) for a spike
PACER_MAX_LAG_NS = 25_000_000
#: a late pacer repays its deficit at up to (at least) this × its rate, one burst at a time
PACER_CATCH_UP_RATIO = 2.0
#: and at up to this × where the line leaves room (SenderSide._catch_up_ratio): a driver that gets a quarter
#: of a CPU in ms-long slices keeps its rate, and a catch-up stays a few × the flow's rate at a switch
PACER_CATCH_UP_RATIO_MAX = 4.0
#: the longest a line-rate floor (EndpointConfig.line_rate_burst_batches) may last at the line rate: at 25
#: Gbit/s 9 batches, at 10 Gbit/s 3, at 1 Gbit/s none (a slow link keeps its bursts)
LINE_BURST_MAX_NS = 200_000
_tx = tuple.__new__  # _tx(Transmit, fields): a Transmit without its __new__'s Python frame (one per batch)


class SenderSide(PacketVisit, BurstVisit, SenderFeedback, RankHalf):
    """All queue pairs a rank sends on, its NIC pacer and the send heap."""

    __slots__ = ("_on_acked", "_rate_samples_left", "_sample_interval", "cfg", "op_packets", "mtu",
                 "msg_max", "batch", "overhead", "full_cost", "later_hdr", "burst", "line_rate",
                 "const_burst_ns", "const_rate", "model_time", "served_ns", "_rto_deferred", "nic_stamp_ns",
                 "full_batches", "spread_ns", "bursts", "line_burst_batches", "nic", "qps", "heap", "seq",
                 "data_tos", "rto", "max_backoff", "ack_every", "mid_row", "fast", "middles", "middle_one", "first_one",
                 "last_one", "arena", "run_tx", "batches", "_new_ctrl", "idle_ctrl", "_icrc", "wnd_max", "wnd_min",
                 "paced_qps")

    def __init__(self, rank: int, config: EndpointConfig, records: RankRecords, events: list[FlowEvent],
                 push_timer: Callable[[int, int, object], int], on_acked: Callable[[int, int], None]) -> None:
        """See :class:`~emulator.endpoint.half.RankHalf`; ``on_acked(op, now_ns)``: SEND ``op``'s last byte
        was acknowledged."""
        super().__init__(rank, records, events, push_timer)
        self._on_acked = on_acked
        self._rate_samples_left = config.max_rate_samples
        self._sample_interval = config.rate_sample_interval_ns
        self.cfg = config
        #: ``records.packets`` as a memoryview: a per-op increment without numpy's scalar indexing
        self.op_packets = memoryview(records.packets)
        self.mtu = config.mtu_bytes
        self.msg_max = config.message_bytes
        self.batch = config.batch_packets
        self.overhead = config.wire_overhead_bytes
        self.full_cost = self.mtu + _MAX_HDR + self.overhead
        #: a packet's wire cost beyond its payload after a message's first (no RETH), as ``_wait_cost`` counts it
        self.later_hdr = _MAX_HDR - 16 + self.overhead
        self.burst = self.batch * self.full_cost
        self.line_rate = float(config.line_rate_bps)
        # constant-rate pacers may burst several batches (EndpointConfig.constant_rate_burst_ns)
        self.const_burst_ns = config.constant_rate_burst_ns
        self.const_rate = controller_spec(config.cc).constant_rate
        self.model_time = config.model_time_service  # serve QPs on model time (module docstring)
        self.served_ns = -(1 << 62)  # with model_time: the time of the last visit (visits never go back)
        self._rto_deferred: dict[int, int] = {}  # per QP, the deadline of a timeout looked at again
        self.nic_stamp_ns = 0  # with model_time: when the NIC has sent the last packet stamped
        #: wait until a whole batch may go (socket drivers: their loop is coarser than one packet time)
        self.full_batches = config.pace_full_batches and not self.model_time
        #: stamp a batch's packets one packet time apart at the QP's rate, and cap batches to this span
        self.spread_ns = config.stamp_spread_ns
        #: a socket driver's visit to a constant-rate QP sends every batch its tokens allow (module docstring)
        self.bursts = config.socket_sends and self.full_batches and self.const_rate
        #: with ``bursts``, line-rate pacers hold at least this many batches (EndpointConfig.line_rate_burst_batches)
        self.line_burst_batches = config.line_rate_burst_batches if self.bursts else 0
        self.nic = TokenBucketPacer(self.line_rate, self._burst_at(self.line_rate))
        self.qps: dict[int, TxQp] = {}
        #: queue pairs made with a rate below the line rate (with ``const_rate``, the rate they keep)
        self.paced_qps = 0
        self.heap: list[tuple[int, int, TxQp]] = []
        self.seq = 0
        self.data_tos = config.marking().data_tos
        self.rto = config.retransmit_timeout_ns
        self.max_backoff = config.max_backoff
        self.ack_every = config.ack_every_packets
        self.mid_row = self.mtu + 16  # BTH + payload + ICRC of a MIDDLE packet
        self.fast = config.batch_fast_paths  # steady-state MIDDLE batches without the batch planner
        writer = MiddleWriter(self.mid_row)
        self.middles = writer.write
        self.middle_one = writer.one  # one MIDDLE packet, no frame (PacketVisit.visit_one)
        self.first_one = first_packer(self.mtu)  # one FIRST packet of a message of more, likewise
        self.last_one = None  # a message's LAST packet header-only (the sim's: visit.SHORT_LAST), None: written full
        #: a socket driver sends every batch before its next poll: MIDDLE runs go into reused buffers
        self.arena = MiddleArena(self.mid_row) if config.socket_sends else None
        if self.arena is not None and config.compiled_core:  # the same rows by one compiled call per run
            from emulator.endpoint.compiled_arena import CompiledArena

            self.arena = CompiledArena(self.mid_row)
        #: a MIDDLE run of several batches in the reused buffers goes out as one TransmitRun
        self.run_tx = config.run_transmits and self.arena is not None
        self.batches = BatchWriter(self.mtu).write  # any batch of one message (zero ICRC)
        self._new_ctrl = config.make_controller
        #: the controller of every queue pair that has had no CNP, when its kind allows (``shared_while_idle``)
        self.idle_ctrl = ctrl = config.make_controller()
        if not getattr(ctrl, "shared_while_idle", False):
            self.idle_ctrl = None
        self._icrc = config.icrc == "compute"
        #: window of outstanding packets per QP (0: none), and the least a NAK cuts it to
        self.wnd_max = -(-config.max_outstanding_bytes // self.mtu)
        self.wnd_min = min(self.batch, self.wnd_max)
        if self.burst_polls():  # a socket driver's constant-rate visits in one frame each (emulator.endpoint.burst)
            self.poll = self.poll_bursts

    # -- posting and scheduling ---------------------------------------------------------------------
    def qp_state(self, qp: int, dst: int, now_ns: int) -> TxQp:
        qs = self.qps.get(qp)
        if qs is None:
            ctrl = self.idle_ctrl or self._new_ctrl()
            rate = ctrl.rate_bps
            if self.line_rate < rate:  # min(rate, line_rate), without the builtin's call
                rate = self.line_rate
            icrc = None
            if self._icrc:
                icrc = self.cfg.icrc_fn(self.rank, dst, sender_qpn(qp), receiver_qpn(qp))
            burst = self._burst_at(rate) if self.const_rate else 2 * self.burst if self.full_batches else self.burst
            qs = TxQp(qp, dst, ctrl, self._pacer(rate, burst, now_ns), icrc)
            if qs.pacer._rate < self.line_rate:  # (its rate_bps, without the property's frame)
                self.paced_qps += 1
            qs.una = qs.nxt = qs.max_sent = self.cfg.initial_psn
            qs.wnd = self.wnd_max
            self.qps[qp] = qs
            self.rate_sample(qs, now_ns, True)  # (force: positional, a call with keywords is not specialised)
        return qs

    def _pacer(self, rate_bps: float, burst_bytes: int, now_ns: int = 0) -> TokenBucketPacer:
        """A QP's pacer: with a socket driver and a constant rate it keeps a late driver's deficit."""
        if not (self.full_batches and self.const_rate):
            return TokenBucketPacer.full_plain(rate_bps, burst_bytes, now_ns)
        return TokenBucketPacer(rate_bps, burst_bytes, now_ns, max_lag_ns=PACER_MAX_LAG_NS,
                                catch_up_ratio=self._catch_up_ratio(rate_bps, burst_bytes))

    def _catch_up_ratio(self, rate_bps: float, burst_bytes: int) -> float:
        """A deficit pacer's catch-up ratio: the most that keeps the batch after a burst from starting before
        the burst and that batch went out at the line rate (``line × batch / ((burst + batch) × rate)``: a
        batch time of slack for a send later than its pacing), within ``[PACER_CATCH_UP_RATIO,
        PACER_CATCH_UP_RATIO_MAX]`` (module docstring)."""
        if rate_bps <= 0:
            return PACER_CATCH_UP_RATIO
        room = self.line_rate * self.burst / ((burst_bytes + self.burst) * rate_bps)
        return min(PACER_CATCH_UP_RATIO_MAX, max(PACER_CATCH_UP_RATIO, room))

    def _base_burst(self) -> int:
        """One full GSO batch; two with ``full_batches`` (a QP waits for a whole batch of tokens, so a
        bucket of one batch would be full when it is due and lose tokens on any lateness of the driver)."""
        return 2 * self.burst if self.full_batches else self.burst

    def _burst_at(self, rate_bps: float) -> int:
        """Burst of a constant-rate pacer: the base burst, or ``rate × constant_rate_burst_ns`` if more; with
        ``bursts`` rounded up to whole batches (a visit sends whole batches: the fraction of one would
        never go in the visit that earned it), and at the line rate at least ``line_rate_burst_batches`` of them
        (as many as ``LINE_BURST_MAX_NS`` at that rate holds)."""
        burst = burst_for(rate_bps, self._base_burst(), self.const_burst_ns, fraction=1.0)
        if self.line_burst_batches and rate_bps >= self.line_rate:  # whole batches within LINE_BURST_MAX_NS
            fit = int(rate_bps * LINE_BURST_MAX_NS // 8e9) // self.burst
            floor = min(self.line_burst_batches, fit) * self.burst
            if burst < floor:
                burst = floor
        if self.bursts:
            burst = -(-burst // self.burst) * self.burst
        return burst

    def packet_gap_ns(self, qs: TxQp) -> int:
        """One full MIDDLE packet's time at the QP's pacing rate (0 without a stamp spread)."""
        rate = qs.pacer.rate_bps
        if not self.spread_ns or rate <= 0:
            return 0
        return -(-(self.mid_row + self.overhead) * 8_000_000_000 // rate)

    def batch_limit(self, qs: TxQp) -> int:
        """Most packets of one batch: ``batch_packets``, fewer with a stamp spread at a low rate."""
        g = self.packet_gap_ns(qs)
        return self.batch if not g else max(1, min(self.batch, 1 + self.spread_ns // g))

    def post(self, op: int, flow: int, qp: int, dst: int, size_bytes: int, now_ns: int) -> None:
        qs = self.qp_state(qp, dst, now_ns)
        chunk = self.msg_max
        if size_bytes <= chunk:
            qs.queue.append((op, flow, size_bytes, True, True))
        else:  # several messages of ``chunk`` bytes, the last one shorter (module docstring, "post")
            rest = size_bytes
            while rest > 0:
                n = min(chunk, rest)
                qs.queue.append((op, flow, n, rest == size_bytes, rest == n))
                rest -= n
        if qs.send_seq is None:
            self.schedule(qs, now_ns)
        else:  # the next message may now be this one (the QP's wait cost is kept while it is in the heap)
            qs.wcost = self._wait_cost(qs)

    def _wait_cost(self, qs: TxQp) -> int:
        """Tokens a visit waits for: the next packet's cost, or with ``full_batches`` that of the next
        ``min(batch, packets left in the message)`` packets (at most one full batch: within every burst)."""
        if qs.cur < len(qs.msgs):
            start, n_pkts, _, _, size, _ = qs.msgs[qs.cur]
            j = qs.nxt - start
            if not self.full_batches:  # one packet
                if j == 0:
                    return (size if size < self.mtu else self.mtu) + _MAX_HDR + self.overhead
                rest = size - j * self.mtu
                return (rest if rest < self.mtu else self.mtu) + self.later_hdr
            if j + self.batch < n_pkts and not self.spread_ns:  # a whole batch of full packets (steady state)
                return self.burst
        else:
            size = qs.queue[0][2]
            if not self.full_batches:  # the first packet of the next message
                return (size if size < self.mtu else self.mtu) + _MAX_HDR + self.overhead
            n_pkts = message_packets(size, self.mtu)
            j = 0
        k = min(self.batch_limit(qs), n_pkts - j)
        return self._payload(size, j, j + k) + k * (_MAX_HDR + self.overhead)

    def schedule(self, qs: TxQp, now_ns: int) -> None:
        """(Re)insert ``qs`` in the send heap at the time its pacer allows its next packet (batch)."""
        if not (qs.cur < len(qs.msgs) or qs.queue):
            qs.send_seq = None
            qs.pacer.idle(now_ns)
            return
        if qs.wnd and qs.nxt - qs.una >= qs.wnd:  # window full: an ACK that moves una reschedules it
            qs.send_seq = None
            return
        cost = qs.wcost = self._wait_cost(qs)
        t = qs.pacer.ready_ns(cost, now_ns)
        if t is None:  # cannot happen with a positive rate; keep the QP alive anyway
            t = now_ns + 1_000_000
        elif self.spread_ns:  # not while its next stamp (one gap at today's rate) is beyond the spread
            hold = qs.stamp_last + self.packet_gap_ns(qs) - self.spread_ns
            if hold > t:
                t = hold
        self.seq += 1
        qs.send_seq = self.seq
        qs.due_ns = t
        heapq.heappush(self.heap, (t, self.seq, qs))

    # -- sending ------------------------------------------------------------------------------------
    def poll(self, now_ns: int, max_batches: int, out: list[Transmit]) -> None:
        heap = self.heap
        arena = self.arena
        if arena is not None:  # the driver sent the previous poll's batches: every row is free again
            arena._i = arena._pos = 0  # MiddleArena.reset, inline
            if arena._patched:  # a shared arena's rows another rank's burst poll gave LAST packets
                arena.restore()
        n = 0
        while heap and n < max_batches:
            t, seq, qs = heap[0]
            if qs.send_seq != seq or not (qs.cur < len(qs.msgs) or qs.queue):
                if qs.send_seq == seq:
                    qs.send_seq = None
                heapq.heappop(heap)
                continue
            if t > now_ns:
                return
            cost1 = qs.wcost
            if self.model_time:  # the visit acts when the QP and then the NIC became due, not at the wake-up
                at = max(t, self.served_ns)
                at = max(at, self.nic.ready_ns(cost1, at) or at)
                if at > now_ns:
                    return
                self.served_ns = at
                nic_avail = self.nic.available_bytes(at)
            else:
                at = now_ns
                nic_avail = self.nic.available_bytes(at)
                if nic_avail < cost1:
                    return
            heapq.heappop(heap)
            qs.send_seq = None
            nxt0 = qs.nxt
            n += self._send_batch(qs, at, nic_avail, cost1, out, max_batches - n, at if self.model_time else t)
            if self.model_time and (qs.una >= qs.recover or nxt0 - qs.una < self.ack_every):  # its RTO clock runs from when the packets leave
                qs.last_progress_ns = max(qs.last_progress_ns, now_ns)
            self.schedule(qs, at)

    def _book_run(self, qs: TxQp, op: int, size: int, j: int, k: int, payload: int, ends: bool, now_ns: int) -> None:
        """Book a run of ``k`` packets of RECV ``op``'s message (``size`` bytes) from its packet ``j``, ``payload``
        bytes, sent now: counters (the part of it go-back-N sent before as retransmits), the QP's next PSN and
        highest sent, and its next message when the run ``ends`` the current one."""
        rec = self.rec
        counters = rec.counters
        retx = qs.max_sent - qs.nxt  # packets of this run sent before (go-back-N), at most k
        if retx > k:
            retx = k
        self.op_packets[op] += k
        counters["packets_sent"] += k
        if retx > 0:
            retx_bytes = self._payload(size, j, j + retx)
            rec.retx_packets[op] += retx
            counters["retransmits"] += retx
            if qs.retx_ev:
                self.events.append(FlowEvent(_EV_RETRANSMITTED, now_ns - self.t0_ns, qs.qp, packets=retx))
            counters["retx_bytes"] += retx_bytes
            counters["bytes_sent"] += payload - retx_bytes
        else:
            counters["bytes_sent"] += payload
        qs.nxt += k
        if qs.nxt > qs.max_sent:
            qs.max_sent = qs.nxt
        if ends:
            qs.cur += 1

    def _send_batch(self, qs: TxQp, now_ns: int, nic_avail: int, cost1: int, out: list[Transmit], room: int,
                    due_ns: int) -> int:
        """Send the QP's next batch (a MIDDLE run: up to ``room`` batches; with ``bursts``: every batch its
        tokens allow, up to ``room``); returns how many went. ``due_ns`` is when its pacer allowed it: the
        intended send time carried by the transmits and stamped in the packets."""
        avail = qs.pacer.available_bytes(now_ns)
        if nic_avail < avail:
            avail = nic_avail
        if avail < cost1:
            return 0
        tos = self.data_tos
        wnd = qs.wnd
        full_cost = self.full_cost
        limit = self.batch_limit(qs) if self.spread_ns else self.batch
        step = self.packet_gap_ns(qs) if self.spread_ns else 0
        if due_ns > now_ns:
            due_ns = now_ns
        nxt0 = qs.nxt
        spent = sent = 0  # bytes and batches of this visit
        while True:
            if qs.cur == len(qs.msgs):  # start the next message of the QP
                op, flow, size, first, last = qs.queue.popleft()
                n_pkts = message_packets(size, self.mtu)
                qs.msgs.append((qs.nxt, n_pkts, op, flow, size, last))
                qs.starts.append(qs.nxt)
                if first:
                    self.events.append(_ev(FlowEvent, (_EV_STARTED, now_ns - self.t0_ns, qs.qp, 0, 0, op, 0)))
            start, n_pkts, op, flow, size, _ = qs.msgs[qs.cur]
            j = qs.nxt - start
            left = n_pkts - j
            k = (avail - spent) // full_cost  # min(limit, left, max(1, tokens for k full packets))
            if k > limit:
                k = limit
            elif k < 1:
                k = 1
            if k > left:
                k = left
            if wnd:
                k = min(k, max(1, wnd - (qs.nxt - qs.una)))
            ends = k == left
            ack_req = ends or qs.since_ackreq + k >= self.ack_every
            qs.since_ackreq = 0 if ack_req else qs.since_ackreq + k
            t_ns = due_ns
            if step and qs.stamp_last + step > t_ns:  # never closer than one packet time at today's rate
                t_ns = qs.stamp_last + step
            if self.model_time and self.nic_stamp_ns > t_ns:  # the NIC serialises: after the previous packet
                t_ns = self.nic_stamp_ns
            if j > 0 and not ends and qs.icrc is None and self.fast:
                # steady state: runs of k MIDDLE packets of full MTU (module docstring, "fast path")
                acks = [ack_req]
                m = 1  # batches of the run
                one = k * (self.mid_row + self.overhead)  # wire cost of one batch of the run
                if k == limit == self.batch and room - sent > 1 and self.const_rate and (
                        self.bursts or not self.heap or self.heap[0][0] > now_ns):
                    # the only QP due (or a socket driver's visit): the further full MIDDLE batches the tokens
                    # allow go now, exactly as the general path would send them one visit each (same bytes,
                    # same AckReq bits)
                    need = k * full_cost
                    left_after = left - k
                    while sent + m < room and left_after > k and avail - spent - m * one >= need and (
                            not step or t_ns + m * k * step - self.spread_ns <= now_ns) and (
                            not wnd or qs.nxt - qs.una + (m + 1) * k <= wnd):
                        a = qs.since_ackreq + k >= self.ack_every
                        qs.since_ackreq = 0 if a else qs.since_ackreq + k
                        acks.append(a)
                        m += 1
                        left_after -= k
                seg = self.mid_row if k > 1 else 0
                dst = qs.dst
                if self.arena is not None:  # one write of every row of the run into reused buffers
                    rows = []  # the run's AckReq rows (the last row of each batch that asks)
                    last = k - 1
                    for a in acks:
                        if a:
                            rows.append(last)
                        last += k
                    buf = self.arena.write(qs.dqpn, qs.nxt, k * m, t_ns, step, rows)
                    if m == 1:
                        out.append(_tx(Transmit, (dst, buf, seg, tos, t_ns, step)))
                    elif self.run_tx:  # the run as one transmit of m sends (EndpointConfig.run_transmits)
                        out.append(_tx(TransmitRun, (dst, buf, seg, tos, t_ns, step, m)))
                    else:
                        size_b = k * self.mid_row
                        a = 0
                        t = t_ns
                        dt = k * step
                        for _ in range(m):
                            out.append(_tx(Transmit, (dst, buf[a : a + size_b], seg, tos, t, step)))
                            a += size_b
                            t += dt
                else:
                    for i, a in enumerate(acks):
                        t = t_ns + i * k * step
                        out.append(_tx(Transmit, (dst, self.middles(qs.dqpn, qs.nxt + i * k, k, a, t, step), seg, tos,
                                                  t, step)))
                cost = m * one
                k *= m
                payload = k * self.mtu
            else:
                m = 1
                if qs.icrc is None and self.fast:  # the same bytes and sends as build_write_batch, one struct pack
                    buf, sends = self.batches(qs.dqpn, qs.nxt, size, j, k, flow, ack_req, t_ns, step)
                else:
                    wb = build_write_batch(qs.nxt & PSN_MASK, k, dest_qp=qs.dqpn, message_bytes=size, mtu_bytes=self.mtu,
                                           packet_index=j, va=flow, ack_req_last=ack_req, icrc=qs.icrc,
                                           stamp_ns=t_ns, stamp_step_ns=step)  # fmt: skip
                    buf, sends = wb.buffer, wb.sends
                cost = len(buf) + k * self.overhead
                if len(sends) == 1:
                    _, length, seg = sends[0]
                    out.append(_tx(Transmit, (qs.dst, buf, 0 if length == seg else seg, tos, t_ns, step)))
                else:
                    mv = memoryview(buf)
                    idx = 0  # the batch index of each send's first packet (its stamp)
                    for off, length, seg in sends:
                        out.append(_tx(Transmit, (qs.dst, mv[off : off + length], 0 if length == seg else seg, tos,
                                                  t_ns + idx * step, step)))
                        idx += -(-length // seg)
                payload = self._payload(size, j, j + k)
            if step:
                qs.stamp_last = t_ns + (k - 1) * step
            if self.model_time:  # the NIC is busy until the batch's last packet is out at the line rate
                wire_ns = -(-cost * 8_000_000_000 // int(k * self.line_rate))
                self.nic_stamp_ns = t_ns + ((k - 1) * step + wire_ns if step else k * wire_ns)
            self._book_run(qs, op, size, j, k, payload, ends, now_ns)
            spent += cost
            sent += m
            # fewer tokens than one full packet: no batch can follow (what _burst_goes_on would say, uncalled)
            if not self.bursts or sent >= room or avail - spent < full_cost or not self._burst_goes_on(
                    qs, avail - spent, limit, now_ns, step):
                break
        self.nic.try_send(spent, now_ns)
        qs.pacer.try_send(spent, now_ns)
        if qs.una >= qs.recover or nxt0 - qs.una < self.ack_every:  # the RTO clock restarts with a batch unless an ACK is owed in recovery (feedback docstring)
            qs.last_progress_ns = now_ns
        # a constant-rate controller has no rate change and no timer to sync; nor one that answers False
        if qs.ctrl.on_bytes_sent(spent, now_ns) is not False and not self.const_rate:
            self.sync_rate(qs, now_ns)
        if qs.rto_seq is None:
            self.arm_rto(qs, qs.last_progress_ns + self.rto * qs.backoff)
        return sent

    def _burst_goes_on(self, qs: TxQp, avail: int, limit: int, now_ns: int, step: int) -> bool:
        """A socket driver's visit sends another batch: the QP has a packet to send, its window room, and
        ``avail`` (its tokens left, within the NIC's) covers a whole batch (``min(limit, packets left in the
        message)`` full packets, as ``_wait_cost`` asks of a visit) stamped within the spread."""
        if qs.cur < len(qs.msgs):
            start, n_pkts = qs.msgs[qs.cur][:2]
            left = n_pkts - (qs.nxt - start)
        elif qs.queue:
            left = message_packets(qs.queue[0][2], self.mtu)
        else:
            return False
        if qs.wnd and qs.nxt - qs.una >= qs.wnd:
            return False
        if step and qs.stamp_last + step - self.spread_ns > now_ns:
            return False
        return avail >= (left if left < limit else limit) * self.full_cost

    def _payload(self, size: int, a: int, b: int) -> int:
        """Payload bytes of packets ``a..b-1`` of a ``size``-byte message."""
        return max(0, min(size, b * self.mtu) - a * self.mtu)

    def rate_sample(self, qs: TxQp, now_ns: int, force: bool = False) -> None:
        """A RATE event for the QP (at most one per sample interval unless ``force``, bounded in count)."""
        if not force and now_ns - qs.last_sample_ns < self._sample_interval:
            return
        if self._rate_samples_left <= 0:
            self.rec.counters["rate_samples_dropped"] += 1
            return
        self._rate_samples_left -= 1
        qs.last_sample_ns = now_ns
        self.events.append(_ev(FlowEvent, (_EV_RATE, now_ns - self.t0_ns, qs.qp, 0, 0, -1, int(qs.rate_bps))))
