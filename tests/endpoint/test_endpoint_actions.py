"""The endpoint's typed actions: driven only through ``poll``/``receive``/``timer``, its Transmits,
TimerRequests and FlowEvents are all a driver needs, and a recorder fed the events fills the records."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import Wire, delay, drop_first, make_schedule, recv, segments, send

from emulator.endpoint import EndpointConfig, RankEndpoint
from emulator.endpoint.events import FlowEvent, FlowEventKind, OpEventKind, TimerRequest, Transmit
from emulator.endpoint.recorder import Recorder
from emulator.schedule.model import OP_RECV, OP_SEND

CFG = EndpointConfig(mtu_bytes=1024, cc="paper", line_rate_bps=10e9)


def _drive_by_actions(eps, recorders, latency_ns=1500, until_ns=10**9):
    """A driver that knows only the actions: Transmits go on a lossless wire, the last TimerRequest is
    the rank's wake-up, FlowEvents go to the rank's recorder."""
    n = len(eps)
    wake: list[int | None] = [None] * n
    wire: list[tuple[int, int, int, bytes]] = []
    seq = 0
    delivered = [0] * n

    def act(r, actions, now):
        nonlocal seq
        wake[r] = None
        for a in actions:
            if isinstance(a, Transmit):
                for pkt in segments(a):
                    seq += 1
                    heapq.heappush(wire, (now + latency_ns, seq, a.dst_rank, pkt))
            elif isinstance(a, TimerRequest):
                wake[r] = a.t_ns
            else:
                assert isinstance(a, FlowEvent)
                recorders[r].on_event(a)

    now = 0
    for r, ep in enumerate(eps):
        act(r, ep.poll(now), now)
    while not all(ep.done for ep in eps):
        cands = [t for t in wake if t is not None] + ([wire[0][0]] if wire else [])
        assert cands, "stalled with nothing to wait for"
        now = max(now, min(cands))
        assert now <= until_ns
        while wire and wire[0][0] <= now:
            _, _, dst, pkt = heapq.heappop(wire)
            delivered[dst] += 1
            eps[dst].receive(pkt, 2, now)
            act(dst, eps[dst].poll(now), now)
        for r, ep in enumerate(eps):
            t = wake[r]
            if t is not None and t <= now:
                ep.timer(now)
                act(r, ep.poll(now), now)
    for r, ep in enumerate(eps):  # whatever is still queued (the last ACKs' events)
        act(r, ep.poll(now), now)
    return now


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 2), st.integers(1, 60_000)), min_size=1, max_size=5),
       st.integers(0, 20_000))
def test_actions_alone_deliver_every_byte(flows, gap_ns) -> None:
    world = 3
    table = [(src, (src + hop) % world, size, i) for i, (src, hop, size) in enumerate(flows)]
    ops: dict[int, list[tuple]] = {r: [] for r in range(world)}
    for f, (src, dst, _, _) in enumerate(table):
        ops[src].append(send(f))
        ops[dst].append(recv(f))
    ops[0].append(delay(gap_ns))
    sched = make_schedule(world, table, ops)
    recs = [Recorder.for_rank(sched, r, CFG) for r in range(world)]
    eps = [RankEndpoint(r, sched, CFG, recs[r]) for r in range(world)]
    _drive_by_actions(eps, recs)
    total = sum(size for _, _, size, _ in table)
    got = [rec.records for rec in recs]
    assert sum(g.counters["bytes_received"] for g in got) == total
    assert sum(g.counters["bytes_sent"] for g in got) == total
    for r, g in enumerate(got):
        assert (g.end_ns >= 0).all(), f"rank {r}: an op never ended"
        assert (g.ready_ns <= g.start_ns).all() and (g.start_ns <= g.end_ns).all()
        kinds = sched.op_kind[int(sched.rank_op_ptr[r]):int(sched.rank_op_ptr[r + 1])]
        for i, k in enumerate(kinds.tolist()):
            if k in (OP_SEND, OP_RECV):
                size = table[int(sched.op_flow[int(sched.rank_op_ptr[r]) + i])][2]
                assert g.packets[i] == -(-size // CFG.mtu_bytes)  # lossless: each packet once
    assert all(len(ep.events()) == 0 for ep in eps)  # every event went to the recorders


def test_poll_returns_the_timer_request_last_and_nothing_when_idle() -> None:
    sched = make_schedule(2, [(0, 1, 10_000, 0)], {0: [send(0)], 1: [recv(0)]})
    ep = RankEndpoint(0, sched, CFG, Recorder.for_rank(sched, 0, CFG))
    actions = ep.poll(0)
    kinds = [type(a) for a in actions]
    assert Transmit in kinds and FlowEvent in kinds
    assert kinds[-1] is TimerRequest and kinds.count(TimerRequest) == 1
    events = [a for a in actions if isinstance(a, FlowEvent)]
    assert events[0].kind == OpEventKind.ORIGIN and events[0].t_ns == 0
    assert [e.kind for e in events[1:3]] == [OpEventKind.OP_READY, OpEventKind.RATE]
    idle = RankEndpoint(1, sched, CFG, Recorder.for_rank(sched, 1, CFG))
    assert not any(isinstance(a, (Transmit, TimerRequest)) for a in idle.poll(0))  # waits for data


def test_actions_are_frozen() -> None:
    for action in (TimerRequest(5), FlowEvent(int(FlowEventKind.TIMEOUT), 5)):
        with pytest.raises(AttributeError):  # a frozen dataclass's FrozenInstanceError, or a named tuple's
            action.t_ns = 6  # type: ignore[misc]


def _lossy_run(recorder_of):
    """A run with a lost data packet (NAK, go-back-N) and CE marks (CNPs, rate samples)."""
    sched = make_schedule(2, [(0, 1, 200_000, 0), (1, 0, 30_000, 1)],
                          {0: [send(0), recv(1, deps=(0,))], 1: [recv(0), send(1, deps=(0,))]})
    eps = [RankEndpoint(r, sched, CFG, recorder_of(sched, r)) for r in range(2)]
    drop, dropped = drop_first(lambda h: h[0] == 0x07 and h[2] == 40)
    marked = iter(range(10**9))
    Wire(eps, latency_ns=2000, drop=drop, ce=lambda pkt: pkt[0] == 0x07 and next(marked) % 7 == 0).run()
    assert dropped and all(ep.done for ep in eps)
    return eps


def test_recorder_fed_by_the_driver_fills_the_same_records_as_the_endpoints_own() -> None:
    own = [ep.records for ep in _lossy_run(lambda s, r: None)]
    external = _lossy_run(lambda s, r: Recorder.for_rank(s, r, CFG))
    for ep in external:
        ep.recorder.consume(ep.events())  # the driver feeds the events, here all at the end
    for a, ep in zip(own, external, strict=True):
        b = ep.recorder.records
        assert a.counters == b.counters
        kinds = set(b.event_kind)
        assert {FlowEventKind.NAK_SENT, FlowEventKind.RETRANSMIT, FlowEventKind.CNP_SENT} & kinds or \
            {FlowEventKind.NAK_RECEIVED, FlowEventKind.CNP_RECEIVED} & kinds
        for name, col in a.to_arrays().items():
            assert col.tolist() == b.to_arrays()[name].tolist(), (ep.rank, name)


def test_recorder_columns_from_events() -> None:
    """Op times, lag, RECV start, rate samples, the event log and the growth of a retransmit row."""
    rec = Recorder(0, [OP_SEND, OP_RECV], late_threshold_ns=100, max_events=2)
    ok, rk = OpEventKind, FlowEventKind
    rec.consume([FlowEvent(ok.ORIGIN, 1_000), FlowEvent(ok.OP_READY, 0, op=0), FlowEvent(ok.OP_READY, 0, op=1),
                 FlowEvent(ok.OP_STARTED, 250, op=0), FlowEvent(ok.RATE, 250, qp=3, value=10**9),
                 FlowEvent(rk.RETRANSMIT, 300, qp=3, psn=9, op=0), FlowEvent(ok.RETRANSMITTED, 310, qp=3, packets=4),
                 FlowEvent(ok.RETRANSMITTED, 320, qp=3, packets=2), FlowEvent(rk.TIMEOUT, 400, qp=3, op=0),
                 FlowEvent(rk.CNP_SENT, 450, qp=3, op=1), FlowEvent(ok.FLOW_HELD, 480, qp=3, op=1),
                 FlowEvent(ok.OP_DONE, 500, op=1), FlowEvent(ok.OP_DONE, 600, op=0)])
    r = rec.records
    assert rec.t0_ns == 1_000
    assert r.ready_ns.tolist() == [0, 0] and r.start_ns.tolist() == [250, 500] and r.end_ns.tolist() == [600, 500]
    assert r.counters["late_ops"] == 1 and r.counters["lag_max_ns"] == 250
    assert (r.rate_t_ns, r.rate_qp, r.rate_bps) == ([250], [3], [10**9])
    assert r.event_kind == [rk.RETRANSMIT, rk.TIMEOUT] and r.event_packets == [6, 0]
    assert r.counters["events_dropped"] == 1  # the CNP row: the log holds 2
    with pytest.raises(ValueError, match="unknown flow event kind 99"):
        rec.on_event(FlowEvent(99, 0))
