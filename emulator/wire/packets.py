"""Whole RoCEv2 packets (the UDP payload: BTH, extension headers, payload, pad, ICRC).

Theory of operation: two tiers over the same bytes.

* Hot path (the rank endpoint): :func:`build_write_packet`, :func:`build_ack`,
  :func:`build_nak_psn_error`, :func:`build_cnp` write headers with precompiled ``struct.pack_into`` calls
  into caller buffers, and :func:`parse_header` / :func:`parse_aeth` read the fields a receiver needs as a
  plain tuple. No dataclass is allocated per packet.
* Complete codec: :func:`decode` walks the opcode's extension-header layout (:data:`opcodes.LAYOUT`) into a
  frozen :class:`RocePacket`; :func:`encode_packet` is its inverse. Every malformed or truncated input makes
  ``decode`` raise :class:`WireError` and nothing else.

Pad bytes: the payload is followed by ``PadCnt`` zero bytes so that header + payload is a multiple of 4;
builders set PadCnt from the payload length. An ICRC argument is ``None`` (4 zero placeholder bytes, for
links that do not check it or for a later fill-in) or a callable ``roce_without_icrc -> icrc`` such as
``IcrcContext.bind(sport)``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from emulator.wire import opcodes as op
from emulator.wire.errors import WireError
from emulator.wire.headers import (
    ACK_SYNDROME,
    NAK_PSN_SEQUENCE_ERROR,
    Aeth,
    AtomicAckEth,
    AtomicEth,
    Bth,
    Deth,
    Ieth,
    ImmDt,
    Rdeth,
    Reth,
)
from emulator.wire.icrc import IcrcFn

BTH_SIZE = 12
ICRC_SIZE = 4
CNP_SIZE_BYTES = BTH_SIZE + 16 + ICRC_SIZE
ACK_SIZE_BYTES = BTH_SIZE + 4 + ICRC_SIZE

_BTH_PACK = struct.Struct("!BBHII").pack_into
_BTH_UNPACK = struct.Struct("!B3xII").unpack_from
#: ``(opcode, word 1, word 2)`` of the BTH at the start of a buffer (word 1: flags and DestQP, word 2: AckReq
#: and PSN), ``struct.error`` when it is shorter: the receive path's one unpack per packet
unpack_bth = _BTH_UNPACK
_RETH_PACK = struct.Struct("!QII").pack_into
_U32_PACK = struct.Struct("!I").pack_into
_U32_UNPACK = struct.Struct("!I").unpack_from
_ICRC_PACK = struct.Struct("<I").pack_into
_CNP_STAMP_PACK = struct.Struct("!Q").pack_into
_ICRC_UNPACK = struct.Struct("<I").unpack_from
_ACK_BYTES = struct.Struct("!BBHIII4x").pack
_RC_ACK = int(op.Opcode.RC_ACKNOWLEDGE)
_BECN = 1 << 30

#: opcode -> (has RETH, has ImmDt) for the opcodes build_write_packet accepts (SEND and RDMA WRITE).
_DATA_LAYOUT: dict[int, tuple[bool, bool]] = {
    o: (op.RETH in hs, op.IMMDT in hs)
    for o, hs in op.LAYOUT.items()
    if o & 0xE0 in (op.TRANSPORT_RC, op.TRANSPORT_UC) and o & 0x1F <= 0x0B
}


def pad_count_for(payload_size_bytes: int) -> int:
    """Pad bytes that bring a payload to a multiple of 4 (the BTH PadCnt)."""
    return -payload_size_bytes & 3


def data_packet_size(opcode: int, payload_size_bytes: int) -> int:
    """UDP payload size of a SEND/WRITE packet: BTH + extension headers + payload + pad + ICRC."""
    return (
        BTH_SIZE + op.EXT_BYTES[opcode] + payload_size_bytes + pad_count_for(payload_size_bytes) + ICRC_SIZE
    )


def build_write_packet(
    buf: bytearray | memoryview,
    offset: int,
    *,
    opcode: int,
    dest_qp: int,
    psn: int,
    payload_len: int,
    ack_req: bool = False,
    va: int = 0,
    rkey: int = 0,
    dma_length: int = 0,
    imm: int | None = None,
    icrc: IcrcFn | None = None,
    pkey: int = 0xFFFF,
    solicited: bool = False,
    migreq: bool = False,
    zero_payload: bool = False,
) -> int:
    """Write one SEND/RDMA WRITE packet at ``buf[offset:]`` and return its size in bytes.

    Writes BTH, RETH (FIRST/ONLY), ImmDt (WITH_IMMEDIATE; ``imm`` required), leaves the ``payload_len``
    payload bytes untouched (or zeroes them with ``zero_payload``), zeroes the pad, then writes the ICRC
    (placeholder zeros when ``icrc`` is None).
    """
    layout = _DATA_LAYOUT.get(opcode)
    if layout is None:
        raise ValueError(f"opcode 0x{opcode:02X} is not a SEND or RDMA WRITE opcode")
    has_reth, has_imm = layout
    if has_imm == (imm is None):
        raise ValueError(
            f"opcode {op.opcode_name(opcode)} {'needs' if has_imm else 'takes no'} immediate data"
        )
    if dest_qp >> 24 or psn >> 24 or dest_qp < 0 or psn < 0 or payload_len < 0:
        raise ValueError(f"dest_qp {dest_qp} / psn {psn} must be 24-bit, payload_len {payload_len} >= 0")
    pad = -payload_len & 3
    hdr = 12 + (16 if has_reth else 0) + (4 if has_imm else 0)
    body_end = offset + hdr + payload_len + pad
    total = body_end + 4 - offset
    if offset < 0 or body_end + 4 > len(buf):
        raise ValueError(f"buffer of {len(buf)} bytes too small for {total} bytes at offset {offset}")
    _BTH_PACK(buf, offset, opcode, (solicited << 7) | (migreq << 6) | (pad << 4), pkey, dest_qp,
              (ack_req << 31) | psn)  # fmt: skip
    pos = offset + 12
    if has_reth:
        _RETH_PACK(buf, pos, va, rkey, dma_length)
        pos += 16
    if has_imm:
        _U32_PACK(buf, pos, imm)
        pos += 4
    if zero_payload:
        buf[pos : pos + payload_len] = bytes(payload_len)
    if pad:
        buf[body_end - pad : body_end] = b"\x00" * pad
    if icrc is None:
        buf[body_end : body_end + 4] = b"\x00\x00\x00\x00"
    else:
        _ICRC_PACK(buf, body_end, icrc(memoryview(buf)[offset:body_end]))
    return total


def build_ack(
    dest_qp: int, psn: int, msn: int, *, syndrome: int = ACK_SYNDROME, icrc: IcrcFn | None = None,
    pkey: int = 0xFFFF,
) -> bytes:  # fmt: skip
    """An RC ACKNOWLEDGE (BTH + AETH + ICRC, 20 bytes) for ``psn`` with message sequence number ``msn``."""
    if dest_qp >> 24 or psn >> 24 or msn >> 24 or syndrome >> 8:  # a negative value shifts to -1: caught too
        raise ValueError(
            f"ACK fields out of range: dest_qp {dest_qp} psn {psn} msn {msn} syndrome {syndrome}"
        )
    data = _ACK_BYTES(_RC_ACK, 0, pkey, dest_qp, psn, (syndrome << 24) | msn)  # zero ICRC
    if icrc is None:
        return data
    buf = bytearray(data)
    _ICRC_PACK(buf, 16, icrc(memoryview(buf)[:16]))
    return bytes(buf)


def build_nak_psn_error(dest_qp: int, psn: int, msn: int, *, icrc: IcrcFn | None = None) -> bytes:
    """An RC NAK with PSN sequence error (syndrome 0x60); ``psn`` is the PSN the responder expects."""
    return build_ack(dest_qp, psn, msn, syndrome=NAK_PSN_SEQUENCE_ERROR, icrc=icrc)


def build_cnp(dest_qp: int, *, icrc: IcrcFn | None = None, pkey: int = 0xFFFF, stamp_ns: int | None = None) -> bytes:
    """A RoCEv2 CNP (opcode 0x81, BECN set, PSN 0, 16 reserved bytes, ICRC: 32 bytes).

    ``dest_qp`` is the QP of the *sender* of the congested flow. The reserved bytes are zero, or with
    ``stamp_ns`` (≥ 0) carry a model time in their first 8 (:func:`emulator.wire.stamp.read_cnp_stamp`).
    """
    if dest_qp >> 24 or dest_qp < 0:
        raise ValueError(f"dest_qp {dest_qp} is not 24-bit")
    buf = bytearray(CNP_SIZE_BYTES)
    _BTH_PACK(buf, 0, op.Opcode.CNP, 0, pkey, _BECN | dest_qp, 0)
    if stamp_ns is not None:
        _CNP_STAMP_PACK(buf, BTH_SIZE, stamp_ns + 1)
    if icrc is not None:
        _ICRC_PACK(buf, 28, icrc(memoryview(buf)[:28]))
    return bytes(buf)


def parse_header(data: bytes | bytearray | memoryview) -> tuple[int, int, int, bool, bool]:
    """The receiver's view of a BTH: ``(opcode, dest_qp, psn, ack_req, becn)``. WireError if < 12 bytes."""
    try:
        opcode, w1, w2 = _BTH_UNPACK(data)
    except struct.error:
        raise WireError(f"truncated BTH at byte 0: {len(data)} bytes, need 12") from None
    return opcode, w1 & 0xFFFFFF, w2 & 0xFFFFFF, w2 >= 0x80000000, bool(w1 & _BECN)


