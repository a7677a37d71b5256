"""The columnar fast path and the per-node path give identical results, batch boundaries included."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator.errors import TraceError
from emulator.trace import et_def_pb2 as pb
from emulator.trace import framing
from emulator.trace.columns import ColumnDecoder
from emulator.trace.framing import encode_varint
from emulator.trace.io import read_rank_file, write_rank
from emulator.trace.model import CollectiveType, CommInfo, IOInfo, Node, NodeType


def frame(*messages) -> bytes:
    out = bytearray()
    for m in messages:
        body = m if isinstance(m, bytes) else m.SerializeToString()
        out += encode_varint(len(body)) + body
    return bytes(out)


META = pb.GlobalMetadata(version="0.0.4")


def both(path: Path, rank: int = 0, **kw):
    """(columnar result, per-node result, number of batches the columnar path accepted)."""
    accepted = []
    original = ColumnDecoder.decode

    def spy(self, bodies, out):
        ok = original(self, bodies, out)
        accepted.append(ok)
        return ok

    with mock.patch.object(ColumnDecoder, "decode", spy):
        fast = read_rank_file(path, rank, **kw)
    with mock.patch.object(ColumnDecoder, "enabled", new_callable=mock.PropertyMock, return_value=False):
        slow = read_rank_file(path, rank, **kw)
    assert fast.nodes == slow.nodes
    assert fast.warnings == slow.warnings
    assert fast.dep_policy == slow.dep_policy
    return fast, slow, sum(accepted)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framing, "CHUNK_BYTES", 300)


def chain(first: int, count: int, **extra) -> list[Node]:
    return [
        Node(id=i, name=f"n{i}", type=NodeType.COMP_NODE, data_deps=(i - 1,) if i > first else (),
             duration_micros=(i % 3) * 5, **extra)
        for i in range(first, first + count)
    ]


def test_uniform_multibyte_single_dependencies(tmp_path: Path, small_chunks: None) -> None:
    nodes = chain(20_000, 400)  # every dependency id is a 3-byte varint
    write_rank(tmp_path / "u.0.et", nodes)
    fast, _, accepted = both(tmp_path / "u.0.et")
    assert fast.nodes == nodes and accepted > 3
    assert fast.warnings == []


def test_equal_total_but_unequal_dependency_lists_are_not_misassigned(tmp_path: Path) -> None:
    # 2 + 0 + 4 bytes = 3 nodes x 2 bytes: the uniform one-varint-per-node path must not take it
    for i, nodes in enumerate([
        [Node(id=0, ctrl_deps=(128,)), Node(id=1), Node(id=2, ctrl_deps=(128, 129))],
        [Node(id=3, data_deps=(300, 301)), Node(id=4), Node(id=5, data_deps=(300,))],
    ]):
        write_rank(tmp_path / f"u{i}.0.et", nodes)
        fast, slow, accepted = both(tmp_path / f"u{i}.0.et")
        assert accepted == 1
        assert fast.nodes == nodes


def test_mixed_dependency_widths_and_many_parents(tmp_path: Path, small_chunks: None) -> None:
    nodes = [Node(id=i, type=NodeType.COMP_NODE, data_deps=tuple(range(max(0, i - 5), i)) + ((2**63 + 1,) if i == 9 else ()))
             for i in range(300)]
    write_rank(tmp_path / "m.0.et", nodes)
    fast, _, accepted = both(tmp_path / "m.0.et")
    assert fast.nodes == nodes and accepted
    assert any("1 parent ids referenced by data_deps" in w and "9223372036854775809" in w for w in fast.warnings)


def test_contiguous_ids_with_parent_outside_the_run(tmp_path: Path) -> None:
    nodes = chain(10, 50)
    nodes[5] = Node(id=15, type=NodeType.COMP_NODE, data_deps=(14, 3), ctrl_deps=(99,))
    write_rank(tmp_path / "c.0.et", nodes)
    fast, _, _ = both(tmp_path / "c.0.et")
    text = "\n".join(fast.warnings)
    assert "1 parent ids referenced by data_deps are not in the file (treated as satisfied), e.g. 3" in text
    assert "1 parent ids referenced by ctrl_deps are not in the file (treated as satisfied), e.g. 99" in text


def test_fields_appearing_late_and_big_ids(tmp_path: Path, small_chunks: None) -> None:
    nodes = chain(0, 120)
    nodes.append(Node(id=2**64 - 1, name="late", type=NodeType.COMM_RECV_NODE, ctrl_deps=(5,), start_time_micros=7,
                      inputs=IOInfo("[1]", "[[1]]", "['int']"), outputs=IOInfo("x"),
                      comm=CommInfo(size_bytes=3, src=1, dst=0, pg_name="p")))
    nodes.append(Node(id=2**63, type=NodeType.COMP_NODE, data_deps=(2**64 - 1,)))
    write_rank(tmp_path / "l.0.et", nodes)
    fast, _, accepted = both(tmp_path / "l.0.et")
    assert fast.nodes == nodes and accepted > 3
    assert type(fast.nodes[-1].id) is int and fast.nodes[-1].type == NodeType.COMP_NODE


def test_non_canonical_records_fall_back_exactly(tmp_path: Path) -> None:
    dup_name = b"\x08\x05\x12\x01a\x18\x04\x12\x01b"  # name written twice: last wins
    explicit_default = b"\x08\x06\x18\x04\x38\x00\x30\x00"  # duration 0 and start 0 written explicitly
    empty_attr = b"\x08\x07\x18\x04\x52\x00"  # an attribute with no name and no value
    unpacked = b"\x08\x08\x18\x04\x28\x05\x28\x06"
    data = frame(META, pb.Node(id=1, type=4), dup_name, explicit_default, empty_attr, unpacked)
    (tmp_path / "n.0.et").write_bytes(data)
    fast, _, accepted = both(tmp_path / "n.0.et")
    assert accepted == 0
    by_id = {n.id: n for n in fast.nodes}
    assert by_id[5].name == "b"
    assert by_id[6].duration_micros == 0
    assert by_id[7].attrs == (("", ("", None)),)
    assert by_id[8].data_deps == (5, 6)


def test_varied_attributes_give_up_and_stop_trying(tmp_path: Path, small_chunks: None) -> None:
    nodes = [Node(id=i, type=NodeType.COMP_NODE, attrs=tuple((f"a{j}", ("int64_val", i * 10 + j)) for j in range(12)))
             for i in range(200)]
    write_rank(tmp_path / "v.0.et", nodes)
    fast, _, accepted = both(tmp_path / "v.0.et")
    assert fast.nodes == nodes


def test_negative_and_unknown_types_are_errors_on_both_paths(tmp_path: Path) -> None:
    data = frame(META, pb.Node(id=1, type=4), b"\x08\x02\x18" + b"\xff" * 9 + b"\x01", pb.Node(id=3, type=12))
    (tmp_path / "t.0.et").write_bytes(data)
    for enabled in (True, False):
        with mock.patch.object(ColumnDecoder, "enabled", new_callable=mock.PropertyMock, return_value=enabled), \
                pytest.raises(TraceError, match=r"rank 0: node 2: unknown NodeType -1 \(2 such node"):
            read_rank_file(tmp_path / "t.0.et", 0)


def test_error_in_attribute_names_the_node_on_both_paths(tmp_path: Path) -> None:
    good = [Node(id=i, type=NodeType.COMM_COLL_NODE, comm=CommInfo(collective=CollectiveType.ALL_REDUCE, size_bytes=8))
            for i in range(5)]
    bad = pb.Node(id=5, type=7)
    bad.attr.add(name="comm_size").float_val = 1.0
    write_rank(tmp_path / "e.0.et", good)
    with open(tmp_path / "e.0.et", "ab") as f:
        f.write(frame(bad))
    from emulator.errors import TraceError

    with pytest.raises(TraceError, match="rank 0: node 5: attribute comm_size must be an integer"):
        read_rank_file(tmp_path / "e.0.et", 0)
    with mock.patch.object(ColumnDecoder, "enabled", new_callable=mock.PropertyMock, return_value=False):
        with pytest.raises(TraceError, match="rank 0: node 5: attribute comm_size must be an integer"):
            read_rank_file(tmp_path / "e.0.et", 0)


_node_bodies = st.lists(
    st.builds(
        lambda nid, name, t, data, ctrl, dur, n_attr: pb.Node(
            id=nid, name=name, type=t, data_deps=data, ctrl_deps=ctrl, duration_micros=dur,
            attr=[pb.AttributeProto(name=f"k{j}", int64_val=j) for j in range(n_attr)],
        ).SerializeToString(),
        st.integers(0, 2**64 - 1), st.sampled_from(["", "x", "é"]), st.integers(0, 9),
        st.lists(st.integers(0, 2**64 - 1), max_size=3), st.lists(st.integers(0, 300), max_size=2),
        st.integers(0, 2**40), st.integers(0, 3),
    ),
    max_size=40,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bodies=_node_bodies,
    # explicit defaults, unpacked deps, an unknown field, and singular fields written a second time
    junk=st.lists(st.sampled_from([b"\x38\x00", b"\x52\x00", b"\x12\x00", b"\x28\x01", b"\x58\x01",
                                   b"\x08\x07", b"\x38\x05", b"\x12\x01y", b"\x18\x04"]), max_size=3),
    at=st.integers(0, 39),
)
def test_hypothesis_paths_agree_on_raw_records(
    tmp_path: Path, small_chunks: None, bodies: list[bytes], junk: list[bytes], at: int
) -> None:
    from emulator.errors import TraceError

    if bodies and junk:
        at %= len(bodies)
        bodies[at] = bodies[at] + b"".join(junk)
    (tmp_path / "h.0.et").write_bytes(frame(META, *bodies))
    try:
        fast, _, _ = both(tmp_path / "h.0.et", dep_policy="union")
        # protobuf semantics (a repeated singular field: the last value wins), record by record
        for n, body in zip(fast.nodes, bodies, strict=True):
            m = pb.Node.FromString(body)
            assert (n.id, n.name, int(n.type), n.duration_micros) == (m.id, m.name, m.type, m.duration_micros)
            assert n.data_deps == tuple(m.data_deps) and n.ctrl_deps == tuple(m.ctrl_deps)
    except TraceError as exc:  # duplicate ids are fine to hit; both paths must agree on it
        with mock.patch.object(ColumnDecoder, "enabled", new_callable=mock.PropertyMock, return_value=False):
            with pytest.raises(TraceError) as slow:
                read_rank_file(tmp_path / "h.0.et", 0)
        assert str(slow.value) == str(exc)
