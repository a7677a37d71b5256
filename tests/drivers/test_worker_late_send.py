"""A socket worker preempted between a pacing decision and the end of its send does not let the gate of a
deficit pacer refill over that time (``RankEndpoint.sent_late``, ``TokenBucketPacer.sent_late``): otherwise the
next poll, right after the late send, put what the gate earned meanwhile right behind it (bench/pacing_burst.py
under busy loops: 250,680 B back to back against the bound of 188,865 = burst + one GSO batch)."""

from __future__ import annotations

import random

import pytest
from support.endpoint import make_schedule, recv, send

from emulator.drivers.sockets.workers import socket_endpoint_config
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.events import expand_runs
from emulator.pacing.pacer import TokenBucketPacer

RATE_BPS = 1e9
LINE_BPS = 10e9
MS = 1_000_000
WIRE_OVERHEAD_BYTES = 66  # per packet beyond its UDP payload, as the pacer meters it


def _endpoint() -> RankEndpoint:
    cfg = EndpointConfig(mtu_bytes=4096, cc="fixed", cc_overrides=(("rate_bps", RATE_BPS),),
                         line_rate_bps=LINE_BPS, compiled_core=True, run_transmits=True,
                         max_outstanding_bytes=0, retransmit_timeout_ns=10**12)  # no ACKs come: no window, no RTO
    sched = make_schedule(2, [(0, 1, 64 << 20, 0)], {0: [send(0)], 1: [recv(0)]})
    return RankEndpoint(0, sched, socket_endpoint_config(cfg))


def _frames(txs) -> list[int]:
    """Wire bytes of each GSO batch (one frame on a veth)."""
    out = []
    for tx in expand_runs(txs):
        n = len(tx.data)
        pkts = -(-n // tx.segment_size) if tx.segment_size else 1
        out.append(n + WIRE_OVERHEAD_BYTES * pkts)
    return out


def _drive(hold: bool, seed: int, duration_ns: int = 300 * MS) -> tuple[int, int, int, int]:
    """A worker's loop in virtual time: a poll at each of the rank's timers, a stall of 2–5 ms (no poll) every
    ~10 ms, and 30 % of the sends ending 100–500 µs after their poll (the worker preempted before or inside
    its ``sendmmsg``), the whole send's frames leaving at its end. Returns (largest run of wire bytes back to
    back at the line rate — each frame starting less than 1.5 packet times after the previous one ended, as
    bench/pacing_burst.py counts it — the bound burst + one batch, bytes sent, bytes the rate allows)."""
    rng = random.Random(seed)
    ep = _endpoint()
    ep.start(0, 0)
    tx = ep._tx
    pacer = next(iter(tx.qps.values())).pacer
    bound = pacer.burst_bytes + tx.burst
    packet_ns = (4096 + 32 + WIRE_OVERHEAD_BYTES) * 8e9 / LINE_BPS
    now = 0
    next_stall = rng.randrange(5 * MS, 15 * MS)
    wire_end = float("-inf")  # when the last frame finished at the line rate
    run = best = sent_bytes = 0
    while now < duration_ns:
        txs = ep.poll_transmit(now)
        if txs:
            late_ns = rng.randrange(100_000, 500_000) if rng.random() < 0.3 else 0
            t = float(now + late_ns)
            for w in _frames(txs):
                run = run + w if t - wire_end < 1.5 * packet_ns else w
                best = max(best, run)
                wire_end = max(t, wire_end) + w * 8e9 / LINE_BPS
                t += w * 8e9 / 100e9  # the kernel copies a send's batches faster than the line
                sent_bytes += w
            if hold:
                ep.sent_late(now, now + late_ns)
            now += late_ns
        t_next = ep.next_timer_ns()
        now = max(now + 1_000, t_next if t_next is not None else now + MS)
        if now >= next_stall:
            now += rng.randrange(2 * MS, 5 * MS)
            next_stall = now + rng.randrange(5 * MS, 15 * MS)
    allowed = int(RATE_BPS * now / 8e9) + bound
    return best, bound, sent_bytes, allowed


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_late_send_puts_at_most_the_burst_and_one_batch_back_to_back(seed):
    best, bound, sent, allowed = _drive(hold=True, seed=seed)
    assert best <= bound, (best, bound)
    # the deficit of the stalls is still repaid: short of the rate by at most the last stall (≤ 5 ms) and a bound
    assert allowed - int(RATE_BPS * 5e-3 / 8) - bound <= sent <= allowed, (sent, allowed)


def test_without_the_hold_the_gate_refilled_during_a_late_send_joins_it():
    # the scenario above on the old worker (the gate refilling while the send was late): over the bound
    assert max(_drive(hold=False, seed=s)[0] for s in (1, 2, 3)) > _drive(hold=False, seed=1)[1]


def test_sent_late_holds_only_the_gate_of_a_pacer_that_spent_then():
    p = TokenBucketPacer(1e9, 100_000, 0, max_lag_ns=10 * MS, catch_up_ratio=2.0)
    assert p.ready_ns(50_000, 0) == 0
    assert p.try_send(100_000, 0)
    assert not p.sent_late(5, 200_000)  # spent at 0, not at 5
    assert p.sent_late(0, 200_000)
    # tokens kept accruing from 0 (100 kB at 1 Gbit/s by 800 µs); the gate only from 200 µs (2 Gbit/s)
    assert p.ready_ns(100_000, 0) == 800_000
    assert p.available_bytes(300_000) == 25_000
    plain = TokenBucketPacer(1e9, 100_000, 0)
    assert plain.try_send(100_000, 0)
    assert not plain.sent_late(0, 200_000)


def _line_rate_endpoint(cc: str) -> RankEndpoint:
    over = (("rate_bps", RATE_BPS),) if cc == "fixed" else ()
    cfg = EndpointConfig(mtu_bytes=4096, cc=cc, cc_overrides=over, line_rate_bps=LINE_BPS, compiled_core=True,
                         run_transmits=True, max_outstanding_bytes=0, retransmit_timeout_ns=10**12)
    sched = make_schedule(2, [(0, 1, 1 << 20, 0)], {0: [send(0)], 1: [recv(0)]})
    return RankEndpoint(0, sched, socket_endpoint_config(cfg))


@pytest.mark.parametrize("cc", ["none", "fixed"])
def test_sent_late_looks_at_the_pacers_only_when_one_is_below_the_line_rate(monkeypatch, cc):
    # a late send of a rank whose queue pairs all pace at the line rate holds nothing: the worker's call per
    # poll returns at once (it went through every queue pair's pacer each time, 2 % of an 8-rank All-to-All's
    # workers); one pacer below the line rate (cc fixed) is still held
    ep = _line_rate_endpoint(cc)
    calls = []
    orig = type(ep._tx).sent_late
    monkeypatch.setattr(type(ep._tx), "sent_late", lambda self, p, s: calls.append(p) or orig(self, p, s))
    ep.start(0, 0)
    assert ep._tx.qps
    for k in range(3):
        assert expand_runs(ep.poll_transmit(k * MS))
        held = ep.sent_late(k * MS, k * MS + 300_000)
        assert held is (cc == "fixed")
    assert len(calls) == (3 if cc == "fixed" else 0)
