"""The software switch process on its own: a burst bigger than its socket buffer is counted, not lost
silently; what it reads it forwards with the TOS it was given (CE only where the port marked)."""

from __future__ import annotations

import multiprocessing as mp
import time

from emulator.drivers.loopback.spec import SwitchSpec
from emulator.drivers.loopback.switch import switch_main
from emulator.drivers.sockets.udp import UdpPort
from emulator.fabric.port import PortConfig


def _packet(qpn: int, payload_bytes: int) -> bytes:
    return bytes(5) + qpn.to_bytes(3, "big") + bytes(4) + bytes(payload_bytes)


def _run_switch(sw: UdpPort, ranks: list[UdpPort], port: PortConfig, before_go, after_go=None) -> dict:
    """Start the switch process, call ``before_go()`` while it waits for its start signal (its socket fills
    up unread), start it, call ``after_go()``, let it drain, stop it, return its final health."""
    ctx = mp.get_context("fork")
    n = len(ranks)
    spec = SwitchSpec(port=port, rank_addresses=tuple(r.address for r in ranks), qp_src=tuple(range(n)),
                      qp_dst=tuple(range(n)), seed=1, scheduling="normal")
    parent, child = ctx.Pipe()
    stop = ctx.Event()
    proc = ctx.Process(target=switch_main, args=(spec, sw, child, stop, time.monotonic_ns() + int(30e9)))
    proc.start()
    try:
        assert parent.poll(10) and parent.recv()[0] == "ready"
        before_go()
        parent.send(("go", time.monotonic_ns()))
        if after_go is not None:
            after_go()
        time.sleep(0.5)
        stop.set()
        while True:
            assert parent.poll(10), "the switch sent no final counters"
            msg = parent.recv()
            if msg[0] == "final":
                return msg[3]
            assert msg[0] == "snapshot", msg
    finally:
        stop.set()
        proc.join(5)
        if proc.is_alive():
            proc.kill()


def _drain(port: UdpPort, seg: int) -> list[tuple[int, int]]:
    """(packets, tos) per receive: a GRO receive holds several of the switch's GSO segments."""
    buf = bytearray(65536)
    out = []
    while True:
        n, tos, _ = port.recv_into(buf)
        if n < 0:
            return out
        assert n % seg == 0
        out.append((n // seg, tos))


def test_burst_bigger_than_the_socket_buffer_is_counted_as_dropped():
    sw = UdpPort("127.0.0.1", 0, rcvbuf_bytes=16 * 1024)  # a few datagrams fit; the burst is 300
    ranks = [UdpPort("127.0.0.1", 0, rcvbuf_bytes=8 << 20) for _ in range(2)]
    sender = UdpPort("127.0.0.1", 0)
    burst = 300

    def blast():
        for i in range(burst):
            sender.send(_packet(2 * (i % 2) + 2, 1024), sw.address, 0, 0x68 | 2)

    try:
        h = _run_switch(sw, ranks, PortConfig(rate_bps=10e9, buffer_bytes=8 << 20), blast)
        got = [_drain(r, 1036) for r in ranks]
    finally:
        for p in (sw, sender, *ranks):
            p.close()
    received = h["switch_received_packets"]
    assert h["switch_socket_drops"] > 0 and received < burst
    assert received + h["switch_socket_drops"] == burst  # nothing vanished without being counted
    assert h["switch_forwarded_packets"] == received == sum(k for g in got for k, _ in g)
    assert all(tos == 0x6A for g in got for _, tos in g)  # not marked: no RED configured


def test_gro_batches_are_cut_per_packet_and_marked_ce_in_the_ip_header():
    from emulator.pacing.red import RedParams

    sw = UdpPort("127.0.0.1", 0, rcvbuf_bytes=8 << 20)
    ranks = [UdpPort("127.0.0.1", 0, rcvbuf_bytes=8 << 20)]
    sender = UdpPort("127.0.0.1", 0)
    seg = 1036
    batch = _packet(2, 1024) * 15

    def blast():
        for _ in range(20):  # 300 packets into a 100 Mbps port: the queue passes Kmax, every packet then marked
            sender.send(batch, sw.address, seg, 0x68 | 2)

    port = PortConfig(rate_bps=100e6, buffer_bytes=1 << 20, red=RedParams(kmin_bytes=4_000, kmax_bytes=20_000, pmax=0.5))
    try:
        h = _run_switch(sw, ranks, port, blast, after_go=lambda: time.sleep(0.1))
        got = _drain(ranks[0], seg)
    finally:
        for p in (sw, sender, *ranks):
            p.close()
    assert h["switch_received_packets"] == 300 and h["switch_received_batches"] == 20
    pkts = 0
    ce = 0
    for k, tos in got:
        pkts += k
        ce += k if tos & 3 == 3 else 0
        assert tos in (0x6A, 0x6B)
    assert pkts == h["switch_forwarded_packets"] == 300
    assert 0 < ce < 300  # the head of the burst leaves below Kmin unmarked, the rest is CE in the real TOS


def test_short_and_unroutable_datagrams_are_counted_not_forwarded():
    sw = UdpPort("127.0.0.1", 0, rcvbuf_bytes=1 << 20)
    ranks = [UdpPort("127.0.0.1", 0) for _ in range(2)]
    sender = UdpPort("127.0.0.1", 0)

    def send():
        sender.send(b"", sw.address)                        # empty
        sender.send(b"\x00" * 7, sw.address)                # shorter than a BTH
        sender.send(_packet(2 * 9 + 2, 64), sw.address)     # QP 9: no such queue pair
        sender.send(_packet(1, 64), sw.address)             # QPN 1: below the first valid QPN
        sender.send(_packet(2, 64), sw.address)             # QP 0 -> rank 0

    try:
        h = _run_switch(sw, ranks, PortConfig(rate_bps=1e9, buffer_bytes=1 << 20), send)
        got = [_drain(r, 76) for r in ranks]
    finally:
        for p in (sw, sender, *ranks):
            p.close()
    assert h["switch_received_packets"] == 5 and h["switch_socket_drops"] == 0
    assert h["switch_malformed_packets"] == 2 and h["switch_unroutable_packets"] == 2
    assert h["switch_forwarded_packets"] == 1 and got == [[(1, 0)], []]
