"""Malformed traces: one clear TraceError line naming the file (and rank, node id or byte offset)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator.errors import TraceError
from emulator.trace import et_def_pb2 as pb
from emulator.trace.framing import encode_varint
from emulator.trace.graph import check_collective_counts, topological_order
from emulator.trace.io import read_rank_file, read_trace, write_rank
from emulator.trace.model import CollectiveType, CommInfo, Node, NodeType


def frame(*bodies: bytes) -> bytes:
    return b"".join(encode_varint(len(b)) + b for b in bodies)


META = pb.GlobalMetadata(version="0.0.4").SerializeToString()
N1 = pb.Node(id=1, name="a", type=4).SerializeToString()
N2 = pb.Node(id=2, name="b", type=4, data_deps=[1]).SerializeToString()


def one_line_error(path: Path, rank: int = 0) -> str:
    with pytest.raises(TraceError) as err:
        read_rank_file(path, rank)
    msg = str(err.value)
    assert str(path) in msg and "\n" not in msg
    return msg


def test_truncated_varint_names_byte_offset(tmp_path: Path) -> None:
    p = tmp_path / "t.0.et"
    good = frame(META, N1)
    p.write_bytes(good + b"\x85")
    msg = one_line_error(p)
    assert f"byte offset {len(good)}" in msg and "truncated varint" in msg


def test_short_body_names_byte_offset(tmp_path: Path) -> None:
    p = tmp_path / "t.0.et"
    good = frame(META, N1)
    p.write_bytes(good + frame(N2)[:-3])
    msg = one_line_error(p)
    assert f"record 2 at byte offset {len(good)}" in msg and "truncated record" in msg


def test_short_metadata_record(tmp_path: Path) -> None:
    p = tmp_path / "t.0.et"
    p.write_bytes(frame(META)[:-1])
    assert "byte offset 0" in one_line_error(p)


def test_varint_overflow(tmp_path: Path) -> None:
    p = tmp_path / "t.0.et"
    good = frame(META, N1)
    p.write_bytes(good + b"\xff\xff\xff\xff\xff\x01" + N2)
    msg = one_line_error(p)
    assert "varint overflow" in msg and f"byte offset {len(good)}" in msg
    p.write_bytes(good + b"\xff\xff\xff\xff\x7f")  # 5 bytes but more than 32 bits
    assert "varint overflow" in one_line_error(p)


def test_undecodable_node_bytes(tmp_path: Path) -> None:
    p = tmp_path / "t.0.et"
    good = frame(META, N1, N2)
    bad = b"\x12\x05ab"  # string field claims 5 bytes, has 2
    p.write_bytes(good + frame(bad) + frame(N1))
    msg = one_line_error(p)
    assert f"record 3 at byte offset {len(good)}" in msg and "undecodable node" in msg


def test_invalid_utf8_name(tmp_path: Path) -> None:
    p = tmp_path / "t.0.et"
    p.write_bytes(frame(META, N1, b"\x08\x02\x12\x02\xff\xfe"))
    assert "undecodable node" in one_line_error(p)


def test_bad_packed_dependency_list_names_node(tmp_path: Path) -> None:
    p = tmp_path / "t.0.et"
    p.write_bytes(frame(META, N1, b"\x08\x07\x18\x04\x2a\x01\x85"))  # packed varint cut short
    msg = one_line_error(p, rank=4)
    assert "rank 4" in msg and ("node 7" in msg or "undecodable" in msg)


def test_duplicate_node_ids(tmp_path: Path) -> None:
    p = tmp_path / "t.0.et"
    p.write_bytes(frame(META, N1, N2, N1))
    msg = one_line_error(p)
    assert "duplicate node id 1" in msg and "rank 0" in msg


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "t.0.et"
    p.write_bytes(b"")
    assert "empty file" in one_line_error(p)


def test_corrupt_gzip(tmp_path: Path) -> None:
    p = tmp_path / "t.0.et.gz"
    p.write_bytes(gzip.compress(frame(META, N1, N2))[:-12])
    one_line_error(p)


def test_missing_file_and_missing_prefix(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no file"):
        read_trace(tmp_path / "nothing")
    with pytest.raises(TraceError, match="no such file"):
        read_trace(tmp_path / "nodir" / "x")


def test_ranks_missing_from_a_prefix(tmp_path: Path) -> None:
    for r in (0, 1, 3, 5):
        (tmp_path / f"p.{r}.et").write_bytes(frame(META, N1))
    with pytest.raises(TraceError) as err:
        read_trace(tmp_path / "p")
    msg = str(err.value)
    assert "ranks missing from the trace: 2, 4" in msg and str(tmp_path / "p") in msg


def test_rank_present_twice(tmp_path: Path) -> None:
    (tmp_path / "p.0.et").write_bytes(frame(META, N1))
    (tmp_path / "p.0.et.gz").write_bytes(gzip.compress(frame(META, N1)))
    with pytest.raises(TraceError, match="rank 0 present twice"):
        read_trace(tmp_path / "p")


def test_cycle_names_file_rank_and_nodes(tmp_path: Path) -> None:
    p = tmp_path / "c.2.et"
    cyc = [pb.Node(id=i, type=4, data_deps=[(i % 3) + 1]).SerializeToString() for i in (1, 2, 3)]
    p.write_bytes(frame(META, pb.Node(id=9, type=4).SerializeToString(), *cyc))
    g = read_trace(p).ranks[2]
    with pytest.raises(TraceError) as err:
        topological_order(g)
    msg = str(err.value)
    assert str(p) in msg and "rank 2" in msg and "1 -> 2 -> 3 -> 1" in msg and "3 of 4 nodes" in msg


def test_mismatched_collective_counts(tmp_path: Path) -> None:
    def coll(nid: int) -> Node:
        return Node(id=nid, type=NodeType.COMM_COLL_NODE, comm=CommInfo(collective=CollectiveType.ALL_REDUCE, size_bytes=64))

    write_rank(tmp_path / "m.0.et", [coll(1), coll(2)])
    write_rank(tmp_path / "m.1.et", [coll(1)])
    trace = read_trace(tmp_path / "m")
    with pytest.raises(TraceError) as err:
        check_collective_counts(trace)
    msg = str(err.value)
    assert "mismatched collective counts" in msg and "rank 0: 2" in msg and "rank 1: 1" in msg
    assert "default" in msg


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300))
def test_random_bytes_raise_only_trace_error(tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "r.0.et"
    p.write_bytes(data)
    try:
        g = read_rank_file(p, 0)
    except TraceError as exc:
        assert "\n" not in str(exc)
        return
    try:
        topological_order(g)
    except TraceError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=10_000), flip=st.integers(min_value=0, max_value=255),
       where=st.integers(min_value=0, max_value=10_000))
def test_mutated_valid_files_raise_only_trace_error(tmp_path: Path, cut: int, flip: int, where: int) -> None:
    good = bytearray(frame(META, N1, N2, pb.Node(id=3, type=7, data_deps=[2, 1]).SerializeToString()))
    good[where % len(good)] ^= flip
    p = tmp_path / "m.0.et"
    p.write_bytes(bytes(good[: max(1, len(good) - cut % 8)]))
    try:
        read_rank_file(p, 0)
    except TraceError:
        pass


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(
        ["Id", "Name", "NodeType", "runtime", "data_deps", "ctrlDeps", "is_cpu_op", "comm_size", "id", "type",
         "dataDeps", "attr", "name", "version", "int64Val", "workload_graph"]), inner, max_size=5),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=_json_values, feeder=st.booleans())
def test_random_json_raises_only_trace_error(tmp_path: Path, doc: object, feeder: bool) -> None:
    import json

    p = tmp_path / "r.0.json"
    p.write_text(json.dumps({"workload_graph": doc} if feeder else doc))
    try:
        read_rank_file(p, 0)
    except TraceError as exc:
        assert "\n" not in str(exc)


@pytest.mark.parametrize("doc", ["{}", '{"foo": 1}', '{"version": "0.0.4"}'])
def test_json_without_nodes_is_an_error_naming_the_shapes(tmp_path: Path, doc: str) -> None:
    p = tmp_path / "t.0.json"
    p.write_text(doc)
    msg = one_line_error(p)
    assert "workload_graph" in msg and "chakra_jsonizer" in msg


def test_top_level_json_list_says_what_was_expected(tmp_path: Path) -> None:
    p = tmp_path / "t.0.json"
    p.write_text('[{"id": 1, "type": 4}]')
    msg = one_line_error(p)
    assert "is a list, not an object" in msg and "workload_graph" in msg


def test_jsonizer_nodes_still_read(tmp_path: Path) -> None:
    p = tmp_path / "t.0.json"
    p.write_text('{"version": "0.0.4"}{"id": "1", "name": "a", "type": "COMP_NODE"}{}')
    g = read_rank_file(p, 0)
    assert [(n.id, n.type) for n in g.nodes] == [(1, NodeType.COMP_NODE), (0, NodeType.INVALID_NODE)]


@pytest.mark.parametrize("node_type", [99, 8, -1])
def test_unknown_node_type_is_an_error_naming_the_node(tmp_path: Path, node_type: int) -> None:
    p = tmp_path / "t.0.et"
    p.write_bytes(frame(META, N1, pb.Node(id=7, type=node_type, data_deps=[1]).SerializeToString(), N2))
    msg = one_line_error(p)
    assert f"node 7: unknown NodeType {node_type}" in msg and "COMM_COLL_NODE" in msg


def test_groups_file_naming_a_rank_outside_the_trace(tmp_path: Path) -> None:
    for r in range(8):
        write_rank(tmp_path / f"t.{r}.et", [Node(id=1, type=NodeType.COMP_NODE)])
    groups = tmp_path / "g.json"
    groups.write_text('{"1": [0, 99]}')
    with pytest.raises(TraceError, match=r"g\.json: group '1' names rank 99, but the trace has 8 rank"):
        read_trace(tmp_path / "t", groups_file=groups)
