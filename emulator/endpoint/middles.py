"""The sender's batch writers: a run of full-MTU RDMA WRITE MIDDLE packets, or any batch of one message, in
one ``struct`` pack."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable

import numpy as np

from emulator.wire.batch import write_layout
from emulator.wire.opcodes import Opcode
from emulator.wire.psn import PSN_MASK

#: BTH word 0 of a MIDDLE packet: RC RDMA WRITE MIDDLE, no SE/MigReq/pad, TVer 0, default P_Key
W0_MIDDLE = _W0_MIDDLE = (0x07 << 24) | 0xFFFF
#: the AckReq bit of BTH word 2
ACK_REQ = _ACKREQ = 0x80000000
_RETH_OPCODES = (Opcode.RC_RDMA_WRITE_FIRST, Opcode.RC_RDMA_WRITE_ONLY)
#: BTH word 0 of a LAST packet (big-endian bytes) by its pad count: RC RDMA WRITE LAST, default P_Key
_W0_LAST = tuple(((Opcode.RC_RDMA_WRITE_LAST << 24) | (pad << 20) | 0xFFFF).to_bytes(4, "big") for pad in range(4))
_W0_MIDDLE_BYTES = _W0_MIDDLE.to_bytes(4, "big")
_NO_STAMP = bytes(8)
_PSN_SPAN = 4096  # PSNs per table of MiddleArena (a table holds two spans, so any run of up to a span fits)
_PSN_TABLES = 64  # tables kept (about one per queue pair sending at once)


class MiddleWriter:
    """Writes ``k`` MIDDLE packets of ``row_bytes`` (BTH + payload + ICRC) each; one packer per ``k``, cached."""

    __slots__ = ("row_bytes", "_packers", "one")

    def __init__(self, row_bytes: int) -> None:
        self.row_bytes = row_bytes
        self._packers: dict[int, Callable[..., bytes]] = {}
        #: one packet from its BTH words and stamp: ``one(W0_MIDDLE, dest_qp, psn & PSN_MASK | AckReq bit, stamp_ns
        #: + 1)`` is ``write(dest_qp, psn, 1, ack_req, stamp_ns)`` without its frame (the sim's per-packet visit)
        self.one = struct.Struct(f"!IIIQ{row_bytes - 20}x").pack

    def write(self, dest_qp: int, psn: int, k: int, ack_req_last: bool, stamp_ns: int = -1,
              step_ns: int = 0) -> bytes:
        """``k`` full-MTU RDMA WRITE MIDDLE packets (RC, P_Key 0xFFFF, zero ICRC) from ``psn``, AckReq on the
        last one if asked, send-time stamp ``stamp_ns + j·step_ns`` (≥ 0) at the start of packet ``j``'s
        payload: the same bytes :func:`~emulator.wire.build_write_batch` writes for them, without planning
        the batch (one ``struct`` pack of the three BTH words and the stamp per row, the rest zero)."""
        if k == 1:
            return self.one(_W0_MIDDLE, dest_qp, (psn & PSN_MASK) | (_ACKREQ if ack_req_last else 0), stamp_ns + 1)
        pack = self._packers.get(k)
        if pack is None:
            fmt = "!" + f"IIIQ{self.row_bytes - 20}x" * k
            pack = self._packers[k] = struct.Struct(fmt).pack
        words = [_W0_MIDDLE, dest_qp, 0, stamp_ns + 1] * k
        if step_ns and k > 1:
            words[3::4] = range(stamp_ns + 1, stamp_ns + 1 + k * step_ns, step_ns)
        if psn + k <= PSN_MASK:
            words[2::4] = range(psn, psn + k)
        else:
            words[2::4] = [(psn + i) & PSN_MASK for i in range(k)]
        if ack_req_last:
            words[-2] |= _ACKREQ
        return pack(*words)


class BatchWriter:
    """Writes any batch of one RC RDMA WRITE message (no immediate, zero ICRC, P_Key 0xFFFF) with one
    ``struct`` pack: the same bytes and GSO sends as :func:`~emulator.wire.build_write_batch` with
    ``stamp_ns``, without planning it. One packer and one send layout per batch shape, cached."""

    __slots__ = ("mtu_bytes", "_shapes")

    def __init__(self, mtu_bytes: int) -> None:
        self.mtu_bytes = mtu_bytes
        #: (one-packet message, has FIRST, MIDDLE count, LAST or ONLY payload or -1) -> (pack, per packet (BTH word 0,
        #: RETH, stamped), sends, index of the last packet's PSN word)
        self._shapes: dict[tuple[int, bool, int, int], tuple] = {}

    def write(self, dest_qp: int, psn: int, message_bytes: int, index: int, count: int, va: int,
              ack_req_last: bool, stamp_ns: int, step_ns: int = 0) -> tuple[bytes, tuple[tuple[int, int, int], ...]]:
        """Packets ``index .. index + count - 1`` of a ``message_bytes`` message from ``psn`` (wrapped to 24
        bits here), RETH address ``va``, AckReq on the last one if asked, packet ``j`` stamped ``stamp_ns +
        j·step_ns``; returns the buffer and its ``(offset, length, segment size)`` sends."""
        mtu = self.mtu_bytes
        n = max(1, -(-message_bytes // mtu))
        if n == 1:
            key = (1, True, 0, message_bytes)
        else:
            first = index == 0
            last = index + count == n
            key = (0, first, count - first - last, message_bytes - (n - 1) * mtu if last else -1)
        shape = self._shapes.get(key)
        if shape is None:  # the key fixes the layout: any batch of this shape describes it
            shape = self._shapes[key] = self._shape(message_bytes, index, count)
        pack, kinds, sends, ack_at = shape
        if count == 1:  # one packet (a short message's FIRST or LAST in the sim's per-packet visit): no loop
            ((w0, reth, stamped),) = kinds
            p = (psn & PSN_MASK) | _ACKREQ if ack_req_last else psn & PSN_MASK
            if reth:
                if stamped:
                    return pack(w0, dest_qp, p, va, 0, message_bytes, stamp_ns + 1), sends
                return pack(w0, dest_qp, p, va, 0, message_bytes), sends
            return (pack(w0, dest_qp, p, stamp_ns + 1) if stamped else pack(w0, dest_qp, p)), sends
        words: list[int] = []
        add = words.extend
        t = stamp_ns + 1
        for j, (w0, reth, stamped) in enumerate(kinds):
            p = (psn + j) & PSN_MASK
            if reth:
                add((w0, dest_qp, p, va, 0, message_bytes))
            else:
                add((w0, dest_qp, p))
            if stamped:
                words.append(t + j * step_ns)
        if ack_req_last:
            words[ack_at] |= _ACKREQ
        return pack(*words), sends

    def _shape(self, message_bytes: int, index: int, count: int) -> tuple:
        rows, sends = write_layout(message_bytes, self.mtu_bytes, index, count)
        fmt = "!"
        kinds = []
        for opcode, payload in rows:
            pad = -payload & 3
            reth = opcode in _RETH_OPCODES
            stamped = payload >= 8
            fmt += "IIIQII" if reth else "III"
            rest = payload + pad + 4
            if stamped:
                fmt += "Q"
                rest -= 8
            fmt += f"{rest}x"
            kinds.append(((opcode << 24) | (pad << 20) | 0xFFFF, reth, stamped))
        ack_at = sum((6 if reth else 3) + stamped for _, reth, stamped in kinds[:-1]) + 2
        return struct.Struct(fmt).pack, tuple(kinds), sends, ack_at


class MiddleArena:
    """Full-MTU MIDDLE packets written into buffers that are reused: per run of rows only the destination QP
    (when it changed), the PSNs, the AckReq bits and the send-time stamps are written, each column with one
    numpy assignment for all rows; the opcode word, the zero payload and the zero ICRC stay from the
    buffer's first use. The PSN column is copied from a table of consecutive 24-bit PSNs (one per
    ``_PSN_SPAN`` PSNs, kept for the most recent spans), so no arithmetic runs per row.

    The rows handed out since :meth:`reset` never overlap; :meth:`reset` makes every row free again: for a
    driver that puts every batch on the wire (``sendmsg`` copies it) before it asks for the next ones.
    :meth:`write_last` ends a run with a message's LAST packet in its last row; such a row is listed and
    given back its MIDDLE opcode word when the rows are free again (:meth:`reset`, or a driver's inline reset
    followed by :meth:`restore` when ``_patched`` is not empty).

    Each view handed out since the last reset is listed in ``handed`` with its buffer address in
    ``handed_addrs`` (``handed_n`` of them, in the order written; a list is restarted by the first write into
    the first chunk's first row, which only a reset frees): a driver's send descriptor reads a row's address
    there (:class:`~emulator.drivers.sockets.tx_compiled.CompiledSend`, matched by identity) instead of asking
    ctypes for it.
    """

    __slots__ = ("row_bytes", "chunk_rows", "_chunks", "_i", "_pos", "_psn_tables", "_steps", "_patched",
                 "handed", "handed_addrs", "handed_n")

    def __init__(self, row_bytes: int, chunk_rows: int = 128) -> None:
        self.row_bytes = row_bytes
        self.chunk_rows = chunk_rows
        #: per chunk [buffer, its memoryview, PSN column, stamp column, destination QP column, the QP every
        #: row holds (-1: mixed), its rows, its buffer's address]
        self._chunks: list[list] = []
        self._i = 0  # chunk in use
        self._pos = 0  # its first free row
        self._psn_tables: dict[int, np.ndarray] = {}
        self._steps = np.arange(chunk_rows, dtype=np.int64)
        self._patched: list[tuple[memoryview, int]] = []  # (chunk view, offset) of the rows holding a LAST packet
        self.handed: list[memoryview] = []  # the views handed out since the last reset (class docstring)
        self.handed_addrs: list[int] = []  # their buffer addresses
        self.handed_n = 0

    @property
    def nbytes(self) -> int:
        """Bytes of its buffers (what the batches written into it are copied from)."""
        return sum(len(ch[0]) for ch in self._chunks)

    def reset(self) -> None:
        """Every row is free again (the previous rows' bytes were sent)."""
        self._i = 0
        self._pos = 0
        if self._patched:
            self.restore()

    def restore(self) -> None:
        """Every row :meth:`write_last` gave a LAST packet's opcode word has its MIDDLE one again (the rows are
        free: call after a reset only)."""
        for mv, o in self._patched:
            mv[o : o + 4] = _W0_MIDDLE_BYTES
        self._patched.clear()

    def _chunk(self, rows: int, dest_qp: int) -> list:
        """The next chunk with ``rows`` free rows (from its start: ``_pos`` = 0), made when there is none
        (its QP column filled with ``dest_qp``)."""
        chunks = self._chunks
        i = self._i
        if i < len(chunks):
            i += 1
        self._pos = 0
        while i < len(chunks) and len(chunks[i][2]) < rows:
            i += 1
        self._i = i
        if i == len(chunks):
            n = max(rows, self.chunk_rows)
            buf = bytearray(n * self.row_bytes)
            dt = np.dtype({"names": ["w0", "dq", "psn", "st"], "formats": [">u4", ">u4", ">u4", ">u8"],
                           "offsets": [0, 4, 8, 12], "itemsize": self.row_bytes})
            rec = np.frombuffer(buf, dtype=dt)
            rec["w0"] = _W0_MIDDLE
            rec["dq"] = dest_qp
            addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
            chunks.append([buf, memoryview(buf), rec["psn"], rec["st"], rec["dq"], dest_qp, n, addr])
            if n > len(self._steps):
                self._steps = np.arange(n, dtype=np.int64)
        return chunks[i]

    def _psns(self, psn: int, n: int) -> np.ndarray:
        """PSNs ``psn .. psn + n − 1`` wrapped to 24 bits, big-endian: a slice of a cached table."""
        base = psn - psn % _PSN_SPAN
        table = self._psn_tables.get(base)
        if table is None:
            if len(self._psn_tables) >= _PSN_TABLES:
                self._psn_tables.clear()
            table = self._psn_tables[base] = ((np.arange(2 * _PSN_SPAN, dtype=np.int64) + base) & PSN_MASK).astype(">u4")
        a = psn - base
        if a + n > 2 * _PSN_SPAN:  # a run longer than a span: computed, not cached
            return ((np.arange(n, dtype=np.int64) + psn) & PSN_MASK).astype(">u4")
        return table[a : a + n]

    def _rows(self, n: int, dest_qp: int) -> tuple[list, int, int]:
        """The chunk and its rows ``a .. b − 1`` that the next run of ``n`` rows takes (now taken)."""
        a = self._pos
        b = a + n
        ch = self._chunks[self._i] if self._i < len(self._chunks) else None
        if ch is None or b > len(ch[2]):
            ch = self._chunk(n, dest_qp)
            a = self._pos
            b = a + n
        self._pos = b
        return ch, a, b

    def write(self, dest_qp: int, psn: int, n: int, stamp_ns: int, step_ns: int, ack_rows: tuple[int, ...] | list[int]) -> memoryview:
        """``n`` MIDDLE rows from ``psn`` (wrapped to 24 bits here) to ``dest_qp``, AckReq on the rows
        ``ack_rows`` (indices in the run), row ``j`` stamped ``stamp_ns + j·step_ns``: the bytes
        :meth:`MiddleWriter.write` gives for the same packets, as a view into a reused buffer."""
        k = 0 if self._pos == 0 and self._i == 0 else self.handed_n  # a reset's first write restarts the list
        ch, a, b = self._rows(n, dest_qp)
        if ch[5] != dest_qp:  # the rows hold other QPs' numbers: write this run's
            ch[4][a:b] = dest_qp
            ch[5] = -1
        p = psn & PSN_MASK
        col = ch[2][a:b]
        col[:] = self._psns(p, n)
        for r in ack_rows:
            col[r] = ((p + r) & PSN_MASK) | _ACKREQ
        if step_ns:
            ch[3][a:b] = self._steps[:n] * step_ns + (stamp_ns + 1)
        else:
            ch[3][a:b] = stamp_ns + 1
        row = self.row_bytes
        return self._hand(k, ch[1][a * row : b * row], ch[7] + a * row)

    def _hand(self, k: int, view: memoryview, addr: int) -> memoryview:
        """``view`` (at ``addr``) listed as the ``k``-th view handed out since the last reset; returns it."""
        try:
            self.handed[k] = view
            self.handed_addrs[k] = addr
        except IndexError:
            self.handed.append(view)
            self.handed_addrs.append(addr)
        self.handed_n = k + 1
        return view

    def write_last(self, dest_qp: int, psn: int, n: int, stamp_ns: int, ack_req: bool, last_payload: int) -> memoryview:
        """``n`` ≥ 2 rows from ``psn`` to ``dest_qp`` stamped ``stamp_ns``: ``n − 1`` MIDDLE packets, then a
        message's LAST packet of ``last_payload`` bytes (1 .. MTU; AckReq if asked; stamped if ≥ 8 bytes): the
        bytes :class:`BatchWriter` gives for the same packets (zero ICRC), as a view into a reused buffer that
        ends with the LAST packet (one GSO send of segment size ``row_bytes``)."""
        mv = self.write(dest_qp, psn, n, stamp_ns, 0, (n - 1,) if ack_req else ())
        cv = self._chunks[self._i][1]
        row = self.row_bytes
        o = (self._pos - 1) * row
        pad = -last_payload & 3
        cv[o : o + 4] = _W0_LAST[pad]
        if last_payload < 8:  # no stamp in a packet that short: its bytes are pad and ICRC (zero)
            cv[o + 12 : o + 20] = _NO_STAMP
        self._patched.append((cv, o))
        k = self.handed_n - 1  # the view write listed, replaced by the one handed out
        last = self.handed[k] = mv[: (n - 1) * row + 12 + last_payload + pad + 4]
        return last


def _arenas(eps: list) -> list:
    """The senders of the endpoints ``eps`` that write MIDDLE runs into an arena (socket sends)."""
    return [tx for tx in (getattr(ep, "_tx", None) for ep in eps) if getattr(tx, "arena", None) is not None]


def share_arena(eps: list) -> int:
    """Give every endpoint of ``eps`` the first one's MIDDLE arena; returns the number of arenas left (1, or 0
    when the senders keep none).

    Sound for a driver that sends every transmit of an endpoint's ``poll_transmit`` before any of them polls
    again (a socket worker), since a poll frees every row of its arena. One arena of one chunk (~0.5 MB at a
    4 KiB MTU) instead of one per rank keeps what the kernel copies from hot in the caches: a sender copying
    61 KB batches from a 2 MB window cost 10–25 % more CPU per byte than from 0.5 MB (bench/RESULTS.md,
    direct11)."""
    senders = _arenas(eps)
    for tx in senders:
        tx.arena = senders[0].arena
    return 1 if senders else 0


def arena_bytes(eps: list) -> int:
    """Bytes of the distinct MIDDLE arenas of the endpoints ``eps`` (what their batches are copied from)."""
    return sum({id(tx.arena): tx.arena.nbytes for tx in _arenas(eps)}.values())
