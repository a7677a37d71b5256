"""The receiver's per-GRO-batch work, counted in Python calls (a bound on the work, not on the machine)."""

from __future__ import annotations

import sys

import pytest
from support.endpoint import make_schedule, recv, send

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint


def _middle_batches(cfg: EndpointConfig, flow_bytes: int) -> list[tuple[bytes, int]]:
    """The sender's GSO batches of one flow, in the socket drivers' modes, as the receiver gets them."""
    sched = make_schedule(2, [(0, 1, flow_bytes, 0)], {0: [send(0)], 1: [recv(0)]})
    a = RankEndpoint(0, sched, cfg)
    a.start(0)
    out, now = [], 0
    while not out or len(out) < 40:
        for tx in a.poll_transmit(now):
            out.append((bytes(tx.data), tx.segment_size))
        now = max(now + 1, a.next_timer_ns() or now + 1)
    return out


@pytest.mark.parametrize(("compiled", "bound"), [(False, 11), (True, 7)])
def test_a_full_gro_batch_of_middles_costs_at_most_a_few_python_calls(compiled, bound, no_gc):
    """``receive`` of a 15-packet GRO batch of MIDDLE packets (the direct path's steady state, ACK decision
    included) makes at most ``bound`` Python calls on average, builtins included, and accepts all 15 packets.
    Python core: 11 (12 before its BTH words were read as one 64-bit and one 32-bit field per row and the queue
    pair looked up inline; 10 before the run reader became the function the compiled kernel is pinned to);
    compiled core (``compiled_core``): one kernel call reads the run."""
    cfg = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, pace_full_batches=True, defer_acks=True,
                         socket_sends=True, compiled_core=compiled)
    batches = _middle_batches(cfg, 64 << 20)
    b = RankEndpoint(1, make_schedule(2, [(0, 1, 64 << 20, 0)], {0: [send(0)], 1: [recv(0)]}), cfg)
    b.start(0)
    calls = [0]

    def count(_frame, event, _arg):
        if event in ("call", "c_call"):
            calls[0] += 1

    full = 0
    for i, (data, seg) in enumerate(batches):
        if i < 2 or len(data) != 15 * seg:  # the FIRST alone, then steady state
            b.receive(data, 2, i, seg)
            continue
        before = b._rx.rec.counters["packets_received"]
        sys.setprofile(count)
        b.receive(data, 2, i, seg)
        sys.setprofile(None)
        calls[0] -= 1  # the setprofile(None) call itself
        assert b._rx.rec.counters["packets_received"] - before == 15
        full += 1
        b.poll_transmit(i, 0)
    assert full >= 20
    assert calls[0] / full <= bound, calls[0] / full
