"""CNPs and NAKs on model time through the loopback switch: the receiver stamps each with the model time it
decided it (the delivery time of the packet that caused it, or the end of a deferring NP's quiet interval),
the switch joins it to the fabric then and rewrites the stamp to its delivery time, and the sender acts on it
at that time however late either process read it; a CNP acted on after the sender's service had passed its
time counts against the timing verdict. In-process: the switch model and endpoints, no real clock."""

from __future__ import annotations

import shutil
import subprocess
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import make_schedule, recv, send
from support.loopback_switch import software_switch

from emulator.drivers.loopback.driver import _add_cnp_lag
from emulator.drivers.loopback.switch import _SoftwareSwitch
from emulator.drivers.sockets.supervisor import add_fidelity
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.qpn import receiver_qpn, sender_qpn
from emulator.endpoint.records import EV_CNP_RECEIVED, EV_NAK_RECEIVED
from emulator.fabric.port import PortConfig
from emulator.instruments.fidelity import with_cnp_lag
from emulator.pacing.notification import NpParams
from emulator.wire import (
    ECT0,
    IcrcContext,
    PcapWriter,
    build_cnp,
    build_nak_psn_error,
    build_write_batch,
    check_frame_icrc,
    ethernet_frame,
    ip_udp_packet,
    parse_aeth,
    tos,
)
from emulator.wire.packets import decode
from emulator.wire.stamp import read_cnp_stamp

