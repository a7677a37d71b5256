"""The direct driver when a receiver cannot keep up: the sender backs off, nothing is lost, and it is reported.

A receiver socket with a tiny receive buffer (``DirectConfig.rcvbuf_bytes``) behind a sender at a
100 Gbit/s line rate overruns at once on 127.0.0.x. The sender must bound what it has outstanding
(``EndpointConfig.max_outstanding_bytes``, which the direct driver sets from the receive buffer), cut its
window on the NAKs the drops cause, and the run must say so (``health["receiver_overrun"]`` and a warning).
"""

from __future__ import annotations

import os
import random
from dataclasses import replace

from emulator.drivers.direct import DirectConfig, run_direct
from emulator.endpoint.config import EndpointConfig
from emulator.schedule.compiler import compile_trace
from emulator.trace.generators.common import p2p_node
from emulator.trace.model import NodeType, RankGraph, Trace


def _one_flow(size_bytes: int):
    ranks = {
        0: RankGraph(0, [p2p_node(0, "send", NodeType.COMM_SEND_NODE, size_bytes, 0, 1, 0)]),
        1: RankGraph(1, [p2p_node(0, "recv", NodeType.COMM_RECV_NODE, size_bytes, 0, 1, 0)]),
    }
    return compile_trace(Trace(ranks=ranks))


def _run(size: int, rcvbuf_bytes: int, **ep):
    ep = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, retransmit_timeout_ns=200_000_000, **ep)
    port = random.Random(os.getpid() + 7).randrange(30000, 40000)
    cfg = DirectConfig(addresses=("127.0.0.21", "127.0.0.22"), udp_port=port, ranks_per_worker=1,
                       rcvbuf_bytes=rcvbuf_bytes)
    res = run_direct(_one_flow(size), cfg, ep, timeout_s=60)
    assert res.errors == [] and res.complete, res.errors
    assert res.bytes_counter("bytes_received") == size
    return res


def test_the_default_window_keeps_a_100g_sender_from_overrunning_a_small_receive_buffer():
    res = _run(24 << 20, 256 << 10)
    over = res.health["receiver_overrun"]
    assert 0 < over["max_outstanding_bytes"] <= 256 << 10
    assert over["socket_drops"] == 0 and over["window_cuts"] == 0 and over["warning"] is None, over
    # the timeout (200 ms) is far above any timer lag of a loaded machine: nothing is re-sent
    assert res.bytes_counter("retx_bytes") == 0 and res.bytes_counter("timeouts") == 0, over


def test_a_sender_whose_window_outgrows_the_receiver_backs_off_and_the_run_reports_it():
    size, window = 24 << 20, 2 << 20
    res = _run(size, 128 << 10, max_outstanding_bytes=window)
    over = res.health["receiver_overrun"]
    assert over["max_outstanding_bytes"] == window
    assert over["socket_drops"] > 0 and over["window_cuts"] > 0, over
    assert any(w.startswith("receiver overrun") for w in res.health["warnings"]), res.health["warnings"]
    # each cut halves the window and go-back-N re-sends at most a window per loss until the window fits the
    # buffer: 1.7-6.7 windows in 24 runs on an idle 2-core VM (how many losses a window has before its cut
    # varies with the receiver's wake-ups); without a window: 2-3 times the whole flow (24-36 windows)
    assert res.bytes_counter("retx_bytes") <= 10 * window, over


def _incast(senders: int, size_bytes: int):
    """``senders`` ranks each send one flow of ``size_bytes`` to rank 0 at once."""
    ranks = {0: RankGraph(0, [p2p_node(i, f"recv{s}", NodeType.COMM_RECV_NODE, size_bytes, s, 0, s)
                              for i, s in enumerate(range(1, senders + 1))])}
    for s in range(1, senders + 1):
        ranks[s] = RankGraph(s, [p2p_node(0, "send", NodeType.COMM_SEND_NODE, size_bytes, s, 0, s)])
    return compile_trace(Trace(ranks=ranks))


def test_senders_into_one_receiver_share_its_buffer_and_none_overruns_it():
    """An incast of 4 senders at 100 Gbit/s into a 1 MiB receive buffer: the windows together stay within
    a quarter of the effective buffer, so the receiver's socket drops nothing and nothing is re-sent; its
    ACKs come every half window (32 packets here: every 16th)."""
    from emulator.drivers.direct import direct_ack_every, max_senders_into_a_rank

    size, n = 4 << 20, 4
    s = _incast(n, size)
    assert max_senders_into_a_rank(s) == n
    ep = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, retransmit_timeout_ns=200_000_000)
    port = random.Random(os.getpid() + 11).randrange(30000, 40000)
    cfg = DirectConfig(addresses=tuple(f"127.0.0.{31 + r}" for r in range(n + 1)), udp_port=port,
                       ranks_per_worker=1, rcvbuf_bytes=1 << 20)
    res = run_direct(s, cfg, ep, timeout_s=60)
    assert res.errors == [] and res.complete, res.errors
    assert res.bytes_counter("bytes_received") == n * size
    over = res.health["receiver_overrun"]
    rcvbuf = res.health["sockets"][0]["rcvbuf_bytes"]
    assert over["max_outstanding_bytes"] == rcvbuf // (4 * n)
    assert over["socket_drops"] == 0 and over["window_cuts"] == 0 and over["retx_bytes"] == 0, over
    w = over["max_outstanding_bytes"]
    assert direct_ack_every(replace(ep, max_outstanding_bytes=w), w) == w // 4096 // 2 == 16
    assert direct_ack_every(replace(ep, max_outstanding_bytes=w, ack_every_packets=9), w) == 9  # set by hand
