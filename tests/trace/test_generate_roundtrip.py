"""Generated traces through the real writer and reader: round trip, determinism, inspect figures."""

from __future__ import annotations

import gzip

import pytest

from emulator.cli import main
from emulator.trace import generators as gen
from emulator.trace.graph import check_collective_counts, critical_path_compute_us
from emulator.trace.inspection import summarize_trace
from emulator.trace.io import read_trace
from emulator.trace.model import CollectiveType, NodeType

CASES = {
    "collective": ["--ranks", "4", "--collective", "all_reduce,all_gather,broadcast,all_to_all,reduce_scatter,"
                   "reduce,gather,scatter,barrier", "--size", "16MiB", "--gap", "250us", "--iterations", "2",
                   "--root", "1"],
    "collective-groups": ["--ranks", "8", "--group-size", "4", "--collective", "all_gather", "--size", "4KiB"],
    "data-parallel": ["--ranks", "3", "--layers", "5", "--params-per-layer", "10MiB", "--bucket-size", "25MiB",
                      "--fwd", "100us", "--bwd", "0.2ms", "--optimizer", "50", "--iterations", "2"],
    "moe": ["--tp", "2", "--ep", "2", "--dp", "2", "--layers", "2"],
    "pipeline": ["--ranks", "4", "--microbatches", "4", "--activation-size", "2MiB"],
}


def kind_of(case: str) -> str:
    return case.split("-groups")[0]


def build(case: str, prefix) -> None:
    assert main(["generate", kind_of(case), "-o", str(prefix), *CASES[case]]) == 0


def expected(case: str) -> gen.GeneratedTrace:
    import argparse

    from emulator.commands.generate import build, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(), "generate", "")
    args = parser.parse_args(["generate", kind_of(case), "-o", "unused", *CASES[case]])
    return build(args)


def comparable(node):
    c = node.comm
    comm = None if c is None else (c.collective, c.size_bytes, c.src, c.dst, c.tag, c.pg_name, c.root)
    return (node.id, node.name, int(node.type), tuple(node.data_deps), node.duration_micros, node.is_cpu_op, comm)


@pytest.mark.parametrize("case", list(CASES))
def test_round_trip(tmp_path, case):
    build(case, tmp_path / "t")
    want = expected(case)
    trace = read_trace(str(tmp_path / "t"))
    assert sorted(trace.ranks) == list(range(want.world_size))
    for rank, graph in trace.ranks.items():
        got = [comparable(n) for n in graph.nodes if n.type != NodeType.METADATA_NODE]
        assert got == [comparable(n) for n in want.nodes(rank)]
        assert graph.dep_policy == ("data" if any(n.data_deps for n in graph.nodes) else "ctrl")
        assert graph.metadata.version == "0.0.4"
    for name, group in want.groups.items():
        assert trace.groups[name].ranks == group.ranks
    check_collective_counts(trace)


@pytest.mark.parametrize("case", list(CASES))
def test_byte_identical(tmp_path, case):
    build(case, tmp_path / "a")
    build(case, tmp_path / "b")
    n = expected(case).world_size
    for r in range(n):
        assert (tmp_path / f"a.{r}.et").read_bytes() == (tmp_path / f"b.{r}.et").read_bytes()


def test_compressed_output_reads_back(tmp_path):
    assert main(["generate", "collective", "--ranks", "2", "--compress", "-o", str(tmp_path / "z")]) == 0
    raw = (tmp_path / "z.0.et.gz").read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    assert len(gzip.decompress(raw)) > 0
    trace = read_trace(str(tmp_path / "z"))
    assert [n.comm.size_bytes for n in trace.ranks[1].nodes if n.is_traffic] == [1 << 20]


def test_data_parallel_inspect_figures(tmp_path):
    build("data-parallel", tmp_path / "dp")
    s = summarize_trace(read_trace(str(tmp_path / "dp")))
    assert s["ranks"] == 3
    for e in s["per_rank"]:
        # 5 layers × 10 MiB, buckets ≥ 25 MiB from the last layer: (4,3,2) 30 MiB, (1,0) 20 MiB; 2 iterations
        assert e["comm"] == [{"type": "ALL_REDUCE", "count": 4, "bytes": 2 * 50 * 2**20, "groups": [None]}]
        assert e["nodes"]["COMP_NODE"] == 2 * (5 + 5 + 1)
        # all-reduces are off the compute chain: the critical path is fwd + bwd + optimizer per iteration
        assert e["critical_path_compute_us"] == 2 * (5 * 100 + 5 * 200 + 50)