MTU = 1024
OVER = 66
RATE = 1e9
HORIZON = 10_000
CNP_NS = -(-(32 + OVER) * 8 * 10**9 // int(RATE))  # a CNP through a NIC or a port at 1 Gbps
NAK_NS = -(-(20 + OVER) * 8 * 10**9 // int(RATE))
D_NS = 1_000_000  # the CE-marked (or out-of-order) packet's model delivery time
LATE_NS = 3_000_000  # how late each process read what it was sent


@pytest.fixture
def switch():
    sw, socks = software_switch(PortConfig(rate_bps=RATE, buffer_bytes=1 << 20), egress_slack_ns=HORIZON,
                                nic_rate_bps=RATE, wire_overhead_bytes=OVER)
    sw.sent = []
    sw.uport = SimpleNamespace(send=lambda iov, addr, seg, tos: sw.sent.append(b"".join(bytes(b) for b in iov)) or 1)
    yield sw
    for s in socks:
        s.close()


def _through(sw: _SoftwareSwitch, pkt: bytes, read_ns: int) -> bytes:
    """``pkt`` (to the sender of QP 0) read by the switch at model time ``read_ns``, run through port 0."""
    sw._release(read_ns - HORIZON)  # the model clock had already passed the packet's time
    sw._ingress(pkt, 0xC0, 0, read_ns)
    sw._release(1 << 40)
    sw.ports[0].advance(1 << 40, sw.pending)
    sw._flush(1 << 40, 1 << 40)
    return sw.sent[-1]


def _receiver(np: NpParams | None = None, n: int = 8) -> RankEndpoint:
    cfg = EndpointConfig(mtu_bytes=MTU, cc="paper", np=np or NpParams(min_time_between_cnps_ns=4_000),
                         delivery_stamps=True)
    ep = RankEndpoint(1, make_schedule(2, [(0, 1, n * MTU, 0)], {1: [recv(0)]}), cfg)
    ep.start(0)
    return ep


def _data(psn: int, delivered_ns: int, n: int = 8) -> bytes:
    wb = build_write_batch(psn, 1, dest_qp=receiver_qpn(0), message_bytes=n * MTU, mtu_bytes=MTU, packet_index=psn,
                           stamp_ns=delivered_ns)
    return bytes(wb.buffer)


def _control_out(ep: RankEndpoint, now_ns: int, opcode: int) -> list[bytes]:
    return [bytes(tx.data) for tx in ep.poll_transmit(now_ns, 0) if tx.data[0] == opcode]


def _sender(**kw) -> RankEndpoint:
    cfg = EndpointConfig(mtu_bytes=MTU, cc="paper", line_rate_bps=RATE, delivery_stamps=True, **kw)
    ep = RankEndpoint(0, make_schedule(2, [(0, 1, 4096 * MTU, 0)], {0: [send(0)]}), cfg)
    ep.start(0)
    ep.poll_transmit(0)
    return ep


def _events(ep: RankEndpoint, kind: int) -> list[int]:
    ev = ep.records.to_arrays()
    return [int(t) for t, k in zip(ev["event_t_ns"], ev["event_kind"], strict=True) if k == kind]


def test_one_late_np_and_one_late_cnp_read_still_cut_the_rate_at_the_cnps_model_time(switch):
    rx = _receiver()
    rx.receive(_data(0, D_NS), 3, D_NS + LATE_NS)  # CE-marked, delivered at 1 ms, read 3 ms late
    (cnp,) = _control_out(rx, D_NS + LATE_NS, 0x81)
    assert read_cnp_stamp(cnp) == D_NS  # decided at the delivery time, and carrying it
    out = _through(switch, cnp, D_NS + LATE_NS + HORIZON)  # the switch read it as late as it was sent
    delivered = D_NS + CNP_NS + CNP_NS  # the receiver's NIC, then the idle port toward the sender
    assert read_cnp_stamp(out) == delivered and out[:12] == cnp[:12]
    tx = _sender()
    tx.receive(out, 0, delivered + LATE_NS)  # the sender's process read it 3 ms late too
    assert _events(tx, EV_CNP_RECEIVED) == [delivered]  # before: 7 ms, at the read
    assert tx.records.rate_t_ns[-1] == delivered and tx.records.rate_bps[-1] < RATE  # the cut, at 1 ms
    assert tx.records.counters["cnps_timed"] == 1


def test_a_deferred_cnp_goes_at_the_end_of_its_quiet_interval_however_late_the_timer_ran():
    rx = _receiver(NpParams(min_time_between_cnps_ns=50_000, defer=True))
    rx.receive(_data(0, D_NS), 3, D_NS + 100)
    rx.receive(_data(1, D_NS + 10_000), 3, D_NS + 200)  # in the quiet interval: deferred to 1.05 ms
    rx.handle_timer(D_NS + LATE_NS)  # the worker woke up 3 ms late
    assert [read_cnp_stamp(c) for c in _control_out(rx, D_NS + LATE_NS, 0x81)] == [D_NS, D_NS + 50_000]


def test_a_nak_carries_its_model_time_and_the_sender_acts_at_its_delivery(switch):
    rx = _receiver()
    rx.receive(_data(1, D_NS), 0, D_NS + LATE_NS)  # PSN 1 while 0 is expected: a gap, seen at 1 ms
    (nak,) = _control_out(rx, D_NS + LATE_NS, 0x11)
    assert parse_aeth(nak) == (0x60, D_NS & 0xFFFFFF)  # its MSN: when it was decided
    out = _through(switch, nak, D_NS + LATE_NS + HORIZON)
    delivered = D_NS + NAK_NS + NAK_NS
    assert parse_aeth(out)[1] == delivered & 0xFFFFFF
    tx = _sender()
    tx.receive(out, 0, delivered + LATE_NS)
    assert _events(tx, EV_NAK_RECEIVED) == [delivered]  # before: 7 ms, at the read


def test_a_nak_msn_is_read_as_the_latest_time_not_after_the_switch_clock(switch):
    now = 5 * (1 << 24) + 123_456  # the clock wrapped the 24-bit MSN five times
    nak = build_nak_psn_error(sender_qpn(0), 0, (now - 2_000_000) & 0xFFFFFF)
    switch._ingress(nak, 0xC0, 0, now)
    assert switch.arrivals[-1][0] == now - 2_000_000 + NAK_NS


def test_an_unstamped_cnp_joins_at_the_clock_and_leaves_with_its_delivery_time(switch):
    out = _through(switch, build_cnp(sender_qpn(0)), 5_000_000 + HORIZON)
    assert read_cnp_stamp(out) == 5_000_000 + CNP_NS  # the idle port from the model clock


@settings(max_examples=30, deadline=None)
@given(served_ahead_ns=st.integers(-500_000, 2_000_000), bound_ns=st.integers(1, 300_000))
def test_a_cnp_the_senders_service_had_passed_acts_at_the_service_time_and_beyond_the_bound_counts_as_late(
        served_ahead_ns, bound_ns):
    tx = _sender(model_time_service=True, feedback_lag_bound_ns=bound_ns)
    for _ in range(100):  # served on model time up to 3 ms (64 batches a call)
        if not tx.poll_transmit(3_000_000):
            break
    served = tx._tx.served_ns
    t = served - served_ahead_ns
    tx.receive(build_cnp(sender_qpn(0), stamp_ns=t), 0, max(t, served) + 1)
    c = tx.records.counters
    assert c["cnps_timed"] == 1
    assert c.get("cnps_acted_late", 0) == (served_ahead_ns > bound_ns)
    assert c.get("cnp_lag_max_ns", 0) == max(0, served_ahead_ns)
    # the cut acts at its model time, or, the service being past it, at the service's time: not in the past
    assert _events(tx, EV_CNP_RECEIVED) == [max(t, served)]


def test_without_delivery_stamps_a_cnp_acts_at_its_read_and_nothing_is_counted():
    cfg = EndpointConfig(mtu_bytes=MTU, cc="paper", line_rate_bps=RATE)
    tx = RankEndpoint(0, make_schedule(2, [(0, 1, 64 * MTU, 0)], {0: [send(0)]}), cfg)
    tx.start(0)
    tx.poll_transmit(0)
    tx.receive(build_cnp(sender_qpn(0), stamp_ns=D_NS), 0, D_NS + LATE_NS)
    assert _events(tx, EV_CNP_RECEIVED) == [D_NS + LATE_NS]
    assert "cnps_timed" not in tx.records.counters


def _fid(faithful: bool = True) -> dict:
    health: dict = {"warnings": []}
    lag = 0 if faithful else 10**6
    add_fidelity(health, {"p50": 0, "p99": lag}, {"p50": 0, "p99": 0}, 100_000, 1.0)
    return health


def test_more_than_one_percent_of_cnps_acted_late_is_not_timing_faithful():
    fid = _fid()["fidelity"]
    assert with_cnp_lag(fid, 1000, 10, 250_000)["faithful"]  # 1 %: the p99 is within the bound
    late = with_cnp_lag(fid, 1000, 11, 250_000)
    assert not late["faithful"] and late["cnps_acted_late"] == 11 and late["cnp_lag_max_ns"] == 250_000
    assert "11 of 1000 CNPs acted on more than 100.00 us after their model time" in late["verdict"]
    assert not with_cnp_lag(fid, 1000, 2, 250_000, congested=True)["faithful"]  # p99.9 on a congested run
    assert with_cnp_lag(fid, 0, 0, 0)["faithful"]


def test_cnp_lag_adds_to_a_lag_verdict_and_replaces_its_warning():
    health = _fid(faithful=False)
    before = health["fidelity"]["warning"]
    health["warnings"] = [before, "other"]
    records = {r: SimpleNamespace(counters={"cnps_timed": 50, "cnps_acted_late": 5, "cnp_lag_max_ns": 400_000 + r})
               for r in range(2)}
    _add_cnp_lag(health, records, congested=False)
    fid = health["fidelity"]
    assert not fid["faithful"] and fid["verdict"].startswith("lag p99") and "10 of 100 CNPs" in fid["verdict"]
    assert fid["cnp_lag_max_ns"] == 400_001
    assert health["warnings"] == [fid["warning"], "other"]


def test_a_stamped_cnp_is_valid_rocev2_with_its_icrc_over_the_stamp(tmp_path):
    a, b = "127.0.0.2", "127.0.0.1"
    cnp = build_cnp(0x11, icrc=IcrcContext(b, a).bind(0xC000, 4791), stamp_ns=123_456_789)
    assert decode(cnp).cnp_reserved == (123_456_790).to_bytes(8, "big") + bytes(8)
    ip = ip_udp_packet(cnp, src=b, dst=a, sport=0xC000, tos=tos(48, ECT0))
    assert check_frame_icrc(ip)
    tshark = shutil.which("tshark")
    if tshark is None:
        return
    pcap = tmp_path / "cnp.pcap"
    with PcapWriter(str(pcap)) as w:
        w.write_frame(ethernet_frame(ip), 1_700_000_000_000_000_000)
    out = subprocess.run([tshark, "-n", "-r", str(pcap), "-T", "fields", "-E", "separator=|", "-e", "_ws.col.Protocol",
                          "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp"],
                         capture_output=True, text=True, timeout=120, check=True).stdout  # fmt: skip
    assert out.split() == ["RRoCE|129|0x000011"]
