"""The sender's window (``EndpointConfig.max_outstanding_bytes``): outstanding packets stay within it, a
NAK halves it once per loss, acknowledged packets grow it back, and every byte still arrives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import Wire, drop_first, make_schedule, recv, send

from emulator.endpoint import EndpointConfig, RankEndpoint
from emulator.errors import ConfigError
from emulator.wire import parse_header

MTU = 4096


def pair(size: int, **cfg):
    s = make_schedule(2, [(0, 1, size, 0)], {0: [send(0)], 1: [recv(0)]})
    config = EndpointConfig(**{"cc": "none", "line_rate_bps": 100e9, "max_segments": 4, **cfg})
    return [RankEndpoint(r, s, config) for r in range(2)]


def max_outstanding(log, latency_ns: int) -> int:
    """Most data packets sent and not yet acknowledged (as the sender saw it) at any data send."""
    acks = sorted((t + latency_ns, parse_header(p)[2] + 1) for t, src, _, p in log if src == 1)
    worst, i, acked = 0, 0, 0
    for t, src, _, p in log:
        if src != 0:
            continue
        while i < len(acks) and acks[i][0] <= t:
            acked = max(acked, acks[i][1])
            i += 1
        worst = max(worst, parse_header(p)[2] - acked + 1)
    return worst


@settings(max_examples=25, deadline=None)
@given(window_pkts=st.integers(1, 40), n_pkts=st.integers(1, 120), ack_every=st.integers(1, 16))
def test_outstanding_packets_never_exceed_the_window(window_pkts, n_pkts, ack_every):
    latency = 50_000  # far longer than a batch at 100 Gbit/s: without a window everything would go at once
    eps = pair(n_pkts * MTU, max_outstanding_bytes=window_pkts * MTU, ack_every_packets=ack_every)
    w = Wire(eps, latency_ns=latency)
    w.run()
    assert all(ep.done for ep in eps)
    assert eps[1].records.counters["bytes_received"] == n_pkts * MTU
    assert max_outstanding(w.log, latency) <= window_pkts
    assert eps[0].records.counters.get("window_cuts", 0) == 0


def test_without_a_window_the_sender_does_not_wait_for_acks():
    latency = 50_000
    eps = pair(120 * MTU)
    w = Wire(eps, latency_ns=latency)
    w.run()
    assert max_outstanding(w.log, latency) == 120


def test_a_nak_halves_the_window_once_and_acks_grow_it_back():
    drop, dropped = drop_first(lambda h: h[0] == 0x07 and h[2] == 40)
    eps = pair(800 * MTU, max_outstanding_bytes=32 * MTU)
    w = Wire(eps, latency_ns=20_000, drop=drop)
    w.run()
    assert dropped and all(ep.done for ep in eps)
    s = eps[0].records
    assert s.counters["naks_received"] == 1 and s.counters["window_cuts"] == 1
    assert eps[1].records.counters["bytes_received"] == 800 * MTU
    assert s.counters["retransmits"] <= 32  # go-back-N re-sends at most one window
    qs = eps[0]._tx.qps[0]
    assert qs.wnd == 32  # 16 after the cut, one packet more per window acknowledged since


def test_negative_window_is_a_config_error_naming_the_key():
    import pytest

    with pytest.raises(ConfigError, match="max_outstanding_bytes"):
        EndpointConfig(max_outstanding_bytes=-1)
