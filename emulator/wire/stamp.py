"""The send-time stamp: a data packet's intended send time in the first 8 bytes of its RDMA payload.

A sender writes ``t_ns + 1`` (big-endian unsigned 64-bit; 0 means "no stamp", the value of a zero
payload) at the start of the payload of every RDMA WRITE packet whose payload holds at least
:data:`STAMP_BYTES` bytes, before the ICRC is computed, so the frame stays valid RoCEv2. The loopback
software switch reads it to run its port model on the times the senders' pacers meant, not on when its
process got the CPU. A CNP may carry a model time the same way in its reserved bytes (:func:`read_cnp_stamp`).
Sans-IO and pure.
"""

from __future__ import annotations

from emulator.wire import opcodes as op
from emulator.wire.packets import BTH_SIZE, ICRC_SIZE

STAMP_BYTES = 8
#: payload offset of every SEND/WRITE data opcode (BTH + its extension headers), by full opcode
_HDR: dict[int, int] = {o: BTH_SIZE + n for o, n in op.EXT_BYTES.items()}
#: the SEND/WRITE data opcodes (RC, UC, ...) whose payload may carry a stamp
DATA_OPCODES = frozenset(o for o in _HDR if o & 0x1F in range(0x06, 0x0C))


def stamp_value(t_ns: int) -> bytes:
    """The 8 stamp bytes of intended send time ``t_ns`` (≥ 0)."""
    return (t_ns + 1).to_bytes(STAMP_BYTES, "big")


def payload_offset(opcode: int) -> int:
    """Bytes before the payload of a data packet with this opcode (BTH + extension headers)."""
    return _HDR[opcode]


def read_stamp(pkt: bytes | bytearray | memoryview) -> int:
    """The intended send time stamped in RDMA WRITE packet ``pkt`` (one packet), or -1 when it carries none
    (not a WRITE, payload shorter than the stamp, or a zero stamp)."""
    if len(pkt) < BTH_SIZE + ICRC_SIZE:
        return -1
    opcode = pkt[0]
    if opcode not in DATA_OPCODES:
        return -1
    hdr = _HDR[opcode]
    payload = len(pkt) - hdr - ICRC_SIZE - ((pkt[1] >> 4) & 3)
    if payload < STAMP_BYTES:
        return -1
    return int.from_bytes(pkt[hdr : hdr + STAMP_BYTES], "big") - 1


#: offset of a CNP's stamp: the first 8 of its 16 reserved bytes, after the BTH
CNP_STAMP_AT = BTH_SIZE


def read_cnp_stamp(pkt: bytes | bytearray | memoryview) -> int:
    """The model time a CNP carries in its reserved bytes (``build_cnp(stamp_ns=...)``: ``t_ns + 1``,
    big-endian), or -1 when it carries none (zero reserved bytes, or too short to be a CNP)."""
    if len(pkt) < CNP_STAMP_AT + STAMP_BYTES:
        return -1
    return int.from_bytes(pkt[CNP_STAMP_AT : CNP_STAMP_AT + STAMP_BYTES], "big") - 1
