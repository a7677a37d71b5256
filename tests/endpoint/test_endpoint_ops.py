"""Op semantics of the rank endpoint: DELAY, RECV → dependents, not-before (open loop), records, lag."""

from __future__ import annotations

import numpy as np
import pytest
from support.endpoint import Wire, delay, make_schedule, recv, send

from emulator.endpoint import EndpointConfig, RankEndpoint
from emulator.errors import ScheduleError

CFG = EndpointConfig(cc="none")


def run(s, cfg=CFG, start=0, **kw):
    eps = [RankEndpoint(r, s, cfg) for r in range(s.world_size)]
    Wire(eps, **kw).run(start=start)
    return eps


def test_delay_chain_waits_exactly():
    s = make_schedule(1, [], {0: [delay(5_000), delay(7_000, [0]), delay(0, [1])]})
    (ep,) = run(s)
    r = ep.records
    assert ep.done
    assert r.ready_ns.tolist() == [0, 5_000, 12_000]
    assert r.end_ns.tolist() == [5_000, 12_000, 12_000]
    assert r.start_ns.tolist() == r.ready_ns.tolist()


def test_delay_end_not_shifted_by_late_timer_call():
    s = make_schedule(1, [], {0: [delay(5_000), delay(1_000, [0])]})
    ep = RankEndpoint(0, s, CFG)
    ep.start(100)
    assert ep.next_timer_ns() == 5_100
    ep.handle_timer(9_000)  # the driver is 3.9 µs late
    assert ep.records.end_ns[0] == 5_000 and ep.records.ready_ns[1] == 5_000
    ep.handle_timer(9_000)
    assert ep.done and ep.records.end_ns[1] == 6_000


def test_recv_completes_dependents_and_send_waits_for_it():
    # rank 0 sends f0; rank 1 waits for it, computes 3 us, sends f1 back; rank 0's final delay waits for f1
    flows = [(0, 1, 10_000, 0), (1, 0, 2_000, 1)]
    ops = {0: [send(0), recv(1), delay(1_000, [1])], 1: [recv(0), delay(3_000, [0]), send(1, [1])]}
    s = make_schedule(2, flows, ops)
    eps = run(s)
    assert all(ep.done for ep in eps)
    r0, r1 = eps[0].records, eps[1].records
    assert r1.ready_ns[1] == r1.end_ns[0]  # the delay became ready when the RECV completed
    assert r1.ready_ns[2] == r1.end_ns[1] == r1.end_ns[0] + 3_000
    assert r1.start_ns[2] >= r1.ready_ns[2]
    assert r0.end_ns[1] > r1.start_ns[2]  # f1 arrived after it was sent
    assert r0.ready_ns[2] == r0.end_ns[1] and r0.end_ns[2] == r0.end_ns[1] + 1_000
    assert r1.start_ns[0] > 0 and r1.start_ns[0] <= r1.end_ns[0]  # RECV start = first packet


def test_data_before_recv_is_ready_completes_at_ready():
    # rank 1's RECV depends on a 50 us delay; the data arrives long before
    s = make_schedule(2, [(0, 1, 4_000, 0)], {0: [send(0)], 1: [delay(50_000), recv(0, [0])]})
    eps = run(s)
    r1 = eps[1].records
    assert r1.start_ns[1] < 10_000  # the first packet arrived early
    assert r1.ready_ns[1] == 50_000 and r1.end_ns[1] == 50_000
    assert eps[0].records.end_ns[0] < 10_000  # the sender did not wait for the RECV to be ready


def test_not_before_honoured_open_loop():
    # open loop: no deps, each op starts at its recorded time
    flows = [(0, 1, 4_000, 0), (0, 1, 4_000, 0)]
    s = make_schedule(2, flows, {0: [send(0, nb=20_000), send(1, nb=5_000)], 1: [recv(0), recv(1)]})
    eps = run(s, start=1_000_000)  # t0 != 0: not-before is relative to t0
    r0 = eps[0].records
    assert r0.ready_ns.tolist() == [20_000, 5_000]
    assert r0.start_ns[0] >= 20_000 and r0.start_ns[1] >= 5_000
    assert r0.start_ns[1] < r0.start_ns[0]  # post order on a QP = ready order, not op order
    assert r0.counters["late_ops"] == 0


def test_not_before_with_dependency_waits_for_both():
    s = make_schedule(1, [], {0: [delay(10_000), delay(1_000, [0], nb=4_000), delay(1_000, [0], nb=30_000)]})
    (ep,) = run(s)
    r = ep.records
    assert r.ready_ns.tolist() == [0, 10_000, 30_000]
    assert r.end_ns.tolist() == [10_000, 11_000, 31_000]


def test_generator_lag_recorded_for_late_sends():
    s = make_schedule(2, [(0, 1, 4_000, 0)], {0: [send(0, nb=1_000)], 1: [recv(0)]})
    cfg = EndpointConfig(cc="none", late_threshold_ns=10_000)
    eps = [RankEndpoint(r, s, cfg) for r in range(2)]
    for ep in eps:
        ep.start(0)
    assert eps[0].next_timer_ns() == 1_000
    eps[0].handle_timer(200_000)  # the driver woke 199 us late
    eps[0].poll_transmit(200_000)
    r = eps[0].records
    assert r.ready_ns[0] == 1_000 and r.start_ns[0] == 200_000
    assert r.counters["late_ops"] == 1 and r.counters["lag_max_ns"] == 199_000


def test_zero_byte_flow_is_one_packet():
    s = make_schedule(2, [(0, 1, 0, 0)], {0: [send(0)], 1: [recv(0)]})
    eps = run(s)
    assert all(ep.done for ep in eps)
    assert eps[0].records.packets[0] == 1 and eps[1].records.counters["bytes_received"] == 0


def test_many_flows_on_one_qp_in_order_and_counts():
    n = 300
    flows = [(0, 1, 1_000 * (i % 7), 0) for i in range(n)]
    s = make_schedule(2, flows, {0: [send(i) for i in range(n)], 1: [recv(i) for i in range(n)]})
    eps = run(s)
    assert all(ep.done for ep in eps)
    assert eps[1].records.counters["bytes_received"] == sum(f[2] for f in flows)
    assert np.all(eps[0].records.end_ns >= eps[0].records.start_ns)


def test_incomplete_run_keeps_partial_records():
    # rank 1 waits for a flow nobody sends (rank 0 never becomes ready: it waits for rank 1)
    s = make_schedule(2, [(0, 1, 4_000, 0), (1, 0, 4_000, 1)],
                      {0: [recv(1), send(0, [0])], 1: [delay(1_000), recv(0, [0]), send(1, [1])]})  # fmt: skip
    eps = run(s)
    assert not any(ep.done for ep in eps)
    r1 = eps[1].records
    assert r1.end_ns[0] == 1_000 and r1.ready_ns[1] == 1_000 and r1.end_ns[1] == -1
    assert eps[1].ops_completed == 1


def test_cross_rank_dependency_rejected():
    bad = make_schedule(2, [], {0: [delay(1)], 1: [(2, -1, 1, -1, (-1,))]})
    with pytest.raises(ScheduleError):
        RankEndpoint(1, bad, CFG)
