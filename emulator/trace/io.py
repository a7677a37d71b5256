"""Reading and writing Chakra execution traces (the only public entry point to the file formats).

Theory of operation
-------------------
Reading one rank file (:func:`read_rank_file`):

1. open, un-gzip by magic, and sniff JSON (``.json`` name or a leading ``{"``): JSON goes through
   :mod:`emulator.trace.jsonfmt` and then the same batch decoder as binary records;
2. record 1 is ``GlobalMetadata`` only when its top-level tags are ``0x0a``/``0x12``; otherwise the
   file is a legacy one without metadata and record 1 is the first node (``metadata.present`` False);
3. the remaining records stream through :class:`~emulator.trace.framing.RecordReader` in chunks of
   a few MiB (memory is bounded by the chunk, not the file). Each chunk goes first through the
   columnar decoder (:mod:`emulator.trace.columns`: one ``NodeColumns`` parse, numpy passes, one
   interpretation per distinct attribute pattern); when the chunk is not canonical enough for it,
   through the per-node path: one ``NodeViewBatch`` parse, trusted only when re-serializing
   reproduces its exact size (else canonicalized through the full ``NodeBatch`` schema first),
   converted by :func:`~emulator.trace.pbconv.convert_views`. Both give identical nodes;
4. checks and warnings: duplicate ids are an error; the dependency policy is resolved (``auto`` →
   ``data`` when any node has a data edge, else ``ctrl``); parents absent from the file are counted
   and ignored (when ids form one contiguous run, a range check replaces the id set); a NodeType
   outside Chakra's 0-7 is an error naming the first such node; CPU-side comm nodes, comm nodes
   without a collective, unknown protobuf fields and SEND/RECV without a peer are counted by the
   decoders and reported as one-line warnings.

The cyclic garbage collector is paused while a file is decoded (the nodes hold no cycles; scanning
a million fresh objects repeatedly would triple the load time) and the new objects are then moved
to the oldest generation without a scan. A cycle in the chosen dependencies is reported by
:func:`emulator.trace.graph.topological_order`, not at load time.

A trace (:func:`read_trace`) is a prefix ``PREFIX.<rank>.et[.gz]`` (ranks 0..N-1 without gaps) or one
file. Process groups: groups file > ``## process_group:init ##`` METADATA nodes > default (all ranks).
A policy other than ``auto`` that ignores edges ``auto`` would use adds a trace warning
(:func:`emulator.trace.checks.policy_warnings`).

Writing (:func:`write_rank`) streams nodes from any iterable: GlobalMetadata first (version never
empty), then one varint32-framed ``Node`` per model node, then, when groups are given and the stream
held no ``process_group:init`` node, one such METADATA node with id ``max id + 1``.
"""

from __future__ import annotations

import gc
import gzip
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import BinaryIO

from google.protobuf.message import DecodeError

from emulator.errors import TraceError
from emulator.trace import et_def_pb2 as pb
from emulator.trace.checks import policy_warnings
from emulator.trace.columns import ColumnDecoder
from emulator.trace.framing import Batch, RecordReader, encode_varint, open_binary, top_level_tags
from emulator.trace.groups import (
    PG_INIT_MARKER,
    check_group_ranks,
    is_pg_init_node,
    load_groups_file,
    merge_groups,
    parse_pg_init,
    pg_init_values,
)
from emulator.trace.jsonfmt import looks_like_json, read_json_records
from emulator.trace.model import (
    DEP_POLICIES,
    GlobalMetadata,
    IOInfo,
    Node,
    NodeType,
    ProcessGroup,
    RankGraph,
    Trace,
)
from emulator.trace.pbconv import DecodeContext, convert_views, metadata_from_pb, metadata_to_pb, node_to_pb

__all__ = ["read_trace", "read_rank_file", "rank_path", "write_rank", "write_trace", "WRITE_VERSION"]

