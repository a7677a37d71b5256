"""The project's own typed model of a Chakra execution trace.

Only ``emulator.trace.io`` (and its helpers) touch protobuf classes; everything downstream (the
schedule compiler, ``inspect``, the generators) sees these plain, frozen objects.

A :class:`Trace` is a set of per-rank graphs (:class:`RankGraph`) plus process groups. A node keeps
both raw dependency lists as read (``data_deps``, ``ctrl_deps``); the graph's ``dep_policy`` says which
set is *used* (``data``, ``ctrl`` or ``union``, chosen by the reader: ``auto`` → ``data`` when the file
has any data edge, else ``ctrl``). Node ids are unique only within one rank's file.

Communication fields are normalised into :class:`CommInfo`: ``collective`` is set only on
``COMM_COLL_NODE`` (``comm_type`` on SEND/RECV nodes is ignored, it holds a NodeType number in MSCCL
traces); SEND without ``comm_src`` and RECV without ``comm_dst`` mean "this rank" and are already
resolved here; ``pg_name`` ``None`` means the default group of all ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple


class NodeType(IntEnum):
    """Chakra ``NodeType`` (et_def.proto); unknown values are kept as plain ints on nodes."""

    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class CollectiveType(IntEnum):
    """Chakra ``CollectiveCommType`` (current numbering, schema 0.0.4 and later)."""

    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


def collective_from_name(text: str) -> CollectiveType | None:
    """``'all_reduce'``, ``'ALL-TO-ALL'``, ``' broadcast '`` → the enum member; None for unknown names."""
    return CollectiveType.__members__.get(text.strip().upper().replace("-", "_"))


#: pre-2023 (proto2) numbering → current enum; used only when the reader is told the file is legacy.
LEGACY_COLLECTIVE_NUMBERING: dict[int, CollectiveType] = {
    0: CollectiveType.ALL_REDUCE,
    1: CollectiveType.ALL_TO_ALL,
    2: CollectiveType.ALL_GATHER,
    3: CollectiveType.REDUCE_SCATTER,
    4: CollectiveType.BROADCAST,
}

COMM_NODE_TYPES = frozenset({NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMM_COLL_NODE})

#: collectives that have a root (the ``root`` int attribute, a position in the process group)
ROOTED = frozenset({CollectiveType.REDUCE, CollectiveType.GATHER, CollectiveType.SCATTER, CollectiveType.BROADCAST})

#: the collective names of profiles and results, in report order (REDUCE_SCATTER_BLOCK is reported as
#: reduce_scatter, so it has no name of its own here)
COLLECTIVE_NAMES: tuple[str, ...] = tuple(c.name.lower() for c in (
    CollectiveType.ALL_REDUCE, CollectiveType.ALL_TO_ALL, CollectiveType.ALL_GATHER, CollectiveType.REDUCE_SCATTER,
    CollectiveType.BROADCAST, CollectiveType.REDUCE, CollectiveType.GATHER, CollectiveType.SCATTER,
    CollectiveType.BARRIER))
#: the names of the rooted collectives
ROOTED_NAMES: frozenset[str] = frozenset(c.name.lower() for c in ROOTED)


def node_type_name(value: int) -> str:
    """Enum spelling of a node type (``COMP_NODE``); ``UNKNOWN_<n>`` for values the schema lacks."""
    try:
        return NodeType(value).name
    except ValueError:
        return f"UNKNOWN_{value}"


@dataclass(frozen=True, slots=True)
class CommInfo:
    """Communication fields of a COMM_* node, already normalised.

    ``collective`` is None on SEND/RECV nodes (and on CPU-side wrapper nodes that carry no
    ``comm_type``). ``src``/``dst`` are set on SEND/RECV nodes (the "this rank" defaults resolved).
    ``root`` comes from a ``root`` attribute when a producer wrote one (Chakra has no root field).
    """

    collective: CollectiveType | None = None
    size_bytes: int = 0
    src: int | None = None
    dst: int | None = None
    tag: int = 0
    pg_name: str | None = None
    priority: int = 0
    root: int | None = None


@dataclass(frozen=True, slots=True)
class IOInfo:
    """``Node.inputs`` / ``Node.outputs``: opaque strings as written (Python-repr, not JSON)."""

    values: str = ""
    shapes: str = ""
    types: str = ""


#: Attribute value kinds preserved for round trips: the protobuf oneof member name and the value.
AttrValue = tuple[str, object]


class Node(NamedTuple):
    """One node of a rank's graph (immutable).

    ``attrs`` holds every attribute that is not interpreted into a typed field, as
    ``(name, (kind, value))`` pairs in file order, where ``kind`` is the protobuf oneof member
    (``int64_val``, ``string_val``, ``bool_list`` …), so a writer can reproduce it.

    A ``NamedTuple`` rather than a frozen dataclass: a trace holds millions of nodes, and the reader
    builds them in C (``tuple.__new__(Node, values)`` over zipped columns) with no Python code per
    node, several times faster than any ``__init__``. Use ``node._replace(...)`` for a modified copy.
    """

    id: int
    name: str = ""
    type: int = NodeType.INVALID_NODE
    data_deps: tuple[int, ...] = ()
    ctrl_deps: tuple[int, ...] = ()
    duration_micros: int = 0
    start_time_micros: int = 0
    is_cpu_op: bool = False
    comm: CommInfo | None = None
    inputs: IOInfo | None = None
    outputs: IOInfo | None = None
    attrs: tuple[tuple[str, AttrValue], ...] = ()

    @property
    def type_name(self) -> str:
        return node_type_name(self.type)

    @property
    def is_comm(self) -> bool:
        return self.type in COMM_NODE_TYPES

    @property
    def is_traffic(self) -> bool:
        """True when this node generates network traffic (GPU-side comm with a known meaning)."""
        if self.comm is None or self.is_cpu_op:
            return False
        if self.type == NodeType.COMM_COLL_NODE:
            return self.comm.collective is not None
        return self.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)

    def attr(self, name: str, default: object = None) -> object:
        """Value of an uninterpreted attribute by name (first occurrence), or ``default``."""
        for key, (_kind, value) in self.attrs:
            if key == name:
                return value
        return default


@dataclass(frozen=True, slots=True)
class ProcessGroup:
    """A communicator: its name (``pg_name``) and sorted member ranks. Position = index in ``ranks``."""

    name: str
    ranks: tuple[int, ...]
    desc: str = ""

    def position(self, rank: int) -> int:
        return self.ranks.index(rank)


@dataclass(frozen=True, slots=True)
class GlobalMetadata:
    """Record 1 of a Chakra file. ``present`` is False for legacy files that start with a Node."""

    version: str = ""
    attrs: tuple[tuple[str, AttrValue], ...] = ()
    present: bool = True


#: the largest comm_size a run accepts (2^53 bytes = 8 PiB: byte counts stay exact in float64 statistics)
MAX_COMM_SIZE_BYTES = 1 << 53

DEP_POLICIES = ("auto", "data", "ctrl", "union")
#: ``--legacy-collectives`` / ``workload.trace.legacy_collectives`` → the reader's ``legacy_collectives``
LEGACY_CHOICES: dict[str, bool | None] = {"auto": None, "yes": True, "no": False}


@dataclass
class RankGraph:
    """One rank's nodes in file order, with the dependency policy in force and load warnings."""

    rank: int
    nodes: list[Node]
    metadata: GlobalMetadata = field(default_factory=GlobalMetadata)
    dep_policy: str = "data"
    source: str = ""
    warnings: list[str] = field(default_factory=list)


@dataclass
class Trace:
    """A whole trace: rank graphs by rank, process groups by name, where it came from."""

    ranks: dict[int, RankGraph]
    groups: dict[str, ProcessGroup] = field(default_factory=dict)
    source: str = ""
    warnings: list[str] = field(default_factory=list)
    #: the groups file the groups came from ('' = the trace itself)
    groups_source: str = ""

    @property
    def world_size(self) -> int:
        return (max(self.ranks) + 1) if self.ranks else 0
