"""The software switch runs its port model on the senders' intended send times (the stamps), spread out at
the senders' NIC rate, a horizon behind the clock: lateness within the horizon changes nothing, lateness
beyond it is counted and, at an idle port, served from the stamp (test_loopback_late.py). Driven in-process (no switch process, no real clock)."""

from __future__ import annotations

from support.loopback_switch import software_switch

from emulator.drivers.loopback.switch import _SoftwareSwitch
from emulator.endpoint.qpn import receiver_qpn, sender_qpn
from emulator.fabric.port import PortConfig
from emulator.wire import build_ack, build_write_batch

MTU = 1024
OVER = 66
RATE = 1e9
PKT_NS = -(-(MTU + 16 + OVER) * 8 * 10**9 // int(RATE))  # one MIDDLE packet at 1 Gbps
HORIZON = 200_000


def _switch(nic_rate_bps: float = RATE) -> _SoftwareSwitch:
    return software_switch(PortConfig(rate_bps=RATE, buffer_bytes=1 << 20), egress_slack_ns=HORIZON,
                           nic_rate_bps=nic_rate_bps, wire_overhead_bytes=OVER)[0]


def _batch(k: int, psn: int, stamp_ns: int) -> tuple[bytes, int]:
    wb = build_write_batch(psn, k, dest_qp=receiver_qpn(0), message_bytes=MTU * 64, mtu_bytes=MTU, packet_index=1 + psn,
                           stamp_ns=stamp_ns)
    return bytes(wb.buffer), MTU + 16


def test_a_late_batch_within_the_horizon_is_modelled_at_its_stamp():
    sw = _switch()
    data, seg = _batch(4, 0, stamp_ns=1_000_000)
    sw._ingress(data, 2, seg, 1_000_000 + HORIZON - 10_000)  # reached the switch 190 µs late
    sw._release(1_000_000 + HORIZON)
    port = sw.ports[1]
    assert port.next_departure_ns == 1_000_000 + PKT_NS + PKT_NS  # NIC serialisation, then the port's
    assert sw.late_arrivals == 0 and sw.ingress_lags == [0]


def test_a_burst_of_batches_is_spread_at_the_nic_rate_and_builds_no_queue():
    sw = _switch()
    for i in range(3):  # three batches handed over at once, all stamped with the same due time
        data, seg = _batch(5, 5 * i, stamp_ns=0)
        sw._ingress(data, 2, seg, 10_000)
    sw._release(HORIZON + 10_000)
    port = sw.ports[1]
    port.advance(10**9, sw.pending)
    departures = [d0 + j * s for *_, m, _sz, _tos, d0, s in sw.pending for j in range(m)]
    assert departures == [PKT_NS * (j + 2) for j in range(15)]
    assert port.peak_queue_bytes <= 2 * (MTU + 16 + OVER)
    assert sw.nic_free[0] == 15 * PKT_NS


def test_lateness_beyond_the_horizon_is_counted_and_an_idle_port_serves_it_from_its_stamp():
    sw = _switch()
    early, seg = _batch(1, 0, stamp_ns=0)
    sw._ingress(early, 2, seg, 50_000)
    sw._release(2_000_000)  # the model clock moved on to 2 ms
    assert sw.released_ns == 2_000_000
    late, seg = _batch(2, 1, stamp_ns=100_000)
    sw._ingress(late, 2, seg, 2_000_000 + HORIZON)  # 1.9 ms after its stamp, the horizon long passed
    assert sw.late_arrivals == 2
    assert sw.ingress_lags[-1] == 2_000_000 - (100_000 + PKT_NS)
    sw._release(2_000_000 + HORIZON)
    assert sw.ports[1].next_departure_ns == 100_000 + 2 * PKT_NS  # NIC, then the port: in the past, sent at once


def test_control_packets_and_unstamped_data_go_at_the_model_clock():
    sw = _switch()
    ack = build_ack(sender_qpn(0), 5, 1)
    sw._ingress(ack, 0xC0, 0, 1_000_000)
    assert sw.arrivals[0][0] == 1_000_000 - HORIZON and sw.arrivals[0][2] == 0
    assert sw.ingress_lags == []  # no stamp, no sender lag to measure


class _Capture:
    """Stands in for the switch's socket: keeps what ``_flush`` sends."""

    def __init__(self):
        self.sent = []

    def send(self, iov, addr, seg, tos):
        self.sent.append((b"".join(bytes(b) for b in iov), seg))
        return True


def _forwarded(sw) -> list[int]:
    """Stamps of every packet the switch sent, in order."""
    from emulator.wire.stamp import read_stamp

    out = []
    for data, seg in sw.uport.sent:
        seg = seg or len(data)
        out += [read_stamp(data[o : o + seg]) for o in range(0, len(data), seg)]
    return out


def test_spread_stamps_arrive_spread_and_leave_stamped_with_their_delivery_times():
    sw = _switch()
    sw.uport = _Capture()
    step = 3 * PKT_NS  # the sender's QP at a third of the NIC rate
    wb = build_write_batch(0, 4, dest_qp=receiver_qpn(0), message_bytes=MTU * 64, mtu_bytes=MTU, packet_index=1,
                           stamp_ns=1_000_000, stamp_step_ns=step)
    sw._ingress(bytes(wb.buffer), 2, MTU + 16, 1_000_000)
    assert sw.received_packets == 4 and len(sw.arrivals) == 1  # one batch, not packet by packet
    sw._release(10**9)
    sw.ports[1].advance(10**9, sw.pending)
    departures = [d0 + j * s for *_, m, _sz, _tos, d0, s in sw.pending for j in range(m)]
    # each packet crosses the NIC (one packet time) from its own stamp, then the idle port (one more)
    assert departures == [1_000_000 + j * step + 2 * PKT_NS for j in range(4)]
    assert sw.ports[1].peak_queue_bytes <= MTU + 16 + OVER
    sw._flush(10**9, 10**9)
    assert _forwarded(sw) == departures  # the stamps now carry the model delivery times (latency 0)


def test_a_batch_with_one_stamp_leaves_with_per_packet_delivery_times():
    sw = _switch()
    sw.uport = _Capture()
    data, seg = _batch(3, 0, stamp_ns=0)
    sw._ingress(data, 2, seg, 10_000)
    sw._release(10**9)
    sw.ports[1].advance(10**9, sw.pending)
    sw._flush(10**9, 10**9)
    assert _forwarded(sw) == [PKT_NS * (j + 2) for j in range(3)]
    assert bytes(data)[:12] == sw.uport.sent[0][0][:12]  # headers untouched
