"""Structure of the synthetic generators, checked on the in-memory node streams (no I/O)."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.errors import ConfigError
from emulator.trace import generators as gen
from emulator.trace.generators.pipeline import stage_program
from emulator.trace.model import CollectiveType, Node, NodeType

CT = CollectiveType


def materialise(trace: gen.GeneratedTrace) -> dict[int, list[Node]]:
    return {r: list(trace.nodes(r)) for r in range(trace.world_size)}


def assert_dag(nodes: list[Node]) -> None:
    """Ids unique, every parent present and earlier in the stream (so the stream is a topological order)."""
    seen: set[int] = set()
    for n in nodes:
        assert n.id not in seen, f"duplicate id {n.id}"
        for p in n.data_deps:
            assert p in seen, f"node {n.id} {n.name}: parent {p} not written before it"
        assert not n.ctrl_deps
        seen.add(n.id)


def ancestors(nodes: list[Node]) -> dict[int, set[int]]:
    anc: dict[int, set[int]] = {}
    for n in nodes:  # stream order is topological (assert_dag)
        s: set[int] = set()
        for p in n.data_deps:
            s.add(p)
            s |= anc[p]
        anc[n.id] = s
    return anc


def simulate(trace: gen.GeneratedTrace) -> None:
    """Run every rank to completion: SEND is asynchronous, RECV needs its (src,dst,tag,k) SEND,
    a collective completes when all members of its group reached their k-th collective on that group
    with the same type and size. Fails on deadlock or mismatch."""
    ranks = materialise(trace)
    for nodes in ranks.values():
        assert_dag(nodes)
    members = {name: set(g.ranks) for name, g in trace.groups.items()}
    done: dict[int, set[int]] = {r: set() for r in ranks}
    sent: Counter = Counter()
    recvd: Counter = Counter()
    coll_seq: dict[tuple[int, str | None], int] = defaultdict(int)  # next collective index per (rank, group)
    arrived: dict[tuple[str | None, int], dict[int, tuple]] = defaultdict(dict)
    pos = {r: 0 for r in ranks}
    # each rank executes in stream order (a valid topological order): simple and deterministic
    progress = True
    while progress:
        progress = False
        for r, nodes in ranks.items():
            while pos[r] < len(nodes):
                n = nodes[pos[r]]
                assert all(p in done[r] for p in n.data_deps)
                if n.type == NodeType.COMM_SEND_NODE:
                    assert n.comm.src == r
                    sent[(n.comm.src, n.comm.dst, n.comm.tag)] += 1
                elif n.type == NodeType.COMM_RECV_NODE:
                    assert n.comm.dst == r
                    key = (n.comm.src, n.comm.dst, n.comm.tag)
                    if sent[key] <= recvd[key]:
                        break
                    recvd[key] += 1
                elif n.type == NodeType.COMM_COLL_NODE:
                    g = n.comm.pg_name
                    group = members[g] if g is not None else set(ranks)
                    assert r in group
                    k = coll_seq[(r, g)]
                    arrived[(g, k)][r] = (n.comm.collective, n.comm.size_bytes, n.comm.root)
                    if len(arrived[(g, k)]) < len(group):
                        break  # wait for the other members (re-arrives on the next sweep)
                    assert len(set(arrived[(g, k)].values())) == 1, f"mismatch in group {g} instance {k}"
                    coll_seq[(r, g)] = k + 1
                done[r].add(n.id)
                pos[r] += 1
                progress = True
    for r, nodes in ranks.items():
        assert pos[r] == len(nodes), f"rank {r} deadlocked at node {nodes[pos[r]].name}"


def test_simulator_detects_deadlock_and_mismatch():
    from emulator.trace.generators.common import coll_node, p2p_node

    def p2p(rank):
        peer = 1 - rank
        yield p2p_node(1, "recv", NodeType.COMM_RECV_NODE, 8, peer, rank, 0)
        yield p2p_node(2, "send", NodeType.COMM_SEND_NODE, 8, rank, peer, 0, (1,))

    with pytest.raises(AssertionError, match="deadlocked"):
        simulate(gen.GeneratedTrace("x", 2, {}, None, p2p))

    def colls(rank):
        yield coll_node(1, "ar", CT.ALL_REDUCE, 8 + rank)

    with pytest.raises(AssertionError, match="mismatch"):
        simulate(gen.GeneratedTrace("x", 2, {}, None, colls))


# ---------------------------------------------------------------- collective


def test_collective_counts_sizes_and_chain():
    t = gen.collective_trace(gen.CollectiveOptions(
        ranks=4, collectives=(CT.ALL_REDUCE, CT.ALL_GATHER, CT.BROADCAST, CT.BARRIER),
        size_bytes=16 << 20, iterations=3, gap_us=250, root=2))
    ranks = materialise(t)
    for nodes in ranks.values():
        assert_dag(nodes)
        types = Counter(n.type for n in nodes)
        assert types[NodeType.COMM_COLL_NODE] == 12
        assert types[NodeType.COMP_NODE] == 11  # gaps between consecutive collectives
        colls = [n for n in nodes if n.type == NodeType.COMM_COLL_NODE]
        assert [c.comm.collective for c in colls[:4]] == [CT.ALL_REDUCE, CT.ALL_GATHER, CT.BROADCAST, CT.BARRIER]
        assert all(c.comm.size_bytes == (0 if c.comm.collective == CT.BARRIER else 16 << 20) for c in colls)
        assert all(c.comm.pg_name is None for c in colls)
        assert [c.comm.root for c in colls[:4]] == [None, None, 2, None]
        assert all(n.duration_micros == 250 for n in nodes if n.type == NodeType.COMP_NODE)
        # one linear chain
        for a, b in zip(nodes, nodes[1:], strict=False):
            assert b.data_deps == (a.id,)
    assert t.groups == {}
    simulate(t)


def test_collective_subgroups_and_nccl_convention():
    t = gen.collective_trace(gen.CollectiveOptions(
        ranks=8, collectives=(CT.ALL_GATHER, CT.REDUCE_SCATTER), size_bytes=1 << 20, group_size=4,
        size_convention="nccl"))
    assert {n: g.ranks for n, g in t.groups.items()} == {"1": (0, 1, 2, 3), "2": (4, 5, 6, 7)}
    ranks = materialise(t)
    assert [n.comm.pg_name for n in ranks[5]] == ["2", "2"]
    assert ranks[0][0].comm.size_bytes == (1 << 20) // 4  # AG: per-rank shard
    assert ranks[0][1].comm.size_bytes == 1 << 20
    simulate(t)


def test_collective_parse_and_errors():
    assert gen.parse_collectives("all_reduce, ALL-TO-ALL,reduce_scatter_block") == (
        CT.ALL_REDUCE, CT.ALL_TO_ALL, CT.REDUCE_SCATTER_BLOCK)
    with pytest.raises(ConfigError, match="allreduce"):
        gen.parse_collectives("allreduce")
    with pytest.raises(ConfigError, match="group-size"):
        gen.collective_trace(gen.CollectiveOptions(ranks=6, group_size=4))
    with pytest.raises(ConfigError, match="root"):
        gen.collective_trace(gen.CollectiveOptions(ranks=4, root=4))


# ---------------------------------------------------------------- data parallel


def dp_opts(**kw) -> gen.DataParallelOptions:
    base = dict(ranks=4, layers=6, params_per_layer_bytes=(10 << 20,), bucket_bytes=25 << 20, iterations=2)
    base.update(kw)
    return gen.DataParallelOptions(**base)


def test_data_parallel_buckets_and_overlap():
    o = dp_opts()
    t = gen.data_parallel_trace(o)
    nodes = materialise(t)[0]
    assert_dag(nodes)
    by_name = {n.name: n for n in nodes}
    ars = [n for n in nodes if n.type == NodeType.COMM_COLL_NODE and n.name.startswith("allreduce_it0")]
    # 6 layers × 10 MiB in buckets of ≥ 25 MiB, last layer first: (5,4,3) (2,1,0)
    assert [a.comm.size_bytes for a in ars] == [30 << 20, 30 << 20]
    assert sum(a.comm.size_bytes for a in ars) == 6 * (10 << 20)
    anc = ancestors(nodes)
    # AR 0 closes after bwd_l3: it depends on bwd_l3 but not on bwd_l2..l0 → overlaps them
    a0 = ars[0]
    assert by_name["bwd_it0_l3"].id in a0.data_deps
    for layer in (2, 1, 0):
        bwd = by_name[f"bwd_it0_l{layer}"]
        assert bwd.id not in anc[a0.id]
        assert a0.id not in anc[bwd.id]
    opt = by_name["optimizer_it0"]
    assert {a.id for a in ars} <= set(opt.data_deps)
    assert by_name["fwd_it1_l0"].data_deps == (opt.id,)
    counts = Counter(n.type for n in nodes)
    assert counts[NodeType.COMP_NODE] == 2 * (6 + 6 + 1)
    assert counts[NodeType.COMM_COLL_NODE] == 4
    simulate(t)


def test_data_parallel_per_layer_sizes():
    o = dp_opts(layers=3, params_per_layer_bytes=(1, 2, 3), bucket_bytes=4, iterations=1)
    assert gen.data_parallel.buckets(o) == [(1, 5), (0, 1)]
    with pytest.raises(ConfigError, match="params-per-layer"):
        gen.data_parallel_trace(dp_opts(layers=3, params_per_layer_bytes=(1, 2)))


@settings(max_examples=40, deadline=None)
@given(layers=st.integers(1, 12), sizes=st.lists(st.integers(0, 50), min_size=1, max_size=12),
       bucket=st.integers(0, 120))
def test_data_parallel_overlap_property(layers, sizes, bucket):
    sizes = tuple((sizes * layers)[:layers])
    o = dp_opts(ranks=2, layers=layers, params_per_layer_bytes=sizes, bucket_bytes=bucket, iterations=1)
    nodes = list(gen.data_parallel_trace(o).nodes(0))
    assert_dag(nodes)
    anc = ancestors(nodes)
    bwd = {int(n.name.rsplit("_l", 1)[1]): n for n in nodes if n.name.startswith("bwd_")}
    ars = [n for n in nodes if n.type == NodeType.COMM_COLL_NODE]
    assert sum(a.comm.size_bytes for a in ars) == sum(sizes)
    for (last_layer, size), ar in zip(gen.data_parallel.buckets(o), ars, strict=True):
        assert ar.comm.size_bytes == size
        assert bwd[last_layer].id in anc[ar.id]
        assert all(bwd[lower].id not in anc[ar.id] for lower in range(last_layer))


# ---------------------------------------------------------------- moe


def test_moe_groups_partition_and_matching():
    o = gen.MoeOptions(tp=2, ep=2, dp=2, layers=2, iterations=2)
    t = gen.moe_trace(o)
    assert t.world_size == 8
    fam = Counter(g.desc.split()[0] for g in t.groups.values())
    assert fam == {"tp": 4, "ep": 4, "dp": 4, "dense-dp": 2}
    for family in ("tp", "ep", "dp"):
        covered = sorted(r for g in t.groups.values() if g.desc.startswith(family) for r in g.ranks)
        assert covered == list(range(8))  # each family partitions the ranks
    assert t.groups["1"].ranks == (0, 1)       # tp innermost
    ep_groups = [g.ranks for g in t.groups.values() if g.desc.startswith("ep")]
    assert (0, 2) in ep_groups
    dp_groups = [g.ranks for g in t.groups.values() if g.desc.startswith("dp")]
    assert (0, 4) in dp_groups
    dense_groups = [g.ranks for g in t.groups.values() if g.desc.startswith("dense-dp")]
    assert dense_groups == [(0, 2, 4, 6), (1, 3, 5, 7)]  # dense params: replicated over ep and dp
    nodes = materialise(t)[3]
    kinds = Counter((n.comm.collective, t.groups[n.comm.pg_name].desc.split()[0]) for n in nodes if n.comm)
    per_it_layer = 2 * 2
    assert kinds[(CT.ALL_TO_ALL, "ep")] == 4 * per_it_layer
    assert kinds[(CT.ALL_REDUCE, "tp")] == 2 * per_it_layer
    assert kinds[(CT.ALL_REDUCE, "dp")] == per_it_layer  # expert gradients
    assert kinds[(CT.ALL_REDUCE, "dense-dp")] == per_it_layer  # dense gradients
    simulate(t)


def test_moe_degree_one_families_have_no_groups():
    t = gen.moe_trace(gen.MoeOptions(tp=1, ep=4, dp=1, layers=1))
    assert [(g.desc.split()[0], g.ranks) for g in t.groups.values()] == [("ep", (0, 1, 2, 3)),
                                                                       ("dense-dp", (0, 1, 2, 3))]
    nodes = list(t.nodes(0))
    used = {(n.comm.collective, t.groups[n.comm.pg_name].desc.split()[0]) for n in nodes if n.comm}
    # no expert gradient all-reduce (each expert on one rank), but every rank's dense gradients are
    assert used == {(CT.ALL_TO_ALL, "ep"), (CT.ALL_REDUCE, "dense-dp")}
    simulate(t)
    t = gen.moe_trace(gen.MoeOptions(tp=2, ep=1, dp=2, layers=1))  # ep 1: dense gradients on the dp group
    assert sorted(g.desc.split()[0] for g in t.groups.values()) == ["dp", "dp", "tp", "tp"]
    simulate(t)


def test_moe_resolve_degrees():
    assert gen.resolve_degrees(8, None, None, None) == (1, 8, 1)
    assert gen.resolve_degrees(16, 2, None, 2) == (2, 4, 2)
    assert gen.resolve_degrees(16, None, 4, None) == (1, 4, 4)
    assert gen.resolve_degrees(None, 2, 2, 2) == (2, 2, 2)
    with pytest.raises(ConfigError):
        gen.resolve_degrees(8, 2, 2, 3)
    with pytest.raises(ConfigError):
        gen.resolve_degrees(6, 4, None, None)


# ---------------------------------------------------------------- pipeline


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_pipeline_send_recv_pairs(schedule):
    o = gen.PipelineOptions(ranks=4, microbatches=6, activation_bytes=1 << 20, iterations=2, schedule=schedule)
    t = gen.pipeline_trace(o)
    ranks = materialise(t)
    sends: Counter = Counter()
    recvs: Counter = Counter()
    for nodes in ranks.values():
        assert_dag(nodes)
        for n in nodes:
            if n.type == NodeType.COMM_SEND_NODE:
                sends[(n.comm.src, n.comm.dst, n.comm.tag)] += 1
            elif n.type == NodeType.COMM_RECV_NODE:
                recvs[(n.comm.src, n.comm.dst, n.comm.tag)] += 1
            if n.comm:
                assert n.comm.size_bytes == 1 << 20
                assert abs(n.comm.src - n.comm.dst) == 1
    assert sends == recvs
    assert sum(sends.values()) == 2 * 2 * 3 * 6  # fwd+bwd × iterations × links × microbatches
    first = Counter(n.type for n in ranks[0])
    assert first[NodeType.COMM_RECV_NODE] == 12 and first[NodeType.COMM_SEND_NODE] == 12
    assert first[NodeType.COMP_NODE] == 2 * (12 + 1)
    simulate(t)


def test_pipeline_1f1b_program():
    o = gen.PipelineOptions(ranks=4, microbatches=4)
    assert stage_program(o, 3) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2), ("F", 3), ("B", 3)]
    assert stage_program(o, 0)[:4] == [("F", 0), ("F", 1), ("F", 2), ("F", 3)]
    for s in range(4):
        prog = stage_program(o, s)
        assert sorted(prog) == sorted([("F", m) for m in range(4)] + [("B", m) for m in range(4)])


@settings(max_examples=25, deadline=None)
@given(ranks=st.integers(1, 6), mb=st.integers(1, 7), sched=st.sampled_from(["1f1b", "gpipe"]))
def test_pipeline_never_deadlocks(ranks, mb, sched):
    simulate(gen.pipeline_trace(gen.PipelineOptions(ranks=ranks, microbatches=mb, schedule=sched)))


# ---------------------------------------------------------------- determinism and streaming


@pytest.mark.parametrize("make", [
    lambda: gen.collective_trace(gen.CollectiveOptions(ranks=3, iterations=4, gap_us=5)),
    lambda: gen.data_parallel_trace(dp_opts()),
    lambda: gen.moe_trace(gen.MoeOptions(tp=2, ep=2, dp=1)),
    lambda: gen.pipeline_trace(gen.PipelineOptions(ranks=3)),
])
def test_same_options_same_nodes(make):
    a, b = make(), make()
    assert a.metadata == b.metadata
    assert a.groups == b.groups
    assert materialise(a) == materialise(b)


def test_streams_lazily():
    t = gen.collective_trace(gen.CollectiveOptions(ranks=1, iterations=10**9))
    it = t.nodes(0)
    assert next(it).type == NodeType.COMM_COLL_NODE  # a billion-iteration trace starts at once


@settings(max_examples=25, deadline=None)
@given(tp=st.integers(1, 3), ep=st.integers(1, 3), dp=st.integers(1, 3), layers=st.integers(1, 3))
def test_moe_matches_and_never_deadlocks(tp, ep, dp, layers):
    t = gen.moe_trace(gen.MoeOptions(tp=tp, ep=ep, dp=dp, layers=layers, iterations=2))
    assert t.world_size == tp * ep * dp
    for rank in range(t.world_size):
        for n in t.nodes(rank):
            if n.comm is not None:
                assert rank in t.groups[n.comm.pg_name].ranks
    simulate(t)


@settings(max_examples=25, deadline=None)
@given(groups=st.integers(1, 3), gsize=st.integers(1, 4),
       colls=st.lists(st.sampled_from(list(CT)), min_size=1, max_size=4), gap=st.integers(0, 3))
def test_collective_matches_and_never_deadlocks(groups, gsize, colls, gap):
    ranks = groups * gsize
    t = gen.collective_trace(gen.CollectiveOptions(ranks=ranks, collectives=tuple(colls), group_size=gsize,
                                                   iterations=2, gap_us=gap, root=gsize - 1))
    simulate(t)
