"""Building blocks shared by the synthetic trace generators.

Theory of operation: a generator is a pure description (:class:`GeneratedTrace`) of a trace set: the
world size, the process groups, the GlobalMetadata record and a function ``rank_nodes(rank)`` that
*yields* that rank's nodes one by one. Nothing is materialised: :func:`write_generated` hands each
rank's iterator to the streaming writer, so memory stays bounded however many nodes are asked for,
and the same options always give the same nodes in the same order (no clocks, no randomness), hence
byte-identical files.

Node ids are allocated per rank by a :class:`NodeIds` counter starting at 1 (0 is avoided because a
proto3 node with id 0 omits the field). Dependencies are always written as ``data_deps`` (the edges
Chakra's feeder honours); ``ctrl_deps`` stay empty.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from emulator.errors import ConfigError, TraceError
from emulator.trace.groups import pg_init_values
from emulator.trace.model import (
    CollectiveType,
    CommInfo,
    GlobalMetadata,
    Node,
    NodeType,
    ProcessGroup,
    RankGraph,
    Trace,
)

#: Chakra schema version written in record 1 (never empty: a zero-length record stops Python readers).
ET_VERSION = "0.0.4"


@dataclass(frozen=True, slots=True)
class GeneratedTrace:
    """A synthetic trace set, described but not materialised."""

    kind: str
    world_size: int
    groups: Mapping[str, ProcessGroup]
    metadata: GlobalMetadata
    rank_nodes: Callable[[int], Iterator[Node]]

    def nodes(self, rank: int) -> Iterator[Node]:
        return self.rank_nodes(rank)

    def to_trace(self) -> Trace:
        """The trace in memory, as the reader returns the files :func:`write_generated` writes (with the
        ``process_group:init`` node the writer adds when there are groups)."""
        from emulator.trace.io import pg_init_node

        ranks: dict[int, RankGraph] = {}
        init = pg_init_node(self.groups, 0) if self.groups else None  # its text (O(ranks)) shared by every rank
        for rank in range(self.world_size):
            nodes = list(self.nodes(rank))
            if init is not None:
                nodes.append(init._replace(id=max((n.id for n in nodes), default=-1) + 1))
            policy = "data" if any(n.data_deps for n in nodes) else "ctrl"
            ranks[rank] = RankGraph(rank=rank, nodes=nodes, metadata=self.metadata, dep_policy=policy)
        return Trace(ranks=ranks, groups=dict(self.groups), source=f"generated {self.kind} trace")

    def digest(self) -> str:
        """sha256 of the files :func:`write_generated` writes uncompressed (their ``trace_digest``), computed
        without writing them."""
        from emulator.trace.io import encode_rank

        h = hashlib.sha256()
        values = pg_init_values(self.groups) if self.groups else None  # once: its text grows with the ranks
        for rank in range(self.world_size):
            for record in encode_rank(self.nodes(rank), metadata=self.metadata, groups=self.groups, pg_values=values):
                h.update(record)
        return h.hexdigest()


def make_metadata(kind: str, options: object) -> GlobalMetadata:
    """Record 1: version plus the generator kind and its options as canonical JSON (deterministic)."""
    opts = asdict(options) if options is not None else {}  # type: ignore[call-overload]
    text = json.dumps(opts, sort_keys=True, separators=(",", ":"), default=_json_default)
    return GlobalMetadata(
        version=ET_VERSION,
        attrs=(("generator", ("string_val", f"emulator generate {kind}")), ("generator_options", ("string_val", text))),
    )


def _json_default(value: object) -> object:
    if isinstance(value, (tuple, frozenset, set)):
        return list(value)
    if hasattr(value, "name"):
        return value.name  # enums
    raise TypeError(f"cannot serialise {type(value).__name__}")


@dataclass(slots=True)
class NodeIds:
    """Per-rank id counter (ids start at 1)."""

    next_id: int = 1

    def take(self) -> int:
        nid = self.next_id
        self.next_id += 1
        return nid


def _deps(deps: Iterable[int | None]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(d for d in deps if d is not None))


def comp_node(nid: int, name: str, duration_us: int, deps: Iterable[int | None] = ()) -> Node:
    return Node(id=nid, name=name, type=NodeType.COMP_NODE, data_deps=_deps(deps), duration_micros=duration_us)


def coll_node(
    nid: int,
    name: str,
    collective: CollectiveType,
    size_bytes: int,
    deps: Iterable[int | None] = (),
    *,
    pg_name: str | None = None,
    root: int | None = None,
) -> Node:
    comm = CommInfo(collective=collective, size_bytes=size_bytes, pg_name=pg_name, root=root)
    return Node(id=nid, name=name, type=NodeType.COMM_COLL_NODE, data_deps=_deps(deps), comm=comm)


def p2p_node(
    nid: int,
    name: str,
    node_type: NodeType,
    size_bytes: int,
    src: int,
    dst: int,
    tag: int,
    deps: Iterable[int | None] = (),
    *,
    pg_name: str | None = None,
) -> Node:
    if node_type not in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
        raise ValueError(f"not a point-to-point node type: {node_type!r}")
    comm = CommInfo(size_bytes=size_bytes, src=src, dst=dst, tag=tag, pg_name=pg_name)
    return Node(id=nid, name=name, type=node_type, data_deps=_deps(deps), comm=comm)


@dataclass(slots=True)
class WriteReport:
    """What :func:`write_generated` wrote: one path and node count per rank."""

    paths: list[Path] = field(default_factory=list)
    node_counts: list[int] = field(default_factory=list)


def write_generated(gen: GeneratedTrace, prefix: str | Path, *, compress: bool = False) -> WriteReport:
    """Stream every rank of ``gen`` to ``PREFIX.<rank>.et`` through the trace writer."""
    from emulator.trace.io import rank_path, write_rank  # the only module that touches protobuf

    parent = Path(f"{prefix}.0.et").parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{prefix}: cannot create output directory {parent}: {exc.strerror or exc}") from None
    report = WriteReport()
    values = pg_init_values(gen.groups) if gen.groups else None  # once: its text grows with the ranks
    for rank in range(gen.world_size):
        path = rank_path(prefix, rank, compress)
        try:
            count = write_rank(path, gen.nodes(rank), metadata=gen.metadata, groups=gen.groups, compress=compress,
                               pg_values=values)
        except OSError as exc:
            raise TraceError(f"{path}: cannot write: {exc.strerror or exc}") from None
        report.paths.append(path)
        report.node_counts.append(count)
    return report


@dataclass(slots=True)
class Chain:
    """A per-rank program-order chain: each node built through it depends on the previous one.

    ``extra`` parents can be added per call; ``head`` is the id of the last node of the chain.
    """

    ids: NodeIds
    head: int | None = None

    def comp(self, name: str, duration_us: int, *extra: int | None) -> Node:
        nid = self.ids.take()
        node = comp_node(nid, name, duration_us, (self.head, *extra))
        self.head = nid
        return node

    def coll(self, name: str, collective: CollectiveType, size_bytes: int, *extra: int | None,
             pg_name: str | None = None, root: int | None = None) -> Node:
        nid = self.ids.take()
        node = coll_node(nid, name, collective, size_bytes, (self.head, *extra), pg_name=pg_name, root=root)
        self.head = nid
        return node