WRITE_VERSION = "0.0.4"
_RANK_FILE = re.compile(r"\.(\d+)\.(?:et|json)(?:\.gz)?$")
_BARE_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)$")
_CHAKRA_SUFFIX = re.compile(r"chakra\.(\d+)\.(\d+)\.(\d+)")
_COMM_TYPES = (5, 6, 7)
_NODE_TYPE_VALUES = frozenset(t.value for t in NodeType)


# ---------------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------------


def _legacy_from_metadata(md: GlobalMetadata) -> bool:
    """True when the metadata names a Chakra schema older than 0.0.4 (legacy collective numbering).

    ``version`` holds a bare Chakra version (``0.0.4``, ``1.0.0``); a ``schema`` string attribute may
    end in ``-chakra.X.Y.Z`` (a bare ``schema`` is PyTorch's host schema and says nothing here).
    """
    found = []
    m = _BARE_VERSION.match(md.version.strip())
    if m:
        found.append(m.groups())
    for name, (kind, value) in md.attrs:
        if name == "schema" and kind == "string_val":
            m = _CHAKRA_SUFFIX.search(str(value))
            if m:
                found.append(m.groups())
    return bool(found) and tuple(int(x) for x in found[0]) < (0, 0, 4)


class _Decoder:
    """Batch → nodes: columnar fast path, per-node view path as the general fallback."""

    def __init__(self, ctx: DecodeContext) -> None:
        self.ctx = ctx
        self.nodes: list[Node] = []
        self.unknown_field_batches = 0
        self.columns = ColumnDecoder(ctx)

    def add(self, batch: Batch) -> None:
        if self.columns.enabled and self.columns.decode(batch.bodies, self.nodes):
            return
        blob = batch.tagged_blob()
        view = pb.NodeViewBatch()
        try:
            view.ParseFromString(blob)
            view.DiscardUnknownFields()
            if view.ByteSize() != len(blob):
                # canonicalize through the full schema; sizes are only asked of fresh messages (the
                # pure-Python runtime keeps stale cached sizes across DiscardUnknownFields)
                full = pb.NodeBatch.FromString(blob)
                full.DiscardUnknownFields()
                canonical = full.SerializeToString()
                if pb.NodeBatch.FromString(blob).ByteSize() != len(canonical):
                    self.unknown_field_batches += 1
                view = pb.NodeViewBatch.FromString(canonical)
        except (DecodeError, UnicodeDecodeError):
            self._locate(batch)
        convert_views(view.nodes, self.ctx, self.nodes)

    def _locate(self, batch: Batch) -> None:
        source = self.ctx.where()
        for index, offset, body in batch.record_offsets():
            try:
                pb.Node.FromString(body)
            except (DecodeError, UnicodeDecodeError) as exc:
                raise TraceError(
                    f"{source}: record {index} at byte offset {offset}: undecodable node ({exc or 'bad bytes'})"
                ) from None
        raise TraceError(f"{source}: records from byte offset {batch.offset}: undecodable node batch")


def _json_batches(records: list[bytes], per_batch: int = 8192) -> Iterator[Batch]:
    for start in range(0, len(records), per_batch):
        yield Batch(0, start, records[start : start + per_batch])


def _read_metadata(reader: RecordReader, source: str) -> tuple[GlobalMetadata, Batch | None]:
    first = reader.next_record()
    if first is None:
        raise TraceError(f"{source}: empty file (no GlobalMetadata and no nodes)")
    offset, body = first
    tags = top_level_tags(body)
    if tags is not None and all(t in (0x0A, 0x12) for t in tags):
        try:
            return metadata_from_pb(pb.GlobalMetadata.FromString(body)), None
        except (DecodeError, UnicodeDecodeError) as exc:
            if 0x0A in tags:
                raise TraceError(
                    f"{source}: record 0 at byte offset {offset}: undecodable GlobalMetadata ({exc})"
                ) from None
    return GlobalMetadata(present=False), Batch(offset, 0, [body])


