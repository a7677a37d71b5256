"""A fixed-rate endpoint driven like the socket workers, with late wake-ups: the rate holds, bursts stay bounded."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import make_schedule, send

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint

MS = 1_000_000
RATE = 1e9


def _sender(size_bytes: int) -> RankEndpoint:
    s = make_schedule(2, [(0, 1, size_bytes, 0)], {0: [send(0)]})
    cfg = EndpointConfig(mtu_bytes=4096, cc="fixed", cc_overrides=(("rate_bps", RATE),), line_rate_bps=25e9,
                         retransmit_timeout_ns=10**12, pace_full_batches=True)
    ep = RankEndpoint(0, s, cfg)
    ep.start(0)
    return ep


def drive(ep: RankEndpoint, delays_ns: list[int], horizon_ns: int) -> list[tuple[int, int]]:
    """The worker loop in virtual time: wake ``delay`` after the endpoint's next timer, send what it gives."""
    out: list[tuple[int, int]] = []
    delays = itertools.cycle(delays_ns)
    now = 0
    while now < horizon_ns:
        t = ep.next_timer_ns()
        if t is None:
            break
        now = max(now, t) + next(delays)
        ep.handle_timer(now)
        wire = sum(len(tx.data) + 66 * (-(-len(tx.data) // tx.segment_size) if tx.segment_size else 1)
                   for tx in ep.poll_transmit(now))
        if wire:
            out.append((now, wire))
    return out


@settings(max_examples=15, deadline=None)
@given(stall_ms=st.integers(1, 20), extra=st.integers(0, 100), jitter_us=st.integers(0, 30))
def test_late_wakeups_are_caught_up_within_the_burst(stall_ms, extra, jitter_us):
    """One wake-up is ``stall_ms`` late, then enough wake-ups late by ``jitter_us`` to repay it at twice the
    rate (a batch time is 0.5 ms), over and over: over 1 s the endpoint sends its 1 Gbit/s within 1 % plus
    the last stall (the deficit is repaid, not lost) and no wake-up sends more than the QP's burst (two GSO
    batches) plus one batch."""
    every = 5 * stall_ms + 10 + extra
    ep = _sender(10**9)
    qp = ep._tx.qps[0]
    burst = qp.pacer.burst_bytes
    batch = burst // 2
    delays = [stall_ms * MS] + [jitter_us * 1000] * (every - 1)
    sends = drive(ep, delays, 1_000 * MS)
    assert max(n for _, n in sends) <= burst + batch
    total = sum(n for t, n in sends if t <= 1_000 * MS)
    assert abs(total / (RATE * 1.0 / 8) - 1) <= 0.01 + stall_ms / 1_000, total / (RATE / 8)


def test_a_qp_that_ran_dry_restarts_without_its_old_deficit():
    ep = _sender(200_000)
    sends = drive(ep, [3 * MS], 50 * MS)                     # every wake-up late: a deficit builds
    assert sends and ep._tx.qps[0].pacer.deficit_bytes == 0  # the message is done: nothing owed any more


def test_only_constant_rate_qps_of_socket_drivers_get_deficit_pacers():
    """The sim driver is never late (a NIC it holds back is backpressure) and DCQCN's rate is what to send
    now: their pacers stay plain buckets, as does the NIC's."""
    sim = RankEndpoint(0, make_schedule(2, [(0, 1, 10**6, 0)], {0: [send(0)]}),
                       EndpointConfig(cc="fixed", cc_overrides=(("rate_bps", RATE),)))
    sim.start(0)
    assert sim._tx.nic.max_lag_ns == 0 and sim._tx.qps[0].pacer.max_lag_ns == 0
    sock = _sender(10**6)
    assert sock._tx.qps[0].pacer.max_lag_ns > 0
    assert sock._tx.nic.max_lag_ns == 0                     # no catch-up beyond the line rate
    dcqcn = RankEndpoint(0, make_schedule(2, [(0, 1, 10**6, 0)], {0: [send(0)]}),
                         EndpointConfig(cc="paper", pace_full_batches=True))
    dcqcn.start(0)
    assert dcqcn._tx.qps[0].pacer.max_lag_ns == 0
