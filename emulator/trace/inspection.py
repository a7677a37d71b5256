"""Trace summary for ``emulator inspect``: a pure function from a :class:`Trace` to a JSON-able dict.

Theory of operation: one pass over each rank's nodes counts node types (Chakra enum spellings,
``COMP_NODE`` …), and aggregates the communication nodes that make traffic (``Node.is_traffic``) by
kind — the collective's enum name (``ALL_REDUCE``) for COMM_COLL nodes, ``COMM_SEND_NODE`` /
``COMM_RECV_NODE`` for point-to-point — with count, total ``comm_size`` bytes, the process groups they
use (``null`` = the default all-rank group) and, for SEND/RECV, the peer ranks. COMM nodes that make no
traffic (CPU-side wrappers, collectives without ``comm_type``) are counted in a warning. The compute
time on the critical path comes from :func:`emulator.trace.graph.critical_path_compute_us` under the
rank's dependency policy. Reader warnings (missing parents …) are carried through per rank and for
the whole trace. Totals add the per-rank figures up.

Shape (``--json``)::

    {"source", "ranks", "world_size", "groups": [{"name", "ranks", "desc"}],
     "per_rank": [{"rank", "source", "dep_policy", "nodes": {...}, "comm": [{"type", "count", "bytes",
                   "groups", "peers"?}], "critical_path_compute_us", "warnings": [...]}],
     "totals": {"nodes": {...}, "comm": [{"type", "count", "bytes", "groups"}],
                "critical_path_compute_us_max"}, "warnings": [...]}
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from operator import attrgetter

from emulator.trace.checks import aggregate_warnings
from emulator.trace.model import CollectiveType, Node, NodeType, RankGraph, Trace, node_type_name

#: order of comm kinds in the output: collectives in enum order, then SEND, RECV
_KIND_ORDER = {c.name: int(c) for c in CollectiveType}
_KIND_ORDER[NodeType.COMM_SEND_NODE.name] = 100
_KIND_ORDER[NodeType.COMM_RECV_NODE.name] = 101


@dataclass(slots=True)
class _CommAgg:
    count: int = 0
    size_bytes: int = 0
    groups: set[str | None] = field(default_factory=set)
    peers: set[int] = field(default_factory=set)


def comm_kind(node: Node) -> str:
    """``ALL_REDUCE`` … for collectives, ``COMM_SEND_NODE`` / ``COMM_RECV_NODE`` for point-to-point."""
    if node.type == NodeType.COMM_COLL_NODE:
        assert node.comm is not None and node.comm.collective is not None
        return node.comm.collective.name
    return node_type_name(node.type)


def _group_key(name: str | None) -> tuple[int, str]:
    return (0, "") if name is None else (1, name.zfill(12) if name.isdigit() else name)


def _node_order(counts: Counter) -> dict[str, int]:
    def key(name: str) -> tuple[int, str]:
        try:
            return (int(NodeType[name]), name)
        except KeyError:
            return (1000, name)

    return {name: counts[name] for name in sorted(counts, key=key)}


def _comm_list(aggs: dict[str, _CommAgg], with_peers: bool) -> list[dict]:
    out = []
    for kind in sorted(aggs, key=lambda k: (_KIND_ORDER.get(k, 1000), k)):
        a = aggs[kind]
        entry: dict = {"type": kind, "count": a.count, "bytes": a.size_bytes,
                       "groups": sorted(a.groups, key=_group_key)}
        if with_peers and kind in (NodeType.COMM_SEND_NODE.name, NodeType.COMM_RECV_NODE.name):
            entry["peers"] = sorted(a.peers)
        out.append(entry)
    return out


def summarize_rank(graph: RankGraph) -> tuple[dict, Counter, dict[str, _CommAgg]]:
    from emulator.trace.graph import critical_path_compute_us

    raw_types = Counter(map(attrgetter("type"), graph.nodes))
    types: Counter = Counter({node_type_name(t): c for t, c in raw_types.items()})  # one name per distinct type
    aggs: dict[str, _CommAgg] = {}
    cpu_comm = 0
    untyped_comm = 0
    for node in graph.nodes:
        if not node.is_comm:
            continue
        if not node.is_traffic:
            if node.is_cpu_op:
                cpu_comm += 1
            else:
                untyped_comm += 1
            continue
        comm = node.comm
        assert comm is not None
        kind = comm_kind(node)
        agg = aggs.setdefault(kind, _CommAgg())
        agg.count += 1
        agg.size_bytes += comm.size_bytes
        agg.groups.add(comm.pg_name)
        if node.type == NodeType.COMM_SEND_NODE and comm.dst is not None:
            agg.peers.add(comm.dst)
        elif node.type == NodeType.COMM_RECV_NODE and comm.src is not None:
            agg.peers.add(comm.src)
    warnings = list(graph.warnings)
    # the reader already reports these for files it read; add them for graphs built any other way
    if cpu_comm and not any("(is_cpu_op) ignored" in w for w in warnings):
        warnings.append(f"{cpu_comm} CPU-side communication node(s) (is_cpu_op) ignored: no traffic")
    if untyped_comm and not any("without comm_type ignored" in w for w in warnings):
        warnings.append(f"{untyped_comm} COMM_COLL_NODE(s) without comm_type ignored: no traffic")
    entry = {
        "rank": graph.rank,
        "source": graph.source,
        "dep_policy": graph.dep_policy,
        "nodes": _node_order(types),
        "comm": _comm_list(aggs, with_peers=True),
        "critical_path_compute_us": int(critical_path_compute_us(graph)),
        "warnings": warnings,
    }
    return entry, types, aggs


def summarize_trace(trace: Trace) -> dict:
    """The inspect summary of a whole trace (see the module docstring for the shape)."""
    per_rank: list[dict] = []
    total_types: Counter = Counter()
    total_aggs: dict[str, _CommAgg] = {}
    for rank in sorted(trace.ranks):
        entry, types, aggs = summarize_rank(trace.ranks[rank])
        per_rank.append(entry)
        total_types.update(types)
        for kind, a in aggs.items():
            t = total_aggs.setdefault(kind, _CommAgg())
            t.count += a.count
            t.size_bytes += a.size_bytes
            t.groups |= a.groups
    groups = [
        {"name": g.name, "ranks": list(g.ranks), "desc": g.desc}
        for g in sorted(trace.groups.values(), key=lambda g: _group_key(g.name))
    ]
    return {
        "source": trace.source,
        "ranks": len(trace.ranks),
        "world_size": trace.world_size,
        "groups": groups,
        "per_rank": per_rank,
        "totals": {
            "nodes": _node_order(total_types),
            "comm": _comm_list(total_aggs, with_peers=False),
            "critical_path_compute_us_max": max((e["critical_path_compute_us"] for e in per_rank), default=0),
        },
        "warnings": list(trace.warnings),
    }


def _groups_text(groups: list) -> str:
    return ",".join("default" if g is None else str(g) for g in groups)


def _peers_text(peers: list[int]) -> str:
    if len(peers) > 6:
        return ",".join(map(str, peers[:6])) + f",… ({len(peers)})"
    return ",".join(map(str, peers)) or "-"


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i]) for i in range(len(header))]

    def fmt(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return [fmt(header), *(fmt(r) for r in rows)]


def format_summary_text(summary: dict) -> str:
    """The readable form of :func:`summarize_trace`'s result (tables, then warnings)."""
    from emulator.units import format_bytes

    lines = [f"trace {summary['source']}: {summary['ranks']} rank(s), world size {summary['world_size']}"]
    if summary["groups"]:
        lines.append("process groups:")
        for g in summary["groups"]:
            desc = f"  ({g['desc']})" if g["desc"] else ""
            lines.append(f"  {g['name']}: ranks {_peers_text(g['ranks'])}{desc}")
    else:
        lines.append("process groups: default only (all ranks)")
    kinds = list(summary["totals"]["nodes"])
    header = ["rank", "deps", *kinds, "critical-path compute"]
    rows = []
    for e in summary["per_rank"]:
        rows.append([str(e["rank"]), e["dep_policy"], *(str(e["nodes"].get(k, 0)) for k in kinds),
                     f"{e['critical_path_compute_us']} us"])
    rows.append(["total", "", *(str(summary["totals"]["nodes"][k]) for k in kinds),
                 f"max {summary['totals']['critical_path_compute_us_max']} us"])
    lines += ["", "nodes by type:", *_table(header, rows, right=set(range(2, len(header))) | {0})]
    comm_rows = []
    for e in summary["per_rank"]:
        for c in e["comm"]:
            comm_rows.append([str(e["rank"]), c["type"], str(c["count"]), str(c["bytes"]), format_bytes(c["bytes"]),
                              _groups_text(c["groups"]), _peers_text(c["peers"]) if "peers" in c else ""])
    for c in summary["totals"]["comm"]:
        comm_rows.append(["total", c["type"], str(c["count"]), str(c["bytes"]), format_bytes(c["bytes"]),
                          _groups_text(c["groups"]), ""])
    lines.append("")
    if comm_rows:
        lines.append("communication (traffic-generating nodes):")
        lines += _table(["rank", "type", "count", "bytes", "", "groups", "peers"], comm_rows, right={0, 2, 3, 4})
    else:
        lines.append("communication: none")
    entries = [(e["rank"], e["source"], w) for e in summary["per_rank"] for w in e["warnings"]]
    warn = [f"  {w}" for w in [*summary["warnings"], *aggregate_warnings(entries, summary["source"])]]
    lines += ["", "warnings:" if warn else "warnings: none", *warn]
    return "\n".join(lines)
