"""The size of a compile before it runs: flows, ops, dependency edges and peak memory, from counts alone.

Theory of operation
-------------------
Every registered algorithm's message count is a function of the group size ``n`` only (empty pieces
still make 0-byte messages) and ``chunks`` multiplies it (:mod:`emulator.schedule.algorithms.base`), so
the flows of a compile follow from the collective nodes of each rank, resolved to their process groups
as the compiler resolves them: :data:`_COUNTS` holds, per (collective, algorithm), the messages of one
instance and its ``after`` edges — exact for ring, direct and pairwise, an upper bound (at most two per
message, one for the rooted trees) for the rest; the tests compare both with the algorithms' tables.
Replicated ranks share one graph, so the walk over nodes is once per distinct graph, not per rank.
Instances of a group = the most collective nodes any member issues on it (the compiler refuses unequal
counts later); point-to-point flows ≤ the SEND nodes.

Peak memory of the compile (bytes above what the process held before it) =
:data:`BYTES_PER_FLOW` per flow (its two ops and the walk's and assembly's columns) +
:data:`BYTES_PER_EDGE` per dependency edge, plus, once per distinct plan (collective, n, size, algorithm,
chunks), the lowering's arrays per transfer: :data:`PLAN_BYTES_PER_TRANSFER_TABLE` for the algorithms
built as arrays (ring, direct All-to-All), :data:`PLAN_BYTES_PER_TRANSFER_OBJECTS` plus
:data:`PLAN_BYTES_PER_AFTER` per ``after`` entry for those built from Python transfer objects, and
8 bytes per payload range (halving-doubling's messages carry up to ``p/2`` pieces each). The constants
are the slopes measured on this machine (bench/RESULTS.md, branch mem18): within about 1.5× of the
peak RSS on ring, direct, pairwise, halving-doubling, tree and barrier compiles of 0.03–8 M flows.

:func:`memory_limit` is the memory a process may still take: the least of ``MemAvailable``, the
address-space and data ``ulimit`` less what the process already maps, and the cgroup's ``memory.max``
less its ``memory.current``. :func:`check_fits` turns an estimate above it into one error line.
"""

from __future__ import annotations

import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from emulator.errors import ScheduleError
from emulator.trace.model import CollectiveType, NodeType

BYTES_PER_FLOW = 150
BYTES_PER_EDGE = 24
PLAN_BYTES_PER_TRANSFER_TABLE = 135
PLAN_BYTES_PER_TRANSFER_OBJECTS = 400
PLAN_BYTES_PER_AFTER = 80
PLAN_BYTES_PER_RANGE = 8
#: a compile at least this large says so before it starts (``emulator compile`` and ``run``, on stderr)
NOTICE_FLOWS = 2_000_000

_C = CollectiveType


def _log2(n: int) -> int:
    return (n - 1).bit_length()


def _hd(n: int) -> tuple[int, int, int]:
    p = 1 << (n.bit_length() - 1)
    return p, n - p, p.bit_length() - 1


#: (collective, algorithm) → (messages of one instance on n ranks, its ``after`` edges (window w or None))
_COUNTS: dict[tuple[CollectiveType, str], tuple[Callable[[int], int], Callable[[int, int | None], int]]] = {
    (_C.ALL_REDUCE, "ring"): (lambda n: 2 * n * (n - 1), lambda n, w: n * (2 * n - 3)),
    (_C.REDUCE_SCATTER, "ring"): (lambda n: n * (n - 1), lambda n, w: n * (n - 2)),
    (_C.REDUCE_SCATTER_BLOCK, "ring"): (lambda n: n * (n - 1), lambda n, w: n * (n - 2)),
    (_C.ALL_GATHER, "ring"): (lambda n: n * (n - 1), lambda n, w: n * (n - 2)),
    (_C.ALL_REDUCE, "direct"): (lambda n: 2 * n * (n - 1), lambda n, w: n * (n - 1) ** 2),
    (_C.REDUCE_SCATTER, "direct"): (lambda n: n * (n - 1), lambda n, w: 0),
    (_C.REDUCE_SCATTER_BLOCK, "direct"): (lambda n: n * (n - 1), lambda n, w: 0),
    (_C.ALL_GATHER, "direct"): (lambda n: n * (n - 1), lambda n, w: 0),
    (_C.ALL_TO_ALL, "direct"): (lambda n: n * (n - 1), lambda n, w: 0 if w is None else n * max(0, n - 1 - w)),
    (_C.ALL_TO_ALL, "pairwise"): (lambda n: n * (n - 1), lambda n, w: 2 * n * max(0, n - 2)),
    (_C.ALL_REDUCE, "halving_doubling"): (lambda n: 2 * (_hd(n)[1] + _hd(n)[2] * _hd(n)[0]),
                                          lambda n, w: 4 * (_hd(n)[1] + _hd(n)[2] * _hd(n)[0])),
    (_C.ALL_REDUCE, "double_binary_tree"): (lambda n: 4 * (n - 1), lambda n, w: 8 * (n - 1)),
    (_C.BROADCAST, "ring"): (lambda n: n - 1, lambda n, w: max(0, n - 2)),
    (_C.BROADCAST, "binomial_tree"): (lambda n: n - 1, lambda n, w: n - 1),
    (_C.REDUCE, "ring"): (lambda n: n - 1, lambda n, w: max(0, n - 2)),
    (_C.REDUCE, "binomial_tree"): (lambda n: n - 1, lambda n, w: n - 1),
    (_C.GATHER, "direct"): (lambda n: n - 1, lambda n, w: 0),
    (_C.SCATTER, "direct"): (lambda n: n - 1, lambda n, w: 0),
    (_C.BARRIER, "dissemination"): (lambda n: n * _log2(n), lambda n, w: 2 * n * _log2(n)),
}


