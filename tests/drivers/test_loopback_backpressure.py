"""The software switch never overruns a rank's receiving socket: a port sends no more than the socket has
room for (half its buffer) and holds the rest until the rank drains it, so nothing is dropped and the wait
shows as switch lag. Driven in-process (no switch process, no real clock)."""

from __future__ import annotations

from types import SimpleNamespace

from support.loopback_switch import software_switch

from emulator.drivers.loopback.switch import _SoftwareSwitch
from emulator.drivers.sockets.udp import UdpPort
from emulator.endpoint.qpn import receiver_qpn
from emulator.fabric.port import PortConfig
from emulator.wire import build_write_batch

MTU = 1024
N_PACKETS = 256  # 264 KiB: four times what the rank's socket takes


def _switch(backpressure: bool) -> tuple[_SoftwareSwitch, UdpPort]:
    sw, ports = software_switch(PortConfig(rate_bps=1e9, buffer_bytes=1 << 20), rank_rcvbuf_bytes=32 * 1024,
                                backpressure=backpressure, egress_slack_ns=0)
    for i in range(N_PACKETS // 16):  # rank 0 → rank 1, all due at once
        wb = build_write_batch(16 * i, 16, dest_qp=receiver_qpn(0), message_bytes=MTU * (N_PACKETS + 2),
                               mtu_bytes=MTU, packet_index=1 + 16 * i, stamp_ns=0)
        sw._ingress(bytes(wb.buffer), 2, MTU + 16, 0)
    sw._release(10**9)
    sw.ports[1].advance(10**9, sw.pending)
    return sw, ports[2]


def _received(rank: UdpPort) -> int:
    n = 0
    while True:
        data, _tos, seg = rank.recv()
        if data is None:
            return n
        n += -(-len(data) // seg) if seg else 1


def test_a_full_rank_socket_holds_its_port_and_nothing_is_dropped():
    sw, rank = _switch(backpressure=True)
    got = 0
    for _ in range(100):
        sw._flush(10**9, 10**9)
        if not sw.pending:
            break
        assert sw.holding  # what is left waits for room in the rank's socket
        got += _received(rank)  # the rank's worker drains it
    got += _received(rank)
    assert got == N_PACKETS == sw.forwarded_packets
    assert rank.drops() == 0
    assert sw.holds >= 3 and sw.health()["switch_backpressure_holds"] == sw.holds


def test_without_backpressure_the_same_burst_overruns_the_socket():
    sw, rank = _switch(backpressure=False)
    sw._flush(10**9, 10**9)
    assert _received(rank) < N_PACKETS
    assert rank.drops() > 0


def test_an_incast_into_a_small_socket_arrives_whole_without_a_retransmit():
    """7 ranks send 1 MiB each to rank 0 at once through 1 Gbit/s ports into 64 KiB receiving sockets, in
    real time (K = 1): before the back-pressure rank 0's socket dropped and go-back-N resent."""
    from emulator.drivers.loopback import LoopbackConfig, run_loopback
    from emulator.endpoint.config import EndpointConfig
    from emulator.pacing.red import RedParams
    from emulator.schedule.compiler import compile_trace
    from emulator.trace.generators.common import p2p_node
    from emulator.trace.model import NodeType, RankGraph, Trace

    size, senders = 1 << 20, 7
    ranks = {0: RankGraph(0, [p2p_node(i, f"r{i}", NodeType.COMM_RECV_NODE, size, i, 0, 0)
                              for i in range(1, senders + 1)])}
    for i in range(1, senders + 1):
        ranks[i] = RankGraph(i, [p2p_node(0, "s", NodeType.COMM_SEND_NODE, size, i, 0, 0)])
    cfg = LoopbackConfig(port=PortConfig(rate_bps=1e9, buffer_bytes=16 << 20, red=RedParams()), ranks_per_worker=4,
                         rank_rcvbuf_bytes=64 * 1024)
    res = run_loopback(compile_trace(Trace(ranks=ranks)), cfg,
                       EndpointConfig(line_rate_bps=1e9, retransmit_timeout_ns=1_000_000_000, cc="none"),
                       seed=1, timeout_s=60)
    assert res.complete and not res.errors
    assert res.health["endpoint_socket_drops"] == 0 and res.health["switch_socket_drops"] == 0
    assert res.bytes_counter("retransmits") == 0


def test_a_held_packet_is_not_overtaken_by_a_smaller_one_behind_it_at_its_port():
    """A rank's socket with room for one MIDDLE packet but not for the larger FIRST (its RETH) ahead of it:
    the port holds both, in order (before, the MIDDLE went first and the receiver NAKed a reordering)."""
    sw, ports = software_switch(PortConfig(rate_bps=1e9, buffer_bytes=1 << 20), backpressure=True, egress_slack_ns=0)
    sent: list[int] = []  # the PSNs the port sent its rank, in order

    def send(iov, addr, seg, tos) -> int:
        data = b"".join(bytes(b) for b in iov)
        sent.extend(int.from_bytes(data[i + 9 : i + 12], "big") for i in range(0, len(data), seg or len(data)))
        return 1

    sw.uport = SimpleNamespace(send=send)
    first = build_write_batch(0, 1, dest_qp=receiver_qpn(0), message_bytes=MTU * 8, mtu_bytes=MTU, stamp_ns=0)
    middles = build_write_batch(1, 4, dest_qp=receiver_qpn(0), message_bytes=MTU * 8, mtu_bytes=MTU, packet_index=1,
                                stamp_ns=0)
    first_bytes, middle_bytes = len(first.buffer), len(middles.buffer) // 4
    assert first_bytes > middle_bytes
    sw._ingress(bytes(first.buffer), 2, first_bytes, 0)
    sw._ingress(bytes(middles.buffer), 2, middle_bytes, 0)
    sw._release(10**9)
    sw.ports[1].advance(10**9, sw.pending)
    room = [middle_bytes + 1024]  # one MIDDLE's worth: not the FIRST's
    sw._room = lambda pid: room[0]
    sw._flush(10**9, 10**9)
    assert sent == [] and sw.holding
    room[0] = 1 << 30  # the rank drained its socket
    sw._flush(10**9, 10**9)
    assert sent == [0, 1, 2, 3, 4]
    for p in ports:
        p.close()
