"""Real-world heterogeneity of Chakra files, one case at a time (hand-built wire bytes)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from google.protobuf import json_format

from emulator.errors import TraceError
from emulator.trace import et_def_pb2 as pb
from emulator.trace.framing import encode_varint
from emulator.trace.graph import parents, topological_order
from emulator.trace.io import read_rank_file, read_trace
from emulator.trace.model import CollectiveType, NodeType

INT_KINDS = [
    "int32_val", "int64_val", "uint32_val", "uint64_val", "sint32_val", "sint64_val",
    "fixed32_val", "fixed64_val", "sfixed32_val", "sfixed64_val",
]


def frame(*messages: bytes | pb.Node | pb.GlobalMetadata) -> bytes:
    out = bytearray()
    for m in messages:
        body = m if isinstance(m, bytes) else m.SerializeToString()
        out += encode_varint(len(body)) + body
    return bytes(out)


def meta(version: str = "0.0.4", **string_attrs: str) -> pb.GlobalMetadata:
    m = pb.GlobalMetadata(version=version)
    for k, v in string_attrs.items():
        m.attr.add(name=k).string_val = v
    return m


def node(nid: int, ntype: int = 4, *, data=(), ctrl=(), dur: int = 0, name: str = "", **attrs) -> pb.Node:
    n = pb.Node(id=nid, name=name or f"n{nid}", type=ntype, data_deps=data, ctrl_deps=ctrl, duration_micros=dur)
    for key, (kind, value) in attrs.items():
        a = n.attr.add(name=key)
        if kind.endswith("_list"):
            getattr(a, kind).values.extend(value)
        else:
            setattr(a, kind, value)
    return n


def write(tmp_path: Path, data: bytes, name: str = "t.0.et") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


# --- framing quirks -----------------------------------------------------------------------------------


def test_legacy_file_without_metadata_keeps_its_first_node(tmp_path: Path) -> None:
    # ASTRA-sim 2023-11 examples: no GlobalMetadata, order only in ctrl_deps
    data = frame(node(0, 7, comm_type=("int64_val", 0), comm_size=("int64_val", 64)), node(1, 4, ctrl=[0], dur=5))
    g = read_rank_file(write(tmp_path, data), 0)
    assert not g.metadata.present
    assert [n.id for n in g.nodes] == [0, 1]
    assert g.dep_policy == "ctrl"  # auto: no data edge anywhere
    assert parents(g, g.nodes[1]) == (0,)
    assert any("no GlobalMetadata" in w for w in g.warnings)


def test_legacy_first_node_with_id_zero_detected_by_type_tag(tmp_path: Path) -> None:
    data = frame(pb.Node(id=0, name="x", type=4), pb.Node(id=1, type=4, data_deps=[0]))
    g = read_rank_file(write(tmp_path, data), 0)
    assert not g.metadata.present and [n.id for n in g.nodes] == [0, 1]


def test_zero_length_records_are_empty_messages_not_end_of_stream(tmp_path: Path) -> None:
    # an all-default GlobalMetadata, then an all-default Node (id 0, INVALID), then a real node
    data = frame(b"", b"", node(5, 4, dur=3))
    g = read_rank_file(write(tmp_path, data), 0)
    assert g.metadata.present and g.metadata.version == ""
    assert [(n.id, n.type) for n in g.nodes] == [(0, NodeType.INVALID_NODE), (5, NodeType.COMP_NODE)]


def test_gzip_detected_by_magic_not_name(tmp_path: Path) -> None:
    data = gzip.compress(frame(meta(), node(1, 4, dur=2)))
    for name in ("plain.0.et", "named.0.et.gz"):
        g = read_rank_file(write(tmp_path, data, name), 0)
        assert [(n.id, n.duration_micros) for n in g.nodes] == [(1, 2)]


def test_gzip_prefix_trace(tmp_path: Path) -> None:
    for r in range(2):
        (tmp_path / f"p.{r}.et.gz").write_bytes(gzip.compress(frame(meta(), node(r, 4))))
    t = read_trace(tmp_path / "p")
    assert sorted(t.ranks) == [0, 1]


def test_unknown_fields_are_skipped(tmp_path: Path) -> None:
    body = node(1, 4, dur=2).SerializeToString() + b"\x58\x07" + b"\x62\x03abc"  # fields 11 and 12
    attr_extra = node(3, 4, data=[1])
    attr_extra.attr.add(name="x").int64_val = 1
    a_body = attr_extra.SerializeToString()
    g = read_rank_file(write(tmp_path, frame(meta(), body, a_body)), 0)
    assert [(n.id, int(n.type)) for n in g.nodes] == [(1, 4), (3, 4)]
    assert g.nodes[0].duration_micros == 2
    assert "unknown protobuf fields" in "\n".join(g.warnings)


def test_unpacked_and_split_dependency_lists(tmp_path: Path) -> None:
    # field 5 unpacked (tag 0x28) and field 4 split into two packed chunks: both legal on the wire
    body = bytes([0x08, 9, 0x18, 4, 0x28, 1, 0x28, 2, 0x22, 1, 3, 0x22, 1, 4])
    g = read_rank_file(write(tmp_path, frame(meta(), node(1), node(2), node(3), node(4), body)), 0)
    n9 = g.nodes[-1]
    assert n9.data_deps == (1, 2) and n9.ctrl_deps == (3, 4)


def test_big_ids_and_multibyte_deps(tmp_path: Path) -> None:
    big = (1 << 64) - 1
    g = read_rank_file(write(tmp_path, frame(meta(), node(300, 4), node(big, 4, data=[300, 2**40]))), 0)
    assert g.nodes[1].id == big and g.nodes[1].data_deps == (300, 2**40)


# --- attributes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", INT_KINDS)
def test_every_integer_kind_reads_comm_fields(tmp_path: Path, kind: str) -> None:
    size = 1048576
    coll = node(1, 7, comm_type=(kind, 2), comm_size=(kind, size), comm_priority=(kind, 3))
    send = node(2, 5, comm_dst=(kind, 3), comm_tag=(kind, 7), comm_size=(kind, 4096))
    recv = node(3, 6, comm_src=(kind, 0), comm_size=(kind, 4096))
    g = read_rank_file(write(tmp_path, frame(meta(), coll, send, recv)), 2)
    c, s, r = (n.comm for n in g.nodes)
    assert (c.collective, c.size_bytes, c.priority) == (CollectiveType.ALL_GATHER, size, 3)
    assert (s.src, s.dst, s.tag, s.size_bytes) == (2, 3, 7, 4096)
    assert (r.src, r.dst, r.size_bytes) == (0, 2, 4096)


def test_uint64_comm_size_is_not_zero(tmp_path: Path) -> None:
    g = read_rank_file(write(tmp_path, frame(meta(), node(1, 7, comm_type=("int64_val", 0), comm_size=("uint64_val", 2**40)))), 0)
    assert g.nodes[0].comm.size_bytes == 2**40


@pytest.mark.parametrize("kind", INT_KINDS + ["bool_val"])
def test_is_cpu_op_accepts_bool_and_integer_kinds(tmp_path: Path, kind: str) -> None:
    value = True if kind == "bool_val" else 1
    g = read_rank_file(write(tmp_path, frame(meta(), node(1, 7, is_cpu_op=(kind, value)), node(2, 4, is_cpu_op=(kind, 0 if kind != "bool_val" else False)))), 0)
    assert [n.is_cpu_op for n in g.nodes] == [True, False]


@pytest.mark.parametrize(
    "attr,kind,value",
    [
        ("comm_size", "double_val", 1.0),
        ("comm_size", "float_val", 2.0),
        ("comm_size", "string_val", "1048576"),
        ("comm_size", "int64_list", [1]),
        ("comm_type", "string_val", "ALL_REDUCE"),
        ("comm_src", "bool_val", True),
        ("is_cpu_op", "string_val", "false"),
        ("comm_size", "", None),
    ],
)
def test_wrong_kind_for_an_integer_attribute_names_node_and_attribute(tmp_path: Path, attr: str, kind: str, value: object) -> None:
    n = node(77, 7, comm_type=("int64_val", 0))
    a = n.attr.add(name=attr)
    if kind.endswith("_list"):
        getattr(a, kind).values.extend(value)
    elif kind:
        setattr(a, kind, value)
    path = write(tmp_path, frame(meta(), n))
    with pytest.raises(TraceError) as err:
        read_rank_file(path, 3)
    msg = str(err.value)
    assert str(path) in msg and "rank 3" in msg and "node 77" in msg and attr in msg and "\n" not in msg


def test_negative_comm_size_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="node 1.*negative"):
        read_rank_file(write(tmp_path, frame(meta(), node(1, 7, comm_type=("int64_val", 0), comm_size=("int64_val", -5)))), 0)


def test_unknown_collective_number_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="node 4: attribute comm_type 12"):
        read_rank_file(write(tmp_path, frame(meta(), node(4, 7, comm_type=("int64_val", 12)))), 0)


def test_comm_attributes_on_non_comm_nodes_stay_plain_attributes(tmp_path: Path) -> None:
    g = read_rank_file(write(tmp_path, frame(meta(), node(1, 4, comm_size=("string_val", "odd"), num_ops=("uint64_val", 9)))), 0)
    n = g.nodes[0]
    assert n.comm is None and n.attr("comm_size") == "odd" and n.attr("num_ops") == 9
    assert n.attrs == (("comm_size", ("string_val", "odd")), ("num_ops", ("uint64_val", 9)))


def test_all_attribute_kinds_are_preserved_with_their_kind(tmp_path: Path) -> None:
    n = pb.Node(id=1, type=4)
    values = {
        "double_val": 1.5, "float_val": 0.25, "int32_val": -3, "int64_val": -(2**40), "uint32_val": 7,
        "uint64_val": 2**63, "sint32_val": -9, "sint64_val": -(2**50), "fixed32_val": 11, "fixed64_val": 2**60,
        "sfixed32_val": -12, "sfixed64_val": -(2**61), "bool_val": True, "string_val": "s", "bytes_val": b"\x00\xff",
    }
    lists = {"int64_list": (1, -2), "bool_list": (True, False), "string_list": ("a", "b"), "double_list": (0.5,),
             "bytes_list": (b"x",), "uint64_list": ()}
    for kind, v in values.items():
        setattr(n.attr.add(name=kind), kind, v)
    for kind, v in lists.items():
        a = n.attr.add(name=kind)
        getattr(a, kind).values.extend(v)
        getattr(a, kind).SetInParent()
    n.attr.add(name="empty")
    g = read_rank_file(write(tmp_path, frame(meta(), n)), 0)
    got = dict(g.nodes[0].attrs)
    for kind, v in values.items():
        assert got[kind] == (kind, v)
    for kind, v in lists.items():
        assert got[kind] == (kind, v)
    assert got["empty"] == ("", None)


# --- collectives, SEND/RECV, CPU ops ---------------------------------------------------------------------


def test_legacy_collective_numbering_by_schema_version_or_option(tmp_path: Path) -> None:
    coll = node(1, 7, comm_type=("int64_val", 1), comm_size=("int64_val", 8))
    old = write(tmp_path, frame(meta("0.0.3"), coll), "old.0.et")
    old_schema = write(tmp_path, frame(meta("", schema="1.0.2-chakra.0.0.1"), coll), "old2.0.et")
    new = write(tmp_path, frame(meta("0.0.4"), coll), "new.0.et")
    pytorch = write(tmp_path, frame(meta("", schema="1.0.1"), coll), "pt.0.et")
    assert read_rank_file(old, 0).nodes[0].comm.collective == CollectiveType.ALL_TO_ALL
    assert read_rank_file(old_schema, 0).nodes[0].comm.collective == CollectiveType.ALL_TO_ALL
    assert read_rank_file(new, 0).nodes[0].comm.collective == CollectiveType.REDUCE
    assert read_rank_file(pytorch, 0).nodes[0].comm.collective == CollectiveType.REDUCE
    assert read_rank_file(new, 0, legacy_collectives=True).nodes[0].comm.collective == CollectiveType.ALL_TO_ALL
    assert read_rank_file(old, 0, legacy_collectives=False).nodes[0].comm.collective == CollectiveType.REDUCE
    assert any("legacy" in w for w in read_rank_file(old, 0).warnings)
    for code, want in [(0, "ALL_REDUCE"), (2, "ALL_GATHER"), (3, "REDUCE_SCATTER"), (4, "BROADCAST")]:
        p = write(tmp_path, frame(meta("0.0.3"), node(1, 7, comm_type=("int64_val", code))), f"c{code}.0.et")
        assert read_rank_file(p, 0).nodes[0].comm.collective.name == want


def test_send_recv_defaults_and_comm_type_5_6(tmp_path: Path) -> None:
    send = node(1, 5, comm_type=("int64_val", 5), comm_dst=("int32_val", 4), comm_size=("int64_val", 10))
    recv = node(2, 6, comm_type=("int64_val", 6), comm_src=("int32_val", 2), comm_size=("int64_val", 10), data=[1])
    g = read_rank_file(write(tmp_path, frame(meta(), send, recv), "x.3.et"), 3)
    s, r = g.nodes
    assert (s.comm.src, s.comm.dst, s.comm.collective) == (3, 4, None)
    assert (r.comm.src, r.comm.dst, r.comm.collective) == (2, 3, None)
    assert s.is_traffic and r.is_traffic


def test_send_without_destination_warns(tmp_path: Path) -> None:
    g = read_rank_file(write(tmp_path, frame(meta(), node(1, 5, comm_size=("int64_val", 10)))), 0)
    assert g.nodes[0].comm.dst is None
    assert any("without a peer" in w for w in g.warnings)


def test_cpu_side_collectives_are_not_traffic(tmp_path: Path) -> None:
    wrapper = node(1, 7, is_cpu_op=("bool_val", True))
    cpu_with_type = node(2, 7, is_cpu_op=("bool_val", True), comm_type=("int64_val", 0), comm_size=("int64_val", 8))
    gpu = node(3, 7, data=[1], is_cpu_op=("bool_val", False), comm_type=("int64_val", 0), comm_size=("int64_val", 8))
    g = read_rank_file(write(tmp_path, frame(meta(), wrapper, cpu_with_type, gpu)), 0)
    assert [n.is_traffic for n in g.nodes] == [False, False, True]
    assert any("2 CPU-side communication nodes" in w for w in g.warnings)


def test_comm_node_without_comm_type_warns(tmp_path: Path) -> None:
    g = read_rank_file(write(tmp_path, frame(meta(), node(1, 7, comm_size=("int64_val", 8)))), 0)
    assert not g.nodes[0].is_traffic
    assert any("without comm_type" in w for w in g.warnings)


# --- dependencies -----------------------------------------------------------------------------------------


def _deps_file(tmp_path: Path) -> Path:
    # data: 1 -> 2 -> 3 ; ctrl: 3 -> 2 (a caller-style edge that makes the union cyclic), 99 absent
    return write(tmp_path, frame(meta(), node(1, 4, ctrl=[99]), node(2, 4, data=[1, 1, 2], ctrl=[3]), node(3, 4, data=[2])))


def test_dep_policies(tmp_path: Path) -> None:
    p = _deps_file(tmp_path)
    auto = read_rank_file(p, 0)
    assert auto.dep_policy == "data"
    assert parents(auto, auto.nodes[1]) == (1,)  # duplicate and self edge dropped
    assert [n.id for n in topological_order(auto)] == [1, 2, 3]
    ctrl = read_rank_file(p, 0, dep_policy="ctrl")
    assert [n.id for n in topological_order(ctrl)] == [1, 3, 2]
    assert parents(ctrl, ctrl.nodes[0]) == ()  # 99 is absent: satisfied
    union = read_rank_file(p, 0, dep_policy="union")
    with pytest.raises(TraceError, match=r"cycle \(union deps\) through nodes 2 -> 3 -> 2"):
        topological_order(union)
    with pytest.raises(TraceError, match="unknown dependency policy"):
        read_rank_file(p, 0, dep_policy="both")


def test_missing_parents_are_counted(tmp_path: Path) -> None:
    g = read_rank_file(write(tmp_path, frame(meta(), node(1, 4, data=[50, 51]), node(2, 4, data=[1, 50], ctrl=[7]))), 0)
    text = "\n".join(g.warnings)
    assert "2 parent ids referenced by data_deps are not in the file" in text
    assert "1 parent ids referenced by ctrl_deps are not in the file" in text
    assert [n.id for n in topological_order(g)] == [1, 2]


# --- JSON forms ---------------------------------------------------------------------------------------------


def test_jsonizer_concatenated_json(tmp_path: Path) -> None:
    msgs = [meta("0.0.4"), node(1, 4, dur=5, is_cpu_op=("bool_val", False)),
            node(2, 7, data=[1], comm_type=("int64_val", 0), comm_size=("uint64_val", 2**35))]
    text = "".join(json_format.MessageToJson(m) for m in msgs)
    assert '"dataDeps"' in text and '"34359738368"' in text  # camelCase keys, 64-bit ints as strings
    g = read_rank_file(write(tmp_path, text.encode(), "j.0.json"), 0)
    assert g.metadata.version == "0.0.4"
    assert [(n.id, n.data_deps, n.duration_micros) for n in g.nodes] == [(1, (), 5), (2, (1,), 0)]
    assert g.nodes[1].comm.size_bytes == 2**35
    # sniffed by content as well
    g2 = read_rank_file(write(tmp_path, text.encode(), "j.0.et"), 0)
    assert g2.nodes == g.nodes


def test_feeder_json_with_comm_keys(tmp_path: Path) -> None:
    doc = {"workload_graph": [
        {"Id": 1, "Name": "send", "NodeType": 5, "is_cpu_op": False, "runtime": 3, "data_deps": [],
         "comm_size": 100, "comm_dst": 1, "comm_tag": 4, "comm_src": 0, "comm_type": 0, "comm_priority": 0, "tensor_size": 100},
    ]}
    g = read_rank_file(write(tmp_path, json.dumps(doc).encode(), "f.0.json"), 0)
    n = g.nodes[0]
    assert (n.comm.src, n.comm.dst, n.comm.tag, n.comm.size_bytes) == (0, 1, 4, 100)
    assert n.attr("tensor_size") == 100


def test_bad_json_names_file_and_offset(tmp_path: Path) -> None:
    p = write(tmp_path, b'{"workload_graph": [}', "bad.0.json")
    with pytest.raises(TraceError, match=r"bad\.0\.json: invalid JSON at character offset"):
        read_rank_file(p, 0)


def test_collective_from_name_tolerates_case_dashes_and_spaces():
    from emulator.trace.model import CollectiveType, collective_from_name

    assert collective_from_name(" All-To-All ") is CollectiveType.ALL_TO_ALL
    assert collective_from_name("reduce_scatter") is CollectiveType.REDUCE_SCATTER
    assert collective_from_name("allreduce") is None
