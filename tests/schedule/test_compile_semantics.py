"""Compiler semantics on small in-memory traces: delays, pass-through, matching, serialisation, errors."""

from __future__ import annotations

import numpy as np
import pytest

from emulator.errors import ScheduleError
from emulator.schedule.compiler import CompileOptions, compile_trace
from emulator.schedule.model import OP_DELAY, OP_RECV, OP_SEND
from emulator.trace.model import CollectiveType, CommInfo, Node, NodeType, ProcessGroup, RankGraph, Trace

AR = CollectiveType.ALL_REDUCE


def comp(i, deps=(), us=10, start=0, ntype=NodeType.COMP_NODE):
    return Node(id=i, type=ntype, data_deps=tuple(deps), duration_micros=us, start_time_micros=start)


def coll(i, deps=(), ctype=AR, size=1 << 20, pg=None, root=None, start=0):
    comm = CommInfo(collective=ctype, size_bytes=size, pg_name=pg, root=root)
    return Node(id=i, type=NodeType.COMM_COLL_NODE, data_deps=tuple(deps), comm=comm, start_time_micros=start)


def wrapper(i, deps=()):
    return Node(id=i, type=NodeType.COMM_COLL_NODE, data_deps=tuple(deps), is_cpu_op=True, comm=CommInfo())


def send(i, rank, dst, deps=(), size=4096, tag=0):
    comm = CommInfo(size_bytes=size, src=rank, dst=dst, tag=tag)
    return Node(id=i, type=NodeType.COMM_SEND_NODE, data_deps=tuple(deps), comm=comm)


def recv(i, rank, src, deps=(), size=4096, tag=0):
    comm = CommInfo(size_bytes=size, src=src, dst=rank, tag=tag)
    return Node(id=i, type=NodeType.COMM_RECV_NODE, data_deps=tuple(deps), comm=comm)


def trace_of(per_rank: dict[int, list[Node]], groups=None) -> Trace:
    return Trace(ranks={r: RankGraph(r, nodes) for r, nodes in per_rank.items()}, groups=groups or {})


def ops_of(s, rank):
    return list(s.rank_ops(rank))


def node_ops(s, rank, node_id):
    return [i for i in s.rank_ops(rank) if s.op_node[i] == node_id]


def test_compute_delays_scaled_and_chained():
    t = trace_of({0: [comp(1, us=7), comp(2, [1], us=3)], 1: [comp(1, us=5)]})
    s = compile_trace(t, CompileOptions(compute_scale=0.5))
    assert s.world_size == 2 and s.n_flows == 0
    assert s.op_kind.tolist() == [OP_DELAY] * 3
    assert s.op_duration_ns.tolist() == [3500, 1500, 2500]
    assert s.parents(1).tolist() == [0]
    assert s.op_not_before_ns.tolist() == [-1, -1, -1]


def test_pass_through_wrapper_children_inherit_parents():
    # 1 → wrapper 2 → 3 : op of 3 depends on op of 1 directly
    t = trace_of({0: [comp(1), wrapper(2, [1]), comp(3, [2]), Node(id=4, type=NodeType.METADATA_NODE)]})
    s = compile_trace(t)
    assert s.n_ops == 2
    assert s.parents(1).tolist() == [0]


def test_ring_all_reduce_entry_and_exit_dependencies():
    n = 4
    t = trace_of({r: [comp(1), coll(2, [1]), comp(3, [2])] for r in range(n)})
    s = compile_trace(t, CompileOptions(algorithms={AR: "ring"}))
    assert s.n_colls == 1 and s.coll_type.tolist() == [AR]
    for r in range(n):
        first, *_ = node_ops(s, r, 1)
        coll_ops = node_ops(s, r, 2)
        last = node_ops(s, r, 3)[0]
        kinds = s.op_kind[coll_ops]
        assert (kinds == OP_SEND).sum() == 2 * (n - 1) and (kinds == OP_RECV).sum() == 2 * (n - 1)
        # every collective op either depends on the compute op or (transitively) on another collective op
        for op in coll_ops:
            ps = set(s.parents(op).tolist())
            assert ps and ps <= set(coll_ops) | {first}
        # the trailing compute depends only on collective ops, and transitively on all of them
        seen, stack = set(), [last]
        while stack:
            for p in s.parents(stack.pop()).tolist():
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        assert set(coll_ops) <= seen
        # sends go to the ring neighbour
        sends = [i for i in coll_ops if s.op_kind[i] == OP_SEND]
        assert set(s.flow_dst[s.op_flow[sends]].tolist()) == {(r + 1) % n}


