"""Process groups: where membership comes from and how a node's ``pg_name`` resolves to ranks.

Theory of operation
-------------------
Membership sources, highest precedence first (``docs/chakra-format.md`` §7):

1. an explicit comm-group JSON file in the ASTRA-sim form ``{"1": [0, 1, 2, 3], ...}``;
2. the PyTorch ``## process_group:init ##`` METADATA node: ``inputs.values`` is the Python ``str()``
   of a one-element list holding a JSON string (``ast.literal_eval`` then ``json.loads``), a list of
   ``{"pg_name", "pg_desc" | "backend_id", "ranks", "group_size", ...}``; ``ranks: []`` = all ranks
   (``range(group_size)`` when the size is given);
3. nothing: every collective belongs to the default group of all ranks in the trace.

:func:`resolve_group` maps a node's ``pg_name`` to a :class:`ProcessGroup`: a known name gives its
group; ``None``, ``""`` and unknown names give the default group of all ranks (the reader warns about
unknown names once). Members are sorted, so a rank's position is its index in ``ranks``.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping

from emulator.errors import TraceError
from emulator.trace.model import Node, NodeType, ProcessGroup, Trace

PG_INIT_MARKER = "## process_group:init ##"
DEFAULT_GROUP_NAME = ""


def is_pg_init_node(node: Node) -> bool:
    return node.type == NodeType.METADATA_NODE and PG_INIT_MARKER in node.name


def load_groups_file(path: str) -> dict[str, ProcessGroup]:
    """Parse an ASTRA-sim comm-group JSON ``{"<id>": [ranks...]}``."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except OSError as exc:
        raise TraceError(f"{path}: cannot open groups file ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: groups file is not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise TraceError(f'{path}: groups file must be a JSON object {{"<group id>": [ranks...]}}')
    groups: dict[str, ProcessGroup] = {}
    for key, members in raw.items():
        if not isinstance(members, list) or not all(
            isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in members
        ):
            raise TraceError(f"{path}: group {key!r}: members must be a list of non-negative integer ranks")
        if len(set(members)) != len(members):
            raise TraceError(f"{path}: group {key!r}: duplicate ranks")
        groups[str(key)] = ProcessGroup(name=str(key), ranks=tuple(sorted(members)))
    return groups


def check_group_ranks(groups: Mapping[str, ProcessGroup], world_size: int, where: str) -> None:
    """TraceError naming ``where`` and the group when a group names a rank outside ``0..world_size-1``."""
    for g in groups.values():
        outside = [r for r in g.ranks if r >= world_size]
        if outside:
            raise TraceError(f"{where}: group {g.name!r} names rank {outside[0]}, but the trace has "
                             f"{world_size} rank(s) (0..{world_size - 1})")


def parse_pg_init(values: str, where: str, world: Iterable[int]) -> list[ProcessGroup]:
    """Groups of a ``## process_group:init ##`` node's ``inputs.values`` string."""
    try:
        outer = ast.literal_eval(values)
        text = outer[0] if isinstance(outer, (list, tuple)) else outer
        items = json.loads(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError, TypeError, IndexError, json.JSONDecodeError) as exc:
        raise TraceError(f"{where}: cannot parse process_group:init values ({exc})") from None
    if not isinstance(items, list):
        raise TraceError(f"{where}: process_group:init values must hold a list of groups")
    everyone = tuple(sorted(world))
    groups: list[ProcessGroup] = []
    for item in items:
        if not isinstance(item, dict) or "pg_name" not in item:
            raise TraceError(f"{where}: process_group:init entry without pg_name: {item!r}"[:200])
        ranks = item.get("ranks") or []
        if not isinstance(ranks, list) or not all(isinstance(r, int) and r >= 0 for r in ranks):
            raise TraceError(f"{where}: group {item['pg_name']!r}: ranks must be a list of integers")
        if not ranks:
            size = item.get("group_size")
            ranks = list(range(size)) if isinstance(size, int) and size > 0 else list(everyone)
        desc = item.get("pg_desc", item.get("backend_id", ""))
        groups.append(ProcessGroup(name=str(item["pg_name"]), ranks=tuple(sorted(set(ranks))), desc=str(desc)))
    return groups


def pg_init_values(groups: Mapping[str, ProcessGroup]) -> str:
    """The ``inputs.values`` string PyTorch writes for these groups (inverse of :func:`parse_pg_init`)."""
    items = [
        {
            "pg_name": g.name,
            "pg_desc": g.desc,
            "backend_config": "cuda:nccl",
            "ranks": list(g.ranks),
            "group_size": len(g.ranks),
            "group_count": len(groups),
        }
        for g in groups.values()
    ]
    return str([json.dumps(items)])


def merge_groups(found: Iterable[tuple[str, ProcessGroup]], warnings: list[str]) -> dict[str, ProcessGroup]:
    """Merge (where, group) pairs from several rank files; first definition of a name wins."""
    merged: dict[str, ProcessGroup] = {}
    origin: dict[str, str] = {}
    for where, g in found:
        old = merged.get(g.name)
        if old is None:
            merged[g.name] = g
            origin[g.name] = where
        elif old.ranks != g.ranks:
            warnings.append(
                f"{where}: process group {g.name!r} has ranks {list(g.ranks)} but {origin[g.name]} "
                f"says {list(old.ranks)}; keeping the first"
            )
    return merged


def default_group(trace: Trace) -> ProcessGroup:
    return ProcessGroup(name=DEFAULT_GROUP_NAME, ranks=tuple(sorted(trace.ranks)), desc="default (all ranks)")


def resolve_group(trace: Trace, pg_name: str | None) -> ProcessGroup:
    """The group a node with this ``pg_name`` belongs to (default group of all ranks if unknown)."""
    if pg_name is not None:
        group = trace.groups.get(pg_name)
        if group is not None:
            return group
    return default_group(trace)
