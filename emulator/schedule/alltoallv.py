"""All-to-all-v: per-peer split sizes on ALL_TO_ALL nodes → per-flow sizes of the compiled instance.

Theory of operation
-------------------
Chakra has no field for per-peer sizes: a COMM_COLL_NODE carries one ``comm_size``. A producer that
knows the splits (``emulator generate moe --routing``, or a PyTorch ET converter that kept
``all_to_all_single``'s ``input_split_sizes``) writes them as an int list attribute on the ALL_TO_ALL
node: ``in_split_sizes`` (or PyTorch's spelling ``in_split_size``), one entry per member of the node's
process group in group-position order (sorted ranks), the entry for the rank itself included. Entries
are bytes when they sum to ``comm_size`` (or ``comm_size`` is 0); otherwise they are element counts and
are scaled by ``comm_size / sum`` (which must be a whole number: the element size).

:func:`extract_splits` (before the compiler's walk) takes each such row out of the trace and gives the
node a placeholder ``comm_size`` equal on every member (so instances match as usual and every
(src, dst, chunk) flow exists); :func:`apply_splits` (after assembly) finds each instance's node per
member through ``op_node`` and sets the instance's flows from the matrix: the flow ``src → dst`` of chunk
``c`` of ``k`` carries block ``M[src][dst]`` split evenly over the chunks (remainder on the first ones),
which holds for every all-to-all algorithm here (direct and pairwise send block ``j`` straight to ``j``).
The instance's ``size_bytes`` becomes the mean row sum (bytes a rank sends, its own block included):
``S`` of the nccl-tests all-to-all(v) bandwidth (algbw = S / time, busbw = algbw × (n − 1) / n).
Every ALL_TO_ALL node of one process group carries splits, or none does (else one error naming a node
without them).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from emulator.errors import ScheduleError
from emulator.schedule.model import Schedule
from emulator.trace.groups import resolve_group
from emulator.trace.model import CollectiveType, NodeType, Trace

SPLIT_ATTRS = ("in_split_sizes", "in_split_size")
#: placeholder bytes per (peer, chunk) while compiling
_PLACEHOLDER_BYTES = 1024

Splits = dict[tuple[int, int], tuple[int, ...]]  # (rank, node id) → bytes per group position


def _row(node, rank: int, n: int) -> tuple[int, ...] | None:
    for name in SPLIT_ATTRS:
        value = node.attr(name)
        if value is None:
            continue
        where = f"rank {rank} node {node.id} attribute {name}"
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                           for v in value):
            raise ScheduleError(f"{where}: expected a list of integers (one per group member)")
        if len(value) != n:
            raise ScheduleError(f"{where}: {len(value)} split sizes for a process group of {n} ranks")
        if any(v < 0 for v in value):
            raise ScheduleError(f"{where}: split sizes must not be negative")
        total, size = sum(value), int(node.comm.size_bytes)
        if total == 0 or size in (0, total):
            return tuple(int(v) for v in value)
        if size % total:
            raise ScheduleError(f"{where}: split sizes sum to {total}, which does not divide comm_size {size} "
                                "(bytes must sum to comm_size; element counts must divide it)")
        return tuple(int(v) * (size // total) for v in value)
    return None


def extract_splits(trace: Trace, chunks: int) -> tuple[Trace, Splits]:
    """``trace`` with every split-carrying ALL_TO_ALL node given a placeholder size, and the rows taken out."""
    splits: Splits = {}
    graphs = {}
    with_splits: dict[str, tuple[int, int]] = {}  # group → a (rank, node) with splits
    without: dict[str, tuple[int, int]] = {}  # group → a (rank, node) without
    for rank, g in trace.ranks.items():
        changed = None
        for i, node in enumerate(g.nodes):
            if (node.type != NodeType.COMM_COLL_NODE or node.comm is None
                    or node.comm.collective != CollectiveType.ALL_TO_ALL or node.is_cpu_op):
                continue
            group = resolve_group(trace, node.comm.pg_name)
            row = _row(node, rank, len(group.ranks)) if node.attrs else None
            if row is None:
                without.setdefault(group.name, (rank, node.id))
                continue
            with_splits.setdefault(group.name, (rank, node.id))
            splits[(rank, node.id)] = row
            if changed is None:
                changed = list(g.nodes)
            placeholder = _PLACEHOLDER_BYTES * len(group.ranks) * max(1, chunks)
            changed[i] = node._replace(comm=dataclasses.replace(node.comm, size_bytes=placeholder))
        if changed is not None:
            graphs[rank] = dataclasses.replace(g, nodes=changed)
    if not splits:
        return trace, splits
    for name, (rank, nid) in sorted(without.items()):
        if name in with_splits:
            r0, n0 = with_splits[name]
            raise ScheduleError(f"rank {rank} node {nid}: ALL_TO_ALL without {SPLIT_ATTRS[0]} on process group "
                                f"{name or 'default'!r}, whose other all-to-alls carry split sizes (rank {r0} node "
                                f"{n0}); give every all-to-all of a group its splits, or none")
    return dataclasses.replace(trace, ranks={r: graphs.get(r, g) for r, g in trace.ranks.items()}), splits


def apply_splits(schedule: Schedule, splits: Splits) -> Schedule:
    """The schedule with each split instance's flow sizes and ``size_bytes`` set from its matrix."""
    s = schedule
    if not splits or not s.n_flows:
        return s
    flow = s.op_flow.astype(np.int64)
    has = (flow >= 0) & (s.op_node >= 0)
    ops = np.flatnonzero(has)
    inst = s.flow_coll[flow[ops]].astype(np.int64)
    ops, inst = ops[inst >= 0], inst[inst >= 0]
    node_of: dict[tuple[int, int], int] = {}  # (instance, rank) → node id
    for o, c in zip(ops.tolist(), inst.tolist(), strict=True):
        node_of.setdefault((c, int(s.op_rank[o])), int(s.op_node[o]))
    sizes = s.flow_size_bytes.copy()
    coll_size = s.coll_size_bytes.copy()
    n_chunks = np.zeros(s.n_colls, dtype=np.int64)
    np.maximum.at(n_chunks, s.flow_coll[s.flow_coll >= 0].astype(np.int64),
                  s.flow_chunk[s.flow_coll >= 0].astype(np.int64) + 1)
    for c in np.flatnonzero(s.coll_type == int(CollectiveType.ALL_TO_ALL)).tolist():
        members = [int(r) for r in s.coll_ranks(c)]
        rows = [splits.get((r, node_of.get((c, r), -1))) for r in members]
        if all(row is None for row in rows):
            continue
        if any(row is None for row in rows):
            r = members[next(i for i, row in enumerate(rows) if row is None)]
            raise ScheduleError(f"all-to-all #{int(s.coll_seq[c])} of group {s.group_names[int(s.coll_group[c])]!r}: "
                                f"rank {r} has no {SPLIT_ATTRS[0]} while other members do")
        matrix = np.asarray(rows, dtype=np.int64)
        pos = {r: i for i, r in enumerate(members)}
        k = max(1, int(n_chunks[c]))
        fl = np.flatnonzero(s.flow_coll == c)
        for f in fl.tolist():
            block = int(matrix[pos[int(s.flow_src[f])], pos[int(s.flow_dst[f])]])
            chunk = int(s.flow_chunk[f])
            sizes[f] = block // k + (1 if chunk < block % k else 0)
        coll_size[c] = int(round(matrix.sum() / len(members)))
    return dataclasses.replace(s, flow_size_bytes=sizes, coll_size_bytes=coll_size)
