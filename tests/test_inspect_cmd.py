"""``emulator inspect``: JSON shape and figures on the bundled traces; one-line CLI errors."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.cli import main

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
RING = TRACES / "astra-sim/examples/system/custom_collectives/custom_ring_allreduce_8npus_1MB/custom_allreduce"
MICRO = TRACES / "astra-sim/examples/workload/microbenchmarks"
CHAKRA0 = TRACES / "chakra/tests/data/chakra.0.et"
FEEDER_JSON = TRACES / "chakra/jsonData/small_chakra.0.json"

needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason="shared/traces not beside the repo")


def inspect_json(capsys, *argv: str) -> dict:
    assert main(["inspect", *argv, "--json"]) == 0
    out = capsys.readouterr().out
    return json.loads(out)  # exactly one JSON object: json.loads rejects trailing data


def comm_by_type(entry: dict) -> dict[str, dict]:
    return {c["type"]: c for c in entry["comm"]}


@needs_traces
def test_ring_allreduce_per_rank(capsys):
    s = inspect_json(capsys, str(RING))
    assert s["ranks"] == 8
    assert set(s) >= {"ranks", "per_rank", "totals", "warnings"}
    for e in s["per_rank"]:
        r = e["rank"]
        assert e["nodes"] == {"COMP_NODE": 7, "COMM_SEND_NODE": 14, "COMM_RECV_NODE": 14}
        c = comm_by_type(e)
        assert list(c) == ["COMM_SEND_NODE", "COMM_RECV_NODE"]
        assert c["COMM_SEND_NODE"]["count"] == 14 and c["COMM_SEND_NODE"]["bytes"] == 1_835_008
        assert c["COMM_SEND_NODE"]["peers"] == [(r + 1) % 8]
        assert c["COMM_RECV_NODE"]["count"] == 14 and c["COMM_RECV_NODE"]["bytes"] == 1_835_008
        assert c["COMM_RECV_NODE"]["peers"] == [(r - 1) % 8]
        assert e["critical_path_compute_us"] == 49  # 7 COMP × 7 µs on one chain
        assert e["warnings"] == []
    assert s["totals"]["nodes"] == {"COMP_NODE": 56, "COMM_SEND_NODE": 112, "COMM_RECV_NODE": 112}
    tc = comm_by_type(s["totals"])
    assert tc["COMM_SEND_NODE"]["bytes"] == 14_680_064


@needs_traces
@pytest.mark.parametrize(("coll", "n"), [("all_reduce", 4), ("all_gather", 8), ("all_to_all", 16),
                                         ("reduce_scatter", 4)])
def test_microbenchmarks(capsys, coll, n):
    s = inspect_json(capsys, str(MICRO / coll / f"{n}npus_1MB" / coll))
    assert s["ranks"] == n
    for e in s["per_rank"]:
        assert e["nodes"] == {"COMM_COLL_NODE": 1}
        assert e["comm"] == [{"type": coll.upper(), "count": 1, "bytes": 1_048_576, "groups": [None]}]
        assert e["critical_path_compute_us"] == 0
    assert s["totals"]["comm"] == [{"type": coll.upper(), "count": n, "bytes": n * 1_048_576, "groups": [None]}]


@needs_traces
def test_pytorch_trace(capsys):
    s = inspect_json(capsys, str(CHAKRA0))
    assert s["ranks"] == 1
    (e,) = s["per_rank"]
    assert e["nodes"] == {"COMP_NODE": 3643, "COMM_COLL_NODE": 21}
    c = comm_by_type(e)
    assert list(c) == ["ALL_REDUCE", "BROADCAST"]  # enum order
    assert (c["BROADCAST"]["count"], c["BROADCAST"]["bytes"]) == (2, 212_904)
    assert (c["ALL_REDUCE"]["count"], c["ALL_REDUCE"]["bytes"]) == (5, 102_228_128)
    cpu_warnings = [w for w in e["warnings"] if "CPU-side" in w]
    assert len(cpu_warnings) == 1 and "14 CPU-side" in cpu_warnings[0]
    assert any("210" in w for w in e["warnings"])  # missing ctrl parents, counted
    assert e["dep_policy"] == "data"
    assert 9093 <= e["critical_path_compute_us"] <= 381_795


@needs_traces
def test_feeder_json_and_text_form(capsys):
    s = inspect_json(capsys, str(FEEDER_JSON))
    assert sum(s["per_rank"][0]["nodes"].values()) == 7
    assert main(["inspect", str(RING)]) == 0
    out = capsys.readouterr().out
    assert "COMM_SEND_NODE" in out and "critical-path compute" in out and "49 us" in out


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    """``python -m emulator ARGV`` as a real process (the entry point, exit code and stderr as a user sees them)."""
    return subprocess.run([sys.executable, "-m", "emulator", *argv], capture_output=True, text=True, timeout=60)


def run_main(capsys, *argv: str) -> subprocess.CompletedProcess:
    """``emulator ARGV`` through :func:`emulator.cli.main` in this process: exit code, stdout and stderr."""
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["emulator", *argv], code, out, err)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0]


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert_one_line_error(run_cli("inspect", str(tmp_path / "nothing")), "nothing")
    assert_one_line_error(run_cli("generate", "collective", "--ranks", "2", "-o", str(tmp_path / "x"),
                                  "--size", "12parsecs"), "--size", "parsecs")
    assert_one_line_error(run_main(capsys, "generate", "data-parallel", "--ranks", "2", "-o", str(tmp_path / "x"),
                                   "--fwd", "3fortnights"), "--fwd")
    assert_one_line_error(run_main(capsys, "generate", "ring", "--ranks", "2", "-o", str(tmp_path / "x")), "ring")
    assert_one_line_error(run_main(capsys, "generate", "collective", "--ranks", "2", "-o", str(tmp_path / "x"),
                                   "--collective", "allreduce"), "allreduce")
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_one_line_error(run_main(capsys, "generate", "collective", "--ranks", "2", "-o", str(blocker / "sub" / "x")), "x")
    assert_one_line_error(run_main(capsys, "generate", "moe", "--ranks", "8", "--tp", "3", "-o", str(tmp_path / "m")), "--tp")
    assert_one_line_error(run_main(capsys, "generate", "pipeline", "-o", str(tmp_path / "p")), "--ranks")


def test_summary_of_in_memory_trace():
    from emulator.trace import generators as gen
    from emulator.trace.inspection import format_summary_text, summarize_trace
    from emulator.trace.model import CollectiveType, CommInfo, Node, NodeType, RankGraph, Trace

    t = gen.moe_trace(gen.MoeOptions(tp=1, ep=2, dp=2, layers=1, a2a_bytes=1000, expert_grad_bytes=10,
                                     dense_grad_bytes=20, attn_us=3, expert_us=5, bwd_factor=2, optimizer_us=1))
    ranks = {r: RankGraph(rank=r, nodes=list(t.nodes(r)), warnings=[]) for r in range(t.world_size)}
    extra = [
        Node(id=900, name="c10d::allreduce_", type=NodeType.COMM_COLL_NODE, is_cpu_op=True, comm=CommInfo()),
        Node(id=901, name="untyped", type=NodeType.COMM_COLL_NODE, comm=CommInfo(size_bytes=5)),
    ]
    ranks[0].nodes.extend(extra)
    ranks[0].warnings.append("2 missing parent(s) ignored")
    trace = Trace(ranks=ranks, groups=dict(t.groups), source="mem", warnings=["top"])
    s = summarize_trace(trace)
    e0 = s["per_rank"][0]
    assert e0["nodes"] == {"COMP_NODE": 5, "COMM_COLL_NODE": 6 + 2}
    c = {x["type"]: x for x in e0["comm"]}
    assert c["ALL_TO_ALL"] == {"type": "ALL_TO_ALL", "count": 4, "bytes": 4000, "groups": ["1"]}
    assert c["ALL_REDUCE"] == {"type": "ALL_REDUCE", "count": 2, "bytes": 30, "groups": ["3", "5"]}
    assert e0["critical_path_compute_us"] == 3 + 5 + 10 + 6 + 1
    assert e0["warnings"] == ["2 missing parent(s) ignored",
                              "1 CPU-side communication node(s) (is_cpu_op) ignored: no traffic",
                              "1 COMM_COLL_NODE(s) without comm_type ignored: no traffic"]
    assert s["per_rank"][1]["warnings"] == []
    assert s["totals"]["nodes"]["COMM_COLL_NODE"] == 4 * 6 + 2
    assert s["totals"]["comm"][0]["type"] == CollectiveType.ALL_REDUCE.name
    assert s["totals"]["comm"][0]["groups"] == ["3", "4", "5"]
    assert s["warnings"] == ["top"]
    assert [g["ranks"] for g in s["groups"]] == [[0, 1], [2, 3], [0, 2], [1, 3], [0, 1, 2, 3]]
    text = format_summary_text(s)
    assert "rank 0: 1 CPU-side" in text and "ALL_TO_ALL" in text and "top" in text


def test_cli_malformed_traces_are_one_line_errors(tmp_path, capsys):
    """Every malformed case of issue 2 through ``emulator inspect``: exit 2, one line, file + location."""
    from emulator.trace import et_def_pb2 as pb
    from emulator.trace.framing import encode_varint
    from emulator.trace.io import write_rank
    from emulator.trace.model import CollectiveType, CommInfo, Node, NodeType

    def rec(msg) -> bytes:
        body = msg.SerializeToString()
        return encode_varint(len(body)) + body

    md = rec(pb.GlobalMetadata(version="0.0.4"))
    good = md + rec(pb.Node(id=1, name="a", type=4)) + rec(pb.Node(id=2, name="b", type=4, data_deps=[1]))
    cases = {
        "trunc.0.et": (good[:-3], ["record 2", "byte offset", "truncated record"]),
        "overflow.0.et": (good + b"\xff" * 6, ["record 3", "byte offset", "varint overflow"]),
        "junk.0.et": (good + encode_varint(3) + b"\x0a\xff\xff", ["rank 0", "record 3", "byte offset", "undecodable"]),
        "utf.0.et": (good + encode_varint(4) + b"\x12\x02\xc3\x28", ["rank 0", "byte offset", "UTF-8"]),
        "dup.0.et": (good + rec(pb.Node(id=1, type=4)), ["rank 0", "duplicate node id 1"]),
        "cyc.0.et": (md + b"".join(rec(pb.Node(id=i, type=4, data_deps=[i % 3 + 1])) for i in (1, 2, 3)),
                     ["rank 0", "dependency cycle", "1 -> 2 -> 3 -> 1"]),
    }
    for i, (name, (data, needles)) in enumerate(cases.items()):
        (tmp_path / name).write_bytes(data)
        run = run_cli if i == 0 else functools.partial(run_main, capsys)  # one real process, the rest in-process
        assert_one_line_error(run("inspect", str(tmp_path / name)), str(tmp_path / name), *needles)
    for r in (0, 2):
        (tmp_path / f"gap.{r}.et").write_bytes(good)
    assert_one_line_error(run_main(capsys, "inspect", str(tmp_path / "gap")), "gap", "ranks missing", "1 (found 2 of 3)")

    def coll(nid: int) -> Node:
        return Node(id=nid, type=NodeType.COMM_COLL_NODE, comm=CommInfo(collective=CollectiveType.ALL_REDUCE,
                                                                       size_bytes=64))

    write_rank(tmp_path / "mm.0.et", [coll(1), coll(2)])
    write_rank(tmp_path / "mm.1.et", [coll(1)])
    assert_one_line_error(run_main(capsys, "inspect", str(tmp_path / "mm"), "--json"), "mm", "mismatched collective counts",
                          "rank 0: 2", "rank 1: 1")


def test_barrier_without_size_is_not_warned(tmp_path, capsys):
    assert main(["generate", "collective", "--ranks", "2", "-o", str(tmp_path / "b"),
                 "--collective", "barrier,all_reduce"]) == 0
    capsys.readouterr()
    s = inspect_json(capsys, str(tmp_path / "b"))
    assert comm_by_type(s["per_rank"][0])["BARRIER"]["bytes"] == 0
    assert all(e["warnings"] == [] for e in s["per_rank"])
    # a sized collective written with comm_size 0 still is
    from emulator.trace.io import write_rank
    from emulator.trace.model import CollectiveType, CommInfo, Node, NodeType

    zero = Node(id=1, type=NodeType.COMM_COLL_NODE, comm=CommInfo(collective=CollectiveType.ALL_REDUCE))
    write_rank(tmp_path / "z.0.et", [zero])
    s = inspect_json(capsys, str(tmp_path / "z.0.et"))
    assert any("comm_size 0" in w for w in s["per_rank"][0]["warnings"])


def test_text_warnings_name_file_and_rank_once(tmp_path, capsys):
    from emulator.trace.io import write_rank
    from emulator.trace.model import Node

    write_rank(tmp_path / "w.0.et", [Node(id=1, type=4, data_deps=(7,))])
    assert main(["inspect", str(tmp_path / "w.0.et")]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "parent ids" in x)
    assert line.strip().startswith(f"{tmp_path / 'w.0.et'}: rank 0: 1 parent ids") and line.count("rank 0") == 1
