"""The two JSON forms of Chakra traces, turned into serialized ``Node`` records.

Theory of operation
-------------------
* **jsonizer output** (``chakra_jsonizer``): ``MessageToJson(GlobalMetadata)`` followed by
  ``MessageToJson(node)`` per node, concatenated — not one JSON document. It is read with a
  ``json.JSONDecoder.raw_decode`` loop; every object goes through protobuf's own JSON mapping
  (``ParseDict``: lowerCamelCase keys, 64-bit ints as strings, enums by name). The first object is
  metadata when its keys are only ``version`` / ``attr``. A value that is not an object, an object
  with no ``Node`` key, or a file without any node is an error naming both accepted shapes.
* **feeder JSON** ``{"workload_graph": [{"Id", "Name", "NodeType", "runtime", "data_deps", ...}]}``:
  each entry becomes a ``Node`` with ``duration_micros = runtime``, ``ctrl_deps`` from ``ctrlDeps`` or
  ``ctrl_deps``, ``is_cpu_op`` as a bool attribute and the comm keys as ``int64`` attributes.

Both produce serialized ``Node`` messages, so the binary decoding path (and all its rules) applies
unchanged. JSON files are read whole (they are text dumps meant for people, not the bulk format).
"""

from __future__ import annotations

import json

from google.protobuf import json_format

from emulator.errors import TraceError
from emulator.trace import et_def_pb2 as pb
from emulator.trace.model import GlobalMetadata
from emulator.trace.pbconv import metadata_from_pb

#: the two accepted shapes, for error messages
EXPECTED_SHAPES = ('expected chakra_jsonizer output (an optional {"version", "attr"} metadata object, then one '
                   'object per node with id, name, type, dataDeps, ...) or feeder JSON '
                   '({"workload_graph": [{"Id", "Name", "NodeType", ...}]})')
#: JSON keys of a jsonizer node object (protobuf JSON names and field names)
_NODE_KEYS = frozenset(
    name for f in pb.Node.DESCRIPTOR.fields for name in (f.name, f.json_name)
)
_FEEDER_INT_ATTRS = ("tensor_size", "comm_type", "comm_priority", "comm_size", "comm_src", "comm_dst", "comm_tag")


def looks_like_json(head: bytes) -> bool:
    """True when a file starts like a JSON object (``{`` then optional whitespace then ``"``/``}``)."""
    text = head.lstrip(b" \t\r\n")
    if not text.startswith(b"{"):
        return False
    rest = text[1:].lstrip(b" \t\r\n")
    return rest[:1] in (b'"', b"}")


def read_json_records(data: bytes, source: str) -> tuple[GlobalMetadata | None, list[bytes]]:
    """(metadata or None, serialized Node records) of a jsonizer or feeder JSON file."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{source}: JSON trace is not UTF-8 (byte offset {exc.start})") from None
    decoder = json.JSONDecoder()
    objects: list[tuple[int, object]] = []
    pos = 0
    n = len(text)
    while True:
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if pos >= n:
            break
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{source}: invalid JSON at character offset {exc.pos}: {exc.msg}") from None
        objects.append((pos, obj))
        pos = end
    if not objects:
        raise TraceError(f"{source}: empty JSON trace")
    first = objects[0][1]
    if len(objects) == 1 and isinstance(first, dict) and "workload_graph" in first:
        return None, _feeder_records(first, source)
    metadata, records = _jsonizer_records(objects, source)
    if not records:
        raise TraceError(f"{source}: no Chakra nodes in this JSON; {EXPECTED_SHAPES}")
    return metadata, records


def _jsonizer_records(objects: list[tuple[int, object]], source: str) -> tuple[GlobalMetadata | None, list[bytes]]:
    metadata = None
    records: list[bytes] = []
    for i, (offset, obj) in enumerate(objects):
        if not isinstance(obj, dict):
            raise TraceError(f"{source}: JSON value {i} at character offset {offset} is a {_json_kind(obj)}, "
                             f"not an object; {EXPECTED_SHAPES}")
        if i == 0 and set(obj) <= {"version", "attr"}:
            m = pb.GlobalMetadata()
            try:
                json_format.ParseDict(obj, m, ignore_unknown_fields=True)
            except (json_format.ParseError, ValueError, TypeError, AttributeError) as exc:
                raise TraceError(f"{source}: metadata at character offset {offset}: {exc}") from None
            metadata = metadata_from_pb(m)
            continue
        if obj and not set(obj) & _NODE_KEYS:  # {} is a node with every field at its default
            keys = ", ".join(map(repr, list(obj)[:5])) or "none"
            raise TraceError(f"{source}: JSON object {i} at character offset {offset} is not a Chakra node "
                             f"(keys: {keys}); {EXPECTED_SHAPES}"[:500])
        node = pb.Node()
        try:
            json_format.ParseDict(obj, node, ignore_unknown_fields=True)
        except (json_format.ParseError, ValueError, TypeError, AttributeError) as exc:
            ident = obj.get("id", "?")
            raise TraceError(f"{source}: node {ident} at character offset {offset}: {exc}"[:400]) from None
        records.append(node.SerializeToString())
    return metadata, records


def _json_kind(value: object) -> str:
    return {list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def _int(entry: dict, key: str, source: str, ident: object) -> int:
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.lstrip("-").isdigit():
            return int(value)
        raise TraceError(f"{source}: node {ident}: {key} must be an integer, got {value!r}"[:300])
    return value


def _feeder_records(doc: dict, source: str) -> list[bytes]:
    graph = doc["workload_graph"]
    if not isinstance(graph, list):
        raise TraceError(f"{source}: workload_graph must be a list")
    records = []
    for i, entry in enumerate(graph):
        if not isinstance(entry, dict) or "Id" not in entry:
            raise TraceError(f"{source}: workload_graph[{i}] has no Id")
        ident = entry["Id"]
        node = pb.Node()
        try:
            node.id = _int(entry, "Id", source, ident)
            node.name = str(entry.get("Name", ""))
            if "NodeType" in entry:
                node.type = _int(entry, "NodeType", source, ident)
            if "runtime" in entry:
                node.duration_micros = _int(entry, "runtime", source, ident)
            for key, target in (("data_deps", node.data_deps), ("ctrlDeps", node.ctrl_deps), ("ctrl_deps", node.ctrl_deps)):
                deps = entry.get(key)
                if deps:
                    if not isinstance(deps, list):
                        raise TraceError(f"{source}: node {ident}: {key} must be a list")
                    target.extend(int(d) for d in deps)
            if "is_cpu_op" in entry:
                flag = entry["is_cpu_op"]
                if not isinstance(flag, (bool, int)):
                    raise TraceError(f"{source}: node {ident}: is_cpu_op must be a bool, got {flag!r}"[:300])
                node.attr.add(name="is_cpu_op").bool_val = bool(flag)
            for key in _FEEDER_INT_ATTRS:
                if key in entry:
                    node.attr.add(name=key).int64_val = _int(entry, key, source, ident)
        except (ValueError, TypeError, OverflowError) as exc:
            raise TraceError(f"{source}: node {ident}: {exc}"[:300]) from None
        records.append(node.SerializeToString())
    return records
