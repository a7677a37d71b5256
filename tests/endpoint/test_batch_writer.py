"""The sender's struct batch writer gives the bytes and GSO sends of the wire module's batch planner."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.endpoint.middles import BatchWriter
from emulator.wire import build_write_batch, max_batch_packets, message_packets
from emulator.wire.psn import PSN_MASK


@settings(max_examples=150, deadline=None)
@given(mtu=st.sampled_from([256, 1024, 4096]), data=st.data(), dest_qp=st.integers(0, (1 << 24) - 1),
       va=st.integers(0, (1 << 64) - 1), stamp=st.integers(0, 1 << 50), step=st.integers(0, 5000))
def test_batch_writer_matches_build_write_batch(mtu, data, dest_qp, va, stamp, step):
    writer = BatchWriter(mtu)  # one writer for several batches: its cached shapes are reused
    for _ in range(4):
        size = data.draw(st.sampled_from([0, 1, 2, 7, 8, 9, mtu - 1, mtu, mtu + 1]) | st.integers(0, 80_000))
        n = message_packets(size, mtu)
        index = data.draw(st.integers(0, n - 1))
        count = data.draw(st.integers(1, min(n - index, max_batch_packets(mtu))))
        psn = data.draw(st.integers(0, PSN_MASK))
        ack = data.draw(st.booleans())
        want = build_write_batch(psn, count, dest_qp=dest_qp, message_bytes=size, mtu_bytes=mtu, packet_index=index,
                                 va=va, ack_req_last=ack, stamp_ns=stamp, stamp_step_ns=step)
        buf, sends = writer.write(dest_qp, psn, size, index, count, va, ack, stamp, step)
        assert bytes(buf) == bytes(want.buffer)
        assert sends == want.sends
