"""Compile a :class:`~emulator.trace.model.Trace` into a columnar :class:`~emulator.schedule.model.Schedule`.

Theory of operation
-------------------
1. **Walk.** Each rank's graph is visited once in topological order (``emulator.trace.graph``,
   lowest-ready-id first). Every node gets a *frontier*: the ops of this rank whose completion means
   "this node is done". A node's *entry* set is the union of its trace parents' frontiers.

   * COMP / MEM_LOAD / MEM_STORE → one DELAY op (``duration_micros``·1000·``compute_scale`` ns) that
     depends on the entry set; frontier = that op.
   * traffic COMM_COLL → the rank's share of one *collective instance*: the algorithm's transfers
     (``emulator.schedule.algorithms``) are lowered once per (type, n, size, root, algorithm, chunks,
     window) into per-position templates (SEND op on the transfer's src, RECV op on its dst; a
     transfer's ``after`` list becomes deps on the RECV of a transfer received by src or the SEND of an
     earlier own send). Template ops without in-instance parents depend on the entry set (plus, by
     default, on the completion of the previous instance of the same process group on this rank: at
     most one collective in flight per group and rank, as NCCL streams behave). Frontier = the
     template's sinks, whose completion implies completion of all its ops.
     Rooted collectives (REDUCE, GATHER, SCATTER, BROADCAST): the root is a *group position* (index in
     the sorted member list, which is the rank itself in the all-rank group): the ``roots`` option, else
     the node's ``root`` attribute (as ``emulator generate`` writes it), else position 0.
     Dependency sets stay small: when the entry set × the template's roots would be large, one
     zero-length DELAY *join* op (node -1) depends on the entry set and the roots depend on it; an
     instance with many sinks on a rank likewise ends in a join op, which becomes its frontier.
   * SEND / RECV → one SEND or RECV op, paired later by ``(src, dst, tag, k-th occurrence)``.
     ``p2p_pairing``: ``strict`` (default) = a node without a peer (``comm_dst`` on SEND, ``comm_src``
     on RECV, as PyTorch conversions leave them) or without a matching partner is an error;
     ``group`` = a missing peer is the other member of the node's two-rank process group (``pg_name``),
     then as strict; ``ignore`` = such nodes become zero waits (no traffic), counted in
     ``meta["warnings"]``.
   * anything else (CPU-side comm wrappers, METADATA, unknown types) → pass-through: frontier = entry.
   * ``keep_idle``: when the rank has ``start_time_micros``, a gap between a node's recorded start and
     its parents' recorded ends (or the trace's earliest start, for a node without timed parents)
     becomes an extra (unscaled) DELAY in front of it. Ignored in open loop.
2. **Match.** Collectives are matched across ranks by issue order within their process group
   (``trace.groups``; the default group is every rank present). The k-th instance of group G is created
   by the first member that reaches it (``pg_name`` None, "" or a name no group defines → the
   all-rank group, labelled ``default``, as ``emulator.trace.groups.resolve_group`` does); every other
   member must agree on type, size and root, and every
   member must issue the same number of collectives on G (else :class:`ScheduleError` naming the group,
   the instance index, the ranks and node ids).
3. **Assemble.** Per-rank op columns and dependency edges (numpy arrays, built once) are concatenated
   with global op ids; edges are sorted and de-duplicated into CSR. Flows: collective instances in
   (group name, seq) order, each contributing its transfers in the algorithm's order, then matched
   point-to-point pairs in ``(src, dst, tag, k)`` order.
4. **Queue pairs.** One QP id per (process group, src, dst) ordered pair; point-to-point flows use the
   group named by their node's ``pg_name`` (default group otherwise). Ids are dense and numbered in
   sorted (group index, src, dst) order.
5. **Open loop** (option): every op gets ``not_before_ns`` = its node's recorded start relative to the
   earliest start in the trace, or, when the trace has no start times, a per-rank estimate (longest path
   of DELAY durations through the op graph, communication counted as zero time); dependencies are
   dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from emulator.errors import ScheduleError
from emulator.schedule.algorithms.table import table_of_transfers
from emulator.schedule.estimate import CompileEstimate, check_fits, estimate_compile
from emulator.schedule.lowering import Lowered, Template, lower
from emulator.schedule.model import OP_DELAY, OP_RECV, OP_SEND, SCHEDULE_VERSION, Schedule
from emulator.trace import graph as tgraph
from emulator.trace.checks import rank_span
from emulator.trace.model import MAX_COMM_SIZE_BYTES, ROOTED, CollectiveType, NodeType, Trace

DEFAULT_GROUP = "default"
P2P_PAIRINGS = ("strict", "group", "ignore")
_DELAY_TYPES = frozenset({NodeType.COMP_NODE, NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE})
_INST_P2P = -2
#: insert an entry join when it saves more than this many dependency edges (entry set × template roots)
JOIN_MIN_SAVING = 16
#: an instance with more sinks than this on a rank gets an exit join (children then depend on one op)
JOIN_MAX_SINKS = 8  # op_inst marker: tidx holds a point-to-point record index


@dataclass(frozen=True, slots=True)
class CompileOptions:
    """Compiler options (all documented in the module docstring and ``emulator compile --help``)."""

    algorithms: Mapping[CollectiveType, str] = field(default_factory=dict)
    chunks: int = 1
    window: int | None = None
    compute_scale: float = 1.0
    open_loop: bool = False
    keep_idle: bool = False
    replicate: int | None = None
    roots: Mapping[CollectiveType, int] = field(default_factory=dict)
    p2p_pairing: str = "strict"
    serialize_groups: bool = True

    def validate(self) -> None:
        if not isinstance(self.chunks, int) or self.chunks < 1:
            raise ScheduleError(f"option chunks: must be an integer >= 1, got {self.chunks!r}")
        if self.window is not None and (not isinstance(self.window, int) or self.window < 1):
            raise ScheduleError(f"option window: must be an integer >= 1, got {self.window!r}")
        scale = self.compute_scale
        if not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale < 0:
            raise ScheduleError(f"option compute_scale: must be a finite number >= 0, got {scale!r}")
        if self.replicate is not None and (not isinstance(self.replicate, int) or self.replicate < 1):
            raise ScheduleError(f"option replicate: must be an integer >= 1, got {self.replicate!r}")
        if self.p2p_pairing not in P2P_PAIRINGS:
            raise ScheduleError(f"option p2p_pairing: {self.p2p_pairing!r} is not one of {', '.join(P2P_PAIRINGS)}")

    def to_meta(self) -> dict:
        return {
            "algorithms": {CollectiveType(k).name.lower(): v for k, v in sorted(self.algorithms.items())},
            "chunks": self.chunks,
            "window": self.window,
            "compute_scale": float(self.compute_scale),
            "open_loop": self.open_loop,
            "keep_idle": self.keep_idle,
            "replicate": self.replicate,
            "roots": {CollectiveType(k).name.lower(): int(v) for k, v in sorted(self.roots.items())},
            "p2p_pairing": self.p2p_pairing,
            "serialize_groups": self.serialize_groups,
        }


class RootOutsideGroupError(ScheduleError):
    """A rooted collective's root position is not a position of its group; ``origin`` says where the root
    came from (``default``, :data:`ROOTS_OPTION` or ``node's root attribute``)."""

    def __init__(self, rank: int, node_id: int, collective: CollectiveType, root: int, origin: str, group: str,
                 group_size: int) -> None:
        super().__init__(
            f"rank {rank} node {node_id}: root position {root} of {collective.name} (from the {origin}) is outside "
            f"group {group!r} of {group_size} ranks (a root is a group position 0..{group_size - 1})")
        self.rank, self.node_id, self.collective, self.root = rank, node_id, collective, root
        self.origin, self.group, self.group_size = origin, group, group_size
        #: True when :attr:`CompileOptions.roots` set the root
        self.from_roots_option = origin == ROOTS_OPTION


#: the ``origin`` of a root set by :attr:`CompileOptions.roots`
ROOTS_OPTION = "roots option (--root)"


@dataclass(slots=True)
class _Instance:
    group: str
    seq: int
    type: CollectiveType
    size: int
    root: int
    algorithm: str
    plan: Lowered
    rank: int  # the rank that created it, and its node
    node: int


def _check_size(rank: int, node_id: int, size_bytes: int) -> None:
    """A comm_size no run can carry (byte counts stay exact as float64 up to 2^53) is one error line."""
    if size_bytes > MAX_COMM_SIZE_BYTES:
        raise ScheduleError(f"rank {rank} node {node_id}: comm_size {size_bytes} exceeds the largest size a run "
                            f"accepts (2^53 bytes = 8 PiB)")


class _RankOut:
    """Op columns and edges of one rank, as numpy parts (concatenated once at the end).

    Edges are rank-local op ids as int32 (a rank with 2**31 ops would need ~70 GiB anyway), which halves
    the largest intermediate of a big compile; :func:`~emulator.schedule.assemble.assemble` widens them.
    """

    __slots__ = ("parts", "rows", "edges_c", "edges_p", "ebuf_c", "ebuf_p", "n")

    _DTYPES = (np.int8, np.int32, np.int32, np.int64, np.bool_, np.int64, np.int64)

    def __init__(self) -> None:
        # columns: kind, inst, tidx, raw duration ns, scaled flag, node id, start us
        self.parts: list[tuple[np.ndarray, ...]] = []
        self.rows: list[tuple[int, int, int, int, int, int, int]] = []  # scalar ops not yet in parts
        self.edges_c: list[np.ndarray] = []
        self.edges_p: list[np.ndarray] = []
        self.ebuf_c: list[int] = []
        self.ebuf_p: list[int] = []
        self.n = 0

    def scalar(self, kind: int, inst: int, tidx: int, dur_ns: int, scaled: int, node: int, start_us: int,
               entry: tuple[int, ...]) -> int:
        op = self.n
        self.n = op + 1
        self.rows.append((kind, inst, tidx, dur_ns, scaled, node, start_us))
        if entry:
            if len(entry) == 1:
                self.ebuf_c.append(op)
                self.ebuf_p.append(entry[0])
            else:
                self.ebuf_c.extend([op] * len(entry))
                self.ebuf_p.extend(entry)
        return op

    def join(self, start_us: int, parents: np.ndarray) -> int:
        """A zero-length DELAY (node -1) that waits for ``parents`` (rank-local op ids)."""
        op = self.scalar(OP_DELAY, -1, -1, 0, 0, -1, start_us, ())
        self.edges_c.append(np.full(parents.shape[0], op, dtype=np.int32))
        self.edges_p.append(parents.astype(np.int32))
        return op

    def flush(self) -> None:
        if self.rows:
            table = np.asarray(self.rows, dtype=np.int64)
            self.parts.append(tuple(table[:, i].astype(t) for i, t in enumerate(self._DTYPES)))
            self.rows = []

    def template(self, tpl: Template, inst: int, node: int, start_us: int, entry: tuple[int, ...]) -> int:
        self.flush()
        base = self.n
        k = tpl.kind.shape[0]
        self.n += k
        z = np.zeros(k, dtype=np.int64)
        self.parts.append(
            (tpl.kind, np.full(k, inst, dtype=np.int32), tpl.tidx, z, np.zeros(k, dtype=np.bool_),
             np.full(k, node, dtype=np.int64), np.full(k, start_us, dtype=np.int64))
        )
        if tpl.edge_child.shape[0]:
            self.edges_c.append(tpl.edge_child + base)
            self.edges_p.append(tpl.edge_parent + base)
        if entry:
            e = np.asarray(entry, dtype=np.int32)
            self.edges_c.append(np.repeat(tpl.roots + base, e.shape[0]))
            self.edges_p.append(np.tile(e, tpl.roots.shape[0]))
        return base

    def columns(self) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        self.flush()
        cols = [np.concatenate([p[i] for p in self.parts]) if self.parts else np.zeros(0, dtype=np.int64)
                for i in range(7)]
        ec = self.edges_c + [np.asarray(self.ebuf_c, dtype=np.int32)]
        ep = self.edges_p + [np.asarray(self.ebuf_p, dtype=np.int32)]
        return cols, np.concatenate(ec), np.concatenate(ep)


class _Compiler:
    def __init__(self, trace: Trace, options: CompileOptions, get_algorithm: Callable) -> None:
        self.o = options
        self.get_algorithm = get_algorithm
        self.trace = trace
        present = sorted(trace.ranks)
        if options.replicate is not None:
            if len(present) != 1:
                raise ScheduleError(
                    f"{trace.source or 'trace'}: replicate={options.replicate} needs a single-rank trace, "
                    f"got ranks {present}"
                )
            only = trace.ranks[present[0]]
            self.graphs = {r: only for r in range(options.replicate)}
        else:
            self.graphs = {r: trace.ranks[r] for r in present}
        self.present = sorted(self.graphs)
        self.world_size = (max(self.present) + 1) if self.present else 0
        self.groups: dict[str, tuple[int, ...]] = {}
        for name, g in trace.groups.items():
            ranks = tuple(sorted(g.ranks))
            if options.replicate is not None and (not ranks or ranks == tuple(present)):
                ranks = tuple(self.present)
            self.groups[name] = ranks
        # the all-rank group: pg_name None, "" or a name no group defines (as emulator.trace.groups does)
        self.default = DEFAULT_GROUP if DEFAULT_GROUP not in self.groups else f"<{DEFAULT_GROUP}>"
        self.groups[self.default] = tuple(self.present)
        self.positions: dict[str, dict[int, int]] = {}
        self.plans: dict[tuple, Lowered] = {}
        self.insts: list[_Instance] = []
        self.inst_ids: dict[tuple[str, int], int] = {}
        self.issued: dict[str, dict[int, int]] = {}  # group → rank → count
        self.p2p: list[tuple[int, int, int, int, int, int, int, int]] = []  # is_send, src, dst, tag, k, rank, op, size
        self.p2p_nodes: list[int] = []
        self.p2p_group: list[str] = []
        self.p2p_skipped: dict[int, int] = {}  # rank → SEND/RECV nodes made zero waits (p2p_pairing=ignore)
        distinct = {id(g): g for g in self.graphs.values()}.values()  # replicas share one graph
        starts = [n.start_time_micros for g in distinct for n in g.nodes if n.start_time_micros]
        self.has_times = bool(starts)
        self.t0_us = min(starts, default=0)

    # -- collectives ---------------------------------------------------------------------------
    def _group_name(self, pg_name: str | None) -> str:
        """The group a node's ``pg_name`` names: None, "" or an undefined name → the all-rank group."""
        return pg_name if pg_name and pg_name in self.groups else self.default

    def _group(self, rank: int, node) -> tuple[str, tuple[int, ...], int]:
        name = self._group_name(node.comm.pg_name)
        ranks = self.groups[name]
        pos = self.positions.get(name)
        if pos is None:
            missing = [r for r in ranks if r not in self.graphs]
            if missing:
                raise ScheduleError(f"{self._groups_where()}process group {name!r} lists rank {missing[0]}, which has "
                                    "no trace file")
            pos = self.positions[name] = {r: i for i, r in enumerate(ranks)}
        if rank not in pos:
            where = f" in {self.trace.groups_source}" if self.trace.groups_source and name != self.default else ""
            raise ScheduleError(f"{self.trace.source or 'trace'}: rank {rank} node {node.id}: rank is not a member of "
                                f"process group {name!r} (its ranks{where}: {rank_span(list(ranks)) or 'none'})")
        return name, ranks, pos[rank]

    def _groups_where(self) -> str:
        """``"<groups file>: "`` when the groups came from one, else ``""``."""
        return f"{self.trace.groups_source}: " if self.trace.groups_source else ""

    def _instance(self, rank: int, node, gname: str, ranks: tuple[int, ...]) -> int:
        counts = self.issued.setdefault(gname, {})
        seq = counts.get(rank, 0)
        counts[rank] = seq + 1
        try:
            ctype = CollectiveType(node.comm.collective)
        except ValueError:
            raise ScheduleError(f"rank {rank} node {node.id}: unknown collective type {node.comm.collective!r}") from None
        size = int(node.comm.size_bytes)
        if size < 0:
            raise ScheduleError(f"rank {rank} node {node.id}: negative comm_size {size}")
        _check_size(rank, node.id, size)
        root = 0  # a group position (index in the sorted member list; = the rank in the all-rank group)
        origin = "default"
        if ctype in ROOTED:
            if ctype in self.o.roots:
                root, origin = int(self.o.roots[ctype]), ROOTS_OPTION
            elif node.comm.root is not None:
                root, origin = int(node.comm.root), "node's root attribute"
        iid = self.inst_ids.get((gname, seq))
        if iid is not None:
            inst = self.insts[iid]
            if (inst.type, inst.size, inst.root) != (ctype, size, root):
                raise ScheduleError(
                    f"process group {gname!r} collective #{seq}: rank {inst.rank} node {inst.node} is "
                    f"{inst.type.name} {inst.size} B root {inst.root}, rank {rank} node {node.id} is "
                    f"{ctype.name} {size} B root {root}"
                )
            return iid
        n = len(ranks)
        if not 0 <= root < n:
            raise RootOutsideGroupError(rank, node.id, ctype, root, origin, gname, n)
        name = self.o.algorithms.get(ctype)
        algorithm = self.get_algorithm(ctype, name)
        window = self.o.window if ctype == CollectiveType.ALL_TO_ALL else None
        key = (ctype, n, size, root, algorithm.name, self.o.chunks, window)
        plan = self.plans.get(key)
        if plan is None:
            label = f"rank {rank} node {node.id}: {ctype.name.lower()}/{algorithm.name} n={n} {size} B"
            try:
                if hasattr(algorithm, "table"):
                    table = algorithm.table(n, size, root=root, chunks=self.o.chunks, window=window)
                else:  # an algorithm object with transfers() only (the Algorithm protocol)
                    table = table_of_transfers(list(algorithm.transfers(n, size, root=root, chunks=self.o.chunks,
                                                                        window=window)))
            except ScheduleError as exc:
                raise ScheduleError(f"{label}: {exc}") from None
            plan = self.plans[key] = lower(table, n, label)
        iid = len(self.insts)
        self.inst_ids[(gname, seq)] = iid
        self.insts.append(_Instance(gname, seq, ctype, size, root, algorithm.name, plan, rank, node.id))
        return iid

    # -- per-rank walk -------------------------------------------------------------------------
    def walk(self, rank: int, order: list, plists: list[tuple[int, ...]]) -> _RankOut:
        out = _RankOut()
        frontier: dict[int, tuple[int, ...]] = {}
        last_in_group: dict[str, tuple[int, ...]] = {}
        p2p_counts: dict[tuple[int, int, int], int] = {}
        keep_idle = self.o.keep_idle and self.has_times and not self.o.open_loop
        end_us: dict[int, int] = {}
        strict = self.o.p2p_pairing != "ignore"
        by_group = self.o.p2p_pairing == "group"
        for node, pids in zip(order, plists, strict=True):
            if not pids:
                entry: tuple[int, ...] = ()
            elif len(pids) == 1:
                entry = frontier.get(pids[0], ())
            else:
                acc: set[int] = set()
                for p in pids:
                    acc.update(frontier.get(p, ()))
                entry = tuple(sorted(acc))
            ntype = node.type
            traffic = node.is_traffic
            produces = ntype in _DELAY_TYPES or traffic
            if keep_idle:
                start = node.start_time_micros
                if produces and start:
                    ends = [end_us[p] for p in pids if p in end_us]
                    ready = max(ends) if ends else self.t0_us
                    if start > ready:
                        gap = out.scalar(OP_DELAY, -1, -1, (start - ready) * 1000, 0, -1, 0, entry)
                        entry = (gap,)
                if start:
                    end_us[node.id] = start + node.duration_micros
            if ntype in _DELAY_TYPES:
                op = out.scalar(OP_DELAY, -1, -1, node.duration_micros * 1000, 1, node.id,
                                node.start_time_micros, entry)
                frontier[node.id] = (op,)
            elif traffic and ntype == NodeType.COMM_COLL_NODE:
                gname, ranks, pos = self._group(rank, node)
                iid = self._instance(rank, node, gname, ranks)
                if self.o.serialize_groups and gname in last_in_group:
                    entry = tuple(sorted(set(entry).union(last_in_group[gname])))
                tpl = self.insts[iid].plan.templates[pos]
                if tpl.kind.shape[0]:
                    start = node.start_time_micros
                    nroots = tpl.roots.shape[0]
                    if len(entry) * nroots > len(entry) + nroots + JOIN_MIN_SAVING:
                        entry = (out.scalar(OP_DELAY, -1, -1, 0, 0, -1, start, entry),)
                    base = out.template(tpl, iid, node.id, start, entry)
                    if tpl.sinks.shape[0] > JOIN_MAX_SINKS:
                        done = (out.join(start, tpl.sinks + base),)
                    else:
                        done = tuple((tpl.sinks + base).tolist())
                else:
                    done = entry
                frontier[node.id] = done
                last_in_group[gname] = done
            elif traffic:
                is_send = ntype == NodeType.COMM_SEND_NODE
                comm = node.comm
                peer = comm.dst if is_send else comm.src
                if by_group and (peer is None or peer == rank):
                    peer = self._group_peer(rank, node)
                if peer is None or peer == rank or peer not in self.graphs:
                    if strict:
                        what = "no peer" if peer is None or peer == rank else f"peer rank {peer}, which has no trace file"
                        raise ScheduleError(
                            f"rank {rank} node {node.id}: {'SEND' if is_send else 'RECV'} has {what} "
                            f"(traces converted from PyTorch lack comm_src/comm_dst; p2p_pairing=group takes the "
                            f"other member of a 2-rank pg_name group, p2p_pairing=ignore skips the node)"
                        )
                    self.p2p_skipped[rank] = self.p2p_skipped.get(rank, 0) + 1
                    frontier[node.id] = entry
                    continue
                _check_size(rank, node.id, int(comm.size_bytes))
                s, d = (rank, peer) if is_send else (peer, rank)
                key = (s, d, comm.tag, int(is_send))
                k = p2p_counts.get(key, 0)
                p2p_counts[key] = k + 1
                rec = len(self.p2p)
                op = out.scalar(OP_SEND if is_send else OP_RECV, _INST_P2P, rec, 0, 0, node.id,
                                node.start_time_micros, entry)
                self.p2p.append((int(is_send), s, d, comm.tag, k, rank, op, int(comm.size_bytes)))
                self.p2p_nodes.append(node.id)
                self.p2p_group.append(self._group_name(comm.pg_name))
                frontier[node.id] = (op,)
            else:
                frontier[node.id] = entry
        return out

    def _group_peer(self, rank: int, node) -> int:
        """``p2p_pairing=group``: the other member of the node's two-rank process group."""
        name = self._group_name(node.comm.pg_name)
        members = self.groups[name]
        if len(members) != 2 or rank not in members:
            raise ScheduleError(
                f"rank {rank} node {node.id}: {'SEND' if node.type == NodeType.COMM_SEND_NODE else 'RECV'} has no "
                f"peer and process group {name!r} has ranks {list(members)}; p2p_pairing=group needs a 2-rank "
                f"group containing rank {rank}"
            )
        return members[1] if members[0] == rank else members[0]

    def check_counts(self) -> None:
        for gname, counts in sorted(self.issued.items()):
            total = max(counts.values())
            for r in self.groups[gname]:
                c = counts.get(r, 0)
                if c != total:
                    iid = self.inst_ids[(gname, c)]
                    inst = self.insts[iid]
                    raise ScheduleError(
                        f"process group {gname!r} collective #{c}: rank {inst.rank} node {inst.node} issues "
                        f"{inst.type.name} but rank {r} issues only {c} collective(s) on this group"
                    )


def _check_estimate(c: _Compiler, on_estimate: Callable | None, limit: tuple[int, str] | None) -> None:
    """Estimate ``c``'s compile, tell ``on_estimate``, refuse it when it would not fit in memory."""
    est = estimate_compile(c)
    what = f"{c.trace.source or 'trace'}: compiling {est.counts()} (the most: {est.largest})"
    check_fits(est.bytes, what, "fewer ranks, chunks or collectives, or another algorithm", limit)
    if on_estimate is not None:
        on_estimate(est)


def compile_trace(
    trace: Trace,
    options: CompileOptions | None = None,
    *,
    provenance: Mapping[str, object] | None = None,
    get_algorithm: Callable | None = None,
    on_estimate: Callable[[CompileEstimate], None] | None = None,
    memory_limit: tuple[int, str] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> Schedule:
    """Compile ``trace`` into a :class:`Schedule` (pure and deterministic).

    Before the walk the compile's size is estimated (:mod:`emulator.schedule.estimate`) and handed to
    ``on_estimate``; a compile that would not fit in ``memory_limit`` (default: what the process may still
    take) is one :class:`ScheduleError` naming the estimate, the limit and what makes it large.
    ``progress(phase, done, total)`` is told of each rank walked (phase ``walk``) and of the assembly."""
    from emulator.schedule.alltoallv import apply_splits, extract_splits
    from emulator.schedule.assemble import assemble

    o = options or CompileOptions()
    o.validate()
    if get_algorithm is None:
        from emulator.schedule.algorithms import get_algorithm
    trace, splits = extract_splits(trace, o.chunks)  # all-to-all-v rows (emulator.schedule.alltoallv)
    c = _Compiler(trace, o, get_algorithm)
    _check_estimate(c, on_estimate, memory_limit)
    outs: dict[int, tuple] = {}
    cache: dict[int, tuple[list, list[tuple[int, ...]]]] = {}
    for r in c.present:
        g = c.graphs[r]
        if id(g) not in cache:
            cache = {id(g): tgraph.ordered_parents(g)}  # replicated ranks share one graph: walk order computed once
        order, plists = cache[id(g)]
        outs[r] = c.walk(r, order, plists).columns()
        if progress is not None:
            progress("walk", len(outs), len(c.present))
    c.check_counts()
    if progress is not None:
        progress("assemble", 0, 1)
    meta = {
        "schedule_version": SCHEDULE_VERSION,
        "options": o.to_meta(),
        "ranks_compiled": len(c.present),
        "dep_policy": sorted({g.dep_policy for g in c.graphs.values()}),
    }
    if c.p2p_skipped:  # present only when there is something to say: hashes of clean schedules unchanged
        meta["warnings"] = [f"{sum(c.p2p_skipped.values())} SEND/RECV nodes without a peer on "
                            f"{len(c.p2p_skipped)} rank(s) skipped (p2p_pairing=ignore): no traffic"]
    meta.update(dict(provenance or {}))
    return apply_splits(assemble(c, outs, meta), splits)
