"""GSO batches: k consecutive RDMA WRITE packets of one message in one buffer.

Theory of operation: a message of M bytes at path MTU P is ``n = max(1, ceil(M / P))`` packets: ONLY when
n == 1, else FIRST (RETH with the whole length), MIDDLE..., LAST; ``*_WITH_IMMEDIATE`` on the final packet
when ``imm`` is given. A batch is packets ``packet_index .. packet_index + count - 1`` of that message,
laid back to back, each starting with its own BTH and ending with its ICRC field.

Every MIDDLE packet has the same size (``P + 16``), so the MIDDLE run is stamped with numpy in one
vectorised step: the buffer is viewed as a ``(rows, row_bytes / 4)`` big-endian uint32 array and the three
BTH words (opcode/flags/P_Key, DestQP, AckReq/PSN) and the ICRC word are assigned per column; PSNs come
from one ``arange`` wrapped at 2**24. The FIRST (16 bytes longer, RETH), ONLY and LAST packets are written
with :func:`build_write_packet`.

A UDP GSO send cuts its buffer into segments of one size, only the last may be shorter. So the batch is
returned as :attr:`WriteBatch.sends`: ``(offset, length, segment_size)`` triples, normally one GSO send
(MIDDLE..., LAST) preceded by the FIRST packet alone when the batch starts a multi-packet message (it is
longer than a MIDDLE) and followed by a LAST_WITH_IMMEDIATE alone when that one is longer. A send with
``length == segment_size`` is a plain datagram. AckReq is set on the batch's last packet (configurable).
With an ICRC function from :meth:`IcrcContext.bind`, segment k of each send gets its ICRC computed
for IPv4 ID ``base + k``, the ID Linux GSO stamps on it. With ``stamp_ns`` every packet whose payload
holds 8 bytes carries that intended send time at the start of its payload (:mod:`~emulator.wire.stamp`),
written before the ICRC; with ``stamp_step_ns`` packet ``j`` of the batch carries ``stamp_ns + j·step``
(packets paced apart at a queue pair's rate).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulator.wire import opcodes as op
from emulator.wire.icrc import IcrcFn
from emulator.wire.packets import BTH_SIZE, ICRC_SIZE, build_write_packet, data_packet_size
from emulator.wire.psn import PSN_MASK
from emulator.wire.stamp import STAMP_BYTES, stamp_value

#: Linux UDP_MAX_SEGMENTS (segments per GSO send).
#: the InfiniBand path MTUs (payload bytes per packet) a RoCEv2 queue pair can use (docs/rocev2.md §1)
PATH_MTUS: tuple[int, ...] = (256, 512, 1024, 2048, 4096)
GSO_MAX_SEGMENTS = 64
#: Largest UDP payload of one GSO send over IPv4 (65535 - 20 IP - 8 UDP).
GSO_MAX_BYTES = 65507
#: Longest RDMA WRITE message: the RETH DMA length is 32 bits and IBTA caps a message at 2^31 bytes;
#: 2^31 - 1 keeps it a positive signed 32-bit value as verbs and NCCL do.
MAX_MESSAGE_BYTES = (1 << 31) - 1

_W_FIRST, _W_MIDDLE, _W_LAST, _W_LAST_IMM, _W_ONLY, _W_ONLY_IMM = 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B


@dataclass(frozen=True, slots=True)
class WriteBatch:
    """Where a batch was written and how to send it."""

    buffer: bytearray | memoryview
    offset: int
    size_bytes: int
    count: int
    segment_size_bytes: int
    sends: tuple[tuple[int, int, int], ...]
    psn_start: int
    next_psn: int
    ends_message: bool

    def views(self) -> list[tuple[memoryview, int]]:
        """``(bytes to send, GSO segment size)`` per send; segment size == len means a plain datagram."""
        mv = memoryview(self.buffer)
        return [(mv[o : o + n], seg) for o, n, seg in self.sends]


def message_packets(message_bytes: int, mtu_bytes: int) -> int:
    """Packets of a message: ``max(1, ceil(message_bytes / mtu_bytes))``."""
    return max(1, -(-message_bytes // mtu_bytes))


def max_batch_packets(mtu_bytes: int, max_bytes: int = GSO_MAX_BYTES) -> int:
    """MIDDLE packets that fit one GSO send (15 at MTU 4096 over IPv4)."""
    return max(1, min(GSO_MAX_SEGMENTS, max_bytes // (mtu_bytes + BTH_SIZE + ICRC_SIZE)))


@dataclass(frozen=True, slots=True)
class _Run:
    """``count`` consecutive packets of one opcode and payload size, the first at ``index`` in the batch."""

    index: int
    count: int
    opcode: int
    payload_bytes: int
    size_bytes: int


def _plan(
    message_bytes: int, mtu_bytes: int, packet_index: int, count: int, transport: int, with_imm: bool
) -> list[_Run]:
    """The batch as at most three runs: a FIRST/ONLY head, a MIDDLE run, a LAST tail."""
    if mtu_bytes <= 0 or mtu_bytes % 4:
        raise ValueError(f"path MTU {mtu_bytes} must be a positive multiple of 4")
    if message_bytes < 0 or message_bytes > MAX_MESSAGE_BYTES:
        raise ValueError(f"message of {message_bytes} bytes out of range 0..2**31-1")
    n = message_packets(message_bytes, mtu_bytes)
    if count < 1 or packet_index < 0 or packet_index + count > n:
        raise ValueError(f"packets {packet_index}..{packet_index + count - 1} outside a {n}-packet message")
    if n == 1:
        o = transport | (_W_ONLY_IMM if with_imm else _W_ONLY)
        return [_Run(0, 1, o, message_bytes, data_packet_size(o, message_bytes))]
    runs = []
    last_j = packet_index + count - 1
    if packet_index == 0:
        o = transport | _W_FIRST
        runs.append(_Run(0, 1, o, mtu_bytes, data_packet_size(o, mtu_bytes)))
    mid_lo, mid_hi = max(packet_index, 1), min(last_j, n - 2)
    if mid_hi >= mid_lo:
        o = transport | _W_MIDDLE
        runs.append(
            _Run(mid_lo - packet_index, mid_hi - mid_lo + 1, o, mtu_bytes, mtu_bytes + BTH_SIZE + ICRC_SIZE)
        )
    if last_j == n - 1:
        o = transport | (_W_LAST_IMM if with_imm else _W_LAST)
        tail = message_bytes - (n - 1) * mtu_bytes
        runs.append(_Run(count - 1, 1, o, tail, data_packet_size(o, tail)))
    return runs


def write_layout(message_bytes: int, mtu_bytes: int, packet_index: int,
                 count: int) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int, int], ...]]:
    """Packets ``packet_index .. + count - 1`` of one RC RDMA WRITE message (no immediate) as
    :func:`build_write_batch` lays them out: per packet ``(opcode, payload bytes)``, and the GSO sends
    ``(offset, length, segment size)`` from offset 0."""
    runs = _plan(message_bytes, mtu_bytes, packet_index, count, 0, False)
    return tuple((r.opcode, r.payload_bytes) for r in runs for _ in range(r.count)), _group(runs, 0)


def _group(runs: list[_Run], base: int) -> tuple[tuple[int, int, int], ...]:
    """Split the runs into GSO sends: equal segment sizes, only the batch's last packet may be shorter."""
    sends = []
    pos = base
    seg = length = segs = 0
    for k, run in enumerate(runs):
        final_single = k == len(runs) - 1 and run.count == 1
        if segs and (run.size_bytes == seg or (final_single and run.size_bytes < seg)):
            length += run.size_bytes * run.count
            segs += run.count
            continue
        if segs:
            sends.append((pos, length, seg, segs))
            pos += length
        seg, length, segs = run.size_bytes, run.size_bytes * run.count, run.count
    sends.append((pos, length, seg, segs))
    for _, length, _, segs in sends:
        if segs > GSO_MAX_SEGMENTS or (segs > 1 and length > GSO_MAX_BYTES):
            raise ValueError(f"GSO send of {segs} segments / {length} bytes exceeds the UDP GSO limits")
    return tuple(s[:3] for s in sends)


