"""Conversion between Chakra protobuf messages and the project's typed model (decode and encode).

Theory of operation
-------------------
Decoding works on :class:`NodeView` batches (see ``et_def.proto``): one ``ParseFromString`` per chunk
of the file, then one tight Python loop per node that reads only cheap scalar fields. Packed
dependency lists arrive as raw bytes and are unpacked here (``bytes.isascii()`` gives a C-speed path
when every id is < 128). Attributes arrive as raw serialized ``AttributeProto`` bytes; the whole tuple
of a node's raw attributes, together with the node type, is the key of a bounded cache whose value is
the interpretation (``is_cpu_op``, :class:`CommInfo`, uninterpreted attributes). Generated traces
repeat the same few attribute sets, so most nodes cost one dict lookup for all their attributes.

Interpretation rules (``docs/chakra-format.md`` §4):

* integer attributes accept the ten integer kinds (``bool_val`` too for the ``is_cpu_op`` flag); a
  float, string or list where an integer is required raises :class:`TraceError` naming the node id;
* ``comm_type`` is a collective only on ``COMM_COLL_NODE`` (on SEND/RECV it stays an uninterpreted
  attribute: MSCCL converters put the NodeType number there); legacy numbering when asked;
* SEND without ``comm_src`` and RECV without ``comm_dst`` resolve to the file's own rank;
* interpreted attributes leave ``Node.attrs``; everything else stays there with its oneof kind so the
  writer reproduces it (an attribute with no value is kept as kind ``""`` and value ``None``).

Encoding writes interpreted fields back as ``int64_val`` (``is_cpu_op`` as ``bool_val``), like the
reference converters. Only this module, ``framing`` and ``io`` import the generated protobuf classes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from emulator.errors import TraceError
from emulator.trace import et_def_pb2 as pb
from emulator.trace.model import (
    LEGACY_COLLECTIVE_NUMBERING,
    CollectiveType,
    CommInfo,
    GlobalMetadata,
    IOInfo,
    Node,
    NodeType,
)

INT_KINDS = frozenset(
    {
        "int32_val", "int64_val", "uint32_val", "uint64_val", "sint32_val", "sint64_val",
        "fixed32_val", "fixed64_val", "sfixed32_val", "sfixed64_val",
    }
)
LIST_KINDS = frozenset(
    {
        "double_list", "float_list", "int32_list", "int64_list", "uint32_list", "uint64_list",
        "sint32_list", "sint64_list", "fixed32_list", "fixed64_list", "sfixed32_list", "sfixed64_list",
        "bool_list", "string_list", "bytes_list",
    }
)
SCALAR_KINDS = INT_KINDS | {"double_val", "float_val", "bool_val", "string_val", "bytes_val"}
ALL_KINDS = SCALAR_KINDS | LIST_KINDS

#: integer-valued attributes interpreted on COMM_* nodes → CommInfo field
_COMM_INT_ATTRS = {
    "comm_size": "size_bytes",
    "comm_src": "src",
    "comm_dst": "dst",
    "comm_tag": "tag",
    "comm_priority": "priority",
    "root": "root",
}
_NODE_TYPES: dict[int, NodeType] = {int(t): t for t in NodeType}
_CACHE_LIMIT = 1 << 16



#: ``_new_node(Node, values)`` builds a Node from a 12-tuple in C (no ``__new__`` call in Python);
#: ``values`` must hold every field in declaration order.
_new_node = tuple.__new__


_intern = sys.intern


def attr_value(a: pb.AttributeProto) -> tuple[str, object]:
    """(kind, python value) of one AttributeProto; lists become tuples; ("", None) when unset."""
    kind = a.WhichOneof("value")
    if kind is None:
        return ("", None)
    value = getattr(a, kind)
    if kind in LIST_KINDS:
        value = tuple(value.values)
    return (kind, value)


def set_attr_value(a: pb.AttributeProto, kind: str, value: object) -> None:
    """Inverse of :func:`attr_value` (raises TypeError/ValueError on a kind/value mismatch)."""
    if not kind:
        return
    if kind in LIST_KINDS:
        getattr(a, kind).values.extend(value)  # type: ignore[arg-type]
        if not value:
            getattr(a, kind).SetInParent()
    else:
        setattr(a, kind, value)


def unpack_varints(raw: bytes) -> tuple[int, ...]:
    """Decode a packed repeated uint64 payload. Raises ValueError on truncation or overflow."""
    if raw.isascii():
        return tuple(raw)
    out = []
    value = 0
    shift = 0
    for b in raw:
        if b & 0x80:
            value |= (b & 0x7F) << shift
            shift += 7
            if shift >= 70:
                raise ValueError("varint longer than 10 bytes")
        else:
            value |= b << shift
            if value >> 64:
                raise ValueError("varint overflows 64 bits")
            out.append(value)
            value = 0
            shift = 0
    if shift:
        raise ValueError("truncated varint")
    return tuple(out)


@dataclass
class DecodeContext:
    """Per-file decoding state: rank, numbering, caches and warning counters."""

    source: str
    rank: int
    legacy_collectives: bool = False
    attr_cache: dict[bytes, tuple[str, str, object]] = field(default_factory=dict)
    interp_cache: dict[tuple, tuple] = field(default_factory=dict)
    io_cache: dict[bytes, IOInfo] = field(default_factory=dict)
    #: warning counters: cpu_comm, no_type, no_size, no_peer, odd_type; and metadata (METADATA nodes)
    counts: dict[str, int] = field(default_factory=dict)
    #: every pg_name seen on a communication node
    pg_names: set[str] = field(default_factory=set)

    def count_node(self, node_type: int, is_cpu: bool, comm: CommInfo | None, times: int = 1) -> None:
        """Account ``times`` nodes of this kind for the load warnings."""
        counts = self.counts
        if node_type not in _NODE_TYPES:
            counts["odd_type"] = counts.get("odd_type", 0) + times
        elif node_type == 1:
            counts["metadata"] = counts.get("metadata", 0) + times
        if comm is None:
            return
        if comm.pg_name is not None:
            self.pg_names.add(comm.pg_name)
        if is_cpu:
            counts["cpu_comm"] = counts.get("cpu_comm", 0) + times
            return
        if node_type == 7:
            if comm.collective is None:
                counts["no_type"] = counts.get("no_type", 0) + times
                return
        elif comm.src is None or comm.dst is None:
            counts["no_peer"] = counts.get("no_peer", 0) + times
        if comm.size_bytes == 0 and comm.collective != CollectiveType.BARRIER:  # a barrier carries no data
            counts["no_size"] = counts.get("no_size", 0) + times

    def where(self, node_id: int | None = None) -> str:
        text = f"{self.source}: rank {self.rank}"
        return text if node_id is None else f"{text}: node {node_id}"

    # -- attributes -------------------------------------------------------------------------------
    def decode_attr(self, raw: bytes, node_id: int) -> tuple[str, str, object]:
        hit = self.attr_cache.get(raw)
        if hit is not None:
            return hit
        try:
            a = pb.AttributeProto.FromString(raw)
        except (DecodeError, UnicodeDecodeError) as exc:
            raise TraceError(f"{self.where(node_id)}: undecodable attribute ({exc})") from None
        kind, value = attr_value(a)
        if isinstance(value, str):
            value = _intern(value)
        hit = (_intern(a.name), kind, value)
        if len(self.attr_cache) >= _CACHE_LIMIT:
            self.attr_cache.clear()
        self.attr_cache[raw] = hit
        return hit

    def interpret(self, node_type: int, raws: tuple[bytes, ...], node_id: int) -> tuple:
        """(is_cpu_op, comm, attrs, error) for one node's raw attributes; cached by content."""
        hit = self.interp_cache.get((node_type, raws)) or self.interpret_raws(node_type, raws, node_id)
        if hit[3] is not None:
            raise TraceError(f"{self.where(node_id)}: {hit[3]}")
        return hit

    def interpret_raws(self, node_type: int, raws: tuple[bytes, ...], node_id: int = 0) -> tuple:
        """Like :meth:`interpret` but returns the error text in the tuple instead of raising it.

        ``node_id`` only names the node in an undecodable-attribute error (raised, not returned).
        """
        key = (node_type, raws)
        hit = self.interp_cache.get(key)
        if hit is None:
            hit = self._interpret(node_type, raws, node_id)
            if len(self.interp_cache) >= _CACHE_LIMIT:
                self.interp_cache.clear()
            self.interp_cache[key] = hit
        return hit

    def _interpret(self, node_type: int, raws: tuple[bytes, ...], node_id: int) -> tuple:
        is_cpu = False
        is_comm = node_type in (5, 6, 7)
        comm_fields: dict[str, object] = {}
        kept: list[tuple[str, tuple[str, object]]] = []
        for raw in raws:
            name, kind, value = self.decode_attr(raw, node_id)
            if name == "is_cpu_op":
                if kind != "bool_val" and kind not in INT_KINDS:
                    return (False, None, (), f"attribute is_cpu_op must be a bool or integer, got {kind or 'no value'}")
                is_cpu = bool(value)
            elif is_comm and (name in _COMM_INT_ATTRS or (name == "comm_type" and node_type == 7)):
                if kind not in INT_KINDS:
                    return (False, None, (), f"attribute {name} must be an integer, got {kind or 'no value'}")
                comm_fields[name] = value
            elif is_comm and name == "pg_name":
                if kind == "string_val":
                    comm_fields[name] = value
                elif kind in INT_KINDS:
                    comm_fields[name] = str(value)
                else:
                    return (False, None, (), f"attribute pg_name must be a string, got {kind or 'no value'}")
            else:
                kept.append((name, (kind, value)))
        comm = None
        if is_comm:
            err, comm = self._comm(node_type, comm_fields)
            if err:
                return (False, None, (), err)
        return (is_cpu, comm, tuple(kept), None)

    def _comm(self, node_type: int, f: dict[str, object]) -> tuple[str | None, CommInfo | None]:
        collective = None
        if "comm_type" in f:
            code = int(f["comm_type"])  # type: ignore[call-overload]
            try:
                collective = (
                    LEGACY_COLLECTIVE_NUMBERING[code] if self.legacy_collectives else CollectiveType(code)
                )
            except (KeyError, ValueError):
                numbering = "legacy" if self.legacy_collectives else "current"
                return f"attribute comm_type {code} is not a collective ({numbering} numbering)", None
        size = int(f.get("comm_size", 0))  # type: ignore[call-overload]
        if size < 0:
            return f"attribute comm_size is negative ({size})", None
        src = f.get("comm_src")
        dst = f.get("comm_dst")
        if node_type == 5 and src is None:
            src = self.rank
        if node_type == 6 and dst is None:
            dst = self.rank
        comm = CommInfo(
            collective=collective,
            size_bytes=size,
            src=src,  # type: ignore[arg-type]
            dst=dst,  # type: ignore[arg-type]
            tag=int(f.get("comm_tag", 0)),  # type: ignore[call-overload]
            pg_name=f.get("pg_name"),  # type: ignore[arg-type]
            priority=int(f.get("comm_priority", 0)),  # type: ignore[call-overload]
            root=f.get("root"),  # type: ignore[arg-type]
        )
        return None, comm

    def io_info(self, raw: bytes, node_id: int) -> IOInfo:
        hit = self.io_cache.get(raw)
        if hit is None:
            try:
                m = pb.IOInfo.FromString(raw)
            except (DecodeError, UnicodeDecodeError) as exc:
                raise TraceError(f"{self.where(node_id)}: undecodable inputs/outputs ({exc})") from None
            hit = IOInfo(m.values, m.shapes, m.types)
            if len(self.io_cache) >= 4096:
                self.io_cache.clear()
            self.io_cache[raw] = hit
        return hit


