"""Deficit pacing in virtual time: a late driver sends at most one burst at once, and holds the rate.

The driver model is the socket workers' loop: a backlogged sender asks :meth:`ready_ns` for one GSO
batch, wakes up ``delay`` ns after that time (any delay), and sends all the pacer then allows, as GSO
batches handed over at the same instant.
"""

from __future__ import annotations

import bisect
import itertools

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from emulator.pacing import TokenBucketPacer

US = 1_000
MS = 1_000_000
PKT = 4096 + 35 + 66              # a full-MTU packet as the endpoint charges it
BATCH = 15                        # packets per GSO batch (64 KiB limit at 4 KiB MTU)
LINE_BPS = 25e9


def drive(pacer: TokenBucketPacer, delays_ns, horizon_ns: int, start_ns: int = 0) -> list[tuple[int, int]]:
    """(time, bytes) per wake-up that sent; the i-th wake-up comes ``delays_ns[i % n]`` after the pacer's time."""
    sends: list[tuple[int, int]] = []
    delays = itertools.cycle(delays_ns)
    t = start_ns
    while t < horizon_ns:
        ready = pacer.ready_ns(BATCH * PKT, t)
        assert ready is not None and ready >= t
        t = ready + next(delays)
        n = pacer.take_burst(PKT, 1 << 30, t)
        if n:
            sends.append((t, n * PKT))
    return sends


def deficit_pacer(rate_bps: float, burst_bytes: int, ratio: float = 2.0) -> TokenBucketPacer:
    return TokenBucketPacer(rate_bps, burst_bytes, 0, max_lag_ns=100 * MS, catch_up_ratio=ratio)


def back_to_back_groups(sends: list[tuple[int, int]]) -> list[int]:
    """Bytes per run of sends whose gaps are below 1.5 × one packet's serialisation at the line rate."""
    gap = 1.5 * PKT * 8e9 / LINE_BPS
    groups: list[int] = []
    prev = None
    for t, n in sends:
        if prev is not None and t - prev < gap:
            groups[-1] += n
        else:
            groups.append(n)
        prev = t
    return groups


@settings(max_examples=60, deadline=None)
@given(rate_gbps=st.sampled_from([0.2, 1.0, 2.5, 5.0]), burst_batches=st.integers(1, 4),
       ratio=st.sampled_from([1.1, 1.5, 2.0]),
       delays=st.lists(st.one_of(st.integers(0, 50 * US), st.integers(0, 20 * MS)), min_size=1, max_size=40))
def test_no_burst_beyond_the_configured_burst_whatever_the_wakeup_delays(rate_gbps, burst_batches, ratio, delays):
    """Any wake-up delays: every back-to-back run ≤ burst + one GSO batch, and over any window [a, b]
    at most burst + catch_up_ratio · rate · (b − a) go (the catch-up is spread, never a burst)."""
    rate = rate_gbps * 1e9
    burst = burst_batches * BATCH * PKT
    sends = drive(deficit_pacer(rate, burst, ratio), delays, 150 * MS)
    assert max(back_to_back_groups(sends)) <= burst + BATCH * PKT
    times = [t for t, _ in sends]
    cum = list(itertools.accumulate(n for _, n in sends))
    for i, (a, _) in enumerate(sends):
        for w in (0, 100 * US, 2 * MS, 20 * MS):
            j = bisect.bisect_right(times, a + w) - 1
            got = cum[j] - (cum[i - 1] if i else 0)
            assert got <= burst + ratio * rate * w / 8e9 + 1, (a, w, got)


def window_errors(sends: list[tuple[int, int]], rate_bps: float, window_ns: int, t_from: int, t_to: int) -> list[float]:
    """Relative error of the bytes sent in every window [a, a + W) with a on a 1 ms grid."""
    times = [t for t, _ in sends]
    cum = [0, *itertools.accumulate(n for _, n in sends)]
    want = rate_bps * window_ns / 8e9
    out = []
    for a in range(t_from, t_to - window_ns, MS):
        got = cum[bisect.bisect_left(times, a + window_ns)] - cum[bisect.bisect_left(times, a)]
        out.append(got / want - 1)
    return out


