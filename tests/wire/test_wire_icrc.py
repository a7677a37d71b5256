"""ICRC against the two check values of rocev2.md §6, masking rules, IPv4 and IPv6."""

import pytest

from emulator.wire import (
    Bth,
    IcrcContext,
    WireError,
    build_cnp,
    check_frame_icrc,
    encode_packet,
    ethernet_frame,
    frame_icrc,
    icrc_wire_bytes,
    ip_udp_packet,
    scapy_icrc_value,
    tos,
)
from emulator.wire.marking import ECT0

CX4_CNP = bytes.fromhex(
    "e41d2dab2bc2" "7cfe90643b32" "0800"
    "45c2003c718c40004011" "9161" "0a001101" "0a001201"
    "000012b700280000"
    "8100ffff40000118" "00000000"
    "00000000000000000000000000000000"
    "82fd002a"
)  # fmt: skip
CX4_CTX = IcrcContext("10.0.17.1", "10.0.18.1", ip_id=0x718C)

UC_PAYLOAD = b"F0\x81\x8b\xe2\x895\xd9\x0e\x9a\x95PT\x01\xbe\x88^P"  # 18 bytes + 2 pad bytes


def test_cx4_cnp_golden_vector_byte_for_byte():
    assert len(CX4_CNP) == 74
    roce = build_cnp(0x118, icrc=CX4_CTX.bind(0))
    assert CX4_CTX.compute(0, 4791, roce[:-4]) == 0x2A00FD82
    assert roce[-4:] == bytes.fromhex("82fd002a")
    ip = ip_udp_packet(roce, src="10.0.17.1", dst="10.0.18.1", sport=0, tos=tos(48, ECT0), ttl=64, ip_id=0x718C)
    frame = ethernet_frame(ip, src_mac=bytes.fromhex("7cfe90643b32"), dst_mac=bytes.fromhex("e41d2dab2bc2"))
    assert frame == CX4_CNP


def test_cx4_cnp_full_frame_icrc():
    ip = CX4_CNP[14:]
    assert frame_icrc(ip) == 0x2A00FD82
    assert check_frame_icrc(ip)
    assert scapy_icrc_value(0x2A00FD82) == 0x82FD002A
    assert icrc_wire_bytes(0x2A00FD82) == bytes.fromhex("82fd002a")


def test_scapy_uc_send_only_vector():
    bth = Bth(opcode=0x24, migreq=1, pad_count=2, dest_qp=211, psn=13571856)
    ctx = IcrcContext("192.168.0.7", "192.168.0.7", ip_id=1144)
    roce = encode_packet(bth, payload=UC_PAYLOAD, icrc=ctx.bind(49152))
    assert len(roce) == 36  # UDP length 44
    assert ctx.compute(49152, 4791, roce[:-4]) == 0xF353F378
    assert roce[-4:] == bytes.fromhex("78f353f3")
    ip = ip_udp_packet(roce, src="192.168.0.7", dst="192.168.0.7", sport=49152, tos=0x01, ip_id=1144)
    assert ip[10:12] == bytes.fromhex("b4d5")  # IPv4 header checksum of the scapy test
    assert frame_icrc(ip) == 0xF353F378


@pytest.mark.parametrize("offset", [1, 8, 10, 11, 20 + 6, 20 + 8 + 4])
def test_masked_fields_do_not_change_icrc(offset):
    """TOS, TTL, IP checksum, UDP checksum, BTH byte 4 are masked; flipping them keeps the ICRC."""
    ip = bytearray(CX4_CNP[14:])
    ip[offset] ^= 0x5A
    assert frame_icrc(ip) == 0x2A00FD82


@pytest.mark.parametrize("offset", [0 + 4, 6, 9 + 3, 12, 16, 20, 20 + 4, 28, 28 + 5, 28 + 12, 28 + 27])
def test_covered_fields_change_icrc(offset):
    ip = bytearray(CX4_CNP[14:])
    ip[offset] ^= 0x01
    assert not check_frame_icrc(ip)


def test_context_matches_frame_ipv6_and_masks_traffic_class_flow_label_hop_limit():
    ctx = IcrcContext("fd00::1", "fd00::2")
    bth = Bth(opcode=0x07, dest_qp=0x123456, psn=0xFFFFFF, ack_req=1)
    roce = encode_packet(bth, payload=bytes(range(64)), icrc=ctx.bind(0xC123))
    for tc, fl, hl in [(0, 0, 64), (0xFF, 0xFFFFF, 1), (tos(26, ECT0), 0x12345, 255)]:
        ip = ip_udp_packet(roce, src="fd00::1", dst="fd00::2", sport=0xC123, tos=tc, flow_label=fl, ttl=hl)
        assert ip[0] >> 4 == 6 and ip[6] == 17
        assert frame_icrc(ip) == ctx.compute(0xC123, 4791, roce[:-4])
        assert check_frame_icrc(ip)
        assert ctx.check(0xC123, 4791, roce)
    assert not ctx.check(0xC124, 4791, roce)
    assert not IcrcContext("fd00::1", "fd00::3").check(0xC123, 4791, roce)


def test_ipv4_identification_and_df_are_covered():
    roce = build_cnp(5)
    a = IcrcContext("10.0.0.1", "10.0.0.2").compute(0xC000, 4791, roce[:-4])
    assert a != IcrcContext("10.0.0.1", "10.0.0.2", ip_id=1).compute(0xC000, 4791, roce[:-4])
    assert a != IcrcContext("10.0.0.1", "10.0.0.2", dont_fragment=False).compute(0xC000, 4791, roce[:-4])


def test_context_rejects_mixed_families():
    with pytest.raises(ValueError):
        IcrcContext("10.0.0.1", "fd00::1")


@pytest.mark.parametrize(
    "packet",
    [b"", b"\x45" + bytes(10), b"\x60" + bytes(20), b"\x75" + bytes(60), b"\x45" + bytes(8) + b"\x06" + bytes(40)],
)
def test_frame_icrc_malformed_raises_wire_error(packet):
    with pytest.raises(WireError):
        frame_icrc(packet)
    assert not check_frame_icrc(packet)