def batch_size_bytes(
    message_bytes: int, mtu_bytes: int, packet_index: int, count: int, *, with_imm: bool = False
) -> int:
    """Buffer bytes :func:`write_segments` needs for this batch."""
    runs = _plan(message_bytes, mtu_bytes, packet_index, count, op.TRANSPORT_RC, with_imm)
    return sum(r.size_bytes * r.count for r in runs)


def write_segments(
    buf: bytearray | memoryview,
    offset: int,
    psn_start: int,
    count: int,
    *,
    dest_qp: int,
    message_bytes: int,
    mtu_bytes: int,
    packet_index: int = 0,
    va: int = 0,
    rkey: int = 0,
    imm: int | None = None,
    ack_req_last: bool = True,
    icrc: IcrcFn | None = None,
    zero_payload: bool = False,
    transport: int = op.TRANSPORT_RC,
    pkey: int = 0xFFFF,
    migreq: bool = False,
    stamp_ns: int | None = None,
    stamp_step_ns: int = 0,
) -> WriteBatch:
    """Write packets ``packet_index..+count`` of a message into ``buf[offset:]``; ``psn_start`` is the
    PSN of the batch's first packet. Payload bytes are left untouched unless ``zero_payload``."""
    if transport not in (op.TRANSPORT_RC, op.TRANSPORT_UC):
        raise ValueError("RDMA WRITE batches are RC or UC")
    if dest_qp >> 24 or dest_qp < 0 or psn_start >> 24 or psn_start < 0:
        raise ValueError(f"dest_qp {dest_qp} and psn_start {psn_start} must be 24-bit")
    runs = _plan(message_bytes, mtu_bytes, packet_index, count, transport, imm is not None)
    total = sum(r.size_bytes * r.count for r in runs)
    if offset < 0 or offset + total > len(buf):
        raise ValueError(f"buffer of {len(buf)} bytes too small for a {total}-byte batch at offset {offset}")
    sends = _group(runs, offset)
    icrcs = _segment_icrcs(icrc, sends, count)
    pos = offset
    for run in runs:
        if run.count == 1 and run.opcode & 0x1F != _W_MIDDLE:
            zp = zero_payload
            if stamp_ns is not None and run.payload_bytes >= STAMP_BYTES:
                a = pos + run.size_bytes - ICRC_SIZE - (-run.payload_bytes & 3) - run.payload_bytes
                if zp:
                    buf[a : a + run.payload_bytes] = bytes(run.payload_bytes)
                    zp = False
                buf[a : a + STAMP_BYTES] = stamp_value(stamp_ns + run.index * stamp_step_ns)
            build_write_packet(
                buf, pos, opcode=run.opcode, dest_qp=dest_qp, psn=(psn_start + run.index) & PSN_MASK,
                payload_len=run.payload_bytes, ack_req=ack_req_last and run.index == count - 1, va=va, rkey=rkey,
                dma_length=message_bytes, imm=imm if run.opcode in op.IMMDT_SET else None,
                icrc=icrcs[run.index] if icrcs else None, pkey=pkey, migreq=migreq, zero_payload=zp,
            )  # fmt: skip
        else:
            _stamp_middles(buf, pos, run, psn_start, ack_req_last and run.index + run.count == count, dest_qp, pkey,
                           migreq, zero_payload, icrcs, stamp_ns, stamp_step_ns)  # fmt: skip
        pos += run.size_bytes * run.count
    return WriteBatch(
        buffer=buf, offset=offset, size_bytes=total, count=count, segment_size_bytes=max(sends, key=_length)[2],
        sends=sends, psn_start=psn_start, next_psn=(psn_start + count) & PSN_MASK,
        ends_message=packet_index + count == message_packets(message_bytes, mtu_bytes),
    )  # fmt: skip


