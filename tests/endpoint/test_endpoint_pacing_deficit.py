"""A fixed-rate endpoint driven like the socket workers, with late wake-ups: the rate holds, bursts stay bounded."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import make_schedule, send

from emulator.drivers.sockets.workers import socket_endpoint_config
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


def _socket_sender(rate_bps: float, line_bps: float, size_bytes: int) -> RankEndpoint:
    """A fixed-rate sender configured as the socket workers run it (bursts of whole batches per visit)."""
    s = make_schedule(2, [(0, 1, size_bytes, 0)], {0: [send(0)]})
    cfg = EndpointConfig(mtu_bytes=4096, cc="fixed", cc_overrides=(("rate_bps", rate_bps),), line_rate_bps=line_bps,
                         retransmit_timeout_ns=10**12)
    ep = RankEndpoint(0, s, socket_endpoint_config(cfg))
    ep.start(0)
    return ep


@pytest.mark.parametrize(("rate_gbps", "line_gbps", "ratio"), [
    (1, 10, 10 / 3), (0.1, 10, 4.0), (1, 25, 4.0), (1.5, 10, 10 / 4.5), (2.5, 10, 2.0), (10, 10, 2.0)])
def test_the_catch_up_ratio_is_what_the_line_leaves_room_for(rate_gbps, line_gbps, ratio):
    """line × batch / ((burst + batch) × rate) within [2, 4]: 1 Gbit/s on 10 Gbit/s repays at 10/3 × (was 2)."""
    ep = _socket_sender(rate_gbps * 1e9, line_gbps * 1e9, 10**6)
    tx = ep._tx
    pacer = tx.qps[0].pacer
    assert pacer.burst_bytes == 2 * tx.burst                 # the bench's flow: two GSO batches
    assert pacer.catch_up_ratio == pytest.approx(ratio)


def _duty_drive(ep: RankEndpoint, on_ns: int, period_ns: int, phase_ns: int, horizon_ns: int,
                cost_ns: int) -> list[tuple[int, int, int]]:
    """The worker loop in virtual time on a CPU it gets only ``on_ns`` of every ``period_ns`` (others' time
    slices): it wakes at its next timer or when it next runs, and each datagram's ``sendmsg`` takes
    ``cost_ns`` of its CPU, so a slice can end between a batch's pacing decision and its send.
    Returns (send time, wire bytes, packets) per datagram."""
    def runs_at(t: int) -> int:
        x = (t + phase_ns) % period_ns
        return t if x < on_ns else t + period_ns - x

    out: list[tuple[int, int, int]] = []
    now = 0
    while now < horizon_ns:
        t = ep.next_timer_ns()
        if t is None:
            break
        now = runs_at(max(now, t))
        ep.handle_timer(now)
        for tx in ep.poll_transmit(now):
            n = -(-len(tx.data) // tx.segment_size) if tx.segment_size else 1
            now = runs_at(now)
            out.append((now, len(tx.data) + 66 * n, n))
            now += cost_ns
    return out


def _longest_back_to_back(sends: list[tuple[int, int, int]], line_bps: float) -> int:
    """Wire bytes of the longest run of datagrams each starting less than 1.5 packet times after the previous
    one went out at the line rate (bench/pacing_burst.py's measure)."""
    best = cur = 0
    end = None
    for t, wire, n in sends:
        ser = wire * 8e9 / line_bps
        cur = cur + wire if end is not None and t - end < 1.5 * ser / n else wire
        best = max(best, cur)
        end = max(t, end or t) + ser
    return best


@settings(max_examples=12, deadline=None)
@given(period_ms=st.integers(3, 8), spare=st.floats(0.0, 0.5), phase=st.floats(0, 1),
       cost_us=st.integers(5, 40))
def test_a_sender_with_a_quarter_of_a_cpu_keeps_its_rate(period_ms, spare, phase, cost_us):
    """1 Gbit/s on 10 Gbit/s from a driver that runs ``on`` of every ``period`` (as with two busy loops on
    two cores: 1 ms in 4 measured), ``on`` just enough at the catch-up ratio of 10/3 (burst + 10/3·rate·on
    ≥ 1.1·rate·period): the deficit of every off time is repaid in the next on time — it never grows beyond
    one off time and a burst, so the bytes of every 100 ms window differ from the rate by at most that —
    and no run back to back at the line exceeds the burst + one batch. At the old ratio of 2 the flow ran
    at 0.75 Gbit/s (1 ms in 4)."""
    rate, line = 1e9, 10e9
    period = period_ms * MS
    burst_ns = 2 * 62_955 * 8                               # the QP's burst (two batches) at 1 Gbit/s, in ns
    on = int((1.1 * period - burst_ns) * 0.3 + spare * MS)
    ep = _socket_sender(rate, line, 100_000_000)
    tx = ep._tx
    sends = _duty_drive(ep, on, period, int(phase * period), 600 * MS, cost_us * 1000)
    assert _longest_back_to_back(sends, line) <= tx.qps[0].pacer.burst_bytes + tx.burst
    t0 = sends[0][0]
    owed_max = 0.0
    sent = 0
    for t, wire, _ in sends:                                # bytes behind a schedule at the rate from t0
        owed_max = max(owed_max, rate * (t - t0) / 8e9 - sent)
        sent += wire
    assert owed_max <= rate * (period - on + burst_ns) / 8e9, owed_max / (rate / 8e9)
    assert abs(sent / (rate * (sends[-1][0] - t0) / 8e9) - 1) <= 0.02