def parse_aeth(data: bytes | bytearray | memoryview) -> tuple[int, int]:
    """``(syndrome, msn)`` of the AETH right after the BTH (ACKNOWLEDGE packets)."""
    try:
        (w,) = _U32_UNPACK(data, BTH_SIZE)
    except struct.error:
        raise WireError(f"truncated AETH at byte 12: {len(data)} bytes, need 16") from None
    return w >> 24, w & 0xFFFFFF


def read_icrc(data: bytes | bytearray | memoryview) -> int:
    """The ICRC value in the last 4 bytes of a packet."""
    if len(data) < 4:
        raise WireError(f"packet of {len(data)} bytes has no ICRC")
    return _ICRC_UNPACK(data, len(data) - 4)[0]


@dataclass(frozen=True, slots=True)
class RocePacket:
    """A decoded RoCEv2 UDP payload. Absent headers are None; ``payload_offset`` indexes the input."""

    bth: Bth
    reth: Reth | None = None
    aeth: Aeth | None = None
    immdt: ImmDt | None = None
    ieth: Ieth | None = None
    deth: Deth | None = None
    rdeth: Rdeth | None = None
    atomic_eth: AtomicEth | None = None
    atomic_ack_eth: AtomicAckEth | None = None
    cnp_reserved: bytes | None = None
    payload_offset: int = BTH_SIZE
    payload_size_bytes: int = 0
    icrc: int | None = None

    @property
    def opcode_name(self) -> str:
        return op.opcode_name(self.bth.opcode)

    @property
    def is_cnp(self) -> bool:
        return self.bth.opcode == op.Opcode.CNP

    def payload(self, data: bytes | bytearray | memoryview) -> memoryview:
        """The payload bytes (without pad) inside the buffer this packet was decoded from."""
        return memoryview(data)[self.payload_offset : self.payload_offset + self.payload_size_bytes]


