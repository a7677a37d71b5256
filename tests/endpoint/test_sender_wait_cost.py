"""The tokens a queue pair waits for with ``pace_full_batches``: the steady-state shortcut equals the formula."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import make_schedule, recv, send

from emulator.endpoint import EndpointConfig, RankEndpoint
from emulator.endpoint.sender import _MAX_HDR
from emulator.wire import message_packets


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 300 * 4096), mtu=st.sampled_from([1024, 4096]), segs=st.integers(1, 16),
       frac=st.floats(0, 1))
def test_wait_cost_is_the_next_batch_of_the_message(size, mtu, segs, frac):
    s = make_schedule(2, [(0, 1, size, 0)], {0: [send(0)], 1: [recv(0)]})
    cfg = EndpointConfig(cc="none", mtu_bytes=mtu, max_segments=segs, pace_full_batches=True, line_rate_bps=1e9)
    ep = RankEndpoint(0, s, cfg)
    ep.start(0)
    tx = ep._tx
    tx.poll(10**6, 1, [])  # the first batch: the message is started
    qs = tx.qps[0]
    n = message_packets(size, mtu)
    if qs.cur >= len(qs.msgs):
        return
    start = qs.msgs[qs.cur][0]
    qs.nxt = start + min(n - 1, int(frac * n))
    j = qs.nxt - start
    k = min(tx.batch, n - j)
    assert tx._wait_cost(qs) == tx._payload(size, j, j + k) + k * (_MAX_HDR + cfg.wire_overhead_bytes)