def test_collectives_serialised_per_group_but_not_across_groups():
    groups = {"a": ProcessGroup("a", (0, 1)), "b": ProcessGroup("b", (0, 1))}
    nodes = [coll(1, pg="a"), coll(2, pg="a"), coll(3, pg="b")]
    s = compile_trace(trace_of({0: nodes, 1: list(nodes)}, groups))
    for r in (0, 1):
        a1, a2, b1 = (set(node_ops(s, r, i)) for i in (1, 2, 3))
        # instance 2 of group a waits for instance 1; group b's ops wait for nothing
        assert any(set(s.parents(op).tolist()) & a1 for op in a2)
        assert all(len(s.parents(op)) == 0 or set(s.parents(op).tolist()) <= b1 for op in b1)
    s2 = compile_trace(trace_of({0: nodes, 1: list(nodes)}, groups), CompileOptions(serialize_groups=False))
    a2 = node_ops(s2, 0, 2)
    assert not any(set(s2.parents(op).tolist()) & set(node_ops(s2, 0, 1)) for op in a2)
    # queue pairs: one per (group, src, dst)
    assert len(set(zip(s.flow_qp.tolist(), s.flow_src.tolist(), s.flow_dst.tolist(), strict=True))) == 4
    assert int(s.flow_qp.max()) + 1 == 4


@pytest.mark.parametrize(
    "rank1_nodes, fragment",
    [
        ([coll(5, size=1 << 19)], "collective #0: rank 0 node 1 is ALL_REDUCE 1048576 B"),
        ([coll(5, ctype=CollectiveType.ALL_GATHER)], "rank 1 node 5 is ALL_GATHER"),
        ([], "rank 1 issues only 0 collective(s)"),
    ],
)
def test_mismatch_is_one_clear_line(rank1_nodes, fragment):
    t = trace_of({0: [coll(1)], 1: rank1_nodes})
    with pytest.raises(ScheduleError) as err:
        compile_trace(t)
    msg = str(err.value)
    assert "\n" not in msg and "'default'" in msg and fragment in msg


def test_mismatch_names_the_group_and_the_instance_index():
    # group g = {1, 2}; instance #0 agrees, instance #1 differs in size on rank 2; rank 0 is not in g
    groups = {"g": ProcessGroup("g", (1, 2))}
    ok = [coll(1, pg="g"), coll(2, [1], pg="g")]
    bad = [coll(1, pg="g"), coll(2, [1], pg="g", size=4096)]
    with pytest.raises(ScheduleError) as err:
        compile_trace(trace_of({0: [comp(1)], 1: ok, 2: bad}, groups))
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("process group 'g' collective #1: rank 1 node 2 is ALL_REDUCE")
    assert "rank 2 node 2 is ALL_REDUCE 4096 B" in msg
    with pytest.raises(ScheduleError, match=r"process group 'g' collective #2: .* rank 2 issues only 2"):
        compile_trace(trace_of({0: [comp(1)], 1: [*ok, coll(3, [2], pg="g")], 2: ok}, groups))
    root_a = [coll(1, ctype=CollectiveType.BROADCAST, size=64, root=0, pg="g")]
    root_b = [coll(1, ctype=CollectiveType.BROADCAST, size=64, root=1, pg="g")]
    with pytest.raises(ScheduleError, match=r"process group 'g' collective #0: .* root 0, rank 2 node 1 .* root 1$"):
        compile_trace(trace_of({0: [], 1: root_a, 2: root_b}, groups))


def test_unknown_group_and_non_member_errors():
    # an undefined pg_name falls back to the all-rank group (the reader warns about it)
    s = compile_trace(trace_of({0: [coll(1, pg="x")], 1: [coll(1, pg="")]}))
    assert s.group_names == ("default",) and s.n_colls == 1
    groups = {"g": ProcessGroup("g", (0, 1))}
    with pytest.raises(ScheduleError, match=r"rank 2 node 1: rank is not a member of process group 'g'"):
        compile_trace(trace_of({r: [coll(1, pg="g")] for r in range(3)}, groups))
    # the message names the trace and the group's ranks (was "error: rank 2 node 1: ..." alone)
    named = trace_of({r: [coll(1, pg="g")] for r in range(3)}, groups)
    named.source = "/data/job"
    with pytest.raises(ScheduleError, match=r"^/data/job: rank 2 node 1: rank is not a member of process group 'g' "
                                            r"\(its ranks: 0-1\)$"):
        compile_trace(named)
    groups = {"g": ProcessGroup("g", (0, 1, 5))}
    with pytest.raises(ScheduleError, match=r"lists rank 5, which has no trace file"):
        compile_trace(trace_of({r: [coll(1, pg="g")] for r in range(2)}, groups))