_HEADER_CLASSES = {
    op.RDETH: Rdeth,
    op.DETH: Deth,
    op.RETH: Reth,
    op.ATOMIC_ETH: AtomicEth,
    op.AETH: Aeth,
    op.ATOMIC_ACK_ETH: AtomicAckEth,
    op.IMMDT: ImmDt,
    op.IETH: Ieth,
}


def decode(data: bytes | bytearray | memoryview, *, has_icrc: bool = True) -> RocePacket:
    """Decode a RoCEv2 UDP payload completely. Raises WireError (only) on malformed or truncated input."""
    size = len(data)
    trailer = ICRC_SIZE if has_icrc else 0
    if size < BTH_SIZE + trailer:
        raise WireError(f"packet of {size} bytes is shorter than BTH{' + ICRC' if has_icrc else ''}")
    bth = Bth.decode(data, 0)
    layout = op.LAYOUT.get(bth.opcode)
    if layout is None:
        raise WireError(f"unknown BTH opcode 0x{bth.opcode:02X} at byte 0")
    end = size - trailer
    pos = BTH_SIZE
    fields: dict[str, object] = {}
    for name in layout:
        hsize = op.EXT_HEADER_SIZES[name]
        if end - pos < hsize:
            raise WireError(f"truncated {name.upper()} at byte {pos} for {op.opcode_name(bth.opcode)}")
        if name == op.CNP_PAD:
            fields["cnp_reserved"] = bytes(data[pos : pos + hsize])
        else:
            fields[name] = _HEADER_CLASSES[name].decode(data, pos)
        pos += hsize
    if end - pos < bth.pad_count:
        raise WireError(f"PadCnt {bth.pad_count} exceeds the {end - pos} payload bytes at byte {pos}")
    icrc = _ICRC_UNPACK(data, end)[0] if has_icrc else None
    return RocePacket(
        bth=bth,
        payload_offset=pos,
        payload_size_bytes=end - pos - bth.pad_count,
        icrc=icrc,
        **fields,  # type: ignore[arg-type]
    )


