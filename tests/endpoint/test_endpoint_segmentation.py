"""Flows longer than one RDMA WRITE message (2^31 − 1 bytes) go out as several messages.

The flow stays one logical transfer: one SEND and one RECV op, their records cover every message, and
only the last message's acknowledgement / arrival completes them. Sizes just above 2^31 and 2^32 catch
wrap-arounds of the 32-bit RETH DMA length; a start PSN near 2^24 makes the 24-bit PSNs and MSNs wrap.
"""

from __future__ import annotations

import struct

import pytest
from support.endpoint import HeldSpy, Wire, make_schedule, recv, send

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.errors import ConfigError
from emulator.wire import MAX_MESSAGE_BYTES, parse_aeth, parse_header

_FIRST, _MIDDLE, _LAST, _ONLY, _ACK = 0x06, 0x07, 0x08, 0x0A, 0x11


def _run_big(size: int, psn0: int, *, max_message_bytes: int = MAX_MESSAGE_BYTES, mtu: int = 4096):
    """Two endpoints, one flow of ``size`` bytes, cc none at 1 Tbit/s, polled every µs; returns the endpoints,
    the (virtual address, DMA length, PSN) of every FIRST/ONLY packet and the last ACK's MSN."""
    sched = make_schedule(2, [(0, 1, size, 0)], {0: [send(0)], 1: [recv(0)]})
    cfg = EndpointConfig(mtu_bytes=mtu, cc="none", line_rate_bps=1e12, retransmit_timeout_ns=10**12,
                         initial_psn=psn0, max_message_bytes=max_message_bytes)  # fmt: skip
    a, b = RankEndpoint(0, sched, cfg), RankEndpoint(1, sched, cfg)
    a.start(0)
    b.start(0)
    firsts: list[tuple[int, int, int]] = []
    msn = -1
    now = 0
    while not (a.done and b.done) and now < 10**10:
        now += 1000
        for tx in a.poll_transmit(now):
            if tx.data[0] in (_FIRST, _ONLY):  # a message opens with a packet sent alone or leading a batch
                va, _rkey, dma = struct.unpack_from("!QII", tx.data, 12)
                firsts.append((va, dma, parse_header(tx.data)[2]))
            b.receive(tx.data, 2, now, tx.segment_size)
        for tx in b.poll_transmit(now):
            if tx.data[0] == _ACK:
                msn = parse_aeth(tx.data)[1]
            a.receive(tx.data, 0, now, tx.segment_size)
        a.handle_timer(now)
        b.handle_timer(now)
    return a, b, firsts, msn


@pytest.mark.slow
@pytest.mark.parametrize("size", [(1 << 31) + 4097, (1 << 32) + 5])
def test_a_flow_beyond_2_gib_is_several_messages_of_one_transfer(size):
    a, b, firsts, msn = _run_big(size, (1 << 24) - 1000)
    assert a.done and b.done
    chunk = MAX_MESSAGE_BYTES - MAX_MESSAGE_BYTES % 4096  # 2^31 − 4096: whole packets
    n_msgs = -(-size // chunk)
    assert [va for va, _, _ in firsts] == [0] * n_msgs  # every message names the flow
    assert [dma for _, dma, _ in firsts] == [chunk] * (n_msgs - 1) + [size - chunk * (n_msgs - 1)]
    assert all(0 < dma <= MAX_MESSAGE_BYTES for _, dma, _ in firsts)
    # PSNs run on across the messages and wrap at 2^24; MSN = messages received (mod 2^24)
    pkts = [-(-dma // 4096) for _, dma, _ in firsts]
    starts = [((1 << 24) - 1000 + sum(pkts[:i])) & 0xFFFFFF for i in range(n_msgs)]
    assert [psn for _, _, psn in firsts] == starts
    assert msn == n_msgs
    tx, rx = a.records, b.records
    assert rx.counters["bytes_received"] == size == tx.counters["bytes_sent"]
    assert int(tx.packets[0]) == int(rx.packets[0]) == sum(pkts)  # one op's records cover every message
    assert rx.counters["bad_packets"] == rx.counters["opcode_errors"] == 0
    assert 0 <= int(tx.start_ns[0]) < int(rx.end_ns[0]) <= int(tx.end_ns[0])


def test_only_the_last_message_completes_the_ops():
    """With 10 kB messages a 25 kB flow is 3 messages: neither op is done before the third arrives / is
    acknowledged, although the first two are complete messages with their own ACKs."""
    size = 25_000
    sched = make_schedule(2, [(0, 1, size, 0)], {0: [send(0)], 1: [recv(0)]})
    cfg = EndpointConfig(mtu_bytes=1024, cc="none", line_rate_bps=1e9, max_message_bytes=10_000)
    assert cfg.message_bytes == 9216  # whole packets: 9 × 1024
    eps = [RankEndpoint(r, sched, cfg) for r in range(2)]
    wire = Wire(eps, latency_ns=1000)
    notified: list[tuple[int, int, int]] = []
    HeldSpy(eps[1], 1, notified)
    wire.run(until_ns=10**8)
    held_at = [t for _, _, t in notified]
    assert all(ep.done for ep in eps)
    assert len(held_at) == 1  # the RECV op was told once: at the last message
    opcodes = [pkt[0] for _, src, _, pkt in wire.log if src == 0]
    assert opcodes.count(_FIRST) == 3 and opcodes.count(_LAST) == 3
    last_sent = max(t for t, src, _, pkt in wire.log if src == 0 and pkt[0] == _LAST)
    acks = [t for t, src, _, pkt in wire.log if src == 1 and pkt[0] == _ACK]
    assert len(acks) >= 3  # each message's last packet asks for an ACK
    assert held_at[0] == last_sent + 1000
    assert int(eps[1].records.end_ns[0]) == held_at[0]
    assert int(eps[0].records.end_ns[0]) >= max(acks) + 1000  # the SEND op waits for the last message's ACK
    assert eps[1].records.counters["bytes_received"] == size


def test_a_lost_packet_of_a_middle_message_is_recovered():
    """Go-back-N across message boundaries: drop the first packet of the second message once."""
    from support.endpoint import drop_first

    size = 30_000
    sched = make_schedule(2, [(0, 1, size, 0), (0, 1, 5000, 0)], {0: [send(0), send(1)], 1: [recv(0), recv(1)]})
    cfg = EndpointConfig(mtu_bytes=1024, cc="none", line_rate_bps=1e9, max_message_bytes=8192,
                         retransmit_timeout_ns=100_000)  # fmt: skip
    eps = [RankEndpoint(r, sched, cfg) for r in range(2)]
    drop, dropped = drop_first(lambda h: h[0] == _FIRST and h[2] == 8)  # PSN 8: FIRST of message 2
    Wire(eps, drop=drop).run(until_ns=10**9)
    assert dropped and all(ep.done for ep in eps)
    c = eps[1].records.counters
    assert c["bytes_received"] == size + 5000 and c["bad_packets"] == 0
    assert eps[0].records.counters["retransmits"] > 0


def test_max_message_bytes_is_validated():
    for bad in (0, -1, MAX_MESSAGE_BYTES + 1, True, 1.5):
        with pytest.raises(ConfigError, match="max_message_bytes"):
            EndpointConfig(max_message_bytes=bad)
    assert EndpointConfig(mtu_bytes=4096).message_bytes == (1 << 31) - 4096
    assert EndpointConfig(mtu_bytes=1024, max_message_bytes=1000).message_bytes == 1000