def test_p2p_pairing_by_src_dst_tag_order():
    t = trace_of({
        0: [send(1, 0, 1, size=100, tag=7), send(2, 0, 1, [1], size=200, tag=7), send(3, 0, 1, size=300, tag=9)],
        1: [recv(1, 1, 0, size=300, tag=9), recv(2, 1, 0, [1], size=100, tag=7), recv(3, 1, 0, [2], size=200, tag=7)],
    })
    s = compile_trace(t)
    assert s.n_flows == 3 and (s.flow_coll == -1).all()
    for op in range(s.n_ops):
        f = s.op_flow[op]
        assert s.flow_size_bytes[f] == {1: 100, 2: 200, 3: 300}[int(s.op_node[op])] or s.op_rank[op] == 1
    sizes_by_recv_node = {int(s.op_node[i]): int(s.flow_size_bytes[s.op_flow[i]]) for i in s.rank_ops(1)}
    assert sizes_by_recv_node == {1: 300, 2: 100, 3: 200}


def test_p2p_unmatched_strict_and_ignore():
    t = trace_of({0: [send(1, 0, 1), comp(2, [1])], 1: [comp(1)]})
    with pytest.raises(ScheduleError, match=r"rank 0 node 1: SEND to rank 1 \(tag 0, occurrence #0\) has no matching RECV"):
        compile_trace(t)
    s = compile_trace(t, CompileOptions(p2p_pairing="ignore"))
    assert s.n_flows == 0
    assert s.op_kind[node_ops(s, 0, 1)].tolist() == [OP_DELAY]
    assert s.op_duration_ns[node_ops(s, 0, 1)].tolist() == [0]
    assert s.parents(node_ops(s, 0, 2)[0]).tolist() == node_ops(s, 0, 1)


def test_p2p_without_peer_pytorch_style():
    lonely = Node(id=1, type=NodeType.COMM_SEND_NODE, comm=CommInfo(size_bytes=8, src=0, dst=None))
    t = trace_of({0: [lonely, comp(2, [1])], 1: [comp(1)]})
    with pytest.raises(ScheduleError, match=r"rank 0 node 1: SEND has no peer .*PyTorch"):
        compile_trace(t)
    s = compile_trace(t, CompileOptions(p2p_pairing="ignore"))
    assert s.n_flows == 0 and s.n_ops == 2


def test_p2p_group_pairing_takes_the_other_member_of_a_two_rank_group():
    # PyTorch-style: SEND/RECV with only comm_size and pg_name (reader resolves the own-rank side)
    def lonely(i, rank, is_send, size=64, pg="pp"):
        comm = CommInfo(size_bytes=size, src=rank if is_send else None, dst=None if is_send else rank, pg_name=pg)
        return Node(id=i, type=NodeType.COMM_SEND_NODE if is_send else NodeType.COMM_RECV_NODE, comm=comm)

    groups = {"pp": ProcessGroup("pp", (1, 2)), "big": ProcessGroup("big", (0, 1, 2))}
    t = trace_of({0: [comp(1)], 1: [lonely(1, 1, True), lonely(2, 1, True, 32)],
                  2: [lonely(1, 2, False), lonely(2, 2, False, 32)]}, groups)
    with pytest.raises(ScheduleError, match=r"rank 1 node 1: SEND has no peer .*p2p_pairing=group"):
        compile_trace(t)
    s = compile_trace(t, CompileOptions(p2p_pairing="group"))
    assert s.flow_src.tolist() == [1, 1] and s.flow_dst.tolist() == [2, 2] and s.flow_size_bytes.tolist() == [64, 32]
    assert s.meta["options"]["p2p_pairing"] == "group"
    t = trace_of({r: [lonely(1, r, r == 0, pg="big")] for r in range(3)}, groups)
    with pytest.raises(ScheduleError, match=r"rank 0 node 1: SEND has no peer and process group 'big' has ranks "
                                            r"\[0, 1, 2\]; p2p_pairing=group needs a 2-rank group"):
        compile_trace(t, CompileOptions(p2p_pairing="group"))


def test_p2p_size_mismatch():
    t = trace_of({0: [send(1, 0, 1, size=10)], 1: [recv(1, 1, 0, size=20)]})
    with pytest.raises(ScheduleError, match=r"SEND 10 B to rank 1 pairs with rank 1 node 1 RECV of 20 B"):
        compile_trace(t)


