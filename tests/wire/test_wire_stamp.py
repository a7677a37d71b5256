"""The send-time stamp: in the first 8 payload bytes of every WRITE packet that has them, written before
the ICRC, read back by the switch; the packets still decode as RoCEv2 with a valid ICRC."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.wire import IcrcContext, build_write_batch, decode, max_batch_packets, message_packets
from emulator.wire.stamp import STAMP_BYTES, read_stamp


def _segments(wb):
    mv = memoryview(wb.buffer)
    for off, length, seg in wb.sends:
        for a in range(off, off + length, seg):
            yield mv[a : min(a + seg, off + length)]


@settings(max_examples=200, deadline=None)
@given(mtu=st.sampled_from([256, 1024, 4096]), size=st.integers(0, 70_000), first=st.integers(0, 40),
       count=st.integers(1, 16), t_ns=st.integers(0, 2**62), imm=st.booleans())  # fmt: skip
def test_every_packet_with_room_carries_the_stamp(mtu, size, first, count, t_ns, imm):
    n = message_packets(size, mtu)
    first = min(first, n - 1)
    count = max(1, min(count, n - first, max_batch_packets(mtu)))
    wb = build_write_batch(7, count, dest_qp=0x123, message_bytes=size, mtu_bytes=mtu, packet_index=first,
                           imm=0xABCD if imm else None, stamp_ns=t_ns)
    segs = list(_segments(wb))
    assert len(segs) == count
    for j, pkt in enumerate(segs):
        p = decode(pkt)
        payload = min(mtu, size - (first + j) * mtu)
        assert p.payload_size_bytes == payload
        if payload >= STAMP_BYTES:
            assert read_stamp(pkt) == t_ns
            assert int.from_bytes(pkt[p.payload_offset : p.payload_offset + STAMP_BYTES], "big") == t_ns + 1
        else:
            assert read_stamp(pkt) == -1


def test_unstamped_batches_are_unchanged_and_read_as_no_stamp():
    plain = build_write_batch(0, 3, dest_qp=5, message_bytes=3 * 1024, mtu_bytes=1024)
    assert all(read_stamp(p) == -1 for p in _segments(plain))
    assert read_stamp(b"\x11" + bytes(40)) == -1  # an ACK opcode
    assert read_stamp(b"\x07") == -1  # too short


def test_stamp_is_written_before_the_icrc():
    ctx = IcrcContext("127.0.0.2", "127.0.0.3")
    wb = build_write_batch(0, 4, dest_qp=9, message_bytes=4 * 1024, mtu_bytes=1024, icrc=ctx.bind(0xC000),
                           stamp_ns=123_456_789)
    mv = memoryview(wb.buffer)
    for off, length, seg in wb.sends:
        for k, a in enumerate(range(off, off + length, seg)):  # GSO gives segment k the IPv4 ID base + k
            pkt = mv[a : min(a + seg, off + length)]
            assert read_stamp(pkt) == 123_456_789
            assert IcrcContext("127.0.0.2", "127.0.0.3", ip_id=k).check(0xC000, 4791, pkt)
