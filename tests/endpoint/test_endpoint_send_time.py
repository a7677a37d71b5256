"""The endpoint tells the driver when each data batch was meant to leave (``Transmit.t_ns``, also stamped in
its packets): the pacer's time, not the time the driver got round to calling."""

from __future__ import annotations

import sys
from pathlib import Path

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.wire.stamp import read_stamp

sys.path.insert(0, str(Path(__file__).parent))
from endpoint_helpers import make_schedule, recv, send  # noqa: E402


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
