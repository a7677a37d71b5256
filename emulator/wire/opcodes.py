"""BTH opcode values and the extension headers each opcode carries (docs/rocev2.md §3.1).

Theory of operation: an opcode byte is ``transport (3 high bits) | operation (5 low bits)``. Every value
named in the InfiniBand spec for RC, UC, RD and UD is a member of :class:`Opcode`, plus the RoCEv2 CNP
(0x81). :data:`LAYOUT` maps each known opcode to the ordered tuple of extension headers that follow the
BTH (the decoder walks it), :data:`EXT_BYTES` their total size, and :data:`IMMDT_SET` answers the question
the batch writer asks ("does this packet carry an ImmDt?") with one membership test.
"""

from __future__ import annotations

from enum import IntEnum

TRANSPORT_RC = 0x00
TRANSPORT_UC = 0x20
TRANSPORT_RD = 0x40
TRANSPORT_UD = 0x60
TRANSPORT_CNP = 0x80

# Extension header names, in the order they appear after the BTH.
RDETH = "rdeth"
DETH = "deth"
RETH = "reth"
ATOMIC_ETH = "atomic_eth"
AETH = "aeth"
ATOMIC_ACK_ETH = "atomic_ack_eth"
IMMDT = "immdt"
IETH = "ieth"
CNP_PAD = "cnp_reserved"

EXT_HEADER_SIZES: dict[str, int] = {
    RDETH: 4,
    DETH: 8,
    RETH: 16,
    ATOMIC_ETH: 28,
    AETH: 4,
    ATOMIC_ACK_ETH: 8,
    IMMDT: 4,
    IETH: 4,
    CNP_PAD: 16,
}


class Opcode(IntEnum):
    """Every BTH opcode value of the IBTA spec (RC, UC, RD, UD) and the RoCEv2 CNP."""

    RC_SEND_FIRST = 0x00
    RC_SEND_MIDDLE = 0x01
    RC_SEND_LAST = 0x02
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03
    RC_SEND_ONLY = 0x04
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05
    RC_RDMA_WRITE_FIRST = 0x06
    RC_RDMA_WRITE_MIDDLE = 0x07
    RC_RDMA_WRITE_LAST = 0x08
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09
    RC_RDMA_WRITE_ONLY = 0x0A
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B
    RC_RDMA_READ_REQUEST = 0x0C
    RC_RDMA_READ_RESPONSE_FIRST = 0x0D
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0E
    RC_RDMA_READ_RESPONSE_LAST = 0x0F
    RC_RDMA_READ_RESPONSE_ONLY = 0x10
    RC_ACKNOWLEDGE = 0x11
    RC_ATOMIC_ACKNOWLEDGE = 0x12
    RC_COMPARE_SWAP = 0x13
    RC_FETCH_ADD = 0x14
    RC_SEND_LAST_WITH_INVALIDATE = 0x16
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17

    UC_SEND_FIRST = 0x20
    UC_SEND_MIDDLE = 0x21
    UC_SEND_LAST = 0x22
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23
    UC_SEND_ONLY = 0x24
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25
    UC_RDMA_WRITE_FIRST = 0x26
    UC_RDMA_WRITE_MIDDLE = 0x27
    UC_RDMA_WRITE_LAST = 0x28
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29
    UC_RDMA_WRITE_ONLY = 0x2A
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2B

    RD_SEND_FIRST = 0x40
    RD_SEND_MIDDLE = 0x41
    RD_SEND_LAST = 0x42
    RD_SEND_LAST_WITH_IMMEDIATE = 0x43
    RD_SEND_ONLY = 0x44
    RD_SEND_ONLY_WITH_IMMEDIATE = 0x45
    RD_RDMA_WRITE_FIRST = 0x46
    RD_RDMA_WRITE_MIDDLE = 0x47
    RD_RDMA_WRITE_LAST = 0x48
    RD_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x49
    RD_RDMA_WRITE_ONLY = 0x4A
    RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x4B
    RD_RDMA_READ_REQUEST = 0x4C
    RD_RDMA_READ_RESPONSE_FIRST = 0x4D
    RD_RDMA_READ_RESPONSE_MIDDLE = 0x4E
    RD_RDMA_READ_RESPONSE_LAST = 0x4F
    RD_RDMA_READ_RESPONSE_ONLY = 0x50
    RD_ACKNOWLEDGE = 0x51
    RD_ATOMIC_ACKNOWLEDGE = 0x52
    RD_COMPARE_SWAP = 0x53
    RD_FETCH_ADD = 0x54
    RD_RESYNC = 0x55

    UD_SEND_ONLY = 0x64
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65

    CNP = 0x81


# Headers after the BTH for each operation (low 5 bits), for RC/UC (RD adds RDETH/DETH, see below).
_OP_HEADERS: dict[int, tuple[str, ...]] = {
    0x00: (),
    0x01: (),
    0x02: (),
    0x03: (IMMDT,),
    0x04: (),
    0x05: (IMMDT,),
    0x06: (RETH,),
    0x07: (),
    0x08: (),
    0x09: (IMMDT,),
    0x0A: (RETH,),
    0x0B: (RETH, IMMDT),
    0x0C: (RETH,),
    0x0D: (AETH,),
    0x0E: (),
    0x0F: (AETH,),
    0x10: (AETH,),
    0x11: (AETH,),
    0x12: (AETH, ATOMIC_ACK_ETH),
    0x13: (ATOMIC_ETH,),
    0x14: (ATOMIC_ETH,),
    0x16: (IETH,),
    0x17: (IETH,),
}

# RD responses carry only the RDETH; RD requests carry RDETH and DETH.
_RD_RESPONSES = frozenset({0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12})


def _layout(value: int) -> tuple[str, ...]:
    transport, op = value & 0xE0, value & 0x1F
    if value == Opcode.CNP:
        return (CNP_PAD,)
    if transport == TRANSPORT_UD:
        return (DETH,) if op == 0x04 else (DETH, IMMDT)
    if transport == TRANSPORT_RD:
        if op == 0x15:  # RESYNC
            return (RDETH, DETH)
        prefix = (RDETH,) if op in _RD_RESPONSES else (RDETH, DETH)
        return prefix + _OP_HEADERS[op]
    return _OP_HEADERS[op]


#: Known opcode value -> ordered extension headers after the BTH.
LAYOUT: dict[int, tuple[str, ...]] = {int(o): _layout(int(o)) for o in Opcode}

#: Known opcode value -> total bytes of extension headers after the BTH.
EXT_BYTES: dict[int, int] = {o: sum(EXT_HEADER_SIZES[h] for h in hs) for o, hs in LAYOUT.items()}

IMMDT_SET = frozenset(o for o, hs in LAYOUT.items() if IMMDT in hs)


def opcode_name(value: int) -> str:
    """The spec name of an opcode value (``RC_RDMA_WRITE_FIRST``), or ``UNKNOWN_0xNN``."""
    try:
        return Opcode(value).name
    except ValueError:
        return f"UNKNOWN_0x{value:02X}"
