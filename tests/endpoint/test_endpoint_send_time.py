"""The endpoint tells the driver when each data batch was meant to leave (``Transmit.t_ns``, also stamped in
its packets): the pacer's time, not the time the driver got round to calling."""

from __future__ import annotations

from support.endpoint import make_schedule, recv, send

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.wire.stamp import read_stamp


def _data(txs):
    return [tx for tx in txs if tx.t_ns >= 0]


def test_a_late_poll_carries_the_pacers_time_not_the_poll_time():
    cfg = EndpointConfig(cc="fixed", cc_overrides=(("rate_bps", 1e9),), line_rate_bps=1e9, mtu_bytes=1024)
    ep = RankEndpoint(0, make_schedule(2, [(0, 1, 64 * 1024, 0)], {0: [send(0)]}), cfg)
    ep.start(0)
    first = _data(ep.poll_transmit(0))
    assert first and all(tx.t_ns == 0 for tx in first)
    due = ep.next_timer_ns()
    assert due is not None and due > 0
    late = due + 3_000_000  # the driver wakes 3 ms late
    txs = _data(ep.poll_transmit(late))
    assert txs, "the paced flow had data due"
    assert txs[0].t_ns == due < late
    mv = memoryview(txs[0].data)
    assert read_stamp(mv[: txs[0].segment_size or len(mv)]) == due


def test_control_packets_carry_no_send_time():
    cfg = EndpointConfig(cc="none", line_rate_bps=1e9, mtu_bytes=1024)
    sched = make_schedule(2, [(1, 0, 4096, 0)], {0: [recv(0)], 1: [send(0)]})
    tx_ep, rx_ep = RankEndpoint(1, sched, cfg), RankEndpoint(0, sched, cfg)
    tx_ep.start(0)
    rx_ep.start(0)
    for tx in tx_ep.poll_transmit(0):
        rx_ep.receive(tx.data, tx.tos & 3, 10, tx.segment_size)
    acks = rx_ep.poll_transmit(20)
    assert acks and all(tx.t_ns == -1 for tx in acks)


def _spread_batches(rate_bps: float, spread_ns: int):
    """A fixed-rate flow under socket-driver pacing with a stamp spread, polled every 10 µs: per data
    transmit, its packets' stamps."""
    cfg = EndpointConfig(cc="fixed", cc_overrides=(("rate_bps", rate_bps),), line_rate_bps=1e9, mtu_bytes=1024,
                         pace_full_batches=True, stamp_spread_ns=spread_ns)
    ep = RankEndpoint(0, make_schedule(2, [(0, 1, 256 * 1024, 0)], {0: [send(0)]}), cfg)
    ep.start(0)
    out = []
    for now in range(0, 5_000_000, 10_000):
        for tx in _data(ep.poll_transmit(now)):
            seg = tx.segment_size or len(tx.data)
            mv = memoryview(tx.data)
            out.append([read_stamp(mv[o : o + seg]) for o in range(0, len(mv), seg)])
    return out


def test_spread_stamps_are_one_packet_time_apart_at_the_qp_rate():
    gap = -(-(1024 + 16 + 66) * 8 * 10**9 // int(250e6))  # one MIDDLE packet at 250 Mbit/s
    batches = _spread_batches(250e6, spread_ns=3 * gap)
    middles = [b for b in batches[1:-1] if len(b) > 1]
    assert middles, "several packets per batch"
    assert all(len(b) <= 4 for b in batches)  # 1 + spread // gap
    for b in middles:
        assert [t - b[0] for t in b] == [j * gap for j in range(len(b))]
    # stamps keep the QP's rate across batches: never closer than one packet time
    flat = [t for b in batches[1:] for t in b]
    assert all(b - a >= gap - 1 for a, b in zip(flat, flat[1:], strict=False))


def test_a_spread_shorter_than_a_packet_time_sends_single_packets():
    gap = -(-(1024 + 16 + 66) * 8 * 10**9 // int(100e6))
    batches = _spread_batches(100e6, spread_ns=gap // 2)
    assert batches and all(len(b) == 1 for b in batches)


def test_without_a_spread_a_batch_carries_one_stamp():
    batches = _spread_batches(250e6, spread_ns=0)
    assert any(len(b) > 4 for b in batches)
    assert all(len(set(b)) == 1 for b in batches)


def test_a_rate_raised_after_a_cut_acts_at_once_on_the_stamps():
    """The hold on a QP's next stamp is one packet time at its *current* rate: after a cut to 10 Mbit/s
    (3.3 ms per 4 KiB packet) and a raise to 1 Gbit/s, the next packet goes within a 1 Gbit/s gap."""
    cfg = EndpointConfig(cc="fixed", cc_overrides=(("rate_bps", 10e6),), line_rate_bps=1e9, mtu_bytes=4096,
                         pace_full_batches=True, stamp_spread_ns=50_000)
    ep = RankEndpoint(0, make_schedule(2, [(0, 1, 1 << 20, 0)], {0: [send(0)]}), cfg)
    ep.start(0)
    stamps = []
    now = 0
    while len(stamps) < 3:
        now += 10_000
        for tx in _data(ep.poll_transmit(now)):
            stamps.append(tx.t_ns)
    slow_gap = stamps[-1] - stamps[-2]
    assert slow_gap > 3_000_000
    qs = next(iter(ep._tx.qps.values()))
    qs.pacer.set_rate(1e9, now)  # the controller raised the rate
    ep._tx.schedule(qs, now)
    later = []
    t = now
    while not later and t < now + 3_000_000:
        t += 10_000
        later = _data(ep.poll_transmit(t))
    assert later and later[0].t_ns - stamps[-1] < slow_gap // 10
