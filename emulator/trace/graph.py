"""Dependency queries on a rank graph: parents, topological order, critical path, collective counts.

Theory of operation
-------------------
The edge set is the graph's ``dep_policy`` (``data``, ``ctrl`` or ``union`` of both), resolved by the
reader. :func:`parents` filters it: parents absent from the file count as satisfied (the reader warned
about them), self edges and duplicates are dropped, order of first appearance is kept.

:func:`topological_order` is Kahn's algorithm with a min-heap of ready ids, so among ready nodes the
lowest id goes first (the v1 Chakra feeder and ASTRA-sim issue order). It never recurses. When nodes
are left over the edge set has a cycle: one is found by walking parents inside the leftover set
until an id repeats, and :class:`TraceError` names the file, rank, policy and the ids on it.

:func:`critical_path_compute_us` is the longest path in that order where a node weighs its
``duration_micros`` unless it is a communication node (weight 0: its time depends on the fabric).

:func:`check_collective_counts` compares, for every process group, how many traffic-generating
collectives each member rank issues on it; matching across ranks is by issue order, so the counts
must agree.

Per-graph indexes (id → node, parent lists) are cached on the graph object and rebuilt when its
node list or policy changes; :func:`ordered_parents` (order plus parent lists for a one-off walk)
drops the index it built.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

from emulator.errors import TraceError
from emulator.trace.groups import resolve_group
from emulator.trace.model import Node, NodeType, ProcessGroup, RankGraph, Trace

_CACHE_ATTR = "_graph_index_cache"


def _where(graph: RankGraph) -> str:
    return f"{graph.source or '<memory>'}: rank {graph.rank}"


def _raw_parents(graph: RankGraph, node: Node) -> tuple[int, ...]:
    policy = graph.dep_policy
    if policy == "data":
        return node.data_deps
    if policy == "ctrl":
        return node.ctrl_deps
    if policy == "union":
        return node.data_deps + node.ctrl_deps
    raise TraceError(f"{_where(graph)}: unknown dependency policy {policy!r} (use data, ctrl or union)")


class _Index:
    __slots__ = ("key", "by_id", "parents")

    def __init__(self, graph: RankGraph) -> None:
        self.key = (id(graph.nodes), len(graph.nodes), graph.dep_policy)
        self.by_id: dict[int, Node] = {n.id: n for n in graph.nodes}
        if len(self.by_id) != len(graph.nodes):
            seen: set[int] = set()
            for n in graph.nodes:
                if n.id in seen:
                    raise TraceError(f"{_where(graph)}: duplicate node id {n.id}")
                seen.add(n.id)
        by_id = self.by_id
        self.parents: dict[int, tuple[int, ...]] = {}
        for n in graph.nodes:
            raw = _raw_parents(graph, n)
            if not raw:
                self.parents[n.id] = ()
                continue
            nid = n.id
            kept = tuple(dict.fromkeys(p for p in raw if p != nid and p in by_id))
            self.parents[nid] = kept


def _index(graph: RankGraph) -> _Index:
    cached = graph.__dict__.get(_CACHE_ATTR)
    if cached is not None and cached.key == (id(graph.nodes), len(graph.nodes), graph.dep_policy):
        return cached
    idx = _Index(graph)
    graph.__dict__[_CACHE_ATTR] = idx
    return idx


def parents(graph: RankGraph, node: Node | int) -> tuple[int, ...]:
    """Parent ids of ``node`` under the graph's policy (absent parents, self edges, duplicates dropped)."""
    idx = _index(graph)
    nid = node if isinstance(node, int) else node.id
    try:
        return idx.parents[nid]
    except KeyError:
        raise TraceError(f"{_where(graph)}: node {nid} is not in the graph") from None


