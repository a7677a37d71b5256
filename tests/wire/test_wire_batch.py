"""GSO batches: every segment is a valid packet, opcodes/PSNs/RETH/AckReq right, sends honour GSO rules."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.wire import (
    IcrcContext,
    WriteBatch,
    batch_size_bytes,
    build_write_batch,
    build_write_packet,
    decode,
    max_batch_packets,
    message_packets,
    psn_add,
    write_segments,
)


def split_sends(batch: WriteBatch) -> list[bytes]:
    """What the kernel's UDP GSO does to each send: cut at segment size, the last may be shorter."""
    datagrams = []
    for view, seg in batch.views():
        assert len(view) >= seg
        chunks = [bytes(view[k : k + seg]) for k in range(0, len(view), seg)]
        assert all(len(c) == seg for c in chunks[:-1]) and len(chunks[-1]) <= seg
        datagrams.extend(chunks)
    return datagrams


def expected_opcodes(n, first, count, imm):
    out = []
    for j in range(first, first + count):
        if n == 1:
            out.append(0x0B if imm else 0x0A)
        elif j == 0:
            out.append(0x06)
        elif j == n - 1:
            out.append(0x09 if imm else 0x08)
        else:
            out.append(0x07)
    return out


@st.composite
def batches(draw):
    mtu = draw(st.sampled_from([256, 1024, 4096]))
    message = draw(st.integers(0, 20 * mtu))
    n = message_packets(message, mtu)
    first = draw(st.integers(0, n - 1))
    count = draw(st.integers(1, min(n - first, max_batch_packets(mtu))))
    imm = draw(st.none() | st.integers(0, 2**32 - 1))
    psn = draw(st.integers(0, 2**24 - 1) | st.integers(2**24 - 20, 2**24 - 1))
    return mtu, message, first, count, imm, psn


@settings(max_examples=150, deadline=None)
@given(batches(), st.integers(0, 2**24 - 1))
def test_batch_segments_are_valid_packets(case, dest_qp):
    mtu, message, first, count, imm, psn = case
    n = message_packets(message, mtu)
    batch = build_write_batch(psn, count, dest_qp=dest_qp, message_bytes=message, mtu_bytes=mtu,
                              packet_index=first, va=0x1000, rkey=0xBEEF, imm=imm)  # fmt: skip
    assert batch.size_bytes == len(batch.buffer) == batch_size_bytes(message, mtu, first, count, with_imm=imm is not None)
    datagrams = split_sends(batch)
    assert len(datagrams) == count
    assert len(batch.sends) <= 3
    pkts = [decode(d) for d in datagrams]
    assert [p.bth.opcode for p in pkts] == expected_opcodes(n, first, count, imm is not None)
    assert [p.bth.psn for p in pkts] == [psn_add(psn, i) for i in range(count)]
    assert [p.bth.ack_req for p in pkts] == [0] * (count - 1) + [1]
    assert all(p.bth.dest_qp == dest_qp and p.bth.pkey == 0xFFFF and p.bth.becn == 0 for p in pkts)
    for p, j in zip(pkts, range(first, first + count), strict=True):
        assert (p.reth is not None) == (j == 0)
        if p.reth:
            assert (p.reth.va, p.reth.rkey, p.reth.dma_length) == (0x1000, 0xBEEF, message)
        assert (p.immdt is not None) == (imm is not None and j == n - 1)
        assert p.payload_size_bytes == (mtu if j < n - 1 else message - (n - 1) * mtu)
        assert (p.bth.pad_count + p.payload_size_bytes) % 4 == 0
        assert p.icrc == 0
    assert batch.next_psn == psn_add(psn, count)
    assert batch.ends_message == (first + count == n)