def test_moe_groups_recovered_and_counted(tmp_path):
    build("moe", tmp_path / "m")
    trace = read_trace(str(tmp_path / "m"))
    assert len(trace.groups) == 14  # tp, ep, dp: 4 each; dense (ep × dp): 2
    s = summarize_trace(trace)
    e = s["per_rank"][0]
    c = {x["type"]: x for x in e["comm"]}
    assert c["ALL_TO_ALL"]["count"] == 8 and len(c["ALL_TO_ALL"]["groups"]) == 1
    assert c["ALL_REDUCE"]["count"] == 4 + 4 and len(c["ALL_REDUCE"]["groups"]) == 3


def test_pipeline_critical_path_and_pairs(tmp_path):
    build("pipeline", tmp_path / "p")
    trace = read_trace(str(tmp_path / "p"))
    g0 = trace.ranks[0]
    assert critical_path_compute_us(g0) == 4 * 300 + 4 * 600 + 100  # within one rank: its own chain
    sends = [n.comm for g in trace.ranks.values() for n in g.nodes if n.type == NodeType.COMM_SEND_NODE]
    recvs = [n.comm for g in trace.ranks.values() for n in g.nodes if n.type == NodeType.COMM_RECV_NODE]
    assert sorted((c.src, c.dst, c.tag) for c in sends) == sorted((c.src, c.dst, c.tag) for c in recvs)


def test_collective_root_and_types_survive(tmp_path):
    build("collective", tmp_path / "c")
    trace = read_trace(str(tmp_path / "c"))
    colls = [n for n in trace.ranks[2].nodes if n.type == NodeType.COMM_COLL_NODE]
    assert {n.comm.collective for n in colls} == set(CollectiveType) - {CollectiveType.REDUCE_SCATTER_BLOCK}
    rooted = {CollectiveType.REDUCE, CollectiveType.GATHER, CollectiveType.SCATTER, CollectiveType.BROADCAST}
    assert all((n.comm.root == 1) == (n.comm.collective in rooted) for n in colls)


def _peak_bytes_writing(tmp_path, iterations: int) -> int:
    import tracemalloc

    t = gen.collective_trace(gen.CollectiveOptions(ranks=1, iterations=iterations, gap_us=1))
    tracemalloc.start()
    try:
        gen.write_generated(t, tmp_path / f"big{iterations}")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_generation_memory_is_bounded(tmp_path):
    small = _peak_bytes_writing(tmp_path, 1_000)     # 2k nodes
    large = _peak_bytes_writing(tmp_path, 10_000)    # 20k nodes (held in memory: several MiB)
    assert (tmp_path / "big10000.0.et").stat().st_size > 5 * (tmp_path / "big1000.0.et").stat().st_size
    assert large < small * 2 + (1 << 20), (small, large)  # streamed: 10× the nodes, not 10× the memory


def test_inspect_groups_file_overrides(tmp_path, capsys):
    import json

    assert main(["generate", "collective", "--ranks", "4", "--group-size", "2", "-o", str(tmp_path / "g")]) == 0
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "g"), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert [(g["name"], g["ranks"]) for g in s["groups"]] == [("1", [0, 1]), ("2", [2, 3])]
    assert s["per_rank"][3]["comm"][0]["groups"] == ["2"]
    groups_file = tmp_path / "groups.json"
    groups_file.write_text(json.dumps({"1": [0, 1], "2": [2, 3]}))
    assert main(["inspect", str(tmp_path / "g"), "--json", "--groups", str(groups_file)]) == 0
    s2 = json.loads(capsys.readouterr().out)
    assert [(g["name"], g["ranks"]) for g in s2["groups"]] == [("1", [0, 1]), ("2", [2, 3])]


def test_compressed_output_is_deterministic(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        assert main(["generate", "pipeline", "--ranks", "2", "--compress", "-o", str(tmp_path / d / "p")]) == 0
    assert (tmp_path / "a/p.1.et.gz").read_bytes() == (tmp_path / "b/p.1.et.gz").read_bytes()
