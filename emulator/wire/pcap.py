"""A minimal pcap writer that wraps RoCEv2 UDP payloads in Ethernet / IPv4 or IPv6 / UDP frames.

Theory of operation: :func:`ip_udp_packet` builds the IP + UDP headers the way a RoCE NIC sends them (UDP
checksum 0, IPv4 DF set, lengths counting the ICRC that ends the payload) and, with ``fill_icrc``,
overwrites the payload's last 4 bytes with the full-frame ICRC. :func:`ethernet_frame` adds a 14-byte
untagged Ethernet header. :class:`PcapWriter` writes the classic libpcap format (nanosecond magic
``0xa1b23c4d``, link type 1 = Ethernet) that tshark and Wireshark read; timestamps are given in ns by
the caller (no clock is read here).
"""

from __future__ import annotations

import ipaddress
import struct
from types import TracebackType
from typing import BinaryIO

from emulator.wire.icrc import frame_icrc, icrc_wire_bytes
from emulator.wire.marking import ROCE_UDP_PORT

PCAP_MAGIC_NS = 0xA1B23C4D
LINKTYPE_ETHERNET = 1
ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
DEFAULT_SRC_MAC = bytes.fromhex("020000000001")
DEFAULT_DST_MAC = bytes.fromhex("020000000002")


def _ipv4_checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ip_udp_packet(
    roce: bytes | bytearray | memoryview,
    *,
    src: str | ipaddress.IPv4Address | ipaddress.IPv6Address,
    dst: str | ipaddress.IPv4Address | ipaddress.IPv6Address,
    sport: int,
    dport: int = ROCE_UDP_PORT,
    tos: int = 0,
    ttl: int = 64,
    ip_id: int = 0,
    dont_fragment: bool = True,
    flow_label: int = 0,
    fill_icrc: bool = False,
) -> bytes:
    """An IPv4 or IPv6 packet carrying ``roce`` (BTH .. ICRC) in UDP; ``fill_icrc`` computes the ICRC."""
    s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    if s.version != d.version:
        raise ValueError("source and destination address families differ")
    udp_len = 8 + len(roce)
    udp = struct.pack("!HHHH", sport, dport, udp_len, 0)
    if s.version == 4:
        head = struct.pack(
            "!BBHHHBBH4s4s", 0x45, tos, 20 + udp_len, ip_id, 0x4000 if dont_fragment else 0, ttl, 17, 0,
            s.packed, d.packed,
        )  # fmt: skip
        head = head[:10] + struct.pack("!H", _ipv4_checksum(head)) + head[12:]
    else:
        first = (6 << 28) | (tos << 20) | (flow_label & 0xFFFFF)
        head = struct.pack("!IHBB16s16s", first, udp_len, 17, ttl, s.packed, d.packed)
    packet = head + udp + bytes(roce)
    if fill_icrc:
        packet = packet[:-4] + icrc_wire_bytes(frame_icrc(packet))
    return packet


def ethernet_frame(
    ip_packet: bytes, *, src_mac: bytes = DEFAULT_SRC_MAC, dst_mac: bytes = DEFAULT_DST_MAC
) -> bytes:
    """An untagged Ethernet II frame (no FCS) around an IPv4 or IPv6 packet."""
    ethertype = ETHERTYPE_IPV6 if ip_packet[0] >> 4 == 6 else ETHERTYPE_IPV4
    return dst_mac + src_mac + struct.pack("!H", ethertype) + ip_packet


class PcapWriter:
    """Write Ethernet frames to a pcap file (nanosecond timestamps)."""

    def __init__(self, target: str | BinaryIO, snaplen: int = 262144) -> None:
        self._own = isinstance(target, str)
        self._f: BinaryIO = open(target, "wb") if isinstance(target, str) else target  # noqa: SIM115
        self._snaplen = snaplen
        self._f.write(struct.pack("<IHHiIII", PCAP_MAGIC_NS, 2, 4, 0, 0, snaplen, LINKTYPE_ETHERNET))

    def write_frame(self, frame: bytes, t_ns: int) -> None:
        """Append one Ethernet frame captured at ``t_ns`` (nanoseconds since the epoch)."""
        data = frame[: self._snaplen]
        sec, nsec = divmod(t_ns, 1_000_000_000)
        self._f.write(struct.pack("<IIII", sec, nsec, len(data), len(frame)))
        self._f.write(data)

    def write_roce(self, roce: bytes | bytearray | memoryview, t_ns: int, **ip_fields: object) -> None:
        """Wrap a RoCE UDP payload (see :func:`ip_udp_packet` for the keywords) and append it."""
        macs = {k: ip_fields.pop(k) for k in ("src_mac", "dst_mac") if k in ip_fields}
        frame = ethernet_frame(ip_udp_packet(roce, **ip_fields), **macs)  # type: ignore[arg-type]
        self.write_frame(frame, t_ns)

    def close(self) -> None:
        if self._own:
            self._f.close()
        else:
            self._f.flush()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