def instance_counts(ctype: CollectiveType, algorithm: str, n: int, chunks: int = 1,
                    window: int | None = None) -> tuple[int, int] | None:
    """(transfers, ``after`` edges) of one instance on ``n`` ranks (chunks included); None when unknown."""
    entry = _COUNTS.get((ctype, algorithm))
    if entry is None:
        return None
    if n < 2:
        return 0, 0
    if window is not None and window >= n - 1:
        window = None
    return entry[0](n) * chunks, entry[1](n, window) * chunks


def _payload_ranges(ctype: CollectiveType, algorithm: str, n: int, chunks: int) -> int:
    """Payload ranges of one plan beyond one per transfer (halving-doubling's multi-piece messages)."""
    if (ctype, algorithm) != (_C.ALL_REDUCE, "halving_doubling") or n < 2:
        return 0
    p, rem, _ = _hd(n)
    return (2 * p * (p - 1) + 2 * rem * p) * chunks


@dataclass(frozen=True, slots=True)
class CompileEstimate:
    """What a compile will build, before it runs (see module docstring)."""

    flows: int
    ops: int
    edges: int
    bytes: int
    #: the largest contribution, in words: "3 × all_reduce/ring on 100,000 ranks (group 'default')"
    largest: str

    def counts(self) -> str:
        return f"{si(self.flows)} flows, {si(self.ops)} ops"

    def text(self) -> str:
        return f"{self.counts()} (~{size_text(self.bytes)})"

    def notice(self) -> str | None:
        """The line a compile of :data:`NOTICE_FLOWS` flows or more prints on stderr before it starts."""
        return f"compiling {self.text()}" if self.flows >= NOTICE_FLOWS else None


def si(x: float) -> str:
    """``2.1 M``: a count in words."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.1f} {unit}" if x < 1e12 else f"{x:.1e}"
    return f"{int(x):,}"


def size_text(b: float) -> str:
    """``1.4 GB``: bytes in words."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if b >= scale:
            return f"{b / scale:.1f} {unit}"
    return f"{b / 1e3:.0f} kB"


