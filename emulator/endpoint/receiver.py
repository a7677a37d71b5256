"""The receiving half of a rank endpoint: expected PSN per queue pair, coalesced ACKs, NAKs, the NP (CNPs).

Theory of operation
-------------------
Every queue pair this rank receives on has an :class:`RxQp` holding the expected PSN ``epsn`` (an
unbounded integer; a wire PSN is mapped to it by its signed 24-bit distance), the message sequence
number ``msn`` and the message in progress (flow, RECV op, packets left). For each arriving data packet:

* **in order** (PSN == ePSN): accepted. A FIRST/ONLY packet opens a message: its RETH virtual address is
  the flow id, so messages map to flows without relying on post order; the flow must be one this rank
  receives on this QP and not yet held (else the packet is counted as ``bad_packets`` and dropped, ePSN
  unchanged). A FIRST or MIDDLE packet whose payload is not one path MTU (a datagram cut on the way) is
  ``bad_packets`` too, dropped. A packet at ePSN whose opcode does not fit — MIDDLE/LAST with no message open, FIRST/ONLY
  while one is open — is an opcode sequence error: dropped (ePSN unchanged), counted as
  ``opcode_errors`` and NAKed like a gap; it is never taken as data of another flow. A LAST/ONLY
  packet closes it: ``msn`` += 1 and, when it was the flow's last message, the endpoint learns that
  every byte of the flow is held (its RECV op may complete). A flow longer than
  ``EndpointConfig.message_bytes`` comes as several messages (cut as the sender cuts them, each with the
  flow id as its address): between two of them ``rest`` holds the bytes still to come and only that
  flow may open the next message. ``bytes_received`` counts each accepted payload once.
* **ahead** (PSN > ePSN, a gap): dropped; one NAK (PSN sequence error carrying ePSN) is sent, and no
  other until an in-order packet fills the gap (``nak_sent`` flag).
* **behind** (PSN < ePSN): a duplicate; dropped, counted, and answered by a re-ACK of ePSN − 1 so a
  sender whose ACK was lost stops retransmitting.

ACKs are cumulative (PSN = ePSN − 1, AETH ACK, MSN) and coalesced: one per queue pair per ``receive``
call (per ``poll_transmit`` with ``EndpointConfig.defer_acks``), sent when an accepted packet carried AckReq or ``ack_every_packets`` accepted packets are
unacknowledged, or a duplicate arrived. ACK/NAK/CNP datagrams go to the data sender's QPN
(``sender_qpn``) at the sending rank.

**NP**: every CE-marked data packet (in order or not) is offered to the
:class:`~emulator.pacing.notification.CnpGenerator`; when it says so, a CNP goes to the sender-side QPN at once;
with a deferring NP the endpoint's timer heap wakes it at the end of the quiet interval.

**Delivery stamps** (``delivery_stamps``, set by the loopback driver): the software switch rewrites each
data packet's send-time stamp (:mod:`emulator.wire.stamp`) to the packet's model delivery time, and
every packet handled packet by packet (CE-marked ones always are) is timed by it instead of by the
``receive`` call, which may hand over many packets that arrived over a long stretch of emulated time:
the NP decides per packet on its delivery time, as a receiver seeing each packet arrive would (one CNP
per CNP interval of delivery time, not one per wake-up), and a message's first and last packets time
its RECV's start and completion. A stamp that is missing or later than ``now_ns`` counts as ``now_ns``.
Each CNP carries its model time (that delivery time, or the end of a deferring NP's quiet interval) in its
reserved bytes and each NAK in its MSN (mod 2^24 ns), so the switch and the sender act on it then
(:mod:`emulator.drivers.loopback.ack_times`).

**Event log** (:mod:`emulator.endpoint.records`): every CNP sent and every NAK sent appends one row
(time, QP, expected PSN, RECV op); nothing is logged per packet.

**GRO batches** (fast path): a run of full-MTU MIDDLE packets of one queue pair with consecutive PSNs
starting at ePSN, inside the open message and not CE-marked — every full-size row of the batch, or every
one but the last when that one differs (a message's full-size LAST) — is recognised with one ``struct``
unpack of the BTH words of every row and accepted as a block (one PSN range, one count per counter, one
ACK decision), the row after it packet by packet; such a run wholly ahead of ePSN (after a loss) is
dropped as a block with the one NAK, and one wholly behind it (duplicates a go-back-N sender re-sent) as
a block with one re-ACK, so a receiver that fell behind does not slow down further while it discards
(same state changes and counters as packet by packet, a property test holds both to it);
anything else goes packet by packet.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.events import FlowEvent, OpEventKind, Transmit
from emulator.endpoint.half import RankHalf
from emulator.endpoint.qpn import part_sizes, receiver_qpn, sender_qpn
from emulator.endpoint.records import EV_CNP_SENT, EV_NAK_SENT, RankRecords
from emulator.endpoint.visit import SHORT_LAST_BYTES
from emulator.pacing.notification import CnpGenerator
from emulator.wire import (
    BTH_SIZE,
    ICRC_SIZE,
    Opcode,
    build_ack,
    build_cnp,
    build_nak_psn_error,
    message_packets,
)
from emulator.wire.opcodes import EXT_BYTES
from emulator.wire.psn import PSN_HALF as _PSN_HALF
from emulator.wire.psn import PSN_MASK, psn_diff

_ev = tuple.__new__  # _ev(FlowEvent or Transmit, all its fields): the named tuple without its __new__ frame
_EV_STARTED = int(OpEventKind.OP_STARTED)  # a RECV's first packet (the recorder keeps the first)
_EV_HELD = int(OpEventKind.FLOW_HELD)  # a part (one wire QP's share) of a flow held

T_NP = 4
_FIRST, _MIDDLE, _LAST, _LAST_IMM, _ONLY, _ONLY_IMM = (int(o) for o in (
    Opcode.RC_RDMA_WRITE_FIRST, Opcode.RC_RDMA_WRITE_MIDDLE, Opcode.RC_RDMA_WRITE_LAST,
    Opcode.RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, Opcode.RC_RDMA_WRITE_ONLY, Opcode.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE))
_OPENS = frozenset({_FIRST, _ONLY, _ONLY_IMM})
_CLOSES = frozenset({_LAST, _LAST_IMM, _ONLY, _ONLY_IMM})
#: non-payload bytes per opcode: BTH 12 + RETH 16 (FIRST/ONLY) + ImmDt 4 (IMM) + ICRC 4
_HDR = {o: BTH_SIZE + EXT_BYTES[o] + ICRC_SIZE for o in (_FIRST, _MIDDLE, _LAST, _LAST_IMM, _ONLY, _ONLY_IMM)}
_STAMP = struct.Struct("!Q").unpack_from
_VA = struct.Struct("!Q").unpack_from
_MIN_VECTOR = 2
_ACKREQ = 0x80000000
#: in BTH words 0-1 read as one 64-bit word: the pad count, and the low bit of DestQP (a receiver QPN is even)
_PAD_OR_ODD = 0x300000 << 32 | 1


def gro_run_py(data: memoryview | bytes, seg: int, unpackers: dict[int, Callable]) -> tuple[int, int, bool, int]:
    """``(rows, first PSN mod 2^24, AckReq, DestQP)`` of the leading run of full-size MIDDLE segments of a GRO
    batch (``rows`` 0: none of at least 2 rows). One ``struct`` unpack (cached per row count in ``unpackers``)
    reads every row's first two BTH words as one 64-bit word and its third (AckReq, PSN); the run is every
    row, or every row but the last when only that one differs, each with the first row's two words (MIDDLE,
    no pad, an even DestQP) and PSNs consecutive mod 2^24 (AckReq anywhere: the flag is any row's)."""
    n_full = len(data) // seg
    unpack = unpackers.get(n_full)
    if unpack is None:
        if n_full < _MIN_VECTOR:
            return 0, 0, False, 0
        unpack = unpackers[n_full] = struct.Struct("!" + f"QI{seg - 12}x" * (n_full - 1) + "QI").unpack_from
    t = unpack(data)
    q0 = t[0]
    if q0 >> 56 != _MIDDLE or q0 & _PAD_OR_ODD:
        return 0, 0, False, 0
    if t[0::2].count(q0) != n_full:
        # a message's full-size LAST (or any other row) closes the batch: the MIDDLE run before it is the
        # block, the rest goes packet by packet
        n_full -= 1
        if n_full < _MIN_VECTOR or t[0 : 2 * n_full : 2].count(q0) != n_full:
            return 0, 0, False, 0
    psns = t[1 : 2 * n_full : 2]
    p0 = psns[0]
    last = p0 + n_full - 1
    expect = tuple(range(p0, last + 1)) if last <= PSN_MASK else ()
    if psns == expect:
        ack_req = False
    elif psns[-1] == last | _ACKREQ and psns[:-1] == expect[:-1]:  # AckReq on the last row (the sender's way)
        ack_req = True
    else:  # AckReq or reserved bits elsewhere, or a PSN wrap: compare the 24-bit PSNs alone
        p0 &= PSN_MASK
        if tuple(p & PSN_MASK for p in psns) != tuple((p0 + i) & PSN_MASK for i in range(n_full)):
            return 0, 0, False, 0
        ack_req = any(p & _ACKREQ for p in psns)
    return n_full, p0, ack_req, q0 & 0xFFFFFF


#: the table columns (emulator.endpoint.rx_table ``F_EPSN``, ``F_UNACKED``, ``F_DUE``) :meth:`ReceiverSide.flush_acks`
#: reads and writes directly
_T_EPSN, _T_UNACKED, _T_DUE = 1, 6, 7


class RxQp:
    """Receiver state of one queue pair (see the module docstring)."""

    __slots__ = ("qp", "src", "ack_qpn", "epsn", "msn", "flow", "op", "left", "nak_sent", "unacked",
                 "ack_due", "icrc", "last_op", "rest")  # fmt: skip

    def __init__(self, qp: int, src: int, icrc: object) -> None:
        self.qp = qp
        self.src = src
        self.ack_qpn = sender_qpn(qp)
        self.epsn = 0
        self.msn = 0
        self.flow = -1  # flow of the message in progress, -1 between messages
        self.op = -1  # its local RECV op
        self.left = 0  # packets of it still expected
        self.nak_sent = False
        self.unacked = 0
        self.ack_due = False
        self.icrc = icrc
        self.last_op = -1  # RECV op of the last completed message (duplicates are most likely its packets)
        self.rest = 0  # bytes of the flow after the open (or, between messages, the last) message


class ReceiverSide(RankHalf):
    """All queue pairs a rank receives on, and its notification point."""

    __slots__ = ("op_packets", "_emit", "_held", "_on_received", "mtu", "msg_max", "flows", "qps_per_peer",
                 "part_bytes", "parts_left", "qp_src", "qps", "np", "np_seq", "np_t", "ack_every",
                 "ack_tos", "cnp_tos", "pending", "fast", "delivery_stamps", "_unpackers", "_row", "_cfg",
                 "_icrc", "_initial_psn", "kernel", "table", "_table_view", "_table_qp", "table_qps",
                 "_table_row", "short_payload")

    def __init__(self, rank: int, config: EndpointConfig, recv_flows: dict[int, tuple[int, int, int, int]],
                 records: RankRecords, events: list[FlowEvent], push_timer: Callable[[int, int, object], int],
                 emit: Callable[[Transmit], None], held: bytearray, on_received: Callable[[int, int], None]):
        """``recv_flows``: flow id -> (local RECV op, qp, src rank, size bytes) for flows this rank receives;
        ``emit`` queues a control packet; ``held[op]`` is set once every byte of RECV ``op``'s flow is here,
        ``on_received(op, now_ns)`` tells the rank so (the rest: :class:`~emulator.endpoint.half.RankHalf`)."""
        super().__init__(rank, records, events, push_timer)
        #: ``records.packets`` as a memoryview: a per-op increment without numpy's scalar indexing
        self.op_packets = memoryview(records.packets)
        self._emit = emit
        self._held = held
        self._on_received = on_received
        self.mtu = config.mtu_bytes
        #: the payload of a header-only FIRST or MIDDLE packet taken for a full-MTU one (the sim's: the stamp), -1: none
        #: (and no header-only LAST taken either)
        self.short_payload = -1
        self.msg_max = config.message_bytes
        self.flows = recv_flows
        #: wire queue pairs per schedule qp; with more than one: (flow, wire qp) -> its part's bytes, and
        #: per RECV op the parts not yet held
        q_per = self.qps_per_peer = config.qps_per_peer
        self.part_bytes: dict[tuple[int, int], int] = {}
        self.parts_left: dict[int, int] = {}
        self.qp_src: dict[int, int] = {}
        for flow, (op, qp, src, size) in recv_flows.items():
            if q_per == 1:
                self.qp_src[qp] = src
                continue
            parts = part_sizes(size, q_per)
            self.parts_left[op] = len(parts)
            for k, n in parts:
                self.qp_src[qp * q_per + k] = src
                self.part_bytes[flow, qp * q_per + k] = n
        self.qps: dict[int, RxQp] = {}
        self.np = CnpGenerator(config.np_params())
        self.np_seq = -1
        self.np_t: int | None = None
        self.ack_every = config.ack_every_packets
        marking = config.marking()
        self.ack_tos = marking.ack_tos
        self.cnp_tos = marking.cnp_tos
        self.pending: list[RxQp] = []
        self.fast = config.batch_fast_paths  # GRO runs of MIDDLE packets as one block
        #: data packets carry their model delivery time in the stamp (module docstring)
        self.delivery_stamps = config.delivery_stamps
        self._unpackers: dict[int, Callable] = {}  # rows in a GRO batch -> its unpack of the BTH words
        self._row = config.mtu_bytes + 16  # a full-size MIDDLE: BTH 12 + payload + ICRC 4
        self._cfg = config
        self._icrc = config.icrc == "compute"
        self._initial_psn = config.initial_psn
        #: the GRO run reader :meth:`on_batch` calls instead of :func:`gro_run_py` (the same result): the
        #: compiled :func:`emulator.wire.kernels.gro_run` when ``EndpointConfig.compiled_core`` is set
        self.kernel: Callable | None = None
        if config.compiled_core:
            from emulator.wire.kernels import gro_run

            self.kernel = gro_run
        #: the queue pairs' scanned fields as a table (:meth:`use_table`), None: attributes
        self.table = None
        self._table_view: memoryview | None = None
        self._table_qp: Callable = RxQp
        self.table_qps = None  # the queue pair of each table row, ascending
        self._table_row: dict[int, int] = {}

    def use_table(self):
        """Keep the queue pairs' scanned fields in an int64 table (:mod:`~emulator.endpoint.rx_table`) from now on,
        a row per queue pair this rank receives on (``table_qps``), for a driver's compiled scan; returns it. Only
        before the first packet (no queue pair made yet)."""
        if self.table is None:
            if self.qps:
                raise RuntimeError("use_table after the first packet")
            import numpy as np

            from emulator.endpoint.rx_table import TableRxQp, new_table

            known = sorted(self.qp_src)
            self.table_qps = np.array(known, dtype=np.int64)
            self._table_row = {qp: r for r, qp in enumerate(known)}
            self.table = new_table(len(known))
            self._table_view = memoryview(self.table).cast("B").cast("q")
            self._table_qp = TableRxQp
        return self.table

    def _qp(self, qp: int) -> RxQp | None:
        rs = self.qps.get(qp)
        if rs is None:
            src = self.qp_src.get(qp)
            if src is None:
                return None
            icrc = None
            if self._icrc:  # ACK/NAK/CNP go from this rank's receiver QPN to the sender's
                icrc = self._cfg.icrc_fn(self.rank, src, receiver_qpn(qp), sender_qpn(qp))
            if self.table is None:
                rs = self.qps[qp] = RxQp(qp, src, icrc)
            else:
                rs = self.qps[qp] = self._table_qp(self._table_view, self._table_row[qp], qp, src, icrc)
            rs.epsn = self._initial_psn
        return rs

    def _part(self, flow: int, qp: int, info: tuple[int, int, int, int] | None) -> tuple[int, int, int, int] | None:
        """(RECV op, wire qp, src, part bytes) of ``flow``'s part on wire qp ``qp``; None when the flow has
        no part there or the part is already held."""
        n = self.part_bytes.get((flow, qp))
        if info is None or n is None:
            return None
        return info[0], qp, info[2], n

    def _last_part(self, flow: int, qp: int, op: int) -> bool:
        """``flow``'s part on wire qp ``qp`` is held; True when it was the flow's last part."""
        del self.part_bytes[flow, qp]
        left = self.parts_left[op] = self.parts_left[op] - 1
        return left == 0

    # -- data ---------------------------------------------------------------------------------------
    def on_data(self, opcode: int, dqpn: int, psn: int, ack_req: bool, pkt: memoryview | bytes, ce: bool,
                now_ns: int) -> None:  # fmt: skip
        """One data packet (``pkt`` = the whole UDP payload)."""
        if self.delivery_stamps:
            now_ns = self.delivery_ns(opcode, pkt, now_ns)
        rec = self.rec
        counters = rec.counters
        rs = None if dqpn & 1 else self.qps.get((dqpn - 2) >> 1) or self._qp((dqpn - 2) >> 1)
        if rs is None:
            counters["unknown_qp"] += 1
            return
        epsn = rs.epsn  # each field read once and written once (a table row's fields are properties)
        d = ((psn - epsn + _PSN_HALF) & PSN_MASK) - _PSN_HALF  # psn_diff(psn, ePSN)
        if d == 0:
            n = len(pkt)
            if opcode <= _MIDDLE and n - _HDR[opcode] != self.mtu:  # FIRST/MIDDLE cut short (or long)
                if n - _HDR[opcode] != self.short_payload:
                    counters["bad_packets"] += 1
                    return
                n = _HDR[opcode] + self.mtu  # a header-only FIRST/MIDDLE stands for the full packet
            elif n == SHORT_LAST_BYTES and opcode == _LAST and self.short_payload >= 0:  # a header-only LAST:
                n = (pkt[20] << 8) | pkt[21]  # the full packet's length, after the stamp (visit.SHORT_LAST)
            flow = rs.flow
            if opcode in _OPENS:
                if flow >= 0:  # a new message while one is open: its tail would be lost
                    self._opcode_error(rs, ce, now_ns)
                    return
                if len(pkt) < 28:
                    counters["bad_packets"] += 1
                    return
                flow = _VA(pkt, 12)[0]
                info = self.flows.get(flow)
                if self.qps_per_peer > 1:
                    info = self._part(flow, rs.qp, info)
                if info is None or info[1] != rs.qp or self._held[info[0]] or (rs.rest and info[0] != rs.last_op):
                    counters["bad_packets"] += 1
                    return
                left = rs.rest or info[3]  # bytes of the flow (of its part) from this message on
                size = left if left <= self.msg_max else self.msg_max
                rs.rest = left - size
                rs.flow = flow
                op = rs.op = info[0]
                left = message_packets(size, self.mtu)
                self.events.append(_ev(FlowEvent, (_EV_STARTED, now_ns - self.t0_ns, rs.qp, 0, 0, op, 0)))
            elif flow < 0:  # MIDDLE/LAST with no message open: never data of the next flow
                self._opcode_error(rs, ce, now_ns)
                return
            else:
                op = rs.op
                left = rs.left
            payload = n - _HDR[opcode] - ((pkt[1] >> 4) & 3)
            rs.epsn = epsn + 1
            left -= 1
            rs.nak_sent = False
            unacked = rs.unacked = rs.unacked + 1
            self.op_packets[op] += 1
            counters["packets_received"] += 1
            counters["bytes_received"] += payload
            if opcode in _CLOSES or left <= 0:
                rs.msn += 1
                rs.last_op = op
                rs.flow = rs.op = -1
                rs.left = 0
                if not rs.rest:  # the flow's part on this QP is held (with one QP: the flow)
                    self.events.append(_ev(FlowEvent, (_EV_HELD, now_ns - self.t0_ns, rs.qp, 0, 0, op, 0)))
                    if self.qps_per_peer == 1 or self._last_part(flow, rs.qp, op):
                        self._on_received(op, now_ns)
            else:
                rs.left = left
            if ack_req or unacked >= self.ack_every:
                self._due(rs)
        elif d > 0:
            counters["out_of_order"] += 1
            self._nak(rs, now_ns)
        else:
            counters["dup_packets"] += 1
            op = rs.op if rs.op >= 0 else rs.last_op
            if op >= 0:
                rec.dup_packets[op] += 1
            self._due(rs)
        if ce:
            self._on_ce(rs, now_ns)

    def delivery_ns(self, opcode: int, pkt: memoryview | bytes, now_ns: int) -> int:
        """When data packet ``pkt`` was delivered: the model time its stamp carries (``delivery_stamps``),
        or ``now_ns`` when it carries none or a later one."""
        hdr = _HDR[opcode]
        if len(pkt) - hdr - ((pkt[1] >> 4) & 3) >= 8:
            t = _STAMP(pkt, hdr - ICRC_SIZE)[0] - 1
            if 0 <= t < now_ns:
                return t
        return now_ns

    def _nak(self, rs: RxQp, now_ns: int) -> None:
        """One PSN-sequence-error NAK carrying ePSN, and no other until an in-order packet is accepted. With
        ``delivery_stamps`` its MSN carries its model time ``now_ns`` (mod 2^24 ns), for the loopback switch."""
        if rs.nak_sent:
            return
        rs.nak_sent = True
        rec = self.rec
        rec.counters["naks_sent"] += 1
        if rs.op >= 0:
            rec.naks[rs.op] += 1
        self.events.append(FlowEvent(EV_NAK_SENT, now_ns - self.t0_ns, rs.qp, rs.epsn & PSN_MASK, 0, rs.op))
        msn = now_ns if self.delivery_stamps else rs.msn
        self._emit(Transmit(rs.src, build_nak_psn_error(rs.ack_qpn, rs.epsn & PSN_MASK, msn & PSN_MASK,
                                                          icrc=rs.icrc), 0, self.ack_tos))  # fmt: skip

    def _opcode_error(self, rs: RxQp, ce: bool, now_ns: int) -> None:
        """A packet at ePSN that does not fit the message state (MIDDLE/LAST with no message open, or
        FIRST/ONLY while one is): dropped, counted, NAKed so the sender goes back to ePSN."""
        self.rec.counters["opcode_errors"] += 1
        self._nak(rs, now_ns)
        if ce:
            self._on_ce(rs, now_ns)

    def _on_ce(self, rs: RxQp, now_ns: int) -> None:
        rec = self.rec
        rec.counters["ce_marks"] += 1
        op = rs.op if rs.op >= 0 else rs.last_op
        if op >= 0:
            rec.ce_marks[op] += 1
        if self.np.on_packet(rs.qp, True, now_ns):
            self._send_cnp(rs, op, now_ns)
        else:
            self._sync_np()

    def on_batch(self, data: memoryview, seg: int, ce: bool, now_ns: int) -> int:
        """Try to accept the leading run of full-size MIDDLE segments of a GRO batch as one block.

        The run (:func:`gro_run_py`, or the compiled :func:`emulator.wire.kernels.gro_run` with ``kernel``
        set) is accepted when its PSNs start at ePSN; a run wholly ahead of ePSN is dropped with one NAK, one
        wholly behind it is counted as duplicates and answered by one re-ACK. Returns the bytes consumed (0:
        the fast path does not apply, the caller goes packet by packet, which gives the same result).
        """
        if ce or seg != self._row or not self.fast:
            return 0
        if self.kernel is not None:
            n_full, p0, ack_req, dqpn = self.kernel(data, seg)
        else:
            n_full, p0, ack_req, dqpn = gro_run_py(data, seg, self._unpackers)
        if not n_full:
            return 0
        qp = (dqpn - 2) >> 1
        rs = self.qps.get(qp) or self._qp(qp)
        if rs is None:
            return 0
        if p0 != rs.epsn & PSN_MASK:
            d = psn_diff(p0, rs.epsn & PSN_MASK)
            if 0 < d < (1 << 23) - n_full:  # the whole run is ahead of a gap: dropped, one NAK
                self.rec.counters["out_of_order"] += n_full
                self._nak(rs, self.delivery_ns(_MIDDLE, data, now_ns) if self.delivery_stamps else now_ns)
                return n_full * seg
            if -(1 << 23) < d <= -n_full:  # the whole run is behind ePSN (go-back-N re-sent it): duplicates
                rec = self.rec
                rec.counters["dup_packets"] += n_full
                op = rs.op if rs.op >= 0 else rs.last_op
                if op >= 0:
                    rec.dup_packets[op] += n_full
                self._due(rs)
                return n_full * seg
            return 0
        if rs.flow < 0 or rs.left <= n_full:
            return 0
        rec = self.rec
        rs.epsn += n_full
        rs.left -= n_full
        rs.nak_sent = False
        rs.unacked += n_full
        self.op_packets[rs.op] += n_full
        counters = rec.counters
        counters["packets_received"] += n_full
        counters["bytes_received"] += n_full * self.mtu
        if ack_req or rs.unacked >= self.ack_every:
            self._due(rs)
        return n_full * seg

    def _due(self, rs: RxQp) -> None:
        if not rs.ack_due:
            rs.ack_due = True
            self.pending.append(rs)

    def flush_acks(self) -> None:
        """Send the coalesced ACKs decided during one ``receive`` call."""
        counters = self.rec.counters
        t = self._table_view
        for rs in self.pending:
            if t is None:
                rs.ack_due = False
                rs.unacked = 0
                epsn = rs.epsn
            else:  # a table row (rx_table.TableRxQp): its fields without their properties' frames
                b = rs._b
                t[b + _T_DUE] = t[b + _T_UNACKED] = 0
                epsn = t[b + _T_EPSN]
            counters["acks_sent"] += 1
            self._emit(_ev(Transmit, (rs.src, build_ack(rs.ack_qpn, (epsn - 1) & PSN_MASK, rs.msn & PSN_MASK,
                                                         icrc=rs.icrc), 0, self.ack_tos, -1, 0)))  # fmt: skip
        self.pending.clear()

    # -- notification point -------------------------------------------------------------------------
    def _send_cnp(self, rs: RxQp, op: int, now_ns: int) -> None:
        rec = self.rec
        rec.counters["cnps_sent"] += 1
        if op >= 0:
            rec.cnps[op] += 1
        self.events.append(FlowEvent(EV_CNP_SENT, now_ns - self.t0_ns, rs.qp, rs.epsn & PSN_MASK, 0, op))
        stamp = now_ns if self.delivery_stamps else None  # its model time, for the loopback switch and the sender
        self._emit(Transmit(rs.src, build_cnp(rs.ack_qpn, icrc=rs.icrc, stamp_ns=stamp), 0, self.cnp_tos))

    def _sync_np(self) -> None:
        t = self.np.next_timer_ns()
        if t is not None and t != self.np_t:
            self.np_t = t
            self.np_seq = self._push_timer(t, T_NP, None)

    def on_np_timer(self, seq: int, now_ns: int) -> None:
        if seq != self.np_seq:
            return
        self.np_t = None
        for qp in self.np.on_timer(now_ns):
            rs = self.qps.get(qp)  # type: ignore[arg-type]
            if rs is not None:  # with delivery_stamps, at the end of its quiet interval, however late the timer ran
                t = self.np.last_cnp_ns(qp) if self.delivery_stamps else None
                self._send_cnp(rs, rs.op if rs.op >= 0 else rs.last_op, now_ns if t is None else t)
        self._sync_np()
