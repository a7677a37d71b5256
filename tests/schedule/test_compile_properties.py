"""Property tests of the compiler over small random traces.

Traces are built from a global sequence of events (collectives on overlapping groups, SEND/RECV pairs,
compute, CPU-side wrappers); each rank's nodes get increasing ids and depend on random earlier nodes
of that rank, so a global execution order exists by construction. Checked: every flow has exactly one
SEND (on src) and one RECV (on dst); deps stay on one rank and point backwards (acyclic); per instance
the bytes equal the algorithm's theoretical volume; an infinite-bandwidth replay of all ranks (with
in-order starts per queue pair) completes every op (no cross-rank deadlock); compiling is deterministic.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator.schedule.algorithms import available_algorithms, get_algorithm
from emulator.schedule.compiler import CompileOptions, compile_trace
from emulator.schedule.io import schedule_hash
from emulator.schedule.model import OP_DELAY, OP_RECV, OP_SEND
from emulator.trace.model import CollectiveType, CommInfo, Node, NodeType, ProcessGroup, RankGraph, Trace


# the strategies random_traces draws from, built once per shape (building them per draw dominated the test)
@functools.cache
def _below(n: int) -> st.SearchStrategy[int]:
    return st.integers(0, n - 1)


@functools.cache
def _members(world: int) -> st.SearchStrategy[list[int]]:
    return st.lists(_below(world), min_size=2, max_size=world, unique=True)


@functools.cache
def _pair(world: int) -> st.SearchStrategy[list[int]]:
    return st.lists(_below(world), min_size=2, max_size=2, unique=True)


@functools.cache
def _dep_indexes(count: int) -> st.SearchStrategy[list[int]]:
    return st.lists(_below(count), max_size=2, unique=True)


_WORLD, _N_GROUPS, _N_EVENTS = st.integers(2, 6), st.integers(0, 2), st.integers(1, 10)
_KIND = st.sampled_from(["coll", "coll", "p2p", "comp", "wrapper"])
_CTYPE = st.sampled_from(list(CollectiveType))
_COLL_SIZE, _P2P_SIZE, _TAG, _DURATION = st.integers(0, 5000), st.integers(0, 3000), st.integers(0, 1), st.integers(0, 50)
_ALGOS = {c: st.sampled_from(sorted(available_algorithms(c))) for c in CollectiveType}
_CHUNKS, _WINDOW = st.integers(1, 3), st.one_of(st.none(), st.integers(1, 3))


@st.composite
def random_traces(draw):
    world = draw(_WORLD)
    groups: dict[str, ProcessGroup] = {}
    for gi in range(draw(_N_GROUPS)):
        members = draw(_members(world))
        groups[f"g{gi}"] = ProcessGroup(f"g{gi}", tuple(sorted(members)))
    nodes: dict[int, list[Node]] = {r: [] for r in range(world)}

    def add(rank: int, **kw) -> None:
        prev = [n.id for n in nodes[rank]]
        deps = [prev[i] for i in draw(_dep_indexes(len(prev)))] if prev else []
        nodes[rank].append(Node(id=len(prev) + 1, data_deps=tuple(deps), **kw))

    names = [None, *groups]
    for _ in range(draw(_N_EVENTS)):
        kind = draw(_KIND)
        if kind == "coll":
            g = names[draw(_below(len(names)))]
            members = groups[g].ranks if g else tuple(range(world))
            ctype = draw(_CTYPE)
            comm = CommInfo(collective=ctype, size_bytes=draw(_COLL_SIZE), pg_name=g)
            for r in members:
                add(r, type=NodeType.COMM_COLL_NODE, comm=comm)
        elif kind == "p2p":
            s, d = draw(_pair(world))
            size, tag = draw(_P2P_SIZE), draw(_TAG)
            add(s, type=NodeType.COMM_SEND_NODE, comm=CommInfo(size_bytes=size, src=s, dst=d, tag=tag))
            add(d, type=NodeType.COMM_RECV_NODE, comm=CommInfo(size_bytes=size, src=s, dst=d, tag=tag))
        elif kind == "comp":
            add(draw(_below(world)), type=NodeType.COMP_NODE, duration_micros=draw(_DURATION))
        else:
            add(draw(_below(world)), type=NodeType.COMM_COLL_NODE, is_cpu_op=True, comm=CommInfo())
    trace = Trace(ranks={r: RankGraph(r, ns) for r, ns in nodes.items()}, groups=groups)
    algos = {c: draw(_ALGOS[c]) for c in CollectiveType}
    options = CompileOptions(
        algorithms=algos,
        chunks=draw(_CHUNKS),
        window=draw(_WINDOW),
        serialize_groups=draw(st.booleans()),
    )
    return trace, options


def replay_completes(s) -> bool:
    """Closed-loop replay with infinite bandwidth; SENDs of one queue pair start in op order."""
    n = s.n_ops
    done = np.zeros(n, dtype=bool)
    started = np.zeros(s.n_flows, dtype=bool)
    sends = np.flatnonzero(s.op_kind == OP_SEND)
    queue: dict[int, list[int]] = {}
    for op in sends.tolist():
        queue.setdefault(int(s.flow_qp[s.op_flow[op]]), []).append(op)
    head = {q: 0 for q in queue}
    progress = True
    while progress:
        progress = False
        for op in np.flatnonzero(~done).tolist():
            if not done[s.parents(op)].all():
                continue
            kind, flow = s.op_kind[op], s.op_flow[op]
            if kind == OP_SEND:
                q = int(s.flow_qp[flow])
                if queue[q][head[q]] != op:
                    continue
                head[q] += 1
                started[flow] = True
            elif kind == OP_RECV and not started[flow]:
                continue
            done[op] = True
            progress = True
    return bool(done.all())


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_traces())
def test_compiled_schedules_are_sound(case):
    trace, options = case
    s = compile_trace(trace, options)
    # every flow: one SEND on src, one RECV on dst
    for kind, col in ((OP_SEND, s.flow_src), (OP_RECV, s.flow_dst)):
        ops = np.flatnonzero(s.op_kind == kind)
        flows = s.op_flow[ops]
        assert np.array_equal(np.sort(flows), np.arange(s.n_flows))
        assert np.array_equal(s.op_rank[ops], col[flows])
    assert (s.op_flow[s.op_kind == OP_DELAY] == -1).all()
    # dependencies: same rank, earlier op (hence acyclic)
    child = np.repeat(np.arange(s.n_ops), np.diff(s.dep_ptr))
    assert (s.dep_idx < child).all()
    assert np.array_equal(s.op_rank[s.dep_idx], s.op_rank[child])
    # bytes of each instance = the algorithm's theoretical volume summed over members
    for i in range(s.n_colls):
        ctype = CollectiveType(int(s.coll_type[i]))
        algo = get_algorithm(ctype, s.algorithm_names[s.coll_algorithm[i]])
        members = s.coll_ranks(i).tolist()
        n, size = len(members), int(s.coll_size_bytes[i])
        # no root attribute in these traces: rooted collectives are rooted at the group's first rank
        expected = sum(algo.expected_bytes_sent(n, size, p, root=0) for p in range(n))
        assert int(s.flow_size_bytes[s.flow_coll == i].sum()) == expected
    # p2p flows carry what the trace said
    p2p_bytes = sum(
        n.comm.size_bytes for g in trace.ranks.values() for n in g.nodes if n.type == NodeType.COMM_SEND_NODE
    )
    assert int(s.flow_size_bytes[s.flow_coll == -1].sum()) == p2p_bytes
    # a global execution order exists
    assert replay_completes(s)
    # deterministic
    assert schedule_hash(compile_trace(trace, options)) == schedule_hash(s)


@settings(max_examples=40, deadline=None)
@given(random_traces())
def test_open_loop_keeps_ops_and_drops_deps(case):
    trace, options = case
    closed = compile_trace(trace, options)
    opened = compile_trace(trace, dataclasses.replace(options, open_loop=True))
    assert opened.n_ops == closed.n_ops and opened.n_flows == closed.n_flows
    assert opened.dep_idx.shape[0] == 0
    assert (opened.op_not_before_ns >= 0).all()


def test_replay_detects_a_cross_rank_deadlock():
    """The checker itself can fail: both ranks wait to receive before they send."""
    nodes = {}
    for r in (0, 1):
        peer = 1 - r
        nodes[r] = [
            Node(id=1, type=NodeType.COMM_RECV_NODE, comm=CommInfo(size_bytes=8, src=peer, dst=r)),
            Node(id=2, type=NodeType.COMM_SEND_NODE, data_deps=(1,), comm=CommInfo(size_bytes=8, src=r, dst=peer)),
        ]
    s = compile_trace(Trace(ranks={r: RankGraph(r, ns) for r, ns in nodes.items()}))
    assert s.n_flows == 2
    assert not replay_completes(s)


def _generated(gen) -> Trace:
    return Trace(ranks={r: RankGraph(r, list(gen.nodes(r))) for r in range(gen.world_size)}, groups=dict(gen.groups))


def test_generated_workloads_replay_without_deadlock():
    """MoE (tp/ep/dp groups overlap on every rank), 1F1B pipeline (SEND/RECV), rooted collectives on sub-groups."""
    from emulator.trace.generators.collective import CollectiveOptions, collective_trace
    from emulator.trace.generators.moe import MoeOptions, moe_trace
    from emulator.trace.generators.pipeline import PipelineOptions, pipeline_trace

    cases = [
        (moe_trace(MoeOptions(tp=2, ep=2, dp=2, layers=2, iterations=2)), CompileOptions(chunks=2)),
        (pipeline_trace(PipelineOptions(ranks=4, microbatches=4)), CompileOptions()),
        (
            collective_trace(CollectiveOptions(ranks=6, collectives=tuple(CollectiveType), group_size=3, root=2)),
            CompileOptions(algorithms={CollectiveType.BROADCAST: "binomial_tree", CollectiveType.ALL_REDUCE: "double_binary_tree"}),
        ),
    ]
    for gen, options in cases:
        s = compile_trace(_generated(gen), options)
        assert s.n_flows > 0 and replay_completes(s), gen.kind