def estimate_compile(c) -> CompileEstimate:
    """The size of ``c``'s compile (a :class:`~emulator.schedule.compiler._Compiler` before its walk)."""
    per_graph: dict[int, tuple[dict[tuple[str, int, int], int], int, int, int]] = {}
    for g in {id(g): g for g in c.graphs.values()}.values():
        colls: dict[tuple[str, int, int], int] = {}
        plain = sends = other = 0
        for node in g.nodes:
            if node.type == NodeType.COMM_COLL_NODE and node.is_traffic:
                key = (c._group_name(node.comm.pg_name), int(node.comm.collective), int(node.comm.size_bytes))
                colls[key] = colls.get(key, 0) + 1
            elif node.is_traffic:
                plain += 1
                sends += node.type == NodeType.COMM_SEND_NODE
            else:
                other += 1
        per_graph[id(g)] = (colls, plain, sends, other)
    ops = edges = flows = plan_bytes = 0
    copies: dict[int, int] = {}
    for g in c.graphs.values():
        copies[id(g)] = copies.get(id(g), 0) + 1
    for gid, k in copies.items():
        colls, plain, sends, other = per_graph[gid]
        flows += k * sends
        ops += k * (plain + other + 3 * sum(colls.values()))  # a DELAY per node, up to two joins per collective
        edges += k * 2 * (plain + other)
    # instances per (group, collective, size): the most any member issues
    issued: dict[tuple[str, int, int], int] = {}
    for gname, ranks in c.groups.items():
        seen: set[int] = set()
        for r in ranks:
            g = c.graphs.get(r)
            if g is None or id(g) in seen:
                continue
            seen.add(id(g))
            for key, k in per_graph[id(g)][0].items():
                if key[0] == gname and k > issued.get(key, 0):
                    issued[key] = k
    largest, largest_flows = "", -1
    for (gname, ctype_value, _size_bytes), k in sorted(issued.items()):
        try:
            ctype = CollectiveType(ctype_value)
            algorithm = c.get_algorithm(ctype, c.o.algorithms.get(ctype))
        except (ValueError, ScheduleError):
            continue  # the walk names the node
        n = len(c.groups[gname])
        chunks = c.o.chunks if getattr(algorithm, "chunkable", True) else 1
        window = c.o.window if ctype == CollectiveType.ALL_TO_ALL else None
        counts = instance_counts(ctype, algorithm.name, n, chunks, window)
        if counts is None:
            continue
        transfers, after = counts
        flows += k * transfers
        ops += 2 * k * transfers
        edges += k * (after + 2 * transfers)  # after edges, and entry edges of the roots (at most one per op)
        objects = type(algorithm)._table is _base_table()
        plan_bytes += transfers * (PLAN_BYTES_PER_TRANSFER_OBJECTS if objects else PLAN_BYTES_PER_TRANSFER_TABLE)
        plan_bytes += (after * PLAN_BYTES_PER_AFTER + _payload_ranges(ctype, algorithm.name, n, chunks)
                       * PLAN_BYTES_PER_RANGE) if objects else 0
        if k * transfers > largest_flows:
            largest_flows = k * transfers
            largest = (f"{k:,} × {ctype.name.lower()}/{algorithm.name} on {n:,} ranks (group {gname!r}"
                       + (f"; replicate={c.o.replicate:,}" if c.o.replicate else "") + ")"
                       + (f" × {chunks:,} chunks" if chunks > 1 else ""))
    need = flows * BYTES_PER_FLOW + edges * BYTES_PER_EDGE + plan_bytes
    return CompileEstimate(flows, ops, edges, need, largest)


def _base_table():
    from emulator.schedule.algorithms.base import BaseAlgorithm

    return BaseAlgorithm._table


def _proc_bytes(path: str, field: str) -> int | None:
    """``field``'s value in a /proc file of ``Name:  N kB`` lines, in bytes; None where absent or unreadable."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


#: a v1 cgroup limit at or above this is "no limit" (the kernel's PAGE_COUNTER_MAX in bytes is ~2**63)
_UNLIMITED_BYTES = 1 << 60


def _room(d: Path, limit_file: str, usage_file: str) -> int | None:
    """``limit_file − usage_file`` in cgroup directory ``d``; None when unlimited or unreadable."""
    try:
        top = (d / limit_file).read_text().strip()
        if top == "max" or int(top) >= _UNLIMITED_BYTES:
            return None
        return max(0, int(top) - int((d / usage_file).read_text().strip()))
    except (OSError, ValueError):
        return None


def _cgroup_room(proc_cgroup: Path = Path("/proc/self/cgroup"), fs: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The least room (limit − usage) of this process's memory cgroup and every ancestor: v2 ``memory.max`` /
    ``memory.current``, v1 ``memory.limit_in_bytes`` / ``memory.usage_in_bytes`` under ``memory/``; None when
    no level has a limit, or nothing is readable."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[1] == "":
            root, files = fs, ("memory.max", "memory.current")
        elif "memory" in parts[1].split(","):
            root, files = fs / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        d = root / parts[2].strip().lstrip("/")
        while True:
            room = _room(d, *files)
            if room is not None:
                rooms.append(room)
            if d == root or root not in d.parents:
                break
            d = d.parent
    return min(rooms) if rooms else None


def memory_limit() -> tuple[int, str] | None:
    """The memory this process may still take and what sets it, or None where nothing is known."""
    found: list[tuple[int, str]] = []
    avail = _proc_bytes("/proc/meminfo", "MemAvailable")
    if avail is not None:
        found.append((avail, "MemAvailable"))
    for which, field, name in ((resource.RLIMIT_AS, "VmSize", "ulimit -v"), (resource.RLIMIT_DATA, "VmData", "ulimit -d")):
        soft = resource.getrlimit(which)[0]
        if soft != resource.RLIM_INFINITY:
            found.append((max(0, soft - (_proc_bytes("/proc/self/status", field) or 0)), f"{name} {soft // 1024} kB, less what is mapped"))
    room = _cgroup_room()
    if room is not None:
        found.append((room, "the cgroup's memory limit"))
    return min(found) if found else None


def check_fits(need_bytes: int, what: str, advice: str, limit: tuple[int, str] | None = None) -> None:
    """ScheduleError (one line) when ``need_bytes`` exceeds :func:`memory_limit` (or ``limit``)."""
    have = limit if limit is not None else memory_limit()
    if have is not None and need_bytes > have[0]:
        raise ScheduleError(f"{what} needs about {size_text(need_bytes)} of memory but {size_text(have[0])} are available "
                            f"({have[1]}): {advice}")