def topological_order(graph: RankGraph) -> list[Node]:
    """Kahn's algorithm, lowest ready id first; TraceError naming nodes on a cycle if there is one."""
    idx = _index(graph)
    pmap = idx.parents
    children: dict[int, list[int]] = defaultdict(list)
    pending: dict[int, int] = {}
    ready: list[int] = []
    for nid, ps in pmap.items():
        if ps:
            pending[nid] = len(ps)
            for p in ps:
                children[p].append(nid)
        else:
            ready.append(nid)
    heapq.heapify(ready)
    order: list[Node] = []
    by_id = idx.by_id
    pop, push = heapq.heappop, heapq.heappush
    while ready:
        nid = pop(ready)
        order.append(by_id[nid])
        for c in children.get(nid, ()):
            left = pending[c] - 1
            pending[c] = left
            if not left:
                push(ready, c)
    if len(order) != len(by_id):
        stuck = {nid for nid, left in pending.items() if left}
        cycle = _find_cycle(stuck, pmap)
        shown = " -> ".join(map(str, cycle[:12])) + (" -> ..." if len(cycle) > 12 else "")
        raise TraceError(
            f"{_where(graph)}: dependency cycle ({graph.dep_policy} deps) through nodes {shown}; "
            f"{len(stuck)} of {len(by_id)} nodes can never run"
        )
    return order


def ordered_parents(graph: RankGraph) -> tuple[list[Node], list[tuple[int, ...]]]:
    """:func:`topological_order` and each node's :func:`parents`, read from the index in one pass.

    For a caller that walks each graph once (the schedule compiler): the index this builds is dropped
    again unless it was already cached, so many graphs' indexes do not stay alive together.
    """
    had_index = _CACHE_ATTR in graph.__dict__
    order = topological_order(graph)
    pmap = _index(graph).parents
    plists = [pmap[n.id] for n in order]
    if not had_index:
        graph.__dict__.pop(_CACHE_ATTR, None)
    return order, plists


def _find_cycle(stuck: set[int], pmap: dict[int, tuple[int, ...]]) -> list[int]:
    """Ids on one cycle inside ``stuck`` (every stuck node has a stuck parent)."""
    start = min(stuck)
    path: list[int] = []
    pos: dict[int, int] = {}
    nid = start
    while nid not in pos:
        pos[nid] = len(path)
        path.append(nid)
        nid = min(p for p in pmap[nid] if p in stuck)
    cycle = path[pos[nid] :]
    cycle.append(nid)
    return cycle


def critical_path_compute_us(graph: RankGraph) -> int:
    """Longest dependency path, weighting each non-communication node by its ``duration_micros``."""
    pmap = _index(graph).parents
    finish: dict[int, int] = {}
    best = 0
    for n in topological_order(graph):
        ps = pmap[n.id]
        start = max(map(finish.__getitem__, ps)) if ps else 0
        end = start + (0 if n.is_comm else n.duration_micros)
        finish[n.id] = end
        if end > best:
            best = end
    return best


def check_collective_counts(trace: Trace) -> None:
    """TraceError when member ranks of a group issue different numbers of collectives on it."""
    counts: dict[str, dict[int, int]] = {}
    names: dict[str, str] = {}
    resolved: dict[str | None, ProcessGroup] = {}  # pg_name → group, resolved once per name
    for rank, graph in sorted(trace.ranks.items()):
        for n in graph.nodes:
            if n.type != NodeType.COMM_COLL_NODE or not n.is_traffic:
                continue
            pg_name = n.comm.pg_name  # type: ignore[union-attr]
            group = resolved.get(pg_name)
            if group is None:
                group = resolved[pg_name] = resolve_group(trace, pg_name)
                counts.setdefault(group.name, dict.fromkeys(group.ranks, 0))
                names[group.name] = group.name or "default (all ranks)"
            per_rank = counts[group.name]
            if rank not in per_rank:
                raise TraceError(
                    f"{graph.source}: rank {rank}: node {n.id} uses process group {names[group.name]!r} "
                    f"whose members {list(group.ranks)} do not include rank {rank}"
                )
            per_rank[rank] += 1
    for gname, per_rank in counts.items():
        present = {r: c for r, c in per_rank.items() if r in trace.ranks}
        if len(set(present.values())) > 1:
            listing = ", ".join(f"rank {r}: {c}" for r, c in sorted(present.items()))
            raise TraceError(
                f"{trace.source}: process group {names[gname]!r}: mismatched collective counts ({listing})"
            )
