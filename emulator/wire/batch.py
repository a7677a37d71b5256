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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulator.wire import opcodes as op
from emulator.wire.icrc import IcrcFn
from emulator.wire.packets import BTH_SIZE, ICRC_SIZE, build_write_packet, data_packet_size
from emulator.wire.psn import PSN_MASK

#: Linux UDP_MAX_SEGMENTS (segments per GSO send).
GSO_MAX_SEGMENTS = 64
#: Largest UDP payload of one GSO send over IPv4 (65535 - 20 IP - 8 UDP).
GSO_MAX_BYTES = 65507

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


def _plan(
    message_bytes: int, mtu_bytes: int, packet_index: int, count: int, transport: int, with_imm: bool
) -> list[tuple[int, int]]:
    """(opcode, payload bytes) per packet of the batch."""
    if mtu_bytes <= 0 or mtu_bytes % 4:
        raise ValueError(f"path MTU {mtu_bytes} must be a positive multiple of 4")
    if message_bytes < 0 or message_bytes >= 1 << 31:
        raise ValueError(f"message of {message_bytes} bytes out of range 0..2**31-1")
    n = message_packets(message_bytes, mtu_bytes)
    if count < 1 or packet_index < 0 or packet_index + count > n:
        raise ValueError(f"packets {packet_index}..{packet_index + count - 1} outside a {n}-packet message")
    plan = []
    for j in range(packet_index, packet_index + count):
        if n == 1:
            plan.append((transport | (_W_ONLY_IMM if with_imm else _W_ONLY), message_bytes))
        elif j == 0:
            plan.append((transport | _W_FIRST, mtu_bytes))
        elif j == n - 1:
            plan.append(
                (transport | (_W_LAST_IMM if with_imm else _W_LAST), message_bytes - (n - 1) * mtu_bytes)
            )
        else:
            plan.append((transport | _W_MIDDLE, mtu_bytes))
    return plan


def _group(sizes: list[int], base: int) -> tuple[tuple[int, int, int], ...]:
    """Split consecutive packets into GSO sends: equal sizes, only the batch's last may be shorter."""
    sends = []
    i, pos = 0, base
    while i < len(sizes):
        seg, j, length = sizes[i], i + 1, sizes[i]
        while j < len(sizes) and (sizes[j] == seg or (sizes[j] < seg and j == len(sizes) - 1)):
            length += sizes[j]
            j += 1
        if j - i > GSO_MAX_SEGMENTS or (j - i > 1 and length > GSO_MAX_BYTES):
            raise ValueError(f"GSO send of {j - i} segments / {length} bytes exceeds the UDP GSO limits")
        sends.append((pos, length, seg))
        pos += length
        i = j
    return tuple(sends)


def batch_size_bytes(
    message_bytes: int, mtu_bytes: int, packet_index: int, count: int, *, with_imm: bool = False
) -> int:
    """Buffer bytes :func:`write_segments` needs for this batch."""
    plan = _plan(message_bytes, mtu_bytes, packet_index, count, op.TRANSPORT_RC, with_imm)
    return sum(data_packet_size(o, p) for o, p in plan)


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
) -> WriteBatch:
    """Write packets ``packet_index..+count`` of a message into ``buf[offset:]``; ``psn_start`` is the
    PSN of the batch's first packet. Payload bytes are left untouched unless ``zero_payload``."""
    if transport not in (op.TRANSPORT_RC, op.TRANSPORT_UC):
        raise ValueError("RDMA WRITE batches are RC or UC")
    if dest_qp >> 24 or dest_qp < 0 or psn_start >> 24 or psn_start < 0:
        raise ValueError(f"dest_qp {dest_qp} and psn_start {psn_start} must be 24-bit")
    plan = _plan(message_bytes, mtu_bytes, packet_index, count, transport, imm is not None)
    sizes = [data_packet_size(o, p) for o, p in plan]
    total = sum(sizes)
    if offset < 0 or offset + total > len(buf):
        raise ValueError(f"buffer of {len(buf)} bytes too small for a {total}-byte batch at offset {offset}")
    middle = transport | _W_MIDDLE
    mids = [i for i, (o, _) in enumerate(plan) if o == middle]  # a contiguous run
    pos = offset
    for i, (opcode, payload) in enumerate(plan):
        if opcode == middle:
            pos += sizes[i]
            continue
        last = i == count - 1
        build_write_packet(
            buf, pos, opcode=opcode, dest_qp=dest_qp, psn=(psn_start + i) & PSN_MASK, payload_len=payload,
            ack_req=ack_req_last and last, va=va, rkey=rkey, dma_length=message_bytes,
            imm=imm if opcode in op.IMMDT_SET else None, icrc=icrc, pkey=pkey, migreq=migreq,
            zero_payload=zero_payload,
        )  # fmt: skip
        pos += sizes[i]
    if mids:
        row = mtu_bytes + BTH_SIZE + ICRC_SIZE
        start = offset + sum(sizes[: mids[0]])
        rows = len(mids)
        words = np.ndarray((rows, row // 4), dtype=">u4", buffer=buf, offset=start)
        words[:, 0] = (middle << 24) | (migreq << 22) | pkey
        words[:, 1] = dest_qp
        psns = (
            np.arange(psn_start + mids[0], psn_start + mids[0] + rows, dtype=np.uint64) & PSN_MASK
        ).astype(np.uint32)
        if ack_req_last and mids[-1] == count - 1:
            psns[-1] |= np.uint32(0x80000000)
        words[:, 2] = psns
        words[:, -1] = 0
        if zero_payload:
            words[:, 3:-1] = 0
        if icrc is not None:
            mv = memoryview(buf)
            for r in range(rows):
                a = start + r * row
                mv[a + row - 4 : a + row] = icrc(mv[a : a + row - 4]).to_bytes(4, "little")
    sends = _group(sizes, offset)
    main_seg = max(sends, key=lambda s: s[1])[2]
    return WriteBatch(
        buffer=buf, offset=offset, size_bytes=total, count=count, segment_size_bytes=main_seg, sends=sends,
        psn_start=psn_start, next_psn=(psn_start + count) & PSN_MASK,
        ends_message=packet_index + count == message_packets(message_bytes, mtu_bytes),
    )  # fmt: skip


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
) -> WriteBatch:
    """Like :func:`write_segments` into a fresh zero-filled buffer sized for the batch."""
    size = batch_size_bytes(message_bytes, mtu_bytes, packet_index, count, with_imm=imm is not None)
    return write_segments(
        bytearray(size), 0, psn_start, count, dest_qp=dest_qp, message_bytes=message_bytes,
        mtu_bytes=mtu_bytes, packet_index=packet_index, va=va, rkey=rkey, imm=imm, ack_req_last=ack_req_last,
        icrc=icrc, transport=transport,
    )  # fmt: skip
