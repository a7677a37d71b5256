"""One late arrival at the software switch, at the quickstart's rates (200 Mbps ports and NICs, 4 KiB MTU,
a sender paced at 97.7 % of its port's rate): the port model serves it from its send time where the wire
sat idle, so it leaves no standing queue the model-time port would not have; a late batch that lost idle
time taints its port and the marks made until the port empties are counted. In-process, no real clock."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.drivers.loopback.model_port import ModelPort
from emulator.drivers.loopback.switch import SwitchSpec, _SoftwareSwitch
from emulator.drivers.sockets.udp import UdpPort
from emulator.endpoint.qpn import receiver_qpn
from emulator.fabric.port import PortConfig
from emulator.pacing.red import RedParams
from emulator.wire import build_write_batch

MTU = 4096
OVER = 66
RATE = 200e6
PKT_NS = -(-(MTU + 16 + OVER) * 8 * 10**9 // int(RATE))  # one MIDDLE packet at 200 Mbps: 167 µs
PACE_NS = int(PKT_NS / 0.977)  # the sender at 97.7 % of the port rate (the quickstart's busiest port)
HORIZON = 10_000


class _Conn:
    def send(self, msg):
        pass


def _switch() -> tuple[_SoftwareSwitch, list[UdpPort]]:
    ports = [UdpPort("127.0.0.1", 0) for _ in range(3)]
    spec = SwitchSpec(port=PortConfig(rate_bps=RATE, buffer_bytes=1 << 20), rank_addresses=tuple(p.address for p in
                      ports[1:]), qp_src=(0,), qp_dst=(1,), seed=1, scheduling="normal", egress_slack_ns=HORIZON,
                      nic_rate_bps=RATE, wire_overhead_bytes=OVER)  # fmt: skip
    return _SoftwareSwitch(spec, ports[0], _Conn(), None, 1 << 62), ports


def _packet(i: int) -> bytes:
    wb = build_write_batch(i, 1, dest_qp=receiver_qpn(0), message_bytes=MTU * 1000, mtu_bytes=MTU, packet_index=1 + i,
                           stamp_ns=i * PACE_NS)
    return bytes(wb.buffer)


def _departures(n: int, read_ns: list[int]) -> list[int]:
    """Model departures of ``n`` paced packets the switch reads at ``read_ns[i]`` (its loop runs after each)."""
    sw, socks = _switch()
    try:
        for i in range(n):
            now = read_ns[i]
            sw._ingress(_packet(i), 2, MTU + 16, now)
            clock = now - HORIZON
            sw._release(clock)
            for p in sw.ports:
                if p.next_departure_ns is not None and p.next_departure_ns <= clock:
                    p.advance(clock, sw.pending)
        sw._release(1 << 50)
        sw.ports[1].advance(1 << 50, sw.pending)
        return [d0 + j * s for *_, m, _sz, _tos, d0, s in sw.pending for j in range(m)]
    finally:
        for s in socks:
            s.close()


def _on_time(n: int) -> list[int]:
    """When an on-time switch reads packet i: its stamp, plus its NIC time, plus the horizon."""
    return [i * PACE_NS + PKT_NS + HORIZON for i in range(n)]


def test_one_late_arrival_leaves_no_standing_queue():
    n, late = 200, 20
    model = _departures(n, _on_time(n))
    assert all(d2 - d1 == PACE_NS for d1, d2 in zip(model[1:], model[2:], strict=False))  # paced, never queued
    # the switch stalls 500 µs (emulated; the kept quickstart run's ingress lag max): packets 20.. are read
    # together when it wakes, then on time again
    read = _on_time(n)
    wake = read[late] + 500_000
    read = [max(r, wake) if i >= late else r for i, r in enumerate(read)]
    got = _departures(n, read)
    assert got == model  # before: 84 packets left late, by up to 329 µs


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 2_000_000), min_size=60, max_size=60))
def test_any_lateness_of_one_paced_sender_leaves_the_models_departures(extra_ns):
    read, t = [], 0  # the socket is FIFO: a packet is read no earlier than the one before it
    for r, e in zip(_on_time(60), extra_ns, strict=True):
        t = max(t, r + e)
        read.append(t)
    assert _departures(60, read) == _departures(60, _on_time(60))


def _port() -> ModelPort:
    red = RedParams(kmin_bytes=2 * (MTU + 16 + OVER), kmax_bytes=8 * (MTU + 16 + OVER), pmax=1.0)
    return ModelPort(PortConfig(rate_bps=RATE, buffer_bytes=1 << 20, red=red), random.Random(1), 0,
                     wire_overhead_bytes=OVER)


def _enqueue(port: ModelPort, k: int, t_ns: int, out: list) -> None:
    buf = bytearray(k * (MTU + 16))
    port.enqueue(memoryview(buf), k, MTU + 16, MTU + 16, 2, 0, t_ns, out)  # ECT(0)


def test_a_late_batch_that_lost_idle_time_taints_the_port_until_it_empties():
    port, out = _port(), []
    _enqueue(port, 1, 1_000_000, out)  # the port went busy at 1 ms ...
    assert port.late_arrival_ns(400_000, out) == 400_000  # ... after a batch's model arrival (0.4 ms)
    assert port.tainted and port.unplaced_late_batches == 1
    _enqueue(port, 6, 400_000, out)  # queued behind: above Kmin, RED marks (pmax 100 %)
    port.advance(1 << 40, out)
    assert port.marked_packets > 0 and port.lag_marks == port.marked_packets
    assert not port.tainted  # emptied: the model is exact again
    _enqueue(port, 7, 1 << 41, out)  # a burst of its own: marks, not the machine's
    port.advance(1 << 42, out)
    assert port.marked_packets > port.lag_marks


def test_a_late_batch_at_a_port_busy_since_before_it_is_placed_without_taint():
    port, out = _port(), []
    _enqueue(port, 3, 0, out)
    assert port.late_arrival_ns(100_000, out) == 100_000  # the queue it joins is the model's
    assert not port.tainted and port.unplaced_late_batches == 0
    port.advance(1 << 40, out)
    assert port.late_arrival_ns(5 * PKT_NS, out) == 5 * PKT_NS  # idle since 3 packet times: from its time
    assert port.late_arrival_ns(PKT_NS, out) == 3 * PKT_NS  # from when the wire went idle
