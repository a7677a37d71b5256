"""One workload iteration of a :class:`Schedule` → a Chakra :class:`Trace` that compiles back to it.

Theory of operation
-------------------
The schedule keeps everything a trace needs to be rebuilt without the original files: per rank the
ops in a valid topological order with their dependencies, and per collective instance its type, process
group, members, ``comm_size`` and root. :func:`schedule_to_trace` walks iteration ``0`` of each rank
(``meta["run"]["ops_per_iteration"]``; a schedule without ``meta["run"]`` is one iteration) and emits:

* one ``COMM_COLL_NODE`` per (rank, collective instance), at the rank's first op of that instance:
  ``comm_type`` = the instance's type, ``comm_size`` = its ``size_bytes``, ``pg_name`` = its group's
  name, ``root`` (rooted types) = the root's group position, as ``emulator generate`` writes it;
  an uneven all-to-all (all-to-all-v) also gets its row as ``in_split_sizes`` (bytes per group
  position, its own block 0: the schedule has no flow for it) and ``comm_size`` = the row's sum;
* one ``COMM_SEND_NODE`` / ``COMM_RECV_NODE`` per point-to-point op (``coll == -1``), ``comm_tag`` = the
  flow's index in the iteration, so every pair matches exactly as it did;
* one ``COMP_NODE`` per DELAY op that came from a trace node (``duration_micros`` = the op's duration
  divided by the compile ``compute_scale``, i.e. the trace's own duration) or that waits a non-zero
  time (a run's injected waits, :mod:`emulator.schedule.perturb`, are named ``injected_delay_op<i>``; a
  rank's injected ``compute_scale`` stays in its COMP durations: the trace is the run as it ran);
  zero-length synthetic DELAYs (the compiler's join ops) are not nodes: their children depend
  on the join's parents instead.

Dependencies (``data_deps``) are the op edges inside the iteration mapped to those nodes. Node ids are
1, 2, … per rank in op order. Process groups are every group with a collective instance, with that
instance's members. Compiling the result with the schedule's algorithms and chunks gives the same flows
(``src``, ``dst``, ``size_bytes``, collective, step, chunk) and bytes; flows may be listed in another
order when the schedule merged several parts (inline collectives), whose instances are then ordered by
group name.

``compute_scale`` is read from ``meta["options"]`` (1 when the schedule does not say, as for merged
inline collectives).

Measured durations: :func:`measured_durations_us` turns the run's per-op ``ready_ns`` / ``end_ns``
columns into one ``duration_micros`` per comm node and rank — ``max(end) − min(ready)`` over the node's
ops in one run iteration (the rank's share of the collective, from when its schedule let it begin; for
SEND/RECV the op's own completion time; 0 for a RECV whose data had arrived before it was ready), then a statistic over the measured iterations (``median``,
``mean``, ``min``, ``max``) or one chosen measured iteration. Iterations in which the node did not
complete are left out. ``comm_duration_us`` of :func:`schedule_to_trace` maps ``(rank, local op index
of the node's first op in iteration 0)`` to the value written.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from emulator.errors import ScheduleError
from emulator.schedule.model import OP_DELAY, OP_SEND, Schedule
from emulator.trace.model import (
    ROOTED,
    CollectiveType,
    CommInfo,
    GlobalMetadata,
    Node,
    NodeType,
    ProcessGroup,
    RankGraph,
    Trace,
)


def ops_per_iteration(schedule: Schedule) -> np.ndarray:
    """Ops per rank in one run iteration (int64, one per rank)."""
    counts = np.diff(schedule.rank_op_ptr.astype(np.int64))
    per = (schedule.meta.get("run") or {}).get("ops_per_iteration")
    if per is None:
        return counts
    out = np.asarray(per, dtype=np.int64)
    if out.shape != counts.shape:
        raise ScheduleError(f"meta.run.ops_per_iteration has {out.shape[0]} ranks, the schedule {counts.shape[0]}")
    return out


def _iteration_counts(schedule: Schedule) -> tuple[int, int]:
    run = schedule.meta.get("run") or {}
    return (int(run.get("colls_per_iteration", schedule.n_colls)),
            int(run.get("flows_per_iteration", schedule.n_flows)))


def comm_node_ops(schedule: Schedule) -> dict[int, list[list[int]]]:
    """Per rank: the local op indices (iteration 0) of each comm node, in node order.

    A collective instance's ops on a rank form one node; each point-to-point op is its own node. The
    first index of each list is the key of ``comm_duration_us`` in :func:`schedule_to_trace`.
    """
    per = ops_per_iteration(schedule)
    out: dict[int, list[list[int]]] = {}
    for rank in range(schedule.world_size):
        base = int(schedule.rank_op_ptr[rank])
        nodes: dict[object, list[int]] = {}
        for local in range(int(per[rank])):
            flow = int(schedule.op_flow[base + local])
            if flow < 0 or int(schedule.op_kind[base + local]) == OP_DELAY:
                continue
            coll = int(schedule.flow_coll[flow])
            key: object = ("c", coll) if coll >= 0 else ("p", local)
            nodes.setdefault(key, []).append(local)
        out[rank] = list(nodes.values())
    return out


STATISTICS = ("median", "mean", "min", "max")


def measured_durations_us(
    schedule: Schedule,
    ready_ns: np.ndarray,
    end_ns: np.ndarray,
    *,
    statistic: str = "median",
    iteration: int | None = None,
) -> tuple[dict[tuple[int, int], int], int]:
    """``({(rank, first local op): duration_micros}, nodes without a complete measured iteration)``.

    ``ready_ns``/``end_ns`` are in global op order (``emulator.stats.tables.op_table``); ``iteration``
    is a measured iteration (0 = the first after warmup) and overrides ``statistic``.
    """
    if statistic not in STATISTICS:
        raise ScheduleError(f"statistic {statistic!r} is not one of {', '.join(STATISTICS)}")
    run = schedule.meta.get("run") or {}
    warmup, measured = int(run.get("warmup", 0)), int(run.get("iterations", 1))
    if iteration is not None and not 0 <= iteration < measured:
        raise ScheduleError(f"iteration {iteration}: the run has {measured} measured iteration(s) (0-{measured - 1})")
    its = [warmup + iteration] if iteration is not None else list(range(warmup, warmup + measured))
    per = ops_per_iteration(schedule)
    reduce = {"median": np.median, "mean": np.mean, "min": np.min, "max": np.max}[statistic]
    out: dict[tuple[int, int], int] = {}
    missing = 0
    for rank, node_ops in comm_node_ops(schedule).items():
        base = int(schedule.rank_op_ptr[rank])
        for locals_ in node_ops:
            idx = np.asarray(locals_, dtype=np.int64)
            values = []
            for k in its:
                g = base + k * int(per[rank]) + idx
                ready, end = ready_ns[g], end_ns[g]
                if (ready >= 0).all() and (end >= 0).all():
                    values.append(max(0, int(end.max() - ready.min())))
            if values:
                out[(rank, locals_[0])] = int(round(float(reduce(np.asarray(values, dtype=np.float64))) / 1000))
            else:
                missing += 1
    return out, missing


def _groups(schedule: Schedule, n_colls: int) -> dict[str, ProcessGroup]:
    groups: dict[str, ProcessGroup] = {}
    for c in range(n_colls):
        name = _group_name(schedule, int(schedule.coll_group[c]))
        if name not in groups:
            groups[name] = ProcessGroup(name=name, ranks=tuple(sorted(int(r) for r in schedule.coll_ranks(c))))
    return groups


def a2a_split_rows(schedule: Schedule, coll: int) -> dict[int, tuple[int, ...]] | None:
    """Per member rank of all-to-all instance ``coll``: bytes sent to each group position (its own 0), or
    None when the instance is even (every block within a byte of ``size_bytes / n``)."""
    members = [int(r) for r in schedule.coll_ranks(coll)]
    n = len(members)
    pos = {r: i for i, r in enumerate(members)}
    m = np.zeros((n, n), dtype=np.int64)
    for f in np.flatnonzero(schedule.flow_coll == coll).tolist():
        m[pos[int(schedule.flow_src[f])], pos[int(schedule.flow_dst[f])]] += int(schedule.flow_size_bytes[f])
    even = int(schedule.coll_size_bytes[coll]) / max(n, 1)
    off = ~np.eye(n, dtype=bool)
    if n < 2 or (np.abs(m[off] - even) <= 1).all():
        return None
    return {r: tuple(m[i].tolist()) for r, i in pos.items()}


def _group_name(schedule: Schedule, g: int) -> str:
    return schedule.group_names[g] if g < len(schedule.group_names) else str(g)


def schedule_to_trace(
    schedule: Schedule,
    *,
    comm_duration_us: Mapping[tuple[int, int], int] | None = None,
    metadata: GlobalMetadata | None = None,
    source: str = "",
) -> Trace:
    """The Chakra trace of iteration 0 of ``schedule`` (see module docstring)."""
    n_colls, n_flows = _iteration_counts(schedule)
    if schedule.n_ops and (schedule.op_not_before_ns >= 0).any():
        raise ScheduleError("an open-loop schedule has no dependencies to export; export a closed-loop run")
    scale = float((schedule.meta.get("options") or {}).get("compute_scale", 1.0))
    roots = schedule.coll_root_ranks()
    groups = _groups(schedule, n_colls)
    durations = comm_duration_us or {}
    per = ops_per_iteration(schedule)
    md = metadata or GlobalMetadata(version="0.0.4")
    ranks: dict[int, RankGraph] = {}
    split_rows: dict[int, dict[int, tuple[int, ...]] | None] = {}
    for rank in range(schedule.world_size):
        base = int(schedule.rank_op_ptr[rank])
        node_of: dict[int, tuple[int, ...]] = {}  # local op → node ids its completion stands for
        coll_node: dict[int, int] = {}  # collective instance → node index in ``nodes``
        nodes: list[Node] = []
        for local in range(int(per[rank])):
            g = base + local
            parents: dict[int, None] = {}
            for p in schedule.parents(g):
                p_local = int(p) - base
                if 0 <= p_local < local:  # edges into an earlier iteration are not part of this one
                    parents.update(dict.fromkeys(node_of.get(p_local, ())))
            kind = int(schedule.op_kind[g])
            flow = int(schedule.op_flow[g])
            if kind == OP_DELAY or flow < 0:
                dur_ns = int(schedule.op_duration_ns[g])
                from_trace = int(schedule.op_node[g]) >= 0
                if not from_trace and dur_ns == 0:  # a join: stands for its parents
                    node_of[local] = tuple(parents)
                    continue
                us = round(dur_ns / scale / 1000) if from_trace and scale > 0 else round(dur_ns / 1000)
                nid = len(nodes) + 1
                label = "injected_delay" if int(schedule.op_node[g]) < -1 else "comp"
                nodes.append(Node(id=nid, name=f"{label}_op{local}", type=NodeType.COMP_NODE,
                                  data_deps=tuple(parents), duration_micros=us))
                node_of[local] = (nid,)
                continue
            coll = int(schedule.flow_coll[flow])
            if coll >= n_colls or flow >= n_flows:
                raise ScheduleError(f"rank {rank} op {local}: flow {flow} lies outside iteration 0")
            if coll >= 0:
                idx = coll_node.get(coll)
                if idx is None:
                    nid = len(nodes) + 1
                    ctype = CollectiveType(int(schedule.coll_type[coll]))
                    gname = _group_name(schedule, int(schedule.coll_group[coll]))
                    root = None
                    if ctype in ROOTED and roots[coll] >= 0:
                        root = groups[gname].position(int(roots[coll]))
                    size = int(schedule.coll_size_bytes[coll])
                    attrs: tuple = ()
                    if ctype == CollectiveType.ALL_TO_ALL:
                        if coll not in split_rows:
                            split_rows[coll] = a2a_split_rows(schedule, coll)
                        rows = split_rows[coll]
                        if rows is not None:  # all-to-all-v: the rank's row (emulator.schedule.alltoallv)
                            attrs = (("in_split_sizes", ("int64_list", rows[rank])),)
                            size = sum(rows[rank])
                    comm = CommInfo(collective=ctype, size_bytes=size, pg_name=gname, root=root)
                    nodes.append(Node(id=nid, name=f"{ctype.name.lower()}_{gname}_{int(schedule.coll_seq[coll])}",
                                      type=NodeType.COMM_COLL_NODE, data_deps=tuple(parents), comm=comm,
                                      duration_micros=int(durations.get((rank, local), 0)), attrs=attrs))
                    coll_node[coll] = len(nodes) - 1
                else:
                    node = nodes[idx]
                    extra = tuple(p for p in parents if p != node.id and p not in node.data_deps)
                    if extra:
                        nodes[idx] = node._replace(data_deps=node.data_deps + extra)
                node_of[local] = (nodes[coll_node[coll]].id,)
                continue
            nid = len(nodes) + 1
            send = kind == OP_SEND
            comm = CommInfo(size_bytes=int(schedule.flow_size_bytes[flow]), src=int(schedule.flow_src[flow]),
                            dst=int(schedule.flow_dst[flow]), tag=flow)
            nodes.append(Node(id=nid, name=f"{'send' if send else 'recv'}_flow{flow}",
                              type=NodeType.COMM_SEND_NODE if send else NodeType.COMM_RECV_NODE,
                              data_deps=tuple(parents), comm=comm,
                              duration_micros=int(durations.get((rank, local), 0))))
            node_of[local] = (nid,)
        ranks[rank] = RankGraph(rank=rank, nodes=nodes, metadata=md, dep_policy="data", source=source)
    return Trace(ranks=ranks, groups=groups, source=source)
