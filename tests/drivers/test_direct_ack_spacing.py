"""The direct driver's ACK spacing: half a queue pair's window, up to 1,024 packets, never so far apart that
the retransmit timer fires between two ACKs of a flow at the line rate (:func:`emulator.drivers.direct.direct_ack_every`).

One sender into a default receive buffer (16 MiB, 32 MiB effective) has a 2,048-packet window: an ACK per
1,024 packets (237 per GB), not per 256 (905 per GB). Each ACK is a ``sendmsg`` at the receiver that on
loopback also delivers it into the sender's socket, and a receive and its parsing at the sender.
"""

from __future__ import annotations

import os
import random

from emulator.drivers.direct import ACK_EVERY_MAX, DirectConfig, direct_ack_every, run_direct
from emulator.endpoint.config import EndpointConfig
from emulator.schedule.compiler import compile_trace
from emulator.trace.generators.common import p2p_node
from emulator.trace.model import NodeType, RankGraph, Trace

WINDOW = 8 << 20  # a quarter of a 16 MiB buffer's 32 MiB, one sender into it


def test_one_sender_with_a_large_window_is_acked_per_half_window_up_to_1024_packets():
    ep = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, retransmit_timeout_ns=20_000_000,
                        max_outstanding_bytes=WINDOW)
    assert direct_ack_every(ep, WINDOW) == WINDOW // 4096 // 2 == 1024 == ACK_EVERY_MAX
    assert direct_ack_every(ep, 4 * WINDOW) == 1024  # capped
    assert direct_ack_every(ep, 1 << 20) == 128  # a smaller window: half of it


def test_acks_come_within_a_quarter_of_the_retransmit_timeout_at_the_line_rate():
    """At 25 Gbit/s a 1 ms timeout is 750 packets of 4,162 wire bytes: an ACK every 187 at most, so the
    timer of a flow at the line rate never fires between two ACKs."""
    ep = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=25e9, retransmit_timeout_ns=1_000_000,
                        max_outstanding_bytes=WINDOW)
    spacing = direct_ack_every(ep, WINDOW)
    assert spacing == 187
    assert spacing * (4096 + ep.wire_overhead_bytes) * 8 / 25e9 * 1e9 <= ep.retransmit_timeout_ns / 4


def test_a_fast_flow_into_a_default_buffer_sends_an_ack_per_1024_packets_and_loses_nothing():
    size = 64 << 20
    s = compile_trace(Trace(ranks={
        0: RankGraph(0, [p2p_node(0, "send", NodeType.COMM_SEND_NODE, size, 0, 1, 0)]),
        1: RankGraph(1, [p2p_node(0, "recv", NodeType.COMM_RECV_NODE, size, 0, 1, 0)])}))
    ep = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, retransmit_timeout_ns=50_000_000)
    port = random.Random(os.getpid() + 61).randrange(30000, 40000)
    cfg = DirectConfig(addresses=("127.0.0.61", "127.0.0.62"), udp_port=port, ranks_per_worker=1)
    res = run_direct(s, cfg, ep, timeout_s=60)
    assert res.errors == [] and res.complete, res.errors
    assert res.bytes_counter("bytes_received") == size and res.bytes_counter("retx_bytes") == 0
    assert res.health["endpoint_socket_drops"] == 0
    assert res.health["receiver_overrun"]["max_outstanding_bytes"] == WINDOW
    packets = size // 4096
    # one per 1,024 packets (rounded up to whole AckReq batches) and the message's last: 64 + 1, not 256 + 1
    assert res.bytes_counter("acks_sent") <= packets // (1024 - 15 + 1) + 2
