"""The per-visit work of the sender stays per visit: a queue pair's wait cost (the tokens its next visit
waits for) is computed when it enters the send heap, not again by every ``next_timer_ns`` and ``poll``,
and what it keeps is what a fresh computation gives whenever the QP is served."""

from __future__ import annotations

import sys

from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import make_schedule, recv, send

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint


def _sim_like(cfg: EndpointConfig, flows: list[tuple[int, int, int, int]], ops: dict, count: bool = False):
    """Two ranks served as the sim serves them (``poll_transmit`` then ``next_timer_ns``, datagrams delivered
    1 µs later, ACKs back the same way); returns (sender visits, wait-cost computations, sender)."""
    sched = make_schedule(2, flows, ops)
    a, b = RankEndpoint(0, sched, cfg), RankEndpoint(1, sched, cfg)
    calls = [0]
    if count:
        real = a._tx._wait_cost

        def counted(qs):
            calls[0] += 1
            return real(qs)

        a._tx._wait_cost = counted
    a.start(0)
    b.start(0)
    visits = 0
    now = 0
    inflight: list[tuple[int, RankEndpoint, object]] = []
    while not (a.done and b.done) and now < 10**9:
        txs = a.poll_transmit(now)
        visits += len(txs)
        inflight += [(now + 1000, b, tx) for tx in txs]
        inflight += [(now + 1000, a, tx) for tx in b.poll_transmit(now)]
        ts = [t for t in (a.next_timer_ns(), b.next_timer_ns()) if t is not None] + [x[0] for x in inflight]
        now = max(now, min(ts))
        due = [x for x in inflight if x[0] <= now]
        inflight = [x for x in inflight if x[0] > now]
        for _, ep, tx in due:
            ep.receive(tx.data, tx.tos & 3, now, tx.segment_size)
        a.handle_timer(now)
        b.handle_timer(now)
    assert a.done and b.done
    return visits, calls[0], a


def test_a_visit_computes_its_wait_cost_once():
    """One 1 MiB flow at 25 Gbit/s under DCQCN, one packet per visit: one wait-cost computation per visit
    (when the QP re-enters the heap) plus one per message posted, where it was three."""
    cfg = EndpointConfig(mtu_bytes=4096, cc="connectx", line_rate_bps=25e9)
    visits, calls, _ = _sim_like(cfg, [(0, 1, 1 << 20, 0)], {0: [send(0)], 1: [recv(0)]}, count=True)
    assert visits > 200  # one packet per visit after the first full bucket
    assert calls <= visits + 2, (calls, visits)


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.sampled_from([1, 4096, 9000, 65_536, 200_001]), min_size=1, max_size=4),
       cc=st.sampled_from(["connectx", "none"]), full=st.booleans(), max_msg=st.sampled_from([(1 << 31) - 1, 12_288]))
def test_the_kept_wait_cost_is_the_fresh_one_at_every_visit(sizes, cc, full, max_msg):
    """Whatever moves a QP's next packet while it waits (a new message, a message cut in several, an ACK),
    the cost it kept equals a fresh computation each time ``poll`` serves it."""
    cfg = EndpointConfig(mtu_bytes=4096, cc=cc, line_rate_bps=25e9, pace_full_batches=full,
                         max_message_bytes=max_msg)
    flows = [(0, 1, s, 0) for s in sizes]
    ops = {0: [send(f) for f in range(len(sizes))], 1: [recv(f) for f in range(len(sizes))]}
    sched = make_schedule(2, flows, ops)
    a = RankEndpoint(0, sched, cfg)
    tx = a._tx
    real_send = tx._send_batch
    seen = [0]

    def checked(qs, now_ns, nic_avail, cost1, out, room, due_ns):
        assert cost1 == tx._wait_cost(qs)
        seen[0] += 1
        return real_send(qs, now_ns, nic_avail, cost1, out, room, due_ns)

    tx._send_batch = checked
    b = RankEndpoint(1, sched, cfg)
    a.start(0)
    b.start(0)
    now = 0
    while not (a.done and b.done) and now < 10**9:
        now += 2000
        for t in a.poll_transmit(now):
            b.receive(t.data, 2, now, t.segment_size)
        for t in b.poll_transmit(now):
            a.receive(t.data, 0, now, t.segment_size)
        a.handle_timer(now)
    assert a.done and b.done and seen[0] > 0


def test_a_one_packet_visit_stays_cheap_in_python_calls(no_gc):
    """The sim's per-packet visit (``poll_transmit`` of one MIDDLE packet under DCQCN, then ``next_timer_ns``)
    makes at most 40 Python calls, builtins included (54 before the wait cost was kept and the one-packet
    writers and pacer refill were inlined; 32 now): a bound on the per-packet work, not on the machine."""
    cfg = EndpointConfig(mtu_bytes=4096, cc="connectx", line_rate_bps=25e9)
    ep = RankEndpoint(0, make_schedule(2, [(0, 1, 1 << 20, 0)], {0: [send(0)], 1: [recv(0)]}), cfg)
    ep.start(0)
    now = 0
    for _ in range(40):  # past the first full bucket: one packet per visit
        ep.poll_transmit(now)
        now = max(now, ep.next_timer_ns())
    calls = [0]

    def count(_frame, event, _arg):
        if event in ("call", "c_call"):
            calls[0] += 1

    visits = 0
    for _ in range(100):
        sys.setprofile(count)
        txs = ep.poll_transmit(now)
        t = ep.next_timer_ns()
        sys.setprofile(None)
        visits += len(txs)
        now = max(now, t)
    assert visits == 100
    assert calls[0] / visits <= 40, calls[0] / visits