def _open_any(path: str) -> tuple[BinaryIO, bool]:
    f = open_binary(path)
    try:
        head = f.peek(64)[:64]  # type: ignore[attr-defined]
    except (OSError, EOFError, zlib.error) as exc:
        f.close()
        raise TraceError(f"{path}: cannot read ({exc})") from None
    is_json = path.endswith((".json", ".json.gz")) or looks_like_json(head)
    return f, is_json


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a million immutable nodes are allocated.

    Nodes and their tuples form no reference cycles; with the collector running, allocating them
    triggers repeated full collections that scan everything loaded so far (3x slower decode).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:
                # move the new objects to the oldest generation without scanning them (freeze resets
                # the young-generation count, unfreeze merges the permanent generation into the oldest)
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def read_rank_file(
    path: str | Path, rank: int, *, dep_policy: str = "auto", legacy_collectives: bool | None = None
) -> RankGraph:
    """Read one rank's file (binary ET, gzip, jsonizer or feeder JSON) into a :class:`RankGraph`."""
    return _read_rank(path, rank, dep_policy, legacy_collectives)[0]


def _read_rank(
    path: str | Path, rank: int, dep_policy: str, legacy_collectives: bool | None
) -> tuple[RankGraph, DecodeContext]:
    source = str(path)
    if dep_policy not in DEP_POLICIES:
        raise TraceError(f"{source}: unknown dependency policy {dep_policy!r} (use one of {', '.join(DEP_POLICIES)})")
    f, is_json = _open_any(source)
    with f, _gc_paused():
        if is_json:
            try:
                data = f.read()
            except (OSError, EOFError, zlib.error) as exc:
                raise TraceError(f"{source}: cannot read ({exc})") from None
            md_or_none, records = read_json_records(data, source)
            metadata = md_or_none or GlobalMetadata(present=False)
            batches: Iterable[Batch] = _json_batches(records)
            first_batch = None
        else:
            reader = RecordReader(f, source)
            metadata, first_batch = _read_metadata(reader, source)
            batches = reader.batches()
        legacy = _legacy_from_metadata(metadata) if legacy_collectives is None else bool(legacy_collectives)
        ctx = DecodeContext(source=source, rank=rank, legacy_collectives=legacy)
        decoder = _Decoder(ctx)
        if first_batch is not None:
            decoder.add(first_batch)
        for batch in batches:
            decoder.add(batch)
        graph = RankGraph(rank=rank, nodes=decoder.nodes, metadata=metadata, source=source)
        _finish(graph, dep_policy, decoder, legacy, framed=not is_json)
    return graph, ctx


def _finish(graph: RankGraph, dep_policy: str, decoder: _Decoder, legacy: bool, framed: bool = True) -> None:
    nodes = graph.nodes
    where = f"{graph.source}: rank {graph.rank}"
    warn = graph.warnings.append
    covered = decoder.columns.ids_cover_deps() if decoder.columns.all_batches else None
    ids: set[int] = set()
    if covered is None:  # contiguous ids need no set: no duplicates, and a range check covers parents
        ids = set(map(attrgetter("id"), nodes))
        if len(ids) != len(nodes):
            seen: dict[int, int] = {}
            for i, n in enumerate(nodes):
                if n.id in seen:
                    raise TraceError(f"{where}: duplicate node id {n.id} (nodes #{seen[n.id]} and #{i} in file order)")
                seen[n.id] = i
    has_data = any(map(attrgetter("data_deps"), nodes))
    graph.dep_policy = ("data" if has_data else "ctrl") if dep_policy == "auto" else dep_policy
    if framed and not graph.metadata.present:
        warn(f"{where}: no GlobalMetadata record (legacy file); record 0 read as a node")
    if legacy:
        warn(f"{where}: comm_type read with the legacy pre-0.0.4 collective numbering")
    for kind in ("data_deps", "ctrl_deps"):
        if covered is not None and covered[kind]:
            continue
        if not ids:
            ids = set(map(attrgetter("id"), nodes))
        refs = set(chain.from_iterable(map(attrgetter(kind), nodes)))
        missing = refs - ids
        if missing:
            sample = ", ".join(map(str, sorted(missing)[:5]))
            warn(
                f"{where}: {len(missing)} parent ids referenced by {kind} are not in the file "
                f"(treated as satisfied), e.g. {sample}"
            )
    counts = decoder.ctx.counts
    if counts.get("odd_type"):
        odd = next(n for n in nodes if n.type not in _NODE_TYPE_VALUES)
        known = ", ".join(f"{t.value} {t.name}" for t in NodeType)
        raise TraceError(f"{where}: node {odd.id}: unknown NodeType {int(odd.type)} "
                         f"({counts['odd_type']} such node(s); Chakra's node types are {known})")
    messages = (
        ("cpu_comm", "CPU-side communication nodes (is_cpu_op) ignored: no traffic"),
        ("no_type", "COMM_COLL nodes without comm_type ignored: no traffic"),
        ("no_size", "communication nodes with comm_size 0 or absent"),
        ("no_peer", "SEND/RECV nodes without a peer rank (comm_dst / comm_src)"),
    )
    for key, text in messages:
        if counts.get(key):
            warn(f"{where}: {counts[key]} {text}")
    if decoder.unknown_field_batches:
        warn(f"{where}: unknown protobuf fields skipped")


