"""4-flow incast through one switch port: DCQCN converges to fair share with a bounded queue; without
congestion control the queue fills, packets drop, and go-back-N still completes every flow."""

from __future__ import annotations

from support.sim import assert_conserved, incast, jain, mean_rate_bps

from emulator.drivers.sim import SimConfig, run_sim
from emulator.endpoint import EndpointConfig
from emulator.pacing.red import RedParams

N = 4
SIZE = 8_000_000
RED = RedParams(kmin_bytes=5_000, kmax_bytes=200_000, pmax=0.01)


def test_dcqcn_incast_fair_share_and_bounded_queue():
    s = incast(N, SIZE)
    res = run_sim(s, SimConfig(red=RED), EndpointConfig(cc="paper"), seed=3)
    assert res.complete
    assert_conserved(s, res)
    end = res.health["end_ns"]
    lo, hi = end / 2, end * 0.9  # second half, before the first flows finish
    rates = [mean_rate_bps(res.records[i], i, lo, hi) for i in range(N)]
    assert jain(rates) >= 0.9
    assert all(r < 25e9 for r in rates)  # DCQCN actually throttled every flow
    bott = res.fabric.port_named("sw0->host4")
    assert bott.dropped_packets == 0 and bott.marked_packets > 0
    t, q = res.fabric.queue_samples.of_port(bott.port)
    half = q[(t >= lo) & (t <= hi)]
    assert half.size > 10
    assert half.mean() <= RED.kmax_bytes  # oscillates in the Kmin..Kmax band
    assert half.max() <= 2 * RED.kmax_bytes
    cnps = [res.records[i].counters["cnps_received"] for i in range(N)]
    assert min(cnps) > 0 and sum(cnps) == res.records[N].counters["cnps_sent"]
    # flows of equal size sharing fairly finish close together
    ends = [int(res.records[i].end_ns[0]) for i in range(N)]
    assert min(ends) >= 0.75 * max(ends)


def test_no_congestion_control_fills_queue_drops_and_recovers():
    s = incast(N, SIZE // 2)
    cfg = SimConfig(red=RED, buffer_bytes=1 << 20)
    res = run_sim(s, cfg, EndpointConfig(cc="none", retransmit_timeout_ns=500_000), seed=3)
    assert res.complete
    assert_conserved(s, res)
    bott = res.fabric.port_named("sw0->host4")
    assert bott.peak_queue_bytes >= 0.9 * (1 << 20)
    assert bott.dropped_packets > 0
    retx = sum(res.records[i].counters["retransmits"] for i in range(N))
    assert retx >= bott.dropped_packets * 0.5
    assert bott.utilisation > 0.9  # the line stays busy (it just carries retransmits too)
    # the CNPs were sent but the 'none' controller ignored them: every rate sample is line rate
    assert all(set(res.records[i].rate_bps) == {25_000_000_000} for i in range(N))
