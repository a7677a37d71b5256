"""A receiver behind the loopback switch times each data packet by the model delivery time the switch
stamped in it, not by the ``receive`` call that handed over many packets at once: the NP sends one CNP per
CNP interval of delivery time (as the sim's receiver, seeing each packet arrive, does), and the RECV
completes when its last packet was delivered."""

from __future__ import annotations

import struct

from support.endpoint import make_schedule, recv

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.qpn import receiver_qpn
from emulator.pacing.notification import NpParams
from emulator.wire import build_write_batch, parse_header

MTU = 1024
N = 8
SPACING_NS = 10_000  # delivered 10 µs apart, CNP interval 4 µs: one CNP per packet


def _receiver(stamps: bool) -> tuple[RankEndpoint, bytes, tuple]:
    cfg = EndpointConfig(mtu_bytes=MTU, cc="paper", np=NpParams(min_time_between_cnps_ns=4_000),
                         delivery_stamps=stamps)
    ep = RankEndpoint(1, make_schedule(2, [(0, 1, N * MTU, 0)], {1: [recv(0)]}), cfg)
    ep.start(0)
    wb = build_write_batch(0, N, dest_qp=receiver_qpn(0), message_bytes=N * MTU, mtu_bytes=MTU,
                           stamp_ns=100_000, stamp_step_ns=SPACING_NS)
    return ep, bytes(wb.buffer), wb.sends


def _deliver_at_once(ep: RankEndpoint, data: bytes, sends, now_ns: int) -> list:
    for off, length, seg in sends:  # every packet CE-marked, all handed over in one wake-up
        ep.receive(data[off : off + length], 3, now_ns, 0 if length == seg else seg)
    ep.handle_timer(now_ns)
    return [tx for tx in ep.poll_transmit(now_ns) if parse_header(tx.data)[0] == 0x81]


def test_cnps_follow_the_delivery_times_not_the_wakeup():
    ep, data, sends = _receiver(stamps=True)
    cnps = _deliver_at_once(ep, data, sends, now_ns=1_000_000)
    assert len(cnps) == N == ep.records.counters["cnps_sent"]
    ev = ep.records.to_arrays()
    assert sorted(ev["event_t_ns"].tolist()) == [100_000 + j * SPACING_NS for j in range(N)]


def test_without_delivery_stamps_one_wakeup_gets_one_cnp():
    ep, data, sends = _receiver(stamps=False)
    cnps = _deliver_at_once(ep, data, sends, now_ns=1_000_000)
    assert len(cnps) == 1


def test_the_recv_completes_at_its_last_packets_delivery_time():
    ep, data, sends = _receiver(stamps=True)
    _deliver_at_once(ep, data, sends, now_ns=1_000_000)
    assert ep.done
    assert ep.records.end_ns[0] == 100_000 + (N - 1) * SPACING_NS
    assert ep.records.start_ns[0] == 100_000


def test_a_stamp_after_the_clock_counts_as_the_clock():
    ep, data, sends = _receiver(stamps=True)
    _deliver_at_once(ep, data, sends, now_ns=130_000)  # packets 4.. stamped after "now"
    assert ep.records.end_ns[0] == 130_000
    assert ep.records.counters["cnps_sent"] == 4


def test_a_packet_without_a_stamp_is_timed_by_the_receive_call():
    ep, data, sends = _receiver(stamps=True)
    buf = bytearray(data)
    for off, length, seg in sends:
        for o in range(off, off + length, seg):
            hdr = 28 if buf[o] == 0x06 else 12
            struct.pack_into("!Q", buf, o + hdr, 0)  # zero stamp: none
    _deliver_at_once(ep, bytes(buf), sends, now_ns=1_000_000)
    assert ep.records.end_ns[0] == 1_000_000 and ep.records.counters["cnps_sent"] == 1
