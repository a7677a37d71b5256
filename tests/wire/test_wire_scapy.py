"""Packets we build decode in scapy.contrib.roce with the same fields and the same ICRC (IPv4 and IPv6)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

scapy_all = pytest.importorskip("scapy.all")
from scapy.all import IP, UDP, Ether, IPv6, Raw, load_contrib  # noqa: E402

load_contrib("roce")
from scapy.contrib.roce import AETH, BTH, CNPPadding  # noqa: E402

from emulator.wire import (  # noqa: E402
    ECT0,
    Bth,
    IcrcContext,
    build_ack,
    build_cnp,
    build_nak_psn_error,
    build_write_packet,
    data_packet_size,
    decode,
    ethernet_frame,
    frame_icrc,
    icrc_from_wire,
    ip_udp_packet,
    rnr_nak_syndrome,
    scapy_icrc_value,
    tos,
)

SRC_MAC, DST_MAC = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
FAMILIES = {
    4: dict(src="10.0.0.1", dst="10.0.0.2", ttl=64, ip_id=0),
    6: dict(src="fd00::1", dst="fd00::2", ttl=64, flow_label=0x12345),
}
SPORT = 0xC4F1


def write(opcode, psn, payload_len, **kw):
    buf = bytearray(data_packet_size(opcode, payload_len))
    for i in range(len(buf)):
        buf[i] = (i * 13) & 0xFF
    build_write_packet(buf, 0, opcode=opcode, dest_qp=0x11, psn=psn, payload_len=payload_len, **kw)
    return bytes(buf)


CASES = {
    "write_first": lambda: write(0x06, 5, 1024, va=0x7F0000001000, rkey=0x1234, dma_length=4000),
    "write_middle": lambda: write(0x07, 6, 1024),
    "write_last": lambda: write(0x08, 7, 927, ack_req=True),
    "write_last_imm": lambda: write(0x09, 8, 10, ack_req=True, imm=0xDEADBEEF),
    "write_only": lambda: write(0x0A, 0xFFFFFF, 64, ack_req=True, va=1, rkey=2, dma_length=64),
    "write_only_imm": lambda: write(0x0B, 0, 3, va=1, rkey=2, dma_length=3, imm=5),
    "ack": lambda: build_ack(0x22, 7, 3),
    "nak": lambda: build_nak_psn_error(0x22, 6, 2),
    "rnr": lambda: build_ack(0x22, 6, 2, syndrome=rnr_nak_syndrome(14)),
    "cnp": lambda: build_cnp(0x33),
}

BTH_FIELDS = {
    "opcode": "opcode", "solicited": "solicited", "migreq": "migreq", "padcount": "pad_count",
    "version": "tver", "pkey": "pkey", "fecn": "fecn", "becn": "becn", "resv6": "resv6", "dqpn": "dest_qp",
    "ackreq": "ack_req", "resv7": "resv7", "psn": "psn",
}  # fmt: skip


def our_frame(roce_placeholder, family, tclass):
    """Fill the ICRC through IcrcContext (the socket path) and wrap it as a NIC would send it."""
    f = FAMILIES[family]
    ctx = IcrcContext(f["src"], f["dst"], ip_id=f.get("ip_id", 0))
    body = roce_placeholder[:-4]
    icrc = ctx.compute(SPORT, 4791, body)
    roce = body + icrc.to_bytes(4, "little")
    ip = ip_udp_packet(roce, sport=SPORT, tos=tclass, **f)
    assert frame_icrc(ip) == icrc  # the full-frame path agrees with the context path
    return ethernet_frame(ip, src_mac=SRC_MAC, dst_mac=DST_MAC), icrc


def scapy_stack(family, tclass, roce):
    """The same packet built by scapy from field values, its ICRC left for scapy to compute."""
    ours = decode(roce)
    f = FAMILIES[family]
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    if family == 4:
        ip = IP(src=f["src"], dst=f["dst"], tos=tclass, ttl=f["ttl"], id=f["ip_id"], flags="DF")
    else:
        ip = IPv6(src=f["src"], dst=f["dst"], tc=tclass, fl=f["flow_label"], hlim=f["ttl"])
    bth = BTH(**{s: getattr(ours.bth, o) for s, o in BTH_FIELDS.items()}, icrc=None)
    return eth / ip / UDP(sport=SPORT, dport=4791, chksum=0) / bth / Raw(roce[12:-4])


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("name", list(CASES))
def test_scapy_decodes_our_packets(name, family):
    roce = CASES[name]()
    tclass = tos(48, ECT0) if name == "cnp" else tos(26, ECT0)
    frame, icrc = our_frame(roce, family, tclass)
    ours = decode(frame[14 + (20 if family == 4 else 40) + 8 :])
    pkt = Ether(frame)
    assert BTH in pkt and pkt[UDP].dport == 4791 and pkt[UDP].chksum == 0
    for s, o in BTH_FIELDS.items():
        assert getattr(pkt[BTH], s) == getattr(ours.bth, o), s
    assert pkt[BTH].icrc == scapy_icrc_value(icrc)
    if ours.aeth is not None:
        assert AETH in pkt and (pkt[AETH].syndrome, pkt[AETH].msn) == (ours.aeth.syndrome, ours.aeth.msn)
    if ours.is_cnp:
        assert CNPPadding in pkt and pkt[CNPPadding].reserved1 == 0 and pkt[CNPPadding].reserved2 == 0
    # scapy recomputes the same ICRC when asked to
    again = pkt.copy()
    del again[BTH].icrc
    assert bytes(again) == frame
    # and scapy's own build of the same fields is byte-identical to ours
    assert bytes(scapy_stack(family, tclass, frame[-len(roce) :])) == frame


@settings(max_examples=25, deadline=None)
@given(
    family=st.sampled_from([4, 6]), opcode=st.sampled_from([0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B]),
    psn=st.integers(0, 2**24 - 1), dest_qp=st.integers(0, 2**24 - 1), payload_len=st.integers(0, 40),
    ack_req=st.booleans(), tclass=st.integers(0, 255), imm=st.integers(0, 2**32 - 1),
)  # fmt: skip
def test_scapy_icrc_matches_for_random_write_packets(family, opcode, psn, dest_qp, payload_len, ack_req, tclass, imm):
    buf = bytearray(data_packet_size(opcode, payload_len))
    build_write_packet(buf, 0, opcode=opcode, dest_qp=dest_qp, psn=psn, payload_len=payload_len, ack_req=ack_req,
                       va=psn * 3, rkey=dest_qp, dma_length=payload_len, imm=imm if opcode in (9, 11) else None)  # fmt: skip
    frame, icrc = our_frame(bytes(buf), family, tclass)
    built = scapy_stack(family, tclass, frame[-len(buf) :])
    raw = bytes(built)
    assert raw == frame
    assert icrc_from_wire(raw[-4:]) == icrc


_u = lambda bits: st.integers(0, (1 << bits) - 1)  # noqa: E731


@settings(max_examples=60, deadline=None)
@given(st.builds(Bth, opcode=_u(8), dest_qp=_u(24), psn=_u(24), solicited=_u(1), migreq=_u(1), pad_count=_u(2),
                 tver=_u(4), pkey=_u(16), fecn=_u(1), becn=_u(1), resv6=_u(6), ack_req=_u(1), resv7=_u(7)))
def test_every_bth_field_sits_where_scapy_puts_it(bth):
    """Our BTH encoder against scapy's field layout, every field random (an independent implementation)."""
    theirs = bytes(BTH(**{s: getattr(bth, o) for s, o in BTH_FIELDS.items()}, icrc=0))[:12]
    assert bth.encode() == theirs
    assert Bth.decode(theirs) == bth