def _length(send: tuple[int, int, int]) -> int:
    return send[1]


def _segment_icrcs(icrc: IcrcFn | None, sends: tuple[tuple[int, int, int], ...], count: int) -> list[IcrcFn]:
    """The ICRC function of each packet: GSO gives segment k of a send the IPv4 ID ``base + k``."""
    if icrc is None:
        return []
    per_segment = getattr(icrc, "for_gso_segment", None)
    if per_segment is None:
        return [icrc] * count
    out: list[IcrcFn] = []
    for _, length, seg in sends:
        out.extend(per_segment(k) for k in range(-(-length // seg)))
    return out


def _stamp_middles(
    buf: bytearray | memoryview, start: int, run: _Run, psn_start: int, ack_last: bool, dest_qp: int, pkey: int,
    migreq: bool, zero_payload: bool, icrcs: list[IcrcFn], stamp_ns: int | None = None, stamp_step_ns: int = 0,
) -> None:  # fmt: skip
    """Write the BTH and ICRC words (and the send-time stamp) of a run of equal-size MIDDLE packets in one
    vectorised step."""
    row = run.size_bytes
    words = np.ndarray((run.count, row // 4), dtype=">u4", buffer=buf, offset=start)
    words[:, 0] = (run.opcode << 24) | (migreq << 22) | pkey
    words[:, 1] = dest_qp
    first = psn_start + run.index
    psns = (np.arange(first, first + run.count, dtype=np.uint64) & PSN_MASK).astype(np.uint32)
    if ack_last:
        psns[-1] |= np.uint32(0x80000000)
    words[:, 2] = psns
    words[:, -1] = 0
    if zero_payload:
        words[:, 3:-1] = 0
    if stamp_ns is not None:
        v: int | np.ndarray = stamp_ns + 1
        if stamp_step_ns:
            v = np.arange(run.count, dtype=np.uint64) * np.uint64(stamp_step_ns) + np.uint64(
                stamp_ns + 1 + run.index * stamp_step_ns)
        words[:, 3] = v >> 32
        words[:, 4] = v & 0xFFFFFFFF
    if icrcs:
        mv = memoryview(buf)
        for r in range(run.count):
            a = start + r * row
            mv[a + row - 4 : a + row] = icrcs[run.index + r](mv[a : a + row - 4]).to_bytes(4, "little")


def build_write_batch(
    psn_start: int,
    count: int,
    *,
    dest_qp: int,
    message_bytes: int,
    mtu_bytes: int,
    packet_index: int = 0,
    va: int = 0,
    rkey: int = 0,
    imm: int | None = None,
    ack_req_last: bool = True,
    icrc: IcrcFn | None = None,
    transport: int = op.TRANSPORT_RC,
    stamp_ns: int | None = None,
    stamp_step_ns: int = 0,
) -> WriteBatch:
    """Like :func:`write_segments` into a fresh zero-filled buffer sized for the batch."""
    size = batch_size_bytes(message_bytes, mtu_bytes, packet_index, count, with_imm=imm is not None)
    return write_segments(
        bytearray(size), 0, psn_start, count, dest_qp=dest_qp, message_bytes=message_bytes,
        mtu_bytes=mtu_bytes, packet_index=packet_index, va=va, rkey=rkey, imm=imm, ack_req_last=ack_req_last,
        icrc=icrc, transport=transport, stamp_ns=stamp_ns, stamp_step_ns=stamp_step_ns,
    )  # fmt: skip