def _rank_of(path: Path) -> int:
    m = _RANK_FILE.search(path.name)
    return int(m.group(1)) if m else 0


def _prefix_files(prefix: str) -> dict[int, Path]:
    p = Path(prefix)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise TraceError(f"{prefix}: no such file or directory")
    pattern = re.compile(re.escape(p.name) + r"\.(\d+)\.(?:et|json)(?:\.gz)?$")
    found: dict[int, Path] = {}
    for child in parent.iterdir():
        m = pattern.fullmatch(child.name)
        if not m:
            continue
        rank = int(m.group(1))
        if rank in found:
            raise TraceError(f"{prefix}: rank {rank} present twice ({found[rank].name}, {child.name})")
        found[rank] = child
    if not found:
        raise TraceError(f"{prefix}: no file {p.name}.<rank>.et, .et.gz or .json (and no such file)")
    missing = sorted(set(range(max(found) + 1)) - set(found))
    if missing:
        shown = ", ".join(map(str, missing[:20])) + (" ..." if len(missing) > 20 else "")
        raise TraceError(f"{prefix}: ranks missing from the trace: {shown} (found {len(found)} of {max(found) + 1})")
    return dict(sorted(found.items()))


def read_trace(
    path: str | Path,
    *,
    dep_policy: str = "auto",
    legacy_collectives: bool | None = None,
    groups_file: str | Path | None = None,
) -> Trace:
    """Read a whole trace: a prefix of per-rank files, or one file (rank from ``X.<r>.et``, else 0)."""
    p = Path(path)
    files = {_rank_of(p): p} if p.is_file() else _prefix_files(str(path))
    ranks: dict[int, RankGraph] = {}
    pg_names: set[str] = set()
    pg_nodes: list[tuple[RankGraph, Node]] = []
    for r, f in files.items():
        graph, ctx = _read_rank(f, r, dep_policy, legacy_collectives)
        ranks[r] = graph
        pg_names |= ctx.pg_names
        if ctx.counts.get("metadata"):
            pg_nodes.extend((graph, n) for n in graph.nodes if n.type == 1 and is_pg_init_node(n))
    trace = Trace(ranks=ranks, source=str(path))
    if groups_file is not None:
        trace.groups = load_groups_file(str(groups_file))
        trace.groups_source = str(groups_file)
        if len(ranks) > 1:  # a one-rank trace may be replicated: the compiler checks the groups it uses
            check_group_ranks(trace.groups, trace.world_size, str(groups_file))
        if pg_nodes:
            trace.warnings.append(
                f"{path}: process_group:init metadata ignored: groups come from {groups_file}"
            )
    elif pg_nodes:
        world = range(trace.world_size)
        found = []
        for g, n in pg_nodes:
            where = f"{g.source}: rank {g.rank}: node {n.id}"
            values = n.inputs.values if n.inputs is not None else ""
            found.extend((where, grp) for grp in parse_pg_init(values, where, world))
        trace.groups = merge_groups(found, trace.warnings)
    unknown = sorted(name for name in pg_names if name not in ("", "0") and name not in trace.groups)
    if unknown:
        trace.warnings.append(
            f"{path}: pg_name {', '.join(map(repr, unknown[:10]))} not defined by any group; using all ranks"
        )
    trace.warnings.extend(policy_warnings(trace, dep_policy))
    return trace