def test_replicate_rank0_trace():
    t = trace_of({0: [comp(1), coll(2, [1], size=8 << 10), coll(3, [2], ctype=CollectiveType.BROADCAST, size=64)]})
    with pytest.raises(ScheduleError, match="mismatch|issues only"):
        compile_trace(trace_of({0: [coll(1)], 1: []}))
    s = compile_trace(t, CompileOptions(replicate=4))
    assert s.world_size == 4 and s.n_colls == 2
    assert np.diff(s.rank_op_ptr).min() > 0
    assert sorted(set(s.flow_src.tolist())) == [0, 1, 2, 3]
    with pytest.raises(ScheduleError, match="single-rank trace"):
        compile_trace(trace_of({0: [comp(1)], 1: [comp(1)]}), CompileOptions(replicate=4))


def test_roots_node_attribute_then_option_override():
    bc = CollectiveType.BROADCAST
    t = trace_of({r: [coll(1, ctype=bc, size=1000, root=2)] for r in range(4)})
    s = compile_trace(t)
    sent = np.bincount(s.flow_src, weights=s.flow_size_bytes, minlength=4)
    recv = np.bincount(s.flow_dst, weights=s.flow_size_bytes, minlength=4)
    assert recv[2] == 0 and sent[2] > 0
    s = compile_trace(t, CompileOptions(roots={bc: 1}))
    recv = np.bincount(s.flow_dst, weights=s.flow_size_bytes, minlength=4)
    assert recv[1] == 0 and recv[2] > 0
    with pytest.raises(ScheduleError, match=r"root position 9 of BROADCAST \(from the roots option \(--root\)\) is outside group 'default' of 4"):
        compile_trace(t, CompileOptions(roots={bc: 9}))
    # in a sub-group the root is a position: group (1, 2, 3), root 1 → rank 2
    groups = {"g": ProcessGroup("g", (1, 2, 3))}
    t = trace_of({r: [coll(1, ctype=bc, size=1000, root=1, pg="g")] for r in (1, 2, 3)} | {0: []}, groups)
    recv = np.bincount(compile_trace(t).flow_dst, minlength=4)
    assert recv.tolist()[0] == 0 and recv[2] == 0 and recv[1] > 0 and recv[3] > 0
    # no attribute: the group's first rank
    t = trace_of({r: [coll(1, ctype=bc, size=1000)] for r in range(3)})
    recv = np.bincount(compile_trace(t).flow_dst, minlength=3)
    assert recv[0] == 0


def test_chunks_reach_the_algorithm():
    t = trace_of({r: [coll(1, size=1 << 16)] for r in range(3)})
    one = compile_trace(t, CompileOptions(algorithms={AR: "ring"}))
    four = compile_trace(t, CompileOptions(algorithms={AR: "ring"}, chunks=4))
    assert four.n_flows == 4 * one.n_flows
    assert int(four.flow_size_bytes.sum()) == int(one.flow_size_bytes.sum())
    assert sorted(set(four.flow_chunk.tolist())) == [0, 1, 2, 3]


def test_open_loop_recorded_times_drop_deps():
    t = trace_of({0: [comp(1, start=1000), comp(2, [1], start=1050)], 1: [comp(1, start=1010)]})
    s = compile_trace(t, CompileOptions(open_loop=True))
    assert s.op_not_before_ns.tolist() == [0, 50_000, 10_000]
    assert s.dep_idx.shape[0] == 0 and s.dep_ptr.tolist() == [0, 0, 0, 0]


def test_open_loop_estimated_times_without_records():
    t = trace_of({0: [comp(1, us=5), comp(2, [1], us=7), comp(3, [1, 2], us=1)]})
    s = compile_trace(t, CompileOptions(open_loop=True, compute_scale=2.0))
    assert s.op_not_before_ns.tolist() == [0, 10_000, 24_000]


def test_keep_idle_inserts_gap_delays():
    t = trace_of({0: [comp(1, us=10, start=100), comp(2, [1], us=10, start=150)]})
    plain = compile_trace(t)
    idle = compile_trace(t, CompileOptions(keep_idle=True))
    assert plain.n_ops == 2 and idle.n_ops == 3
    gap = [i for i in range(idle.n_ops) if idle.op_node[i] == -1]
    assert idle.op_duration_ns[gap].tolist() == [40_000]
    assert idle.parents(2).tolist() == gap


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"chunks": 0}, "chunks"),
        ({"window": 0}, "window"),
        ({"compute_scale": -1.0}, "compute_scale"),
        ({"compute_scale": float("nan")}, "compute_scale"),
        ({"replicate": 0}, "replicate"),
        ({"p2p_pairing": "fuzzy"}, "p2p_pairing"),
    ],
)
def test_bad_options_name_the_option(kwargs, key):
    with pytest.raises(ScheduleError, match=f"option {key}"):
        compile_trace(trace_of({0: [comp(1)]}), CompileOptions(**kwargs))