def test_typical_batch_is_one_gso_send():
    mtu = 4096
    assert max_batch_packets(mtu) == 15
    batch = build_write_batch(100, 15, dest_qp=7, message_bytes=1 << 20, mtu_bytes=mtu, packet_index=1)
    assert batch.sends == ((0, 15 * 4112, 4112),) and batch.segment_size_bytes == 4112
    first = build_write_batch(100, 15, dest_qp=7, message_bytes=1 << 20, mtu_bytes=mtu)
    assert first.sends == ((0, 4128, 4128), (4128, 14 * 4112, 4112))  # FIRST (with RETH) goes alone
    last = build_write_batch(100, 3, dest_qp=7, message_bytes=3 * mtu, mtu_bytes=mtu, packet_index=0, imm=9)
    assert [s[2] for s in last.sends] == [4128, 4112, 4116]  # full-size LAST_WITH_IMMEDIATE goes alone
    with pytest.raises(ValueError, match="GSO"):
        build_write_batch(100, 17, dest_qp=7, message_bytes=1 << 20, mtu_bytes=mtu, packet_index=1)


def test_batch_equals_individual_packets_with_icrc_in_dirty_reused_buffer():
    ctx = IcrcContext("10.0.0.1", "10.0.0.2")
    icrc = ctx.bind(0xC123)
    mtu, message, first, count = 1024, 5 * 1024 + 6, 0, 6
    size = batch_size_bytes(message, mtu, first, count)
    buf = bytearray(b"\xab" * (size + 10))
    batch = write_segments(buf, 5, 0xFFFFFD, count, dest_qp=3, message_bytes=message, mtu_bytes=mtu,
                           packet_index=first, icrc=icrc, zero_payload=True, va=42, rkey=43)  # fmt: skip
    assert buf[:5] == b"\xab" * 5 and buf[5 + size :] == b"\xab" * 5
    assert [s[1] // s[2] for s in batch.sends] == [1, 4]  # FIRST alone, then MIDDLE x4 + short LAST
    segment_in_send = [0, 0, 1, 2, 3, 4]  # Linux GSO stamps IPv4 ID base + k on segment k of a send
    ref = bytearray(size)
    pos = 0
    for i, (opc, payload) in enumerate([(6, 1024)] + [(7, 1024)] * 4 + [(8, 6)]):
        pos += build_write_packet(ref, pos, opcode=opc, dest_qp=3, psn=psn_add(0xFFFFFD, i), payload_len=payload,
                                  ack_req=i == 5, va=42, rkey=43, dma_length=message,
                                  icrc=icrc.for_gso_segment(segment_in_send[i]))  # fmt: skip
    assert bytes(buf[5 : 5 + size]) == bytes(ref)
    for k, d in zip(segment_in_send, split_sends(batch), strict=True):
        assert IcrcContext("10.0.0.1", "10.0.0.2", ip_id=k).check(0xC123, 4791, d)
        assert ctx.check(0xC123, 4791, d) == (k == 0)


def test_batch_icrc_with_plain_callable_uses_it_for_every_packet():
    ctx6 = IcrcContext("fd00::1", "fd00::2")  # IPv6 has no identification: every segment checks the same
    batch = build_write_batch(0, 4, dest_qp=3, message_bytes=4096, mtu_bytes=1024, packet_index=0,
                              icrc=lambda roce: ctx6.compute(0xC000, 4791, roce))  # fmt: skip
    assert all(ctx6.check(0xC000, 4791, d) for d in split_sends(batch))
    batch = build_write_batch(0, 4, dest_qp=3, message_bytes=4096, mtu_bytes=1024, icrc=ctx6.bind(0xC000))
    assert all(ctx6.check(0xC000, 4791, d) for d in split_sends(batch))


def test_batch_argument_errors():
    with pytest.raises(ValueError):
        build_write_batch(0, 3, dest_qp=1, message_bytes=2048, mtu_bytes=1024)  # only 2 packets
    with pytest.raises(ValueError):
        build_write_batch(0, 1, dest_qp=1, message_bytes=2048, mtu_bytes=1002)  # MTU not a multiple of 4
    with pytest.raises(ValueError):
        write_segments(bytearray(100), 0, 0, 2, dest_qp=1, message_bytes=2048, mtu_bytes=1024)
    with pytest.raises(ValueError):
        build_write_batch(1 << 24, 1, dest_qp=1, message_bytes=10, mtu_bytes=1024)


def test_zero_length_message_is_write_only():
    batch = build_write_batch(5, 1, dest_qp=1, message_bytes=0, mtu_bytes=1024)
    (pkt,) = [decode(d) for d in split_sends(batch)]
    assert pkt.bth.opcode == 0x0A and pkt.reth.dma_length == 0 and pkt.payload_size_bytes == 0