@settings(max_examples=25, deadline=None)
@given(rate_gbps=st.sampled_from([1.0, 2.5, 10.0]), window_ms=st.sampled_from([100, 250]),
       burst_batches=st.integers(1, 2), stall=st.floats(0, 1),
       jitter=st.lists(st.floats(0, 1), min_size=1, max_size=20), extra=st.integers(0, 50))
def test_any_window_of_100ms_or_more_within_2_percent_when_wakeups_are_not_starved(rate_gbps, window_ms,
                                                                                burst_batches, stall, jitter, extra):
    """Wake-ups late by jitter of up to a tenth of a batch time, and repeatedly one late by up to d_max,
    where rate·d_max + burst + one batch ≤ 2 % of rate·W, followed by enough such wake-ups to repay it at
    twice the rate (the sender is not starved): every window of W ≥ 100 ms carries rate·W within 2 %."""
    rate = rate_gbps * 1e9
    w = window_ms * MS
    burst = burst_batches * BATCH * PKT
    d_max = int(0.02 * w - (burst + BATCH * PKT) * 8e9 / rate)
    assert d_max > 0
    stall_ns = int(stall * d_max)
    batch_ns = BATCH * PKT * 8e9 / rate
    repay = int(4 * stall_ns / batch_ns) + 4            # wake-ups to repay it at 2 × the rate, and some
    delays = [stall_ns] + [int(jitter[i % len(jitter)] * batch_ns / 10) for i in range(repay + extra)]
    sends = drive(deficit_pacer(rate, burst), delays, 3 * w)
    errs = window_errors(sends, rate, w, 0, sends[-1][0])
    assert errs and max(abs(e) for e in errs) <= 0.02, max(errs, key=abs)


@pytest.mark.parametrize("stall_ms", [2, 5, 20])
def test_one_late_wakeup_is_caught_up_not_lost(stall_ms):
    """A single wake-up ``stall_ms`` late at 1 Gbit/s with a 2-batch burst (≈ 1 ms): the deficit is repaid
    at 2 × the rate in bursts of at most the burst, so every 100 ms window holding the stall and its
    catch-up carries the rate within 2 %, and the flow ends on schedule. The plain bucket (max_lag_ns = 0)
    loses the stall for good."""
    rate, burst = 1e9, 2 * BATCH * PKT
    delays = [0] * 60 + [stall_ms * MS] + [0] * 100_000
    for lag_ns, within in ((100 * MS, True), (0, False)):
        pacer = TokenBucketPacer(rate, burst, 0, max_lag_ns=lag_ns, catch_up_ratio=2.0)
        sends = drive(pacer, delays, 400 * MS)
        stall_at = sends[60][0] - stall_ms * MS                 # the 61st wake-up came late
        first = max(0, stall_at + 2 * stall_ms * MS + MS - 100 * MS)
        errs = window_errors(sends, rate, 100 * MS, first, stall_at + 100 * MS)
        total = sum(n for t, n in sends if t < 300 * MS)
        on_schedule = abs(total / (rate * 0.3 / 8) - 1) <= 0.01
        if within:
            assert max(abs(e) for e in errs) <= 0.02
            assert on_schedule
            assert max(back_to_back_groups(sends)) <= burst + BATCH * PKT
        elif stall_ms > 2:
            assert min(errs) < -0.02 and not on_schedule


def test_idle_and_a_rate_cut_forget_the_deficit():
    p = TokenBucketPacer(8e9, 10_000, 0, max_lag_ns=1 * MS)        # 1 byte/ns, burst 10 kB
    assert p.ready_ns(10_000, 0) == 0 and p.take_burst(1000, 10, 0) == 10
    assert p.ready_ns(1000, 0) == 1000                              # backlogged from here
    assert p.available_bytes(50_000) == 10_000                      # at most one burst at once...
    assert p.deficit_bytes == 40_000                                # ...the rest is owed
    p.set_rate(16e9, 50_000)                                        # a raise keeps it
    assert p.deficit_bytes == 40_000
    p.set_rate(4e9, 50_000)                                         # a cut (a CNP) forgets it
    assert p.deficit_bytes == 0
    p.ready_ns(1000, 50_000)
    assert p.available_bytes(100_000) == 10_000 and p.deficit_bytes > 0
    p.idle(100_000)
    assert p.deficit_bytes == 0 and p.available_bytes(900_000) == 10_000


