"""Typed RoCEv2 transport headers: BTH and the extension headers, each with ``encode``/``decode``.

Theory of operation: each header is a frozen dataclass whose fields are the spec's fields (docs/rocev2.md §3),
in network byte order. ``encode()`` validates every field's range (``ValueError``) and returns the exact
wire bytes; ``decode(data, offset)`` reads them back and raises :class:`WireError` when the input is too
short. ``decode(h.encode()) == h`` for every valid header. These are the readable, complete codec; the hot
path in :mod:`emulator.wire.packets` writes the same bytes with precompiled structs instead.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from emulator.wire.errors import WireError

ACK_SYNDROME = 0x1F  # ACK, credit count 31 (invalid / unlimited)
NAK_PSN_SEQUENCE_ERROR = 0x60

AETH_ACK = 0
AETH_RNR_NAK = 1
AETH_RESERVED = 2
AETH_NAK = 3

NAK_CODE_PSN_SEQUENCE_ERROR = 0
NAK_CODE_INVALID_REQUEST = 1
NAK_CODE_REMOTE_ACCESS_ERROR = 2
NAK_CODE_REMOTE_OPERATIONAL_ERROR = 3
NAK_CODE_INVALID_RD_REQUEST = 4

_BTH = struct.Struct("!BBHII")
_RETH = struct.Struct("!QII")
_U32 = struct.Struct("!I")
_DETH = struct.Struct("!II")
_ATOMIC_ETH = struct.Struct("!QIQQ")
_ATOMIC_ACK_ETH = struct.Struct("!Q")


def _check(name: str, value: int, bits: int) -> None:
    if not 0 <= value < (1 << bits):
        raise ValueError(f"{name}={value} does not fit in {bits} bits")


def _need(data: bytes | bytearray | memoryview, offset: int, size: int, what: str) -> None:
    if offset < 0 or len(data) - offset < size:
        raise WireError(
            f"truncated {what} at byte {offset}: need {size} bytes, have {max(len(data) - offset, 0)}"
        )


def syndrome(kind: int, value: int) -> int:
    """An AETH syndrome byte from its type (AETH_ACK, AETH_RNR_NAK, AETH_NAK) and 5-bit value."""
    _check("AETH type", kind, 2)
    _check("AETH value", value, 5)
    return (kind << 5) | value


def rnr_nak_syndrome(timer_code: int) -> int:
    """The syndrome of an RNR NAK with the given RNR timer code (0..31)."""
    return syndrome(AETH_RNR_NAK, timer_code)


@dataclass(frozen=True, slots=True)
class Bth:
    """Base Transport Header (12 bytes). ``opcode`` may be any byte, known or not."""

    opcode: int
    dest_qp: int
    psn: int
    solicited: int = 0
    migreq: int = 0
    pad_count: int = 0
    tver: int = 0
    pkey: int = 0xFFFF
    fecn: int = 0
    becn: int = 0
    resv6: int = 0
    ack_req: int = 0
    resv7: int = 0

    SIZE = 12

    def encode(self) -> bytes:
        for name, bits in (
            ("opcode", 8), ("dest_qp", 24), ("psn", 24), ("solicited", 1), ("migreq", 1), ("pad_count", 2),
            ("tver", 4), ("pkey", 16), ("fecn", 1), ("becn", 1), ("resv6", 6), ("ack_req", 1), ("resv7", 7),
        ):  # fmt: skip
            _check(name, getattr(self, name), bits)
        b1 = (self.solicited << 7) | (self.migreq << 6) | (self.pad_count << 4) | self.tver
        w1 = (self.fecn << 31) | (self.becn << 30) | (self.resv6 << 24) | self.dest_qp
        w2 = (self.ack_req << 31) | (self.resv7 << 24) | self.psn
        return _BTH.pack(self.opcode, b1, self.pkey, w1, w2)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> Bth:
        _need(data, offset, 12, "BTH")
        op, b1, pkey, w1, w2 = _BTH.unpack_from(data, offset)
        return cls(
            opcode=op, dest_qp=w1 & 0xFFFFFF, psn=w2 & 0xFFFFFF, solicited=b1 >> 7, migreq=(b1 >> 6) & 1,
            pad_count=(b1 >> 4) & 3, tver=b1 & 0xF, pkey=pkey, fecn=w1 >> 31, becn=(w1 >> 30) & 1,
            resv6=(w1 >> 24) & 0x3F, ack_req=w2 >> 31, resv7=(w2 >> 24) & 0x7F,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Reth:
    """RDMA Extended Transport Header (16 bytes): remote address, key and the whole message length."""

    va: int
    rkey: int
    dma_length: int

    SIZE = 16

    def encode(self) -> bytes:
        _check("va", self.va, 64)
        _check("rkey", self.rkey, 32)
        _check("dma_length", self.dma_length, 32)
        return _RETH.pack(self.va, self.rkey, self.dma_length)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> Reth:
        _need(data, offset, 16, "RETH")
        return cls(*_RETH.unpack_from(data, offset))


@dataclass(frozen=True, slots=True)
class Aeth:
    """ACK Extended Transport Header (4 bytes): syndrome (8 bits) and MSN (24 bits)."""

    syndrome: int
    msn: int

    SIZE = 4

    @property
    def kind(self) -> int:
        """AETH_ACK, AETH_RNR_NAK, AETH_RESERVED or AETH_NAK (syndrome bits 6:5)."""
        return (self.syndrome >> 5) & 3

    @property
    def value(self) -> int:
        """Credit count (ACK), RNR timer code (RNR NAK) or NAK code (NAK): syndrome bits 4:0."""
        return self.syndrome & 0x1F

    @property
    def is_ack(self) -> bool:
        return self.kind == AETH_ACK

    @property
    def is_psn_sequence_error(self) -> bool:
        return self.kind == AETH_NAK and self.value == NAK_CODE_PSN_SEQUENCE_ERROR

    def encode(self) -> bytes:
        _check("syndrome", self.syndrome, 8)
        _check("msn", self.msn, 24)
        return _U32.pack((self.syndrome << 24) | self.msn)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> Aeth:
        _need(data, offset, 4, "AETH")
        (w,) = _U32.unpack_from(data, offset)
        return cls(syndrome=w >> 24, msn=w & 0xFFFFFF)


@dataclass(frozen=True, slots=True)
class ImmDt:
    """Immediate data (4 bytes)."""

    imm: int

    SIZE = 4

    def encode(self) -> bytes:
        _check("imm", self.imm, 32)
        return _U32.pack(self.imm)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> ImmDt:
        _need(data, offset, 4, "ImmDt")
        return cls(_U32.unpack_from(data, offset)[0])


@dataclass(frozen=True, slots=True)
class Ieth:
    """Invalidate Extended Transport Header (4 bytes): the R_Key to invalidate."""

    rkey: int

    SIZE = 4

    def encode(self) -> bytes:
        _check("rkey", self.rkey, 32)
        return _U32.pack(self.rkey)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> Ieth:
        _need(data, offset, 4, "IETH")
        return cls(_U32.unpack_from(data, offset)[0])


@dataclass(frozen=True, slots=True)
class Deth:
    """Datagram Extended Transport Header (8 bytes): Q_Key, reserved byte, source QP."""

    qkey: int
    src_qp: int
    resv8: int = 0

    SIZE = 8

    def encode(self) -> bytes:
        _check("qkey", self.qkey, 32)
        _check("src_qp", self.src_qp, 24)
        _check("resv8", self.resv8, 8)
        return _DETH.pack(self.qkey, (self.resv8 << 24) | self.src_qp)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> Deth:
        _need(data, offset, 8, "DETH")
        qkey, w = _DETH.unpack_from(data, offset)
        return cls(qkey=qkey, src_qp=w & 0xFFFFFF, resv8=w >> 24)


@dataclass(frozen=True, slots=True)
class Rdeth:
    """Reliable Datagram Extended Transport Header (4 bytes): reserved byte, EE context."""

    ee_context: int
    resv8: int = 0

    SIZE = 4

    def encode(self) -> bytes:
        _check("ee_context", self.ee_context, 24)
        _check("resv8", self.resv8, 8)
        return _U32.pack((self.resv8 << 24) | self.ee_context)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> Rdeth:
        _need(data, offset, 4, "RDETH")
        (w,) = _U32.unpack_from(data, offset)
        return cls(ee_context=w & 0xFFFFFF, resv8=w >> 24)


@dataclass(frozen=True, slots=True)
class AtomicEth:
    """Atomic Extended Transport Header (28 bytes)."""

    va: int
    rkey: int
    swap_add: int
    compare: int

    SIZE = 28

    def encode(self) -> bytes:
        _check("va", self.va, 64)
        _check("rkey", self.rkey, 32)
        _check("swap_add", self.swap_add, 64)
        _check("compare", self.compare, 64)
        return _ATOMIC_ETH.pack(self.va, self.rkey, self.swap_add, self.compare)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> AtomicEth:
        _need(data, offset, 28, "AtomicETH")
        return cls(*_ATOMIC_ETH.unpack_from(data, offset))


@dataclass(frozen=True, slots=True)
class AtomicAckEth:
    """Atomic Acknowledge Extended Transport Header (8 bytes): the original remote data."""

    orig_remote_data: int

    SIZE = 8

    def encode(self) -> bytes:
        _check("orig_remote_data", self.orig_remote_data, 64)
        return _ATOMIC_ACK_ETH.pack(self.orig_remote_data)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> AtomicAckEth:
        _need(data, offset, 8, "AtomicAckETH")
        return cls(_ATOMIC_ACK_ETH.unpack_from(data, offset)[0])
