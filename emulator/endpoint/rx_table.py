"""The receiver's queue-pair state in one int64 table, and the compiled scan that accepts GRO batches into it.

A socket driver that receives many GRO batches per system call can hand them to a compiled loop instead of
calling :meth:`~emulator.endpoint.endpoint.RankEndpoint.receive` once per batch. For that the fields of
:class:`~emulator.endpoint.receiver.RxQp` that accepting a run of MIDDLE packets reads or writes live in a
table row per queue pair (:class:`TableRxQp`: the same object to the Python core, its fields properties
over the row), and :func:`scan_block` does, datagram by datagram, exactly what
:meth:`~emulator.endpoint.receiver.ReceiverSide.on_batch` does for a batch that is *wholly* one accepted run
(full-size MIDDLE segments of a known queue pair, PSNs from ePSN, inside the open message, not CE-marked; or,
when the driver asks, such a run followed by one packet, which is left to the caller):
ePSN, packets left, NAK flag, unacknowledged count, the RECV op's packet count and the ACK decision. It
stops at the first datagram that is anything else (a message's LAST, another opcode, a gap, a duplicate,
CE, a queue pair not yet seen), which the caller then hands to ``receive`` as usual before scanning on:
the order of the state changes is the Python core's, so the records and the bytes on the wire are too
(tests/endpoint/test_rx_table.py).

Sans-IO: the scan reads the datagram lengths, TOS and segment sizes the driver parsed and the buffers it is
given, and writes the table, the op column and its ``out`` array.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from emulator.endpoint.qpn import sender_qpn
from emulator.endpoint.receiver import _T_DUE, _T_EPSN, _T_UNACKED, RxQp
from emulator.wire.kernels import gro_run

#: table columns: the row is in use, ePSN (unbounded, as ``RxQp.epsn``), flow of the open message (−1: none),
#: its RECV op, packets of it left, NAK sent, packets not yet acknowledged, ACK due
F_LIVE, F_EPSN, F_FLOW, F_OP, F_LEFT, F_NAK, F_UNACKED, F_DUE = range(8)
if (_T_EPSN, _T_UNACKED, _T_DUE) != (F_EPSN, F_UNACKED, F_DUE):  # ReceiverSide.flush_acks writes these columns
    raise ImportError("receiver's table columns differ from rx_table's")
FIELDS = 8
#: ``out`` array of :func:`scan_block`: [0] index of the first datagram not accepted (``count`` when all were),
#: [1] packets accepted, [2] queue pairs whose ACK became due (listed in ``due``), [3] bytes of all datagrams
#: (set by the driver's parse), [4] the last socket drop count seen (−1: none); then per datagram ``i`` its
#: length, TOS and segment size (0: a plain datagram) at ``OUT_HEAD + 3·i``; [5] (set by the driver) 1 when a
#: datagram of MIDDLE rows and one packet after them (a message's LAST) may have its rows accepted, [6] where the
#: scan stopped at such a datagram, the offset of that packet (0: the datagram is the caller's whole)
OUT_STOP, OUT_ROWS, OUT_DUE, OUT_BYTES, OUT_OVFL, OUT_TAILS, OUT_TAIL = range(7)
OUT_HEAD = 8
_PSN_MASK = 0xFFFFFF


def _field(k: int) -> property:
    def get(self):
        return self._t[self._b + k]

    def put(self, v) -> None:
        self._t[self._b + k] = v

    return property(get, put)


class TableRxQp(RxQp):
    """An :class:`~emulator.endpoint.receiver.RxQp` whose scanned fields are its table row (flat int64 view
    ``t``, row ``row``: the queue pair's place among the rank's sorted receive queue pairs); the others stay
    attributes."""

    __slots__ = ("_t", "_b")

    def __init__(self, t: memoryview, row: int, qp: int, src: int, icrc: object) -> None:
        self._t = t
        b = self._b = row * FIELDS
        self.qp = qp  # RxQp.__init__ with the row's fields written without their properties
        self.src = src
        self.ack_qpn = sender_qpn(qp)
        self.msn = 0
        self.icrc = icrc
        self.last_op = -1
        self.rest = 0
        t[b + F_EPSN] = t[b + F_LEFT] = t[b + F_NAK] = t[b + F_UNACKED] = t[b + F_DUE] = 0
        t[b + F_FLOW] = t[b + F_OP] = -1
        t[b + F_LIVE] = 1

    epsn = _field(F_EPSN)
    flow = _field(F_FLOW)
    op = _field(F_OP)
    left = _field(F_LEFT)
    nak_sent = _field(F_NAK)
    unacked = _field(F_UNACKED)
    ack_due = _field(F_DUE)


@njit(cache=True, inline="always")
def _be32(data, a):  # pragma: no cover - compiled
    return (np.int64(data[a]) << 24) | (np.int64(data[a + 1]) << 16) | (np.int64(data[a + 2]) << 8) | np.int64(data[a + 3])


@njit(cache=True)
def middle_row(data, a):  # pragma: no cover - compiled
    """``(1, PSN, AckReq, DestQP)`` when the packet at ``data[a:]`` is an RDMA WRITE MIDDLE (no pad, an even
    DestQP: what :func:`~emulator.wire.kernels.gro_run` asks of each row), else ``(0, 0, False, 0)``."""
    w0 = _be32(data, a)
    w1 = _be32(data, a + 4)
    if w0 >> 24 != 0x07 or w0 & 0x300000 or w1 & 1:
        return 0, 0, False, 0
    p = _be32(data, a + 8)
    return 1, p & _PSN_MASK, p >= 0x80000000, w1 & _PSN_MASK


@njit(cache=True)
def scan_block(data, size, start, count, row, ack_every, qps, table, op_packets, out, due):  # pragma: no cover - compiled
    """Accept datagrams ``start ..`` of ``count`` (datagram ``i`` is ``data[i·size :][: len]``, its length, TOS
    and segment size in ``out``) while each is one whole accepted run of ``row``-byte MIDDLE segments (module
    docstring); ``qps``: the queue pair of each table row, ascending. With ``out[OUT_TAILS]`` set, a datagram whose
    leading run of MIDDLE rows (one or more) is followed by one packet (a message's LAST) has the run accepted and the scan
    stops there with ``out[OUT_TAIL]`` the packet's offset (``ReceiverSide.on_batch`` then ``_one``, as
    ``receive`` splits it). ``out[OUT_STOP]`` is where it stopped, ``out[OUT_ROWS]`` the packets accepted,
    ``due[: out[OUT_DUE]]`` the queue pairs whose ACK became due. Returns the stop index."""
    rows_in = 0
    n_due = 0
    cap = qps.shape[0]
    tails = out[OUT_TAILS]
    out[OUT_TAIL] = 0
    i = start
    while i < count:
        h = OUT_HEAD + 3 * i
        n = out[h]
        if out[h + 1] & 3 == 3 or out[h + 2] != row or (n % row and not tails):
            break
        a = i * size
        rows, p0, ack, dqpn = gro_run(data[a : a + n], row)
        if rows == 0 and tails and row < n <= 2 * row:  # one MIDDLE row and a packet after it (gro_run's runs
            rows, p0, ack, dqpn = middle_row(data, a)  # are of 2 rows or more; receive takes it packet by packet)
        tail = n - rows * row  # bytes after the run: one packet (a LAST) at most
        if rows == 0 or (tail and (not tails or tail > row)):
            break
        qp = (dqpn - 2) >> 1
        r = np.searchsorted(qps, qp)
        if r >= cap or qps[r] != qp or table[r, F_LIVE] == 0:
            break
        if p0 != table[r, F_EPSN] & _PSN_MASK or table[r, F_FLOW] < 0 or table[r, F_LEFT] <= rows:
            break
        table[r, F_EPSN] += rows
        table[r, F_LEFT] -= rows
        table[r, F_NAK] = 0
        table[r, F_UNACKED] += rows
        op_packets[table[r, F_OP]] += rows
        rows_in += rows
        if (ack or table[r, F_UNACKED] >= ack_every) and table[r, F_DUE] == 0:
            table[r, F_DUE] = 1
            due[n_due] = qp
            n_due += 1
        if tail:  # the rows are accepted, the packet after them is the caller's (ReceiverSide.on_batch's split)
            out[OUT_TAIL] = rows * row
            break
        i += 1
    out[OUT_STOP] = i
    out[OUT_ROWS] = rows_in
    out[OUT_DUE] = n_due
    return i


def new_table(n_qps: int) -> np.ndarray:
    """A zeroed table of ``n_qps`` rows."""
    return np.zeros((max(1, n_qps), FIELDS), dtype=np.int64)


def warm() -> None:
    """Compile (or load from numba's cache) :func:`scan_block` for the arrays the drivers pass."""
    out = np.zeros(OUT_HEAD + 3 * 16, dtype=np.int64)
    scan_block(np.zeros(8, dtype=np.uint8), 8, 0, 0, 4112, 1, np.zeros(1, dtype=np.int64), new_table(1),
               np.zeros(1, dtype=np.int64), out, np.zeros(16, dtype=np.int64))