def convert_views(views, ctx: DecodeContext, out: list[Node]) -> None:
    """Append one model Node per NodeView of ``views`` (a repeated field of a NodeViewBatch) to ``out``."""
    types = _NODE_TYPES
    interpret = ctx.interpret
    count_node = ctx.count_node
    append = out.append
    no_attrs: tuple = (False, None, (), None)
    for nv in views:
        nid = nv.id
        t = nv.type
        raws = nv.attr
        if raws:
            cpu, comm, attrs, _ = interpret(t, tuple(raws), nid)
        elif t in (5, 6, 7):
            cpu, comm, attrs, _ = interpret(t, (), nid)
        else:
            cpu, comm, attrs, _ = no_attrs
        raw = nv.data_deps
        try:
            data = (tuple(raw) if raw.isascii() else unpack_varints(raw)) if raw else ()
            raw = nv.ctrl_deps
            ctrl = (tuple(raw) if raw.isascii() else unpack_varints(raw)) if raw else ()
        except ValueError as exc:
            raise TraceError(f"{ctx.where(nid)}: bad dependency list ({exc})") from None
        if comm is not None or t not in types or t == 1:
            count_node(t, cpu, comm)
        raw = nv.inputs
        inputs = ctx.io_info(raw, nid) if raw else None
        raw = nv.outputs
        outputs = ctx.io_info(raw, nid) if raw else None
        append(_new_node(Node, (
            nid, _intern(nv.name), types.get(t, t), data, ctrl, nv.duration_micros, nv.start_time_micros,
            cpu, comm, inputs, outputs, attrs,
        )))


