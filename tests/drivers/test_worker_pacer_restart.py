"""A socket worker restarts a rank's pacers as its first poll's transmits go (``RankEndpoint.restart_pacers``): a
rank that started late, or whose first poll was slow, does not repay that time at its catch-up ratio right
after its first frame (bench/pacing_burst.py's first 100 ms window ran +2–8 %), and a late wake-up after
the restart is still repaid."""

from __future__ import annotations

from support.endpoint import make_schedule, recv, send

from emulator.drivers.sockets.workers import socket_endpoint_config
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.events import expand_runs

RATE = 1e9
MS = 1_000_000


def p2p_schedule(size_bytes: int):
    """One flow of ``size_bytes`` from rank 0 to rank 1."""
    return make_schedule(2, [(0, 1, size_bytes, 0)], {0: [send(0)], 1: [recv(0)]})
POLL_NS = 100_000


def _endpoint() -> RankEndpoint:
    cfg = EndpointConfig(mtu_bytes=4096, cc="fixed", cc_overrides=(("rate_bps", RATE),), line_rate_bps=10e9,
                         compiled_core=True, run_transmits=True)
    return RankEndpoint(0, p2p_schedule(64 << 20), socket_endpoint_config(cfg))


def _sent_in_window(first_poll_ns: int, restart: bool, stall: tuple[int, int] = (0, 0)) -> int:
    """Bytes handed out in the 100 ms from the rank's first poll (at ``first_poll_ns`` after its start at 0), a
    poll every 100 µs but none in ``stall`` (start, end ns); the pacers restarted after the first poll if asked."""
    ep = _endpoint()
    ep.start(0, 0)
    sent = 0
    now = first_poll_ns
    first = True
    while now < first_poll_ns + 100 * MS:
        if not stall[0] <= now < stall[1]:
            txs = ep.poll_transmit(now)
            if first and restart:
                assert ep.restart_pacers(now) == 1
            first = False
            sent += sum(len(tx.data) for tx in expand_runs(txs))
        now += POLL_NS
    return sent


def test_a_late_first_poll_is_not_repaid_after_the_first_frame():
    on_time = _sent_in_window(0, restart=False)
    late_old = _sent_in_window(4 * MS, restart=False)
    late = _sent_in_window(4 * MS, restart=True)
    four_ms = RATE * 4e-3 / 8
    batch = 15 * 4112
    assert late_old >= on_time + 0.8 * four_ms  # without the restart: the 4 ms repaid in the window
    assert abs(late - on_time) <= batch, (late, on_time)


def test_a_stall_after_the_restart_is_still_repaid():
    on_time = _sent_in_window(0, restart=True)
    # 10 ms without a poll right after the first: the pacer is backlogged again from the restart on
    stalled = _sent_in_window(0, restart=True, stall=(1, 10 * MS))
    assert abs(stalled - on_time) <= 15 * 4112, (stalled, on_time)


def test_a_rank_that_sent_nothing_or_runs_on_model_time_is_left_alone():
    ep = _endpoint()
    assert ep.restart_pacers(0) == 0  # not started: no queue pair
    cfg = EndpointConfig(mtu_bytes=4096, cc="fixed", cc_overrides=(("rate_bps", RATE),), line_rate_bps=10e9,
                         model_time_service=True)
    ep = RankEndpoint(0, p2p_schedule(1 << 20), socket_endpoint_config(cfg))
    ep.start(0, 0)
    ep.poll_transmit(1 * MS)
    assert ep.restart_pacers(1 * MS) == 0
