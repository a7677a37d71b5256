"""Model-time service (``model_time_service``, the loopback driver's mode): a rank serves its queue pairs, and
stamps their packets, as the sim's driver would call it — whatever the wake-ups of the driver that polls it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import make_schedule, send

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.wire.stamp import read_stamp

RATE_BPS = 200e6
MTU = 4096
PEERS = 7
#: one full MIDDLE packet (BTH + payload + ICRC + wire overhead) at the line rate
GAP_NS = -(-(MTU + 16 + 66) * 8 * 10**9 // int(RATE_BPS))


def _endpoint(model_time: bool) -> RankEndpoint:
    """Rank 0 of an All-to-All: one 64 KiB flow to each of 7 peers on its own QP, DCQCN at the line rate,
    configured as a socket worker runs it on the loopback fabric."""
    flows = [(0, d, 64 * 1024, d - 1) for d in range(1, PEERS + 1)]
    cfg = EndpointConfig(cc="paper", line_rate_bps=RATE_BPS, mtu_bytes=MTU, retransmit_timeout_ns=10**12,
                         pace_full_batches=True, defer_acks=True, stamp_spread_ns=GAP_NS, delivery_stamps=True,
                         model_time_service=model_time)
    ep = RankEndpoint(0, make_schedule(PEERS + 1, flows, {0: [send(f) for f in range(PEERS)]}), cfg)
    ep.start(0)
    return ep


def _packets(ep: RankEndpoint, lateness_ns: list[int]) -> list[tuple[int, int]]:
    """Drive ``ep`` as a worker does (timers, then a poll) waking up ``lateness_ns[i]`` after its i-th timer
    (the list repeats); returns every data packet sent as (destination, stamp), in send order."""
    out: list[tuple[int, int]] = []
    now = 0
    i = 0
    while i < 10_000:
        t = ep.next_timer_ns()
        if t is None or t > 10**9:  # no ACKs come: stop before the retransmit timeout
            break
        now = max(now, t + lateness_ns[i % len(lateness_ns)])
        i += 1
        ep.handle_timer(now)
        for tx in ep.poll_transmit(now):
            if tx.t_ns < 0:
                continue
            seg = tx.segment_size or len(tx.data)
            mv = memoryview(tx.data)
            out.extend((tx.dst_rank, read_stamp(mv[o : o + seg])) for o in range(0, len(mv), seg))
    return out


def test_on_time_service_interleaves_the_queue_pairs_packet_by_packet():
    pkts = _packets(_endpoint(True), [0])
    assert len(pkts) == PEERS * 16
    stamps = [t for _, t in pkts]
    assert stamps == sorted(stamps)
    assert all(b - a >= GAP_NS - 1 for a, b in zip(stamps, stamps[1:], strict=False))  # the NIC's line rate
    dsts = [d for d, _ in pkts]
    for w in range(0, len(dsts) - PEERS, PEERS):  # round-robin: every 7 consecutive packets, 7 peers
        assert sorted(dsts[w : w + PEERS]) == list(range(1, PEERS + 1))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3_000_000), min_size=1, max_size=40))
def test_late_wake_ups_change_neither_the_order_nor_the_stamps(lateness_ns):
    assert _packets(_endpoint(True), lateness_ns) == _packets(_endpoint(True), [0])


def test_without_model_time_late_wake_ups_bunch_the_stamps():
    """The contrast: an endpoint serving at its driver's wake-ups stamps several queue pairs' packets
    closer than the NIC could send them after a late wake-up (and differently from an on-time driver)."""
    on_time = _packets(_endpoint(False), [0])
    late = _packets(_endpoint(False), [0, 900_000, 50_000, 1_700_000])
    assert late != on_time
    stamps = sorted(t for _, t in late)
    assert sum(b - a < GAP_NS - 1 for a, b in zip(stamps, stamps[1:], strict=False)) > PEERS
