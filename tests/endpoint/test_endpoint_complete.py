"""An op's completion on an ACK or a held flow (``RankEndpoint._complete``) is the op state machine's general
drain of that one op (``_drain(deque([(op, t)]))``): the same ops done and released in the same order, the same
events, for any dependency graph."""

from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import Wire, delay, make_schedule, recv, send

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint


@st.composite
def _graphs(draw):
    """Two ranks, flows both ways; per rank a list of SEND/RECV/DELAY ops, each depending on earlier ones of its
    rank."""
    n_flows = draw(st.integers(1, 6))
    flows = []
    ops: dict[int, list] = {0: [], 1: []}
    for f in range(n_flows):
        src = draw(st.integers(0, 1))
        flows.append((src, 1 - src, draw(st.sampled_from([100, 1024, 5000])), f))
        ops[src].append(("send", f))
        ops[1 - src].append(("recv", f))
    for r in (0, 1):  # flow ops in flow order (a dependency on an earlier op cannot deadlock), delays anywhere
        for _ in range(draw(st.integers(0, 3))):
            ops[r].insert(draw(st.integers(0, len(ops[r]))), ("delay", draw(st.sampled_from([0, 0, 3000]))))
    built = {}
    for r in (0, 1):
        lst = []
        for i, (kind, arg) in enumerate(ops[r]):
            deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
            lst.append({"send": send, "recv": recv, "delay": delay}[kind](arg, deps))
        built[r] = lst
    return flows, built


def _run(flows, ops, general: bool):
    sched = make_schedule(2, flows, ops)
    cfg = EndpointConfig(mtu_bytes=1024, cc="none", line_rate_bps=1e9)
    eps = [RankEndpoint(r, sched, cfg) for r in range(2)]
    if general:
        for ep in eps:
            ep._complete = lambda i, t, ep=ep: ep._drain(deque([(i, t)]))
    Wire(eps).run(until_ns=10**9)
    assert all(ep.done for ep in eps)
    return [tuple((k, v.tobytes()) for k, v in sorted(ep.records.to_arrays().items())) for ep in eps]


@settings(max_examples=60, deadline=None)
@given(_graphs())
def test_completing_one_op_equals_the_general_drain(graph):
    flows, ops = graph
    assert _run(flows, ops, general=False) == _run(flows, ops, general=True)


def test_a_completion_that_releases_no_child_takes_no_general_drain(monkeypatch):
    """Each rank sends a flow, receives one and then runs a delay that waits for both: of the two completions only
    the second releases the delay, so the general drain runs twice per rank (the start, then that release), not
    once more for the first completion."""
    calls = []
    orig = RankEndpoint._drain
    monkeypatch.setattr(RankEndpoint, "_drain", lambda self, work: (calls.append(self.rank), orig(self, work))[1])
    sched = make_schedule(2, [(0, 1, 5000, 0), (1, 0, 3000, 1)],
                          {0: [send(0), recv(1), delay(0, [0, 1])], 1: [recv(0), send(1), delay(0, [0, 1])]})
    eps = [RankEndpoint(r, sched, EndpointConfig(mtu_bytes=1024, cc="none", line_rate_bps=1e9)) for r in range(2)]
    Wire(eps).run(until_ns=10**9)
    assert all(ep.done for ep in eps)
    assert sorted(calls) == [0, 0, 1, 1]
