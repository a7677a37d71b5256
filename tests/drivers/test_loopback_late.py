"""One late arrival at the software switch, at the quickstart's rates (200 Mbps ports and NICs, 4 KiB MTU,
a sender paced at 97.7 % of its port's rate): the port model serves it from its send time where the wire
sat idle, so it leaves no standing queue the model-time port would not have; a late batch that lost idle
time taints its port and the marks made until the port empties are counted. In-process, no real clock."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from support.loopback_switch import software_switch

from emulator.drivers.contract import FabricReport, PortReport
from emulator.drivers.loopback.driver import _add_lag_marks
from emulator.drivers.loopback.model_port import ModelPort
from emulator.drivers.loopback.switch import _SoftwareSwitch
from emulator.drivers.sockets.supervisor import add_fidelity
from emulator.drivers.sockets.udp import UdpPort
from emulator.endpoint.qpn import receiver_qpn, sender_qpn
from emulator.fabric.port import PortConfig
from emulator.pacing.red import RedParams
from emulator.report.console import _fidelity_line
from emulator.wire import build_ack, build_write_batch

MTU = 4096
OVER = 66
RATE = 200e6
PKT_NS = -(-(MTU + 16 + OVER) * 8 * 10**9 // int(RATE))  # one MIDDLE packet at 200 Mbps: 167 µs
PACE_NS = int(PKT_NS / 0.977)  # the sender at 97.7 % of the port rate (the quickstart's busiest port)
HORIZON = 10_000


def _switch(port: PortConfig | None = None, n_ranks: int = 2, qp_src: tuple[int, ...] = (0,),
            qp_dst: tuple[int, ...] = (1,)) -> tuple[_SoftwareSwitch, list[UdpPort]]:
    return software_switch(port or PortConfig(rate_bps=RATE, buffer_bytes=1 << 20), n_ranks, qp_src, qp_dst,
                           egress_slack_ns=HORIZON, nic_rate_bps=RATE, wire_overhead_bytes=OVER)


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
    _enqueue(port, 1, 1_000_000, out)  # the port went busy at 1 ms, idle before ...
    # ... after a 6-packet batch's model arrival (1 µs): the model would have sent it by then, queue-free
    assert port.late_arrival_ns(1_000, 6, MTU + 16, MTU + 16, out) == 1_000
    assert port.tainted and port.unplaced_late_batches == 1
    assert port.lag_excess_bytes == (1_000_000 - 1_000) * 200 // 8_000  # the lost idle time at the port rate
    _enqueue(port, 6, 1_000, out)  # queued behind: above Kmin, RED marks
    port.advance(1 << 40, out)
    assert port.marked_packets > 0 and port.lag_marks == port.marked_packets
    assert not port.tainted  # emptied: the model is exact again
    _enqueue(port, 7, 1 << 41, out)  # a burst of its own: marks, not the machine's
    port.advance(1 << 42, out)
    assert port.marked_packets > port.lag_marks


def test_a_late_batch_at_a_port_busy_since_before_it_is_placed_without_taint():
    port, out = _port(), []
    _enqueue(port, 3, 0, out)
    assert port.late_arrival_ns(100_000, 1, MTU + 16, MTU + 16, out) == 100_000  # the queue it joins is the model's
    assert not port.tainted and port.unplaced_late_batches == 0
    port.advance(1 << 40, out)
    assert port.late_arrival_ns(5 * PKT_NS, 1, MTU + 16, MTU + 16, out) == 5 * PKT_NS  # idle since 3 packet times: from its time
    assert port.late_arrival_ns(PKT_NS, 1, MTU + 16, MTU + 16, out) == 3 * PKT_NS  # from when the wire went idle


def _health(lag_marks: list[int], switch_p99_ns: int = 20_000) -> tuple[dict, FabricReport]:
    lag = {"p50": 0, "p99": switch_p99_ns, "p999": switch_p99_ns, "max": switch_p99_ns}
    health = {"warnings": ["rank sockets dropped 3 datagrams"], "switch_lag_marks": lag_marks,
              "switch_unplaced_late_batches": [1 if m else 0 for m in lag_marks]}
    add_fidelity(health, {"p50": 0, "p99": 0}, lag, PKT_NS, 30.0)
    ports = tuple(PortReport(i, f"sw0->host{i}", "down", RATE, marked_packets=5 * m) for i, m in enumerate(lag_marks))
    return health, FabricReport("loopback_switch", ports)


def test_the_verdict_stays_faithful_without_marks_at_queues_only_lateness_made():
    health, fabric = _health([0, 0, 0])
    _add_lag_marks(health, fabric)
    fid = health["fidelity"]
    assert fid["faithful"] and fid["verdict"] == "timing faithful" and fid["lag_marks"] == 0
    assert fid["lag_marks_by_port"] == [0, 0, 0] and fid["unplaced_late_batches"] == 0
    assert health["warnings"] == ["rank sockets dropped 3 datagrams"]


def test_marks_at_queues_only_lateness_made_are_not_timing_faithful():
    health, fabric = _health([0, 2, 1])  # lag p99 well within one packet time: faithful by the lag rule alone
    _add_lag_marks(health, fabric)
    fid = health["fidelity"]
    assert not fid["faithful"] and fid["lag_marks"] == 3 and fid["unplaced_late_batches"] == 2
    assert fid["verdict"] == ("3 of 15 ECN marks at queues only late arrivals made (ports 1, 2): marks, rate cuts "
                              "and times are upper bounds")
    assert health["warnings"] == [fid["verdict"], "rank sockets dropped 3 datagrams"]
    line = _fidelity_line(fid, None)
    assert line.startswith("fidelity: 3 of 15 ECN marks at queues only late arrivals made")
    assert "late arrivals that cost a port idle time: 2;" in line


def test_a_lag_verdict_keeps_its_figures_and_adds_the_marks():
    health, fabric = _health([4], switch_p99_ns=10 * PKT_NS)
    _add_lag_marks(health, fabric)
    fid = health["fidelity"]
    assert not fid["faithful"] and fid["verdict"].startswith("lag p99 1.67 ms exceeds")
    assert fid["verdict"].endswith("4 of 20 ECN marks at queues only late arrivals made (port 0): marks, rate cuts "
                                   "and times are upper bounds")
    assert health["warnings"][0] == fid["warning"] and len(health["warnings"]) == 2


def test_the_switch_counts_the_marks_a_late_batch_left_and_the_run_is_not_faithful():
    red = RedParams(kmin_bytes=2 * (MTU + 16 + OVER), kmax_bytes=3 * (MTU + 16 + OVER), pmax=1.0)
    sw, socks = _switch(PortConfig(rate_bps=RATE, buffer_bytes=1 << 20, red=red), 3, (0, 2), (1, 1))
    try:
        def batch(qp: int, k: int, stamp: int) -> bytes:
            return bytes(build_write_batch(0, k, dest_qp=receiver_qpn(qp), message_bytes=MTU * 64, mtu_bytes=MTU,
                                           packet_index=1, stamp_ns=stamp).buffer)

        sw._ingress(batch(0, 1, 1_000_000), 2, MTU + 16, 1_000_000 + PKT_NS + HORIZON)  # rank 0, on time
        sw._release(1_000_000 + PKT_NS)
        # rank 2's 6 packets, due at 1 µs, reach the switch 1 ms late: port 1 lost its idle time to them
        sw._ingress(batch(1, 6, 1_000), 2, MTU + 16, 1_000_000 + 2 * PKT_NS + HORIZON)
        sw._release(1_000_000 + 2 * PKT_NS)
        sw.ports[1].advance(1 << 40, sw.pending)
        h = sw.health()
        assert h["switch_unplaced_late_batches"] == [0, 1, 0] and h["switch_lag_marks"][1] > 0
        health = {**h, "warnings": []}
        # one late batch among thousands on time (the kept quickstart run: 1 in 34,071): lag p99 0
        add_fidelity(health, {"p50": 0, "p99": 0}, {"p50": 0, "p99": 0}, PKT_NS, 1.0)
        assert health["fidelity"]["faithful"]  # by the lag percentiles alone
        _add_lag_marks(health, FabricReport("loopback_switch", sw.fabric(1 << 40)["ports"]))
        assert not health["fidelity"]["faithful"] and "only late arrivals made (port 1)" in health["fidelity"]["verdict"]
    finally:
        for s in socks:
            s.close()


class _Capture:
    def send(self, iov, addr, seg, tos):
        return True


def test_an_ack_joins_the_fabric_when_the_packet_it_acknowledges_was_delivered():
    sw, socks = _switch()
    try:
        sw.uport = _Capture()
        data = bytes(build_write_batch(0, 3, dest_qp=receiver_qpn(0), message_bytes=MTU * 64, mtu_bytes=MTU,
                                       packet_index=1, stamp_ns=0).buffer)
        sw._ingress(data, 2, MTU + 16, PKT_NS + HORIZON)
        sw._release(1 << 30)
        sw.ports[1].advance(1 << 30, sw.pending)
        sw._flush(1 << 30, 1 << 30)
        delivered = [PKT_NS * (j + 2) for j in range(3)]  # the NIC, then the port, packet by packet
        ack = build_ack(sender_qpn(0), 2, 1)
        # the receiver's process got the CPU 2 ms after the last delivery: its ACK reaches the switch then
        sw._ingress(ack, 0xB8, 0, delivered[2] + 2_000_000)
        ack_ns = -(-(len(ack) + OVER) * 8 * 10**9 // int(RATE))
        assert sw.arrivals[0][0] == delivered[2] + ack_ns  # before: 2 ms later, at the model clock
        # an ACK of a packet the switch keeps no time for goes at the clock (NAKs, CNPs: test_loopback_cnp_time.py)
        sw._ingress(build_ack(sender_qpn(0), 9, 1), 0xB8, 0, 3_000_000)
        assert sorted(a[0] for a in sw.arrivals)[-1] == 3_000_000 - HORIZON
    finally:
        for s in socks:
            s.close()


def test_the_switch_writes_an_acks_delivery_time_into_its_msn_and_the_sender_acts_at_it():
    from support.endpoint import make_schedule, send

    from emulator.endpoint.config import EndpointConfig
    from emulator.endpoint.endpoint import RankEndpoint
    from emulator.wire import parse_aeth

    sw, socks = _switch()
    try:
        sent = []
        sw.uport = type("_Keep", (), {"send": lambda self, iov, addr, seg, tos: sent.append(b"".join(iov)) or True})()
        ack = build_ack(sender_qpn(0), 7, 1)
        sw._ingress(ack, 0xB8, 0, 5_000_000 + HORIZON)  # at the model clock: 5 ms
        sw._release(1 << 30)
        sw.ports[0].advance(1 << 30, sw.pending)
        sw._flush(1 << 30, 1 << 30)
        ack_ns = -(-(len(ack) + OVER) * 8 * 10**9 // int(RATE))
        assert parse_aeth(sent[0])[1] == (5_000_000 + ack_ns) & 0xFFFFFF  # departure from the idle port
        assert sent[0][:12] == ack[:12]
    finally:
        for s in socks:
            s.close()
    for stamps, acked in ((True, 20_000_000), (False, 20_000_000 + 3_000_000)):
        cfg = EndpointConfig(mtu_bytes=MTU, delivery_stamps=stamps)
        ep = RankEndpoint(0, make_schedule(2, [(0, 1, MTU, 0)], {0: [send(0)]}), cfg)
        ep.start(0)
        ep.poll_transmit(0)
        # delivered at 20 ms (MSN, mod 2^24 ns), read by a process that woke up 3 ms later
        ep.receive(build_ack(sender_qpn(0), 0, 20_000_000 & 0xFFFFFF), 0, 23_000_000)
        assert ep.records.end_ns[0] == acked


def test_acks_of_two_queue_pairs_in_one_gso_batch_are_each_timed_and_carry_their_delivery_time():
    from emulator.wire import parse_aeth

    sw, socks = _switch(n_ranks=3, qp_src=(0, 0), qp_dst=(1, 2))
    sent = []
    sw.uport = type("_Keep", (), {"send": lambda self, iov, addr, seg, tos: sent.append((b"".join(iov), seg)) or True})()
    try:
        for qp in (0, 1):
            data = bytes(build_write_batch(0, 1, dest_qp=receiver_qpn(qp), message_bytes=MTU * 64, mtu_bytes=MTU,
                                           packet_index=1, stamp_ns=qp * 1_000_000).buffer)
            sw._ingress(data, 2, MTU + 16, qp * 1_000_000 + PKT_NS + HORIZON)
        sw._release(1 << 30)
        for p in sw.ports:
            p.advance(1 << 30, sw.pending)
        sw._flush(1 << 30, 1 << 30)
        delivered = (2 * PKT_NS, 1_000_000 + 2 * PKT_NS)
        sent.clear()
        acks = build_ack(sender_qpn(0), 0, 1) + build_ack(sender_qpn(1), 0, 1)  # one GSO send of two ACKs
        sw._ingress(acks, 0xB8, 20, 9_000_000)
        ack_ns = -(-(20 + OVER) * 8 * 10**9 // int(RATE))
        assert sorted(a[0] for a in sw.arrivals) == [d + ack_ns for d in delivered]
        sw._release(1 << 31)
        sw.ports[0].advance(1 << 31, sw.pending)
        sw._flush(1 << 31, 1 << 31)
        out = b"".join(d for d, _ in sent)
        msns = sorted(parse_aeth(out[o : o + 20])[1] for o in range(0, len(out), 20))
        assert msns == [d + ack_ns + ack_ns for d in delivered]  # NIC, then the idle port
    finally:
        for s in socks:
            s.close()


def test_marks_with_a_lag_max_beyond_one_mtu_are_not_timing_faithful_without_marks_they_are():
    from emulator.instruments.fidelity import timing_fidelity, with_lag_marks

    fid = timing_fidelity({"p50": 0, "p99": 0, "p999": 20_000, "max": 30_000},
                          {"p50": 0, "p99": PKT_NS // 2, "p999": PKT_NS - 1, "max": 2 * PKT_NS}, PKT_NS)
    assert fid["faithful"] and fid["judged"] == "p99"  # p99 and p99.9 within one MTU
    assert with_lag_marks(fid, [0, 0], [0, 0], 0)["faithful"]  # no mark: the late packet made no queue
    out = with_lag_marks(fid, [0, 0], [0, 0], 79)  # marks the lag-marks rule cannot place
    assert not out["faithful"] and out["verdict"].startswith("79 ECN marks with lag max")
    punctual = timing_fidelity({"p50": 0, "p99": 0, "p999": 0, "max": 0},
                               {"p50": 0, "p99": 0, "p999": 0, "max": PKT_NS}, PKT_NS)
    assert with_lag_marks(punctual, [0, 0], [0, 0], 79)["faithful"]  # never beyond one MTU: the model's marks
    congested = timing_fidelity({"p50": 0, "p99": 0, "p999": 0, "max": 10 * PKT_NS}, None, PKT_NS, congested=True)
    assert with_lag_marks(congested, [0], [0], 2000)["faithful"]  # judged on its p99.9 already: not this rule


def test_a_late_batch_served_from_when_the_wire_went_idle_keeps_its_senders_later_batches_behind_it():
    """Rank 2's 6 packets keep port 1 busy; rank 0's PSNs 0–3, 4–7 and 8–11 (stamped back to back from 0) reach
    the switch after it went idle: the first batch is served from then, and the others, whose model arrivals lie
    before that, wait behind it in order (before, PSN 4 went before PSN 1 and the receiver NAKed)."""
    sw, socks = _switch(n_ranks=3, qp_src=(0, 2), qp_dst=(1, 1))
    sent: list[tuple[int, int]] = []  # (QP, PSN) in the order port 1 sent them

    class Capture:
        def send(self, iov, addr, seg, tos):
            data = b"".join(bytes(b) for b in iov)
            sent.extend((int.from_bytes(data[i + 5 : i + 8], "big"), int.from_bytes(data[i + 9 : i + 12], "big"))
                        for i in range(0, len(data), seg or len(data)))
            return True

    def batch(qp: int, psn: int, k: int, stamp: int) -> bytes:
        return bytes(build_write_batch(psn, k, dest_qp=receiver_qpn(qp), message_bytes=MTU * 64, mtu_bytes=MTU,
                                       packet_index=1 + psn, stamp_ns=stamp, stamp_step_ns=PKT_NS).buffer)

    try:
        sw.uport = Capture()
        late_ns = 20 * PKT_NS
        sw._ingress(batch(1, 0, 6, 0), 2, MTU + 16, HORIZON)  # rank 2, on time
        sw._release(late_ns)
        sw.ports[1].advance(late_ns, sw.pending)  # rank 2's packets left by 7 packet times: idle since then
        sw._ingress(batch(0, 0, 4, 0), 2, MTU + 16, late_ns + HORIZON)
        sw._ingress(batch(0, 4, 4, 4 * PKT_NS), 2, MTU + 16, late_ns + HORIZON)
        sw._ingress(batch(0, 8, 4, 8 * PKT_NS), 2, MTU + 16, late_ns + HORIZON)  # behind the one behind it
        sw._release(late_ns)
        sw.ports[1].advance(1 << 40, sw.pending)
        sw._flush(1 << 40, 1 << 40)
        assert [psn for qp, psn in sent if qp == receiver_qpn(0)] == list(range(12))
    finally:
        for s in socks:
            s.close()
