"""Every shared sample trace (sets A-D of shared/traces/README.md) reads with the stated counts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from emulator.errors import TraceError
from emulator.trace.graph import (
    check_collective_counts,
    critical_path_compute_us,
    parents,
    topological_order,
)
from emulator.trace.groups import resolve_group
from emulator.trace.io import read_rank_file, read_trace
from emulator.trace.model import CollectiveType, NodeType

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"  # ../shared/traces next to the repo
MICRO = TRACES / "astra-sim/examples/workload/microbenchmarks"
RING = TRACES / "astra-sim/examples/system/custom_collectives/custom_ring_allreduce_8npus_1MB/custom_allreduce"
CHAKRA0 = TRACES / "chakra/tests/data/chakra.0.et"
SMALL_JSON = TRACES / "chakra/jsonData/small_chakra.0.json"

pytestmark = pytest.mark.skipif(not TRACES.is_dir(), reason="shared traces not available")

COLLS = {
    "all_reduce": CollectiveType.ALL_REDUCE,
    "all_gather": CollectiveType.ALL_GATHER,
    "all_to_all": CollectiveType.ALL_TO_ALL,
    "reduce_scatter": CollectiveType.REDUCE_SCATTER,
}


# --- set A ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("coll", sorted(COLLS))
@pytest.mark.parametrize("npus", [4, 8, 16])
def test_microbenchmarks_one_collective_per_rank(coll: str, npus: int) -> None:
    trace = read_trace(MICRO / coll / f"{npus}npus_1MB" / coll)
    assert sorted(trace.ranks) == list(range(npus))
    assert trace.groups == {}
    for rank, graph in trace.ranks.items():
        assert graph.metadata.present and graph.metadata.version == "0.0.4" and graph.metadata.attrs == ()
        assert len(graph.nodes) == 1
        (node,) = graph.nodes
        assert node.id == rank  # id 0 is absent on the wire for rank 0 and still reads as 0
        assert node.type == NodeType.COMM_COLL_NODE
        assert node.name == f"{coll}_{npus}npus_1MB"
        assert node.is_cpu_op is False and node.is_traffic
        assert node.comm.collective == COLLS[coll]
        assert node.comm.size_bytes == 1048576
        assert node.comm.pg_name is None
        assert node.attrs == ()
        assert graph.warnings == []
        assert resolve_group(trace, node.comm.pg_name).ranks == tuple(range(npus))
    check_collective_counts(trace)


def test_microbenchmark_rank0_file_is_two_bytes_shorter() -> None:
    base = MICRO / "all_reduce/4npus_1MB"
    sizes = [(base / f"all_reduce.{r}.et").stat().st_size for r in range(4)]
    assert sizes[0] == sizes[1] - 2
    assert read_rank_file(base / "all_reduce.0.et", 0).nodes[0].id == 0


def test_single_file_takes_rank_from_its_name() -> None:
    trace = read_trace(MICRO / "all_reduce/8npus_1MB/all_reduce.5.et")
    assert list(trace.ranks) == [5]
    assert trace.ranks[5].nodes[0].id == 5


# --- set B ------------------------------------------------------------------------------------------


def test_custom_ring_allreduce_sends_and_receives() -> None:
    trace = read_trace(RING)
    assert sorted(trace.ranks) == list(range(8))
    total_sent = 0
    for r, graph in trace.ranks.items():
        md = graph.metadata
        assert md.present and md.version == ""
        assert [name for name, _ in md.attrs] == ["schema", "input_file", "collective"]
        assert dict(md.attrs)["schema"] == ("string_val", "1.0.2-chakra.0.0.4")
        assert len(dict(md.attrs)["input_file"][1]) > 26000
        nodes = graph.nodes
        assert [n.id for n in nodes] == list(range(35))
        types = Counter(n.type for n in nodes)
        assert types == {NodeType.COMM_SEND_NODE: 14, NodeType.COMM_RECV_NODE: 14, NodeType.COMP_NODE: 7}
        sends = [n for n in nodes if n.type == NodeType.COMM_SEND_NODE]
        recvs = [n for n in nodes if n.type == NodeType.COMM_RECV_NODE]
        assert all(n.comm.size_bytes == 131072 for n in sends + recvs)
        assert {(n.comm.src, n.comm.dst, n.comm.tag) for n in sends} == {(r, (r + 1) % 8, 0)}
        assert {(n.comm.src, n.comm.dst, n.comm.tag) for n in recvs} == {((r - 1) % 8, r, 0)}
        # comm_type 5/6 on SEND/RECV is a NodeType number, not a collective: kept as a plain attribute
        assert all(n.comm.collective is None and n.attr("comm_type") == 5 for n in sends)
        assert all(n.comm.collective is None and n.attr("comm_type") == 6 for n in recvs)
        assert all(n.is_traffic for n in sends + recvs)
        comps = [n for n in nodes if n.type == NodeType.COMP_NODE]
        assert all(n.duration_micros == 7 and n.comm is None and n.attrs == () for n in comps)
        # one linear chain through data_deps
        assert graph.dep_policy == "data"
        assert sum(len(n.data_deps) for n in nodes) == 34 and all(not n.ctrl_deps for n in nodes)
        order = topological_order(graph)
        assert [n.id for n in order] == list(range(35))
        assert all(parents(graph, n) == ((n.id - 1,) if n.id else ()) for n in nodes)
        assert [n.type for n in order[:21]] == [5, 6, 4] * 7 and [n.type for n in order[21:]] == [5, 6] * 7
        assert critical_path_compute_us(graph) == 49
        assert graph.warnings == []
        total_sent += sum(n.comm.size_bytes for n in sends)
        assert sum(n.comm.size_bytes for n in sends) == 1835008
    assert total_sent == 14680064


# --- set C ------------------------------------------------------------------------------------------


def test_chakra0_counts_and_metadata() -> None:
    graph = read_rank_file(CHAKRA0, 0)
    md = graph.metadata
    assert md.present and md.version == ""
    assert dict(md.attrs) == {
        "schema": ("string_val", "1.0.1"),
        "pid": ("uint64_val", 114598),
        "time": ("string_val", "2023-12-14 11:55:01"),
        "start_ts": ("uint64_val", 216405745),
        "finish_ts": ("uint64_val", 216433101),
    }
    nodes = graph.nodes
    ids = [n.id for n in nodes]
    assert len(nodes) == 3664 and ids == sorted(set(ids)) and ids[0] == 216 and ids[-1] == 7022
    assert Counter(n.type for n in nodes) == {NodeType.COMP_NODE: 3643, NodeType.COMM_COLL_NODE: 21}
    assert sum(n.is_cpu_op for n in nodes) == 2448
    assert sum(len(n.data_deps) for n in nodes) == 181878
    assert max(len(n.data_deps) for n in nodes) == 270
    assert all(len(n.ctrl_deps) == 1 for n in nodes)
    assert sum(n.duration_micros for n in nodes) == 381795
    assert sum(1 for n in nodes if n.duration_micros == 0) == 157
    assert all(n.start_time_micros == 0 for n in nodes)
    assert all(n.attr("tid") is not None for n in nodes)
    assert sum(1 for n in nodes if n.attr("op_schema") is not None) == 2448
    n435 = next(n for n in nodes if n.id == 435)
    assert n435.inputs.values.startswith("[[430, 431, 0, 53120, 4, 'cuda:0']")
    assert n435.attr("involved_dim") == (True,)


def test_chakra0_collectives_issue_in_order_on_data_deps() -> None:
    graph = read_rank_file(CHAKRA0, 0)
    assert graph.dep_policy == "data"  # auto: the file has data edges
    roots = sorted(n.id for n in graph.nodes if not parents(graph, n))
    assert roots == [216, 432, 541, 619, 1634]
    order = topological_order(graph)
    assert len(order) == 3664
    children_216 = [n.id for n in graph.nodes if 216 in n.data_deps]
    assert children_216[:3] == [217, 430, 435]
    gpu = [n for n in order if n.is_traffic]
    assert [n.id for n in gpu] == [435, 622, 3256, 3512, 3686, 4486, 5700]
    expected = [
        (CollectiveType.BROADCAST, 212480, 28),
        (CollectiveType.BROADCAST, 424, 5),
        (CollectiveType.ALL_REDUCE, 8196000, 5572),
        (CollectiveType.ALL_REDUCE, 31502336, 9093),
        (CollectiveType.ALL_REDUCE, 26255360, 8512),
        (CollectiveType.ALL_REDUCE, 26550272, 8178),
        (CollectiveType.ALL_REDUCE, 9724160, 5327),
    ]
    assert [(n.comm.collective, n.comm.size_bytes, n.duration_micros) for n in gpu] == expected
    assert sum(n.comm.size_bytes for n in gpu) == 102441032
    wrappers = [n for n in graph.nodes if n.type == NodeType.COMM_COLL_NODE and n.is_cpu_op]
    assert len(wrappers) == 14 and not any(n.is_traffic for n in wrappers)
    assert all(n.comm.collective is None and n.comm.size_bytes == 0 for n in wrappers)


def test_chakra0_warnings_missing_ctrl_parents_and_cpu_comm() -> None:
    graph = read_rank_file(CHAKRA0, 0)
    text = "\n".join(graph.warnings)
    assert all("\n" not in w for w in graph.warnings)
    assert "210 parent ids referenced by ctrl_deps are not in the file" in text
    assert "data_deps are not in the file" not in text
    assert "14 CPU-side communication nodes" in text


def test_chakra0_union_policy_reports_a_cycle() -> None:
    graph = read_rank_file(CHAKRA0, 0, dep_policy="union")
    assert graph.dep_policy == "union"
    with pytest.raises(TraceError) as err:
        topological_order(graph)
    msg = str(err.value)
    assert "chakra.0.et" in msg and "rank 0" in msg and "cycle" in msg
    assert "2283 of 3664 nodes can never run" in msg  # 1381 of 3664 could run
    assert "3317" in msg and "3318" in msg


def test_chakra0_data_and_ctrl_policies() -> None:
    assert read_rank_file(CHAKRA0, 0, dep_policy="data").dep_policy == "data"
    ctrl = read_rank_file(CHAKRA0, 0, dep_policy="ctrl")
    assert ctrl.dep_policy == "ctrl"
    ids = {n.id for n in ctrl.nodes}
    for n in ctrl.nodes:
        assert parents(ctrl, n) == tuple(p for p in n.ctrl_deps if p in ids and p != n.id)
    assert sum(1 for n in ctrl.nodes if not parents(ctrl, n)) > 5


def test_chakra0_critical_path_is_positive_and_bounded() -> None:
    graph = read_rank_file(CHAKRA0, 0)
    cp = critical_path_compute_us(graph)
    comp_total = sum(n.duration_micros for n in graph.nodes if not n.is_comm)
    assert 9093 < cp <= comp_total


# --- set D ------------------------------------------------------------------------------------------


def test_feeder_json_excerpt() -> None:
    trace = read_trace(SMALL_JSON)
    graph = trace.ranks[0]
    rows = [(n.id, n.type, n.is_cpu_op, n.duration_micros, n.data_deps, n.ctrl_deps) for n in graph.nodes]
    assert rows == [
        (216, 4, True, 318, (), (3,)),
        (217, 4, True, 28, (216,), (3,)),
        (430, 4, False, 4, (216,), (429,)),
        (432, 7, True, 85, (), (3,)),
        (433, 7, True, 79, (432,), (3,)),
        (435, 7, False, 28, (432, 216, 217), (434,)),
        (541, 4, True, 153, (), (3,)),
    ]
    assert graph.dep_policy == "data"
    assert sorted(n.id for n in graph.nodes if not parents(graph, n)) == [216, 432, 541]
    assert [n.id for n in topological_order(graph)] == [216, 217, 430, 432, 433, 435, 541]
    text = "\n".join(graph.warnings)
    assert "3 parent ids referenced by ctrl_deps are not in the file" in text
    assert "e.g. 3, 429, 434" in text


def test_feeder_json_matches_chakra0_excerpt() -> None:
    small = read_rank_file(SMALL_JSON, 0)
    big = {n.id: n for n in read_rank_file(CHAKRA0, 0).nodes}
    for n in small.nodes:
        ref = big[n.id]
        assert (n.type, n.data_deps, n.ctrl_deps, n.duration_micros, n.is_cpu_op) == (
            ref.type, ref.data_deps, ref.ctrl_deps, ref.duration_micros, ref.is_cpu_op,
        )


def test_a_prefix_finds_json_rank_files_plain_and_gzipped(tmp_path: Path) -> None:
    import gzip

    (tmp_path / "t.0.json").write_bytes(SMALL_JSON.read_bytes())
    (tmp_path / "t.1.json.gz").write_bytes(gzip.compress(SMALL_JSON.read_bytes()))
    trace = read_trace(tmp_path / "t")
    assert sorted(trace.ranks) == [0, 1]
    assert [n.id for n in trace.ranks[1].nodes] == [n.id for n in read_trace(SMALL_JSON).ranks[0].nodes]
    with pytest.raises(TraceError, match=r"no file u\.<rank>\.et, \.et\.gz or \.json"):
        read_trace(tmp_path / "u")
