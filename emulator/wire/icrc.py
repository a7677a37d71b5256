"""RoCEv2 invariant CRC (ICRC), exactly as docs/rocev2.md §6 masks it, for IPv4 and IPv6.

Theory of operation: the ICRC is CRC-32 (zlib) over ``8 x 0xFF`` (pseudo LRH), the IP header with its
variant fields forced to ones (IPv4: TOS, TTL, header checksum; IPv6: traffic class, flow label, hop
limit), the UDP header with checksum 0xFFFF, the BTH with byte 4 (FECN/BECN/Resv6) forced to 0xFF, and the
rest of the RoCE payload up to the ICRC. IP and UDP lengths count the 4-byte ICRC. It is appended
least-significant byte first; in this package an ICRC is always the ``zlib.crc32`` integer value (scapy
shows the byte-swapped value, see :func:`icrc_wire_bytes`).

Two ways in:

* :func:`frame_icrc` / :func:`check_frame_icrc` take a whole IP packet (pcaps, raw sockets).
* :class:`IcrcContext` rebuilds the IP header from what a UDP socket sender knows (addresses; TOS,
  TTL and flow label are masked so they do not matter; IPv4 identification and DF are *not* masked, so
  they must match what the kernel sends). Linux (``ip_select_ident_segs``) sends ID 0 for DF datagrams
  from an *unconnected* socket (a connected one uses a per-socket counter we cannot predict), so senders
  should use ``IP_PMTUDISC_DO`` and ``sendto``/``sendmsg`` with an address. UDP GSO
  (``inet_gso_segment``) then numbers the segments of one send ``id, id + 1, ...``:
  :meth:`BoundIcrc.for_gso_segment` gives the ICRC function for segment k, and the batch builder uses it.
  The CRC state over the 8 x 0xFF prefix is computed once; each call hashes 36 or 56 header bytes plus the
  packet through a memoryview (no payload copy).
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from emulator.wire.errors import WireError
from emulator.wire.marking import ROCE_UDP_PORT

ICRC_SIZE = 4
#: what goes into a packet's ICRC field: ``zero`` (4 zero bytes) or ``compute`` (the real CRC-32)
ICRC_MODES: tuple[str, ...] = ("zero", "compute")
BTH_SIZE = 12
_LRH_STANDIN = b"\xff" * 8
_CRC_LRH = zlib.crc32(_LRH_STANDIN)
_FF = b"\xff"
_IPV4_HEAD = struct.Struct("!BBHHHBBH4s4s")
_IPV6_HEAD = struct.Struct("!IHBB16s16s")
_UDP_HEAD = struct.Struct("!HHHH")
_ICRC_LE = struct.Struct("<I")

IcrcFn = Callable[[bytes | bytearray | memoryview], int]


def _crc_roce(roce: bytes | bytearray | memoryview, crc: int) -> int:
    """Continue ``crc`` over a RoCE payload (BTH onward, without ICRC) with BTH byte 4 masked."""
    mv = memoryview(roce)
    if len(mv) < BTH_SIZE:
        raise WireError(f"RoCE payload of {len(mv)} bytes is shorter than a BTH (12 bytes)")
    crc = zlib.crc32(mv[:4], crc)
    crc = zlib.crc32(_FF, crc)
    return zlib.crc32(mv[5:], crc)


def icrc_wire_bytes(icrc: int) -> bytes:
    """The 4 trailer bytes for an ICRC value (least-significant byte first)."""
    return _ICRC_LE.pack(icrc)


def icrc_from_wire(trailer: bytes | bytearray | memoryview) -> int:
    """The ICRC value of 4 trailer bytes (inverse of :func:`icrc_wire_bytes`)."""
    return _ICRC_LE.unpack_from(trailer)[0]


def scapy_icrc_value(icrc: int) -> int:
    """The integer scapy's ``BTH.icrc`` field shows for an ICRC value (the byte-swapped value)."""
    return int.from_bytes(icrc_wire_bytes(icrc), "big")