# ---------------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------------


def encode_rank(
    nodes: Iterable[Node],
    *,
    metadata: GlobalMetadata | None = None,
    groups: Mapping[str, ProcessGroup] | None = None,
    where: str = "<memory>",
    pg_values: str | None = None,
) -> Iterator[bytes]:
    """The framed records of one rank file, streamed: GlobalMetadata, the nodes, a pg_init node if needed
    (``pg_values``: its text, :func:`pg_init_values` of ``groups``, when the caller made it once for all ranks)."""
    md = metadata_to_pb(metadata or GlobalMetadata(), WRITE_VERSION)
    body = md.SerializeToString()
    yield encode_varint(len(body)) + body

    def here() -> str:
        return where

    max_id = -1
    has_pg = False
    for n in nodes:
        if n.comm is not None and n.type not in _COMM_TYPES:
            raise TraceError(f"{where}: node {n.id}: comm fields on a {n.type_name} (not a COMM_* node)")
        body = node_to_pb(n, here).SerializeToString()
        yield encode_varint(len(body)) + body
        if n.id > max_id:
            max_id = n.id
        if is_pg_init_node(n):
            has_pg = True
    if groups and not has_pg:
        body = node_to_pb(pg_init_node(groups, max_id + 1, pg_values), here).SerializeToString()
        yield encode_varint(len(body)) + body


def pg_init_node(groups: Mapping[str, ProcessGroup], node_id: int, values: str | None = None) -> Node:
    """The ``process_group:init`` METADATA node that declares ``groups`` in a rank file (``values``: its text
    made already)."""
    return Node(id=node_id, name=PG_INIT_MARKER, type=NodeType.METADATA_NODE,
                inputs=IOInfo(values=pg_init_values(groups) if values is None else values))


def write_rank(
    path: str | Path,
    nodes: Iterable[Node],
    *,
    metadata: GlobalMetadata | None = None,
    groups: Mapping[str, ProcessGroup] | None = None,
    compress: bool | None = None,
    pg_values: str | None = None,
) -> int:
    """Write one rank file from any iterable of nodes (streamed); returns the number of nodes written."""
    target = str(path)
    if compress is None:
        compress = target.endswith(".gz")
    count = -1  # the GlobalMetadata record is not a node
    try:
        raw = open(target, "wb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise TraceError(f"{target}: cannot write ({exc.strerror or exc})") from None
    try:
        out = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) if compress else raw
        write = out.write
        for record in encode_rank(nodes, metadata=metadata, groups=groups, where=target, pg_values=pg_values):
            write(record)
            count += 1
        if compress:
            out.close()
    except OSError as exc:
        raise TraceError(f"{target}: cannot write ({exc.strerror or exc})") from None
    finally:
        raw.close()
    return count


def rank_path(prefix: str | Path, rank: int, compress: bool = False) -> Path:
    """``PREFIX.<rank>.et`` (``.et.gz`` when compressed): the per-rank file name the reader looks for."""
    return Path(f"{prefix}.{rank}.et" + (".gz" if compress else ""))


def write_trace(trace: Trace, prefix: str | Path, *, compress: bool = False) -> list[Path]:
    """Write ``PREFIX.<rank>.et`` (``.et.gz`` when compressed) for every rank; returns the paths."""
    base = Path(prefix)
    if str(base.parent):
        try:
            base.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TraceError(f"{base}: cannot create output directory {base.parent}: {exc.strerror or exc}") from None
    paths = []
    values = pg_init_values(trace.groups) if trace.groups else None  # once: its text grows with the ranks
    for rank, graph in sorted(trace.ranks.items()):
        path = rank_path(base, rank, compress)
        write_rank(path, graph.nodes, metadata=graph.metadata, groups=trace.groups or None, compress=compress,
                   pg_values=values)
        paths.append(path)
    return paths