def test_without_max_lag_the_pacer_is_the_plain_bucket():
    """max_lag_ns = 0 (the default, the sim's pacers): a late owner loses what exceeds the burst."""
    p = TokenBucketPacer(8e9, 10_000, 0)
    p.take_burst(1000, 10, 0)
    assert p.ready_ns(1000, 0) == 1000
    assert p.available_bytes(50_000) == 10_000 and p.deficit_bytes == 0
    with pytest.raises(ValueError):
        TokenBucketPacer(1e9, 1000, max_lag_ns=-1)
    with pytest.raises(ValueError):
        TokenBucketPacer(1e9, 1000, catch_up_ratio=0.5)


def drive_batches(pacer: TokenBucketPacer, delays_ns, horizon_ns: int, send_late_ns=(0,)) -> list[tuple[int, int]]:
    """As :func:`drive`, but every wake-up sends whole GSO batches only (a socket driver's visit), one
    (time, bytes) entry per batch, the batches of one wake-up handed over at the same instant, that instant
    ``send_late_ns[i % n]`` after the pacing decision of the i-th wake-up (the driver preempted between)."""
    sends: list[tuple[int, int]] = []
    delays = itertools.cycle(delays_ns)
    late = itertools.cycle(send_late_ns)
    t = 0
    while t < horizon_ns:
        ready = pacer.ready_ns(BATCH * PKT, t)
        assert ready is not None and ready >= t
        t = ready + next(delays)
        n = pacer.available_bytes(t) // (BATCH * PKT)
        at = t + next(late)
        for _ in range(n):
            assert pacer.try_send(BATCH * PKT, t)
            sends.append((at, BATCH * PKT))
    return sends


def longest_run_at_the_line(sends: list[tuple[int, int]], line_bps: float) -> int:
    """Bytes of the longest run of batches each starting less than 1.5 packet times after the previous one
    went out at ``line_bps`` (the batches of one instant go out one after the other)."""
    pkt_ns = PKT * 8e9 / line_bps
    best = cur = 0
    end = None
    for t, n in sends:
        cur = cur + n if end is not None and t - end < 1.5 * pkt_ns else n
        best = max(best, cur)
        end = max(t, end if end is not None else t) + n * 8e9 / line_bps
    return best


@settings(max_examples=60, deadline=None)
@given(rate_gbps=st.sampled_from([0.1, 0.5, 1.0, 2.0]), line_gbps=st.sampled_from([10, 25]),
       burst_batches=st.integers(1, 4), share=st.floats(0.2, 1.0),
       delays=st.lists(st.one_of(st.integers(0, 300 * US), st.integers(0, 20 * MS)), min_size=1, max_size=40))
def test_a_catch_up_within_the_lines_room_never_runs_back_to_back_past_the_bound(rate_gbps, line_gbps, burst_batches,
                                                                                share, delays):
    """A catch-up ratio of at most line × batch / ((burst + batch) × rate) (the socket sender's choice,
    :meth:`~emulator.endpoint.sender.SenderSide._catch_up_ratio`): whatever the wake-up delays, no run of
    whole batches back to back at the line rate reaches burst + one batch (the batch after a burst starts
    at least a batch time after the burst went out)."""
    rate, line = rate_gbps * 1e9, line_gbps * 1e9
    batch = BATCH * PKT
    burst = burst_batches * batch
    ratio = share * line * batch / ((burst + batch) * rate)
    assume(ratio >= 1.0)
    sends = drive_batches(deficit_pacer(rate, burst, ratio), delays, 100 * MS)
    assert longest_run_at_the_line(sends, line) < burst + batch