@dataclass(frozen=True, slots=True)
class IcrcContext:
    """What a UDP-socket sender knows about the IP header of its datagrams.

    ``src`` and ``dst`` are IPv4 or IPv6 addresses (strings or ``ipaddress`` objects; both the same
    family). TOS/traffic class, TTL/hop limit and the flow label are masked by the ICRC and need not be
    given. For IPv4, ``ip_id`` and ``dont_fragment`` are covered by the ICRC and must match the wire.
    """

    src: str | ipaddress.IPv4Address | ipaddress.IPv6Address
    dst: str | ipaddress.IPv4Address | ipaddress.IPv6Address
    ip_id: int = 0
    dont_fragment: bool = True
    _src_bytes: bytes = field(init=False, repr=False, compare=False)
    _dst_bytes: bytes = field(init=False, repr=False, compare=False)
    _v6: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        s = ipaddress.ip_address(self.src)
        d = ipaddress.ip_address(self.dst)
        if s.version != d.version:
            raise ValueError(f"ICRC context mixes IPv{s.version} source and IPv{d.version} destination")
        if not 0 <= self.ip_id <= 0xFFFF:
            raise ValueError(f"IPv4 identification {self.ip_id} out of range 0..65535")
        object.__setattr__(self, "_src_bytes", s.packed)
        object.__setattr__(self, "_dst_bytes", d.packed)
        object.__setattr__(self, "_v6", s.version == 6)

    def _prefix_crc(self, udp_sport: int, udp_dport: int, roce_len: int, ip_id: int) -> int:
        udp_len = 8 + roce_len + ICRC_SIZE
        if self._v6:
            ip = _IPV6_HEAD.pack(0x6FFFFFFF, udp_len, 17, 0xFF, self._src_bytes, self._dst_bytes)
        else:
            frag = 0x4000 if self.dont_fragment else 0
            ip = _IPV4_HEAD.pack(
                0x45, 0xFF, 20 + udp_len, ip_id, frag, 0xFF, 17, 0xFFFF, self._src_bytes, self._dst_bytes
            )
        crc = zlib.crc32(ip, _CRC_LRH)
        return zlib.crc32(_UDP_HEAD.pack(udp_sport, udp_dport, udp_len, 0xFFFF), crc)

    def compute(
        self,
        udp_sport: int,
        udp_dport: int,
        roce: bytes | bytearray | memoryview,
        *,
        ip_id: int | None = None,
    ) -> int:
        """The ICRC of a RoCE payload (BTH onward, *without* the 4 ICRC bytes).

        ``ip_id`` overrides the context's IPv4 identification (ignored for IPv6).
        """
        crc = self._prefix_crc(
            udp_sport, udp_dport, len(roce), self.ip_id if ip_id is None else ip_id & 0xFFFF
        )
        return _crc_roce(roce, crc)

    def check(self, udp_sport: int, udp_dport: int, roce_with_icrc: bytes | bytearray | memoryview) -> bool:
        """True when the trailing 4 bytes of a received UDP payload are its correct ICRC."""
        mv = memoryview(roce_with_icrc)
        if len(mv) < BTH_SIZE + ICRC_SIZE:
            return False
        return self.compute(udp_sport, udp_dport, mv[:-ICRC_SIZE]) == _ICRC_LE.unpack_from(mv, len(mv) - 4)[0]

    def bind(self, udp_sport: int, udp_dport: int = ROCE_UDP_PORT) -> BoundIcrc:
        """A one-argument callable ``roce_without_icrc -> icrc`` for the packet builders."""
        return BoundIcrc(self, udp_sport, udp_dport, self.ip_id)


class BoundIcrc:
    """An :class:`IcrcContext` with the UDP ports (and IPv4 ID) fixed: ``roce_without_icrc -> icrc``."""

    __slots__ = ("ctx", "udp_sport", "udp_dport", "ip_id")

    def __init__(self, ctx: IcrcContext, udp_sport: int, udp_dport: int, ip_id: int) -> None:
        self.ctx = ctx
        self.udp_sport = udp_sport
        self.udp_dport = udp_dport
        self.ip_id = ip_id

    def __call__(self, roce: bytes | bytearray | memoryview) -> int:
        return self.ctx.compute(self.udp_sport, self.udp_dport, roce, ip_id=self.ip_id)

    def for_gso_segment(self, index: int) -> BoundIcrc:
        """The ICRC function for segment ``index`` of one UDP GSO send (IPv4 ID + index)."""
        return BoundIcrc(self.ctx, self.udp_sport, self.udp_dport, (self.ip_id + index) & 0xFFFF)


def _split_ip_packet(packet: memoryview) -> tuple[bytes, int]:
    """Masked IP + UDP header bytes and the offset of the RoCE payload inside an IP packet."""
    if len(packet) < 1:
        raise WireError("IP packet is empty")
    version = packet[0] >> 4
    if version == 4:
        ihl = (packet[0] & 0x0F) * 4
        if ihl < 20 or len(packet) < ihl + 8:
            raise WireError(f"IPv4 packet of {len(packet)} bytes too short for header length {ihl} + UDP")
        if packet[9] != 17:
            raise WireError(f"IPv4 protocol {packet[9]} at byte 9 is not UDP (17)")
        ip = bytearray(packet[:ihl])
        ip[1] = 0xFF
        ip[8] = 0xFF
        ip[10:12] = b"\xff\xff"
    elif version == 6:
        ihl = 40
        if len(packet) < 48:
            raise WireError(f"IPv6 packet of {len(packet)} bytes too short for header + UDP")
        if packet[6] != 17:
            raise WireError(f"IPv6 next header {packet[6]} at byte 6 is not UDP (17)")
        ip = bytearray(packet[:40])
        ip[0:4] = b"\x6f\xff\xff\xff"
        ip[7] = 0xFF
    else:
        raise WireError(f"IP version {version} at byte 0 is neither 4 nor 6")
    udp = bytearray(packet[ihl : ihl + 8])
    udp[6:8] = b"\xff\xff"
    return bytes(ip + udp), ihl + 8


def frame_icrc(ip_packet: bytes | bytearray | memoryview, *, includes_icrc: bool = True) -> int:
    """The ICRC of a whole IP packet (IPv4 or IPv6 header, UDP, RoCE).

    With ``includes_icrc`` (default) the last 4 bytes are the ICRC field and are excluded; the IP and UDP
    length fields are taken as they are in the packet (they must already count the ICRC).
    """
    mv = memoryview(ip_packet)
    head, roce_off = _split_ip_packet(mv)
    end = len(mv) - ICRC_SIZE if includes_icrc else len(mv)
    if end - roce_off < BTH_SIZE:
        raise WireError(f"IP packet of {len(mv)} bytes has no room for a BTH at byte {roce_off}")
    return _crc_roce(mv[roce_off:end], zlib.crc32(head, _CRC_LRH))


def check_frame_icrc(ip_packet: bytes | bytearray | memoryview) -> bool:
    """True when the last 4 bytes of an IP packet carrying RoCEv2 are its correct ICRC."""
    mv = memoryview(ip_packet)
    try:
        return frame_icrc(mv) == _ICRC_LE.unpack_from(mv, len(mv) - 4)[0]
    except (WireError, struct.error):
        return False