def encode_packet(
    bth: Bth,
    *,
    reth: Reth | None = None,
    aeth: Aeth | None = None,
    immdt: ImmDt | None = None,
    ieth: Ieth | None = None,
    deth: Deth | None = None,
    rdeth: Rdeth | None = None,
    atomic_eth: AtomicEth | None = None,
    atomic_ack_eth: AtomicAckEth | None = None,
    cnp_reserved: bytes | None = None,
    payload: bytes = b"",
    icrc: int | IcrcFn | None = None,
) -> bytes:
    """Encode a whole packet: the headers must be exactly those the opcode's layout requires.

    ``bth.pad_count`` zero bytes follow the payload. ``icrc``: None -> zeros, int -> that value,
    callable -> computed over the packet.
    """
    layout = op.LAYOUT.get(bth.opcode)
    if layout is None:
        raise ValueError(f"cannot encode unknown opcode 0x{bth.opcode:02X}")
    given = {
        op.RDETH: rdeth, op.DETH: deth, op.RETH: reth, op.ATOMIC_ETH: atomic_eth, op.AETH: aeth,
        op.ATOMIC_ACK_ETH: atomic_ack_eth, op.IMMDT: immdt, op.IETH: ieth, op.CNP_PAD: cnp_reserved,
    }  # fmt: skip
    parts = [bth.encode()]
    for name, value in given.items():
        if (name in layout) != (value is not None):
            need = "needs" if name in layout else "takes no"
            raise ValueError(f"opcode {op.opcode_name(bth.opcode)} {need} {name.upper()}")
    for name in layout:
        value = given[name]
        if name == op.CNP_PAD:
            if len(value) != 16:  # type: ignore[arg-type]
                raise ValueError("CNP reserved field must be 16 bytes")
            parts.append(bytes(value))  # type: ignore[arg-type]
        else:
            parts.append(value.encode())  # type: ignore[union-attr]
    parts.append(bytes(payload))
    parts.append(bytes(bth.pad_count))
    body = b"".join(parts)
    if icrc is None:
        value_icrc = 0
    elif callable(icrc):
        value_icrc = icrc(body)
    else:
        value_icrc = icrc
    return body + struct.pack("<I", value_icrc)
