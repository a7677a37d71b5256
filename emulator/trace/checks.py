"""Whole-trace warnings: the dependency policy against the trace's own, one-rank traces, and one line per
distinct warning however many rank files repeat it.

* :func:`policy_warnings`: for every rank whose policy differs from what ``auto`` would choose
  (``data`` when the rank has any data edge, else ``ctrl``), a rank where the chosen policy uses no edge
  while the other kind has some (every node a root), and ranks whose compute critical path under the
  chosen policy differs from the one under ``auto`` — each summed up in one line over all such ranks.
* :func:`one_rank_warnings`: a one-rank trace whose collectives would compile to no traffic.
* :func:`aggregate_warnings` / :func:`warning_lines`: per-rank warnings ``"<file>: rank <r>: <text>"``
  with the same text on several ranks become ``"<trace>: <n> rank files (ranks a-b, ...): <text>"``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from emulator.errors import TraceError
from emulator.trace.graph import critical_path_compute_us
from emulator.trace.model import NodeType, RankGraph, Trace


def auto_policy(graph: RankGraph) -> str:
    """The policy ``auto`` resolves to on this rank: ``data`` when any node has a data edge, else ``ctrl``."""
    return "data" if any(n.data_deps for n in graph.nodes) else "ctrl"


def rank_span(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` → ``"0-2, 5, 7-8"``."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _ranks_text(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"{len(ranks)} rank files (ranks {rank_span(ranks)})"


def policy_warnings(trace: Trace, requested: str) -> list[str]:
    """Lines for ranks where the ``requested`` policy ignores edges ``auto`` would use (see module doc)."""
    if requested == "auto":
        return []
    rootless: list[int] = []
    ignored_edges = 0
    other = ""
    paths: dict[int, tuple[int, int, str]] = {}
    for r, g in sorted(trace.ranks.items()):
        auto = auto_policy(g)
        if g.dep_policy == auto:
            continue
        n_data = sum(len(n.data_deps) for n in g.nodes)
        n_ctrl = sum(len(n.ctrl_deps) for n in g.nodes)
        used = {"data": n_data, "ctrl": n_ctrl}.get(g.dep_policy, n_data + n_ctrl)
        if used == 0 and n_data + n_ctrl:
            rootless.append(r)
            ignored_edges += n_data + n_ctrl
            other = auto
        try:
            chosen_us = critical_path_compute_us(g)
            auto_us = critical_path_compute_us(replace(g, dep_policy=auto, warnings=[]))
        except TraceError:  # a cycle under one policy: reported where the graph is walked
            continue
        if chosen_us != auto_us:
            paths[r] = (chosen_us, auto_us, auto)
    out = []
    where = trace.source or "trace"
    if rootless:
        out.append(f"{where}: dependency policy {requested!r} uses no edge on {_ranks_text(rootless)}, "
                   f"which hold {ignored_edges} {other}_deps edges: every node is a root and runs at once; "
                   f"use dep_policy auto (or {other})")
    if paths:
        worst = max(paths, key=lambda r: abs(paths[r][0] - paths[r][1]))
        chosen_us, auto_us, auto = paths[worst]
        out.append(f"{where}: dependency policy {requested!r} changes the compute critical path on "
                   f"{_ranks_text(sorted(paths))}: e.g. rank {worst} {chosen_us} us instead of {auto_us} us "
                   f"under the trace's own {auto}_deps (dep_policy auto)")
    return out


def one_rank_warnings(trace: Trace, replicate: int | None) -> list[str]:
    """A one-rank trace (not replicated) whose collectives make no traffic: say so and how to run it."""
    if replicate is not None or len(trace.ranks) != 1:
        return []
    graph = next(iter(trace.ranks.values()))
    colls = sum(1 for n in graph.nodes if n.type == NodeType.COMM_COLL_NODE and n.is_traffic)
    if not colls:
        return []
    return [f"{trace.source or 'trace'}: a one-rank trace: its {colls} collective(s) have no peer and make no "
            f"traffic; use --replicate N (profile: workload.trace.replicate) to run it on N data-parallel ranks"]


def aggregate_warnings(entries: Iterable[tuple[int, str, str]], source: str) -> list[str]:
    """``(rank, rank file, warning)`` → one line per distinct warning text, ranks counted.

    A warning starting ``"<rank file>: rank <r>: "`` is compared without that prefix; one met on a single
    rank is given that prefix (``"rank <r>: "`` without a file).
    """
    by_text: dict[str, list[tuple[int, str]]] = {}
    for rank, rank_source, w in entries:
        prefix = f"{rank_source}: rank {rank}: "
        text = w[len(prefix):] if w.startswith(prefix) else w
        by_text.setdefault(text, []).append((rank, prefix if rank_source else f"rank {rank}: "))
    out = []
    for text, hits in by_text.items():
        if len(hits) == 1:
            out.append(hits[0][1] + text)
        else:
            out.append(f"{source or 'trace'}: {_ranks_text(sorted(r for r, _ in hits))}: {text}")
    return out


def warning_lines(trace: Trace) -> list[str]:
    """Every warning of a read trace, identical per-rank ones aggregated (trace-level lines first)."""
    entries = ((r, g.source, w) for r, g in sorted(trace.ranks.items()) for w in g.warnings)
    return [*trace.warnings, *aggregate_warnings(entries, trace.source)]