# ---------------------------------------------------------------------------------------------------
# metadata
# ---------------------------------------------------------------------------------------------------


def metadata_from_pb(m: pb.GlobalMetadata) -> GlobalMetadata:
    attrs = tuple((a.name, attr_value(a)) for a in m.attr)
    return GlobalMetadata(version=m.version, attrs=attrs, present=True)


def metadata_to_pb(md: GlobalMetadata, default_version: str) -> pb.GlobalMetadata:
    m = pb.GlobalMetadata(version=md.version or default_version)
    for name, (kind, value) in md.attrs:
        a = m.attr.add(name=name)
        set_attr_value(a, kind, value)
    return m


# ---------------------------------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------------------------------


def _int_attr(m: pb.Node, name: str, value: int) -> None:
    a = m.attr.add(name=name)
    if value >= 1 << 63:
        a.uint64_val = value
    else:
        a.int64_val = value


def node_to_pb(n: Node, where: Callable[[], str]) -> pb.Node:
    """Encode one model node; raises TraceError (naming the node) when a value cannot be encoded."""
    try:
        m = pb.Node(
            id=n.id,
            name=n.name,
            type=int(n.type),
            ctrl_deps=n.ctrl_deps,
            data_deps=n.data_deps,
            start_time_micros=n.start_time_micros,
            duration_micros=n.duration_micros,
        )
        if n.inputs is not None:
            m.inputs.SetInParent()
            m.inputs.values, m.inputs.shapes, m.inputs.types = n.inputs.values, n.inputs.shapes, n.inputs.types
        if n.outputs is not None:
            m.outputs.SetInParent()
            m.outputs.values, m.outputs.shapes, m.outputs.types = (
                n.outputs.values,
                n.outputs.shapes,
                n.outputs.types,
            )
        m.attr.add(name="is_cpu_op").bool_val = bool(n.is_cpu_op)
        c = n.comm
        if c is not None:
            if c.collective is not None:
                _int_attr(m, "comm_type", int(c.collective))
            if c.size_bytes or c.collective is not None:
                _int_attr(m, "comm_size", c.size_bytes)
            for name, value in (("comm_src", c.src), ("comm_dst", c.dst), ("root", c.root)):
                if value is not None:
                    _int_attr(m, name, value)
            if c.tag:
                _int_attr(m, "comm_tag", c.tag)
            if c.priority:
                _int_attr(m, "comm_priority", c.priority)
            if c.pg_name is not None:
                m.attr.add(name="pg_name").string_val = c.pg_name
        for name, (kind, value) in n.attrs:
            set_attr_value(m.attr.add(name=name), kind, value)
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise TraceError(f"{where()}: node {n.id}: cannot encode ({exc})") from None
    return m
