"""Header and packet codec: hypothesis round trips, fast builders vs the full codec, malformed input."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.wire import (
    ACK_SYNDROME,
    AETH_ACK,
    AETH_NAK,
    AETH_RNR_NAK,
    NAK_PSN_SEQUENCE_ERROR,
    Aeth,
    AtomicAckEth,
    AtomicEth,
    Bth,
    Deth,
    IcrcContext,
    Ieth,
    ImmDt,
    Opcode,
    Rdeth,
    Reth,
    WireError,
    build_ack,
    build_cnp,
    build_nak_psn_error,
    build_write_packet,
    data_packet_size,
    decode,
    encode_packet,
    opcode_name,
    pad_count_for,
    parse_aeth,
    parse_header,
    read_icrc,
    rnr_nak_syndrome,
)
from emulator.wire.opcodes import LAYOUT

u = lambda bits: st.integers(0, (1 << bits) - 1)  # noqa: E731

bths = st.builds(
    Bth, opcode=u(8), dest_qp=u(24), psn=u(24), solicited=u(1), migreq=u(1), pad_count=u(2), tver=u(4),
    pkey=u(16), fecn=u(1), becn=u(1), resv6=u(6), ack_req=u(1), resv7=u(7),
)  # fmt: skip
HEADER_STRATEGIES = {
    "reth": st.builds(Reth, va=u(64), rkey=u(32), dma_length=u(32)),
    "aeth": st.builds(Aeth, syndrome=u(8), msn=u(24)),
    "immdt": st.builds(ImmDt, imm=u(32)),
    "ieth": st.builds(Ieth, rkey=u(32)),
    "deth": st.builds(Deth, qkey=u(32), src_qp=u(24), resv8=u(8)),
    "rdeth": st.builds(Rdeth, ee_context=u(24), resv8=u(8)),
    "atomic_eth": st.builds(AtomicEth, va=u(64), rkey=u(32), swap_add=u(64), compare=u(64)),
    "atomic_ack_eth": st.builds(AtomicAckEth, orig_remote_data=u(64)),
    "cnp_reserved": st.binary(min_size=16, max_size=16),
}


@given(bths)
def test_bth_round_trip(bth):
    raw = bth.encode()
    assert len(raw) == 12
    assert Bth.decode(raw) == bth
    assert Bth.decode(b"xx" + raw, 2) == bth


@pytest.mark.parametrize("name", [n for n in HEADER_STRATEGIES if n != "cnp_reserved"])
@given(data=st.data())
def test_extension_header_round_trip(name, data):
    header = data.draw(HEADER_STRATEGIES[name])
    raw = header.encode()
    assert len(raw) == header.SIZE
    assert type(header).decode(raw) == header
    with pytest.raises(WireError):
        type(header).decode(raw[:-1])


def test_encode_rejects_out_of_range_fields():
    with pytest.raises(ValueError):
        Bth(opcode=6, dest_qp=1 << 24, psn=0).encode()
    with pytest.raises(ValueError):
        Bth(opcode=6, dest_qp=0, psn=-1).encode()
    with pytest.raises(ValueError):
        Aeth(syndrome=0x100, msn=0).encode()


@st.composite
def packets(draw):
    opcode = draw(st.sampled_from(sorted(LAYOUT)))
    bth = Bth(**{**_fields(draw(bths)), "opcode": opcode})
    headers = {name: draw(HEADER_STRATEGIES[name]) for name in LAYOUT[opcode]}
    payload = draw(st.binary(max_size=64))
    return bth, headers, payload, draw(u(32))


def _fields(bth):
    return {f: getattr(bth, f) for f in Bth.__dataclass_fields__}


@settings(deadline=None)
@given(packets())
def test_whole_packet_round_trip(case):
    bth, headers, payload, icrc = case
    raw = encode_packet(bth, payload=payload, icrc=icrc, **headers)
    pkt = decode(raw)
    assert pkt.bth == bth
    for name, value in headers.items():
        assert getattr(pkt, name) == value
    assert pkt.payload_size_bytes == len(payload)
    assert bytes(pkt.payload(raw)) == payload
    assert pkt.icrc == icrc == read_icrc(raw)
    assert parse_header(raw) == (bth.opcode, bth.dest_qp, bth.psn, bool(bth.ack_req), bool(bth.becn))
    # every strict prefix that cuts into the headers is rejected with WireError
    for cut in range(0, pkt.payload_offset + 4):
        with pytest.raises(WireError):
            decode(raw[:cut])


@settings(max_examples=300)
@given(st.binary(max_size=80), st.booleans())
def test_random_bytes_raise_only_wire_error(data, has_icrc):
    try:
        pkt = decode(data, has_icrc=has_icrc)
    except WireError:
        return
    assert pkt.payload_offset + pkt.payload_size_bytes + pkt.bth.pad_count + (4 if has_icrc else 0) == len(data)


@settings(max_examples=100)
@given(st.binary(max_size=20))
def test_fast_parsers_raise_only_wire_error(data):
    for fn in (parse_header, parse_aeth, read_icrc):
        try:
            fn(data)
        except WireError:
            pass


def test_unknown_opcode_and_bad_padcount():
    with pytest.raises(WireError, match="opcode 0x15"):
        decode(Bth(opcode=0x15, dest_qp=1, psn=1).encode() + bytes(4))
    with pytest.raises(WireError, match="PadCnt"):
        decode(Bth(opcode=0x07, dest_qp=1, psn=1, pad_count=3).encode() + bytes(2) + bytes(4))


def test_all_spec_opcodes_named():
    expected = {
        0x00: "RC_SEND_FIRST", 0x06: "RC_RDMA_WRITE_FIRST", 0x07: "RC_RDMA_WRITE_MIDDLE",
        0x08: "RC_RDMA_WRITE_LAST", 0x09: "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 0x0A: "RC_RDMA_WRITE_ONLY",
        0x0B: "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 0x0C: "RC_RDMA_READ_REQUEST", 0x11: "RC_ACKNOWLEDGE",
        0x12: "RC_ATOMIC_ACKNOWLEDGE", 0x13: "RC_COMPARE_SWAP", 0x14: "RC_FETCH_ADD",
        0x16: "RC_SEND_LAST_WITH_INVALIDATE", 0x17: "RC_SEND_ONLY_WITH_INVALIDATE", 0x24: "UC_SEND_ONLY",
        0x2B: "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 0x64: "UD_SEND_ONLY", 0x65: "UD_SEND_ONLY_WITH_IMMEDIATE",
        0x81: "CNP",
    }  # fmt: skip
    for value, name in expected.items():
        assert opcode_name(value) == name and Opcode[name] == value
    assert all(opcode_name(v) == f"RC_{n}" for v, n in enumerate(
        "SEND_FIRST SEND_MIDDLE SEND_LAST SEND_LAST_WITH_IMMEDIATE SEND_ONLY SEND_ONLY_WITH_IMMEDIATE "
        "RDMA_WRITE_FIRST RDMA_WRITE_MIDDLE RDMA_WRITE_LAST RDMA_WRITE_LAST_WITH_IMMEDIATE RDMA_WRITE_ONLY "
        "RDMA_WRITE_ONLY_WITH_IMMEDIATE RDMA_READ_REQUEST RDMA_READ_RESPONSE_FIRST RDMA_READ_RESPONSE_MIDDLE "
        "RDMA_READ_RESPONSE_LAST RDMA_READ_RESPONSE_ONLY ACKNOWLEDGE ATOMIC_ACKNOWLEDGE COMPARE_SWAP "
        "FETCH_ADD".split()))  # fmt: skip
    assert opcode_name(0x15) == "UNKNOWN_0x15"
    assert LAYOUT[0x0B] == ("reth", "immdt") and LAYOUT[0x65] == ("deth", "immdt") and LAYOUT[0x12] == (
        "aeth", "atomic_ack_eth")  # fmt: skip


WRITE_OPCODES = [0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x26, 0x27, 0x28, 0x29, 0x2A, 0x2B, 0x00, 0x04, 0x05]


@settings(deadline=None)
@given(
    opcode=st.sampled_from(WRITE_OPCODES), dest_qp=u(24), psn=u(24), payload_len=st.integers(0, 70),
    ack_req=st.booleans(), va=u(64), rkey=u(32), dma_length=u(32), imm=u(32), offset=st.integers(0, 9),
)  # fmt: skip
def test_build_write_packet_matches_full_codec(opcode, dest_qp, psn, payload_len, ack_req, va, rkey, dma_length,
                                               imm, offset):  # fmt: skip
    headers = {}
    if "reth" in LAYOUT[opcode]:
        headers["reth"] = Reth(va, rkey, dma_length)
    has_imm = "immdt" in LAYOUT[opcode]
    if has_imm:
        headers["immdt"] = ImmDt(imm)
    pad = pad_count_for(payload_len)
    payload = bytes((i * 7) & 0xFF for i in range(payload_len))
    ctx = IcrcContext("10.1.2.3", "10.4.5.6")
    expected = encode_packet(
        Bth(opcode=opcode, dest_qp=dest_qp, psn=psn, ack_req=int(ack_req), pad_count=pad),
        payload=payload, icrc=ctx.bind(0xC001), **headers,
    )  # fmt: skip
    size = data_packet_size(opcode, payload_len)
    buf = bytearray(b"\xee" * (offset + size + 3))
    hdr = size - payload_len - pad - 4
    buf[offset + hdr : offset + hdr + payload_len] = payload  # payload written by the caller, left untouched
    n = build_write_packet(
        buf, offset, opcode=opcode, dest_qp=dest_qp, psn=psn, payload_len=payload_len, ack_req=ack_req, va=va,
        rkey=rkey, dma_length=dma_length, imm=imm if has_imm else None, icrc=ctx.bind(0xC001),
    )  # fmt: skip
    assert n == size == len(expected)
    assert bytes(buf[offset : offset + n]) == expected
    assert buf[:offset] == b"\xee" * offset and buf[offset + n :] == b"\xee" * 3
    assert ctx.check(0xC001, 4791, expected)


def test_build_write_packet_placeholder_and_zero_payload_and_errors():
    buf = bytearray(b"\xff" * 64)
    n = build_write_packet(buf, 0, opcode=0x07, dest_qp=1, psn=2, payload_len=8, zero_payload=True)
    assert n == 24 and buf[:24] == bytes.fromhex("0700ffff00000001 00000002") + bytes(12)
    with pytest.raises(ValueError):
        build_write_packet(bytearray(23), 0, opcode=0x07, dest_qp=1, psn=2, payload_len=8)
    small = bytearray(30)
    with pytest.raises(ValueError):
        build_write_packet(small, 10, opcode=0x07, dest_qp=1, psn=2, payload_len=8)
    assert len(small) == 30
    with pytest.raises(ValueError):
        build_write_packet(buf, 0, opcode=0x11, dest_qp=1, psn=2, payload_len=0)
    with pytest.raises(ValueError):
        build_write_packet(buf, 0, opcode=0x09, dest_qp=1, psn=2, payload_len=0)  # imm missing
    with pytest.raises(ValueError):
        build_write_packet(buf, 0, opcode=0x07, dest_qp=1, psn=1 << 24, payload_len=0)


def test_ack_nak_rnr_cnp_builders():
    ack = build_ack(0x22, 0xFFFFFF, 77)
    assert ack == bytes.fromhex("1100ffff00000022 00ffffff 1f00004d 00000000")
    pkt = decode(ack)
    assert pkt.opcode_name == "RC_ACKNOWLEDGE" and pkt.aeth.is_ack and pkt.aeth.value == 31
    assert pkt.aeth.kind == AETH_ACK and pkt.aeth.msn == 77 and pkt.payload_size_bytes == 0
    nak = decode(build_nak_psn_error(0x22, 1000, 5))
    assert nak.aeth.syndrome == NAK_PSN_SEQUENCE_ERROR and nak.aeth.kind == AETH_NAK
    assert nak.aeth.is_psn_sequence_error and nak.bth.psn == 1000
    rnr = decode(build_ack(0x22, 3, 4, syndrome=rnr_nak_syndrome(14)))
    assert rnr.aeth.kind == AETH_RNR_NAK and rnr.aeth.value == 14 and rnr.aeth.syndrome == 0x2E
    assert parse_aeth(ack) == (ACK_SYNDROME, 77)
    cnp = build_cnp(0xABCDEF)
    assert len(cnp) == 32 and cnp[:12] == bytes.fromhex("8100ffff40abcdef00000000") and cnp[12:] == bytes(20)
    c = decode(cnp)
    assert c.is_cnp and c.bth.becn == 1 and c.bth.fecn == 0 and c.cnp_reserved == bytes(16)
    assert parse_header(cnp) == (0x81, 0xABCDEF, 0, False, True)
    with pytest.raises(ValueError):
        build_ack(1 << 24, 0, 0)
    with pytest.raises(ValueError):
        build_cnp(-1)


def test_parse_header_bit_positions():
    raw = struct.pack("!BBHII", 0x0A, 0, 0xFFFF, 0x80000000 | 0x000123, 0x80000000 | 0x00ABCD)
    assert parse_header(raw) == (0x0A, 0x123, 0xABCD, True, False)
    assert parse_header(memoryview(bytearray(raw))) == (0x0A, 0x123, 0xABCD, True, False)


@settings(max_examples=200, deadline=None)
@given(qp=st.integers(0, (1 << 24) - 1), psn=st.integers(0, (1 << 24) - 1), msn=st.integers(0, (1 << 24) - 1),
       syn=st.integers(0, 255), pkey=st.integers(0, 0xFFFF))
def test_a_zero_icrc_ack_is_the_general_acks_bytes(qp, psn, msn, syn, pkey):
    """The one-pack ACK (zero ICRC) is byte for byte the ACK the general path writes with an ICRC of 0."""
    fast = build_ack(qp, psn, msn, syndrome=syn, pkey=pkey)
    assert fast == build_ack(qp, psn, msn, syndrome=syn, pkey=pkey, icrc=lambda _mv: 0)
    assert len(fast) == 20 and fast[0] == 0x11 and fast[-4:] == bytes(4)


@pytest.mark.parametrize("args", [(-1, 0, 0), (0, -1, 0), (0, 0, -1)])
def test_a_negative_ack_field_is_refused(args):
    with pytest.raises(ValueError):
        build_ack(*args)