def test_absent_rank_file_gets_no_ops_and_meta_is_recorded():
    t = trace_of({0: [comp(1)], 2: [comp(1)]})
    s = compile_trace(t, provenance={"trace_sha256": "x"})
    assert s.world_size == 3 and s.rank_op_ptr.tolist() == [0, 1, 1, 2]
    assert s.meta["trace_sha256"] == "x" and s.meta["options"]["chunks"] == 1


def test_malformed_collectives_one_line():
    bad_type = Node(id=3, type=NodeType.COMM_COLL_NODE, comm=CommInfo(collective=42, size_bytes=8))
    with pytest.raises(ScheduleError, match=r"^rank 0 node 3: unknown collective type 42$"):
        compile_trace(trace_of({0: [bad_type], 1: [bad_type]}))
    with pytest.raises(ScheduleError, match=r"^rank 0 node 1: negative comm_size -5$"):
        compile_trace(trace_of({r: [coll(1, size=-5)] for r in range(2)}))
    with pytest.raises(ScheduleError, match=r"unknown|bogus"):
        compile_trace(trace_of({r: [coll(1)] for r in range(2)}), CompileOptions(algorithms={AR: "bogus"}))


def test_cycle_in_trace_is_reported():
    from emulator.errors import TraceError

    t = trace_of({0: [comp(1, [2]), comp(2, [1])]})
    with pytest.raises(TraceError, match="cycle"):
        compile_trace(t)


def test_window_reaches_all_to_all():
    a2a = CollectiveType.ALL_TO_ALL
    t = trace_of({r: [coll(1, ctype=a2a, size=6000)] for r in range(6)})
    free = compile_trace(t)
    windowed = compile_trace(t, CompileOptions(window=1))
    assert windowed.n_flows == free.n_flows

    def send_after_send(s):
        child = np.repeat(np.arange(s.n_ops), np.diff(s.dep_ptr))
        return int(((s.op_kind[child] == OP_SEND) & (s.op_kind[s.dep_idx] == OP_SEND)).sum())

    assert send_after_send(free) == 0 and send_after_send(windowed) == 6 * 4
    assert windowed.meta["options"]["window"] == 1


def test_graph_walk_order_matches_public_queries():
    """The compiler walks ``ordered_parents`` (one pass over the graph index): the same order and parents
    as ``topological_order`` + ``parents``, and no index is left alive on the trace's graphs."""
    from emulator.trace import graph as tgraph

    t = trace_of({r: [comp(1), comp(3, [1]), coll(2, [1, 3]), comp(4, [2, 1])] for r in range(3)})
    compile_trace(t)
    assert all(tgraph._CACHE_ATTR not in g.__dict__ for g in t.ranks.values())  # indexes not kept alive
    for g in t.ranks.values():
        order, plists = tgraph.ordered_parents(g)
        assert tgraph._CACHE_ATTR not in g.__dict__
        public = tgraph.topological_order(g)
        assert [n.id for n in order] == [n.id for n in public] == [1, 3, 2, 4]
        assert plists == [tgraph.parents(g, n) for n in public] == [(), (1,), (1, 3), (2, 1)]
        assert tgraph._CACHE_ATTR in g.__dict__  # an index the caller built stays
        assert tgraph.ordered_parents(g) == (order, plists) and tgraph._CACHE_ATTR in g.__dict__


def test_a_root_outside_its_group_is_a_structured_error():
    """The fields say which collective and where the root came from; callers never parse the message."""
    from emulator.schedule.compiler import RootOutsideGroupError

    bc = CollectiveType.BROADCAST
    t = trace_of({r: [coll(1, ctype=bc, size=1000, root=7)] for r in range(4)})
    with pytest.raises(RootOutsideGroupError) as info:
        compile_trace(t)
    e = info.value
    assert (e.collective, e.root, e.group, e.group_size, e.from_roots_option) == (bc, 7, "default", 4, False)
    assert isinstance(e, ScheduleError) and "node's root attribute" in str(e)
    with pytest.raises(RootOutsideGroupError) as info:
        compile_trace(t, CompileOptions(roots={bc: 5}))
    assert info.value.from_roots_option and info.value.root == 5