@settings(max_examples=40, deadline=None)
@given(rate_gbps=st.sampled_from([0.1, 0.5, 1.0, 2.0]), line_gbps=st.sampled_from([10, 25]),
       burst_batches=st.integers(2, 4),
       delays=st.lists(st.one_of(st.integers(0, 300 * US), st.integers(0, 20 * MS)), min_size=1, max_size=40),
       late=st.lists(st.floats(0, 1), min_size=1, max_size=40))
def test_sends_up_to_a_batch_time_late_stay_within_the_bound(rate_gbps, line_gbps, burst_batches, delays, late):
    """The same ratio, a burst of two batches or more (the socket sender's), and every wake-up's batches sent
    up to one batch time at the line rate after their pacing decision: no run back to back at the line
    exceeds burst + one batch."""
    rate, line = rate_gbps * 1e9, line_gbps * 1e9
    batch = BATCH * PKT
    burst = burst_batches * batch
    ratio = line * batch / ((burst + batch) * rate)
    assume(ratio >= 1.0)
    batch_ns = batch * 8e9 / line
    sends = drive_batches(deficit_pacer(rate, burst, ratio), delays, 100 * MS, [int(x * batch_ns) for x in late])
    sends.sort()
    assert longest_run_at_the_line(sends, line) <= burst + batch


@settings(max_examples=40, deadline=None)
@given(ratio=st.sampled_from([1.5, 2.0, 3.0, 4.0]), stall_ms=st.integers(3, 20), jitter=st.floats(0, 1),
       burst_batches=st.integers(2, 4))
def test_a_late_owners_deficit_is_repaid_within_stall_over_ratio_minus_one(ratio, stall_ms, jitter, burst_batches):
    """A burst of two batches or more (the socket sender's), one wake-up ``stall_ms`` late and the others late
    by up to a tenth of a batch time at the catch-up rate (within the burst: no gate tokens lost): the
    deficit is repaid in full — the pacer owes nothing — ``stall / (ratio − 1)`` plus one batch time at the
    catch-up rate after the stall, and stays repaid (a stall long enough to leave a deficit after its burst)."""
    rate, burst = 1e9, burst_batches * BATCH * PKT
    assume(rate * stall_ms * MS / 8e9 > 2 * burst + BATCH * PKT)
    gate_batch_ns = BATCH * PKT * 8e9 / (ratio * rate)
    late = int(jitter * gate_batch_ns / 10)
    pacer = deficit_pacer(rate, burst, ratio)
    delays = itertools.chain([late] * 40, [stall_ms * MS], itertools.repeat(late))
    t, stall_end, owed_at = 0, 0, []
    for i, d in enumerate(delays):
        t = pacer.ready_ns(BATCH * PKT, t) + d
        pacer.take_burst(BATCH * PKT, 1 << 20, t)
        if i == 40:
            stall_end = t
        if i >= 40:
            owed_at.append((t, pacer.deficit_bytes))
            if t > stall_end + stall_ms * MS / (ratio - 1) + 4 * gate_batch_ns:
                break
    due = stall_end + stall_ms * MS / (ratio - 1) + gate_batch_ns
    assert owed_at[0][1] > 0 and all(owed == 0 for t, owed in owed_at if t >= due), owed_at[-4:]


def test_restart_forgets_the_deficit_and_leaves_the_rest_of_the_first_burst():
    p = TokenBucketPacer(8e9, 10_000, 0, max_lag_ns=1 * MS)         # 1 byte/ns, burst 10 kB
    assert p.ready_ns(4000, 0) == 0                                 # backlogged from the start
    assert p.available_bytes(30_000) == 10_000 and p.deficit_bytes == 30_000  # the first send is 30 µs late
    p.spend(4000)                                                   # the first burst: 4 kB of a full bucket
    p.restart(30_000)
    assert p.deficit_bytes == 0                                     # the lateness is not owed
    assert p.available_bytes(30_000) == 6000                        # at most the rest of one burst at once
    assert p.ready_ns(1000, 30_000) == 30_000
    assert p.available_bytes(40_000) == 10_000                      # and it refills at its rate from there
