"""The fluid driver: a compiled schedule on the flow-level fabric (:mod:`emulator.fabric.fluid`), in virtual time.

Theory of operation
-------------------
The schedule's semantics are those the rank endpoints follow on the packet sim (:mod:`emulator.schedule.model`):
an op is ready when its parents are complete and its ``not_before_ns`` has come; a DELAY ends
``duration_ns`` later; a SEND posts its flow to its queue pair, whose flows leave in post order (the
next starts when the previous one's last byte has left the NIC); a RECV completes at the later of its
ready time and the arrival of its flow's last byte. One heap orders the driver's events (an op released
by its not-before time, a DELAY's end, a flow's last byte arriving, its last acknowledgement); between
them :meth:`~emulator.fabric.fluid.FluidFabric.advance` runs the fabric. The parts a slice delivers are
handled as arrays, and their arrivals and acknowledgements enter the heap as one entry per run of one time
and kind (numbered as single events would be, so they pop in the same order).

*Events that only record cut no slice.* An event within one step (``FluidConfig.step_ns``) of the fabric's
time that, handled in heap order, would start no part and push no event — an acknowledgement whose SEND
makes nothing ready, an arrival whose RECV readies a SEND that queues behind a busy queue pair — is held
(:mod:`emulator.drivers.fluid_events`): the fabric advances to the next event that changes a rate, then the held events before
the time reached are handled at their own times. Records keep their exact times; an acknowledgement's CNP
count is the one its queue pair had at the fabric's time before the advance, which is the count at the
acknowledgement's time: a CNP reaches a queue pair only at the end of a congested slice, and the first
congested slice of an advance from ``t`` ends at or after ``t + step_ns`` or at the advance's end
(tests/drivers/test_fluid_hold.py). Calm stretches are unchanged; in congested ones the slice grid is that
of the fabric's steps, not of the driver's bookkeeping.

*Events inside a congested step start their flows there.* When a queue holds bytes (or PFC pauses a port)
the fabric's next slice is ``step_ns`` long whatever starts in it (:meth:`~emulator.fabric.fluid.FluidFabric.
fixed_step_ns`): the driver then handles every event before the step's end at its own time first
(:meth:`~emulator.drivers.fluid_events.DriverEvents.handle_within`), and a flow such an event starts sends
from its own time within the slice (its bytes exact, its NIC shared by the part of the slice it sends), so
the arrivals that start a ring's next flows cut no slice. What those events read of the fabric is as at their
times: a CNP reaches a queue pair only at a slice's end. A run of completions whose readied children are
plain (released SENDs on distinct queue pairs, RECVs not arrived) completes as arrays.

Times a packet would add beyond the fluid model: a flow's first byte reaches the receiver ``hops ×
latency`` plus one packet's serialisation after it starts (RECV ``start_ns``), its last byte ``hops ×
latency`` after the fluid delivered it (the end of the slice that delivered it; with
``FluidConfig.tail_delivery`` the time within it its last bytes left, :mod:`emulator.fabric.fluid_tail`),
and its acknowledgement as long again (SEND ``end_ns``).

*Merge tolerance* (``merge_ns``, default 0 = exact): a part's arrival and acknowledgement times go to the
nearest multiple of ``merge_ns`` (never before the time they are computed at), so the events of a ring step
that end a few hundred ns apart cut one fabric slice, not one each. It is not safe to use: a 16-rank ring
All-Reduce (4 MiB, leaf–spine, DCQCN) ends +21–24 % late at grids of 200–1,000 ns and about +1 % at 100 ns;
no profile key sets it.

Records have the shape the endpoints fill (:class:`~emulator.endpoint.records.RankRecords`); packets,
CE marks and CNPs are the fluid model's estimates (``fabric.estimates`` in the result says so). A queue
pair's CNPs and the CE marks its NP saw go to its parts by time, each once: a part gets those from the
delivery of the queue pair's previous part until its own delivery (RP side: acknowledgement); marks are
rounded on the queue pair's running sum, so expected fractions add up.
"""

from __future__ import annotations

import functools
import heapq
import math
import sys
import time
from array import array
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from emulator.drivers import contract, fluid_events, fluid_warm
from emulator.drivers.contract import DriverResult, FabricReport, PortReport, Progress, QueueSamples
from emulator.drivers.fluid_events import _ACKED, _ARRIVE, _DONE, _RELEASE, DriverEvents  # noqa: F401 (the event kinds, for callers)
from emulator.drivers.fluid_layout import interleaved
from emulator.drivers.heap_reuse import keep_large_blocks
from emulator.drivers.sim_types import SimConfig
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.records import OP_COLUMNS, RankRecords
from emulator.errors import ConfigError
from emulator.fabric.fluid import FluidConfig, FluidFabric
from emulator.fabric.fluid_cc import FluidDcqcn
from emulator.fabric.fluid_parts import Parts, flow_parts
from emulator.fabric.fluid_paths import qp_paths, udp_source_ports
from emulator.fabric.topology import build_topology, link_down_intervals
from emulator.pacing.registry import controller_spec
from emulator.schedule.model import OP_DELAY, OP_RECV, OP_SEND, Schedule

__all__ = ["ESTIMATES_NOTE", "FluidConfig", "run_fluid"]

ESTIMATES_NOTE = ("fluid fabric: packets, ECN marks and CNPs are expected values of the fluid model, "
                  "not counted packets; flow times are model estimates")  # fmt: skip
#: virtual time advanced between two checks of the wall deadline (about 100 fluid steps when congested)
_DEADLINE_SLICE_NS = 100_000.0
_MAX_RATE_SAMPLES = 10_000
#: peak resident memory of a fluid run per flow and fixed (compile, schedule, driver state, records; the
#: slope between 256- and 512-rank All-to-Alls in one process: 127 and 391 MB for 65 k and 262 k flows)
MEMORY_PER_FLOW_BYTES = 1_450
MEMORY_BASE_BYTES = 128 << 20


def memory_estimate_flows(flows: int) -> int:
    """The peak resident memory a fluid run of ``flows`` flows needs, about."""
    return MEMORY_BASE_BYTES + MEMORY_PER_FLOW_BYTES * flows


def memory_estimate_bytes(schedule: Schedule) -> int:
    """The peak resident memory a fluid run of ``schedule`` needs, about."""
    return memory_estimate_flows(schedule.n_flows)


def available_memory_bytes() -> int | None:
    """Memory the run may still take (the least of MemAvailable, ulimit and cgroup: emulator.schedule.estimate)."""
    from emulator.schedule.estimate import memory_limit

    limit = memory_limit()
    return None if limit is None else limit[0]


def check_memory(schedule: Schedule) -> None:
    """Refuse, before the run, a schedule whose fluid run would not fit in the memory available."""
    need = memory_estimate_bytes(schedule)
    have = available_memory_bytes()
    if have is not None and need > have:
        raise ConfigError(f"fluid: the workload has {schedule.n_flows:,} flows on {schedule.world_size:,} ranks; "
                          f"its run needs about {need / 2**30:.1f} GiB ({MEMORY_PER_FLOW_BYTES:,} bytes per flow) "
                          f"but {have / 2**30:.1f} GiB are available: fewer ranks, iterations or smaller "
                          "collectives (fewer flows)")  # fmt: skip


#: the port rate at which ``FluidConfig.step_ns`` is the congested slice's length (see :func:`port_step`)
STEP_RATE_BPS = 25e9


def port_step(fluid: FluidConfig, rates_bps) -> FluidConfig:
    """``fluid`` for ports at ``rates_bps``: a slice carries the slowest port as many bytes as ``step_ns``
    carries a 25 Gb/s one (200 Mb/s ports: 125 µs, not 1 µs — one congested slice per 1/7 packet made a 7-to-1
    incast take minutes); at 25 Gb/s and faster, ``step_ns`` itself."""
    slowest = min(rates_bps, default=STEP_RATE_BPS)
    return fluid if slowest >= STEP_RATE_BPS else replace(fluid, step_ns=round(fluid.step_ns * STEP_RATE_BPS / slowest))


def fluid_model(schedule: Schedule, cfg: SimConfig, ecfg: EndpointConfig, fluid: FluidConfig,
                seed: int | None = None, parts: Parts | None = None) -> FluidFabric:
    """The fluid fabric for ``schedule``: topology, per-part paths (one part per flow unless
    ``qps_per_peer`` > 1, :mod:`emulator.fabric.fluid_parts`), DCQCN state per wire queue pair."""
    if cfg.loss:
        raise ConfigError("fluid: fabric.loss: per-packet loss injection has no meaning on the fluid fabric")
    if getattr(ecfg, "icrc", "zero") != "zero":
        raise ConfigError("fluid: fabric.transport.icrc: the fluid fabric has no packets to checksum (use the "
                          "default 'zero', or fabric.kind sim, loopback or direct)")
    parts = parts or flow_parts(schedule, ecfg.qps_per_peer)
    topo = build_topology(cfg.topology, schedule.world_size, cfg.port_rate_bps, cfg.latency_ns)
    fluid = port_step(fluid, [p.rate_bps for p in topo.ports])
    n_qp = int(parts.qp.max()) + 1 if parts.n else 0
    qp_src = np.zeros(n_qp, np.int64)
    qp_dst = np.zeros(n_qp, np.int64)
    qp_src[parts.qp] = schedule.flow_src[parts.flow]
    qp_dst[parts.qp] = schedule.flow_dst[parts.flow]
    used = np.flatnonzero(np.bincount(parts.qp)) if parts.n else np.zeros(0, np.int64)
    sport = udp_source_ports(used)
    qp_path = np.full((n_qp, 4), -1, np.int64)
    qp_path[used] = qp_paths(topo, qp_src[used], qp_dst[used], sport)
    ctrl = ecfg.make_controller()
    spec = controller_spec(ecfg.cc)
    params = getattr(ctrl, "params", None) if spec.dcqcn_form is not None else None
    fixed = ctrl.rate_bps if spec.constant_rate else None
    cc = FluidDcqcn(n_qp, ecfg.line_rate_bps, params, fixed, ticks_first=fluid.cnp_after_ticks)
    npp = ecfg.np_params()
    return FluidFabric(topo, qp_path[parts.qp], parts.qp, cc, red=cfg.red,
                       np_interval_ns=npp.min_time_between_cnps_ns, np_defer=npp.defer, mtu_bytes=ecfg.mtu_bytes,
                       wire_overhead_bytes=cfg.wire_overhead_bytes, buffer_bytes=cfg.buffer_bytes,
                       latency_ns=cfg.latency_ns, seed=seed, config=fluid, pfc=cfg.pfc,
                       link_down=link_down_intervals(topo, cfg.link_down),
                       retransmit_timeout_ns=ecfg.retransmit_timeout_ns,
                       nic_batch_bytes=ecfg.batch_packets * (ecfg.mtu_bytes + cfg.wire_overhead_bytes))  # fmt: skip


def store_and_forward_ns(path: np.ndarray, rate_bps: np.ndarray, size_bytes: np.ndarray, mtu_bytes: int,
                        overhead_bytes: int) -> np.ndarray:
    """Per flow and path level (``[n, 4]``), what its last packet adds at that switch port after the fluid
    delivered its last byte: a port receives the whole packet before it sends it (store and forward), one
    serialisation at the port's rate; the NIC level adds nothing (its sending is the fluid's). The fluid
    passes bytes through a port without a queue at once; a port where the flow's last bytes queued sends
    its last packet when the fluid's queue drains, so only the levels after the last such port add."""
    n_pkts = np.maximum(1, -(-size_bytes // mtu_bytes))
    last_bits = 8.0 * (size_bytes - (n_pkts - 1) * mtu_bytes + overhead_bytes)
    per_hop = (1e9 / rate_bps)[np.maximum(path, 0)]  # one division per port; few temporaries of [n, 4]
    per_hop[path < 0] = 0.0
    per_hop[:, 0] = 0.0
    per_hop *= last_bits[:, None]
    return per_hop


def _ranks_within(counts: np.ndarray) -> np.ndarray:
    """0, 1, …, c − 1 for each count ``c`` of ``counts``, concatenated."""
    ends = np.cumsum(counts)
    return np.arange(int(ends[-1]) if ends.size else 0, dtype=np.int64) - np.repeat(ends - counts, counts)


def _ints(a: np.ndarray) -> memoryview:
    """``a`` as int64 entries that are cheap to read and set one at a time from Python (:func:`_flat`)."""
    return _flat(a, np.int64)


def _flat(a: np.ndarray, dtype: type) -> memoryview:
    """A copy of ``a`` as ``dtype`` behind a one-dimensional memoryview: entries read and set one at a time as
    cheaply as in an array of the standard library, in a numpy buffer — which numpy backs with huge pages from
    4 MiB (``madvise(MADV_HUGEPAGE)``), so the compiled checks' scattered reads into million-entry per-op
    records miss the TLB far less often."""
    return memoryview(np.array(a, dtype).reshape(-1))


class _Run(DriverEvents):
    def __init__(self, schedule: Schedule, cfg: SimConfig, ecfg: EndpointConfig, fluid: FluidConfig,
                 seed: int | None, merge_ns: float = 0.0) -> None:  # fmt: skip
        s = schedule
        self.grid_ns = float(merge_ns)
        self.s = s
        self.parts = parts = flow_parts(s, ecfg.qps_per_peer)
        self.fab = fluid_model(s, cfg, ecfg, fluid, seed, parts)
        n_ops = s.n_ops
        # per op, per flow and per part: one 64-byte record each (emulator.drivers.fluid_layout), its fields
        # memoryviews (8 bytes an entry, not a Python object)
        child = np.repeat(np.arange(n_ops, dtype=np.int64), np.diff(s.dep_ptr))
        order = np.argsort(s.dep_idx, kind="stable")
        self.child_idx = _ints(child[order])
        del child, order
        q, d = np.int64, np.float64
        op = interleaved(n_ops, dict.fromkeys(("child_ptr", "pending", "kind", "not_before", "op_flow", "ready", "start",
                                               "end"), q), ("child_ptr",))  # fmt: skip
        op["child_ptr"][0] = 0
        op["child_ptr"][1:] = np.cumsum(np.bincount(s.dep_idx, minlength=n_ops))
        op["pending"][:] = np.diff(s.dep_ptr)
        op["kind"][:], op["not_before"][:], op["op_flow"][:] = s.op_kind, s.op_not_before_ns, s.op_flow
        op["ready"][:], op["start"][:], op["end"][:] = -1, -1, -1
        self.duration = _ints(s.op_duration_ns)
        self.cnps = _ints(np.zeros(n_ops))
        self.ce = _ints(np.zeros(n_ops))
        nf = s.n_flows
        # per flow: its parts, SEND and RECV, parts not yet arrived, not yet acknowledged, arrived, RECV ready
        fl = interleaved(nf, dict.fromkeys(("part_ptr", "send_op_l", "recv_op_l", "to_arrive", "to_ack", "arrived",
                                            "recv_ready"), q), ("part_ptr",))  # fmt: skip
        fl["part_ptr"][:] = parts.ptr
        fl["send_op_l"][:], fl["recv_op_l"][:], fl["arrived"][:], fl["recv_ready"][:] = -1, -1, 0, 0
        sends = np.flatnonzero(s.op_kind == OP_SEND)
        fl["send_op_l"][s.op_flow[sends]] = sends
        del sends
        recvs = np.flatnonzero(s.op_kind == OP_RECV)
        fl["recv_op_l"][s.op_flow[recvs]] = recvs
        del recvs
        np.subtract(parts.ptr[1:], parts.ptr[:-1], out=fl["to_arrive"])
        fl["to_ack"][:] = fl["to_arrive"]
        mtu = ecfg.mtu_bytes
        # the fabric runs parts (one per flow unless qps_per_peer > 1): per part its wire bytes, latency, qp
        size = parts.size_bytes.astype(np.int64)
        part_packets = np.maximum(1, -(-size // mtu))
        self.packets = np.bincount(parts.flow, part_packets, nf).astype(np.int64)
        pa = interleaved(parts.n, {"part_flow": q, "part_qp": q, "lat": q, "part_src": q, "wire": d, "first_pkt_ns": d})
        pa["part_flow"][:], pa["part_qp"][:] = parts.flow, parts.qp
        pa["lat"][:] = (self.fab.path >= 0).sum(axis=1) * cfg.latency_ns  # hops × latency
        pa["part_src"][:] = s.flow_src[parts.flow]
        pa["wire"][:] = size + part_packets * cfg.wire_overhead_bytes
        pa["first_pkt_ns"][:] = (np.minimum(size, mtu) + cfg.wire_overhead_bytes) * 8e9 / cfg.port_rate_bps
        self.__dict__.update({k: memoryview(v) for cols in (op, fl, pa) for k, v in cols.items()})
        del op, fl, pa
        self.hop_ser_ns = store_and_forward_ns(self.fab.path, self.fab.rate, size, mtu, cfg.wire_overhead_bytes)
        self._work_size = max(n_ops, nf, parts.n, self.fab.cc.n)
        # per wire queue pair: its CNPs (NP sent, RP received) and CE marks already given to a part: a queue
        # pair's overlapping parts share them, none counts them twice
        n_qp = self.fab.cc.n
        self.np_given = _flat(np.zeros(n_qp), np.int32)
        self.rp_given = _flat(np.zeros(n_qp), np.int32)
        self.ce_given = _flat(np.zeros(n_qp), np.float64)
        self.fifo: dict[int, deque[int]] = {}
        self.sending: dict[int, int] = {}
        self.heap: list[tuple] = []
        self.seq = 0
        self.events = 0
        self.n_done = 0
        # per flow start: rank, time, queue pair and rate (int64 arrays: 32 bytes a sample; the first
        # _MAX_RATE_SAMPLES of a rank go to its records)
        self._rate_log = (array("q"), array("q"), array("q"), array("q"))

    @functools.cached_property
    def work(self) -> np.ndarray:
        """A work array indexed by op, flow, part or queue pair ids, overwritten by each use (duplicate tests);
        made at the first use, so a run that never handles events as arrays does without it."""
        return np.zeros(self._work_size, np.int32)

    def push(self, t: float, kind: int, x: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, x))

    def push_batch(self, t: np.ndarray, kind: np.ndarray, x: np.ndarray) -> None:
        """Events ``i`` at ``t[i]``, in the order given, as one heap entry per run of one time and kind.

        An entry holds the ids of its run and the sequence number of its first event; the events of one call
        take consecutive numbers, so entries of one time pop in the order single pushes would have had."""
        k = t.shape[0]
        if not k:
            return
        order = np.argsort(t, kind="stable")
        ts, ks, xs = t[order], kind[order], x[order]
        cut = np.flatnonzero((ts[1:] != ts[:-1]) | (ks[1:] != ks[:-1])) + 1
        starts = np.concatenate(([0], cut))
        ends = np.concatenate((cut, [k]))
        seq0 = self.seq + 1
        self.seq += k
        for lo, hi, first in zip(starts.tolist(), ends.tolist(), (order[starts] + seq0).tolist(), strict=True):
            heapq.heappush(self.heap, (float(ts[lo]), first, int(ks[lo]), xs[lo:hi].tolist()))

    # -- ops ----------------------------------------------------------------------------------------
    def eligible(self, op: int, t: float) -> None:
        nb = self.not_before[op]
        if nb > t:
            self.push(float(nb), _RELEASE, op)
        else:
            self.make_ready(op, t)

    def make_ready(self, op: int, t: float) -> None:
        self.ready[op] = round(t)
        k = self.kind[op]
        if k == OP_DELAY:
            self.push(t + self.duration[op], _DONE, op)
        elif k == OP_SEND:
            f = self.op_flow[op]
            for p in range(self.part_ptr[f], self.part_ptr[f + 1]):  # part k on its wire qp, in post order
                qp = self.part_qp[p]
                if qp in self.sending:  # a queue only for a busy queue pair: most never wait
                    self.fifo.setdefault(qp, deque()).append(p)
                else:
                    self.start_part(qp, p, t)
        else:
            f = self.op_flow[op]
            self.recv_ready[f] = 1
            if self.arrived[f]:
                self.complete(op, t)

    def complete(self, op: int, t: float) -> None:
        self.end[op] = round(t)
        self.n_done += 1
        for i in range(self.child_ptr[op], self.child_ptr[op + 1]):
            c = self.child_idx[i]
            self.pending[c] -= 1
            if self.pending[c] == 0:
                self.eligible(c, t)

    # -- flows --------------------------------------------------------------------------------------
    def start_next(self, qp: int, t: float) -> None:
        q = self.fifo.get(qp)
        if not q:
            return
        p = q.popleft()
        if not q:
            del self.fifo[qp]
        self.start_part(qp, p, t)

    def start_part(self, qp: int, p: int, t: float) -> None:
        self.sending[qp] = p
        fab = self.fab
        fab.start(p, self.wire[p], t)
        f = self.part_flow[p]
        so = self.send_op_l[f]
        if self.start[so] < 0:  # the flow starts with its first part to start
            self.start[so] = round(t)
            r = self.recv_op_l[f]
            if r >= 0:
                self.start[r] = round(t + self.lat[p] + self.first_pkt_ns[p])
        log = self._rate_log
        log[0].append(self.part_src[p])
        log[1].append(round(t))
        log[2].append(qp)
        log[3].append(int(fab.cc.rc[qp]))

    def rate_samples(self) -> dict[int, tuple[list[int], list[int], list[int]]]:
        """Per rank, the times, queue pairs and rates of its first flow starts (up to ``_MAX_RATE_SAMPLES``)."""
        rank, ts, qs, rs = (np.frombuffer(a, np.int64) for a in self._rate_log)
        order = np.argsort(rank, kind="stable")
        ranks, lo, n = np.unique(rank[order], return_index=True, return_counts=True)
        out = {}
        for r, a, k in zip(ranks.tolist(), lo.tolist(), np.minimum(n, _MAX_RATE_SAMPLES).tolist(), strict=True):
            take = order[a:a + k]
            out[r] = (ts[take].tolist(), qs[take].tolist(), rs[take].tolist())
        return out

    def start_roots(self, t: float) -> None:
        """The ops without parents at ``t`` (nothing sent yet), as :meth:`eligible` in op order would take
        them: heap entries (released later, DELAYs) one by one, SENDs' parts started and RECVs readied as arrays."""
        ops = np.flatnonzero(np.asarray(self.pending) == 0)
        kind = self.s.op_kind[ops]
        now = self.s.op_not_before_ns[ops] <= t
        for op in ops[~now | (kind == OP_DELAY)].tolist():  # the only ones that push: in op order, as before
            self.eligible(op, t)
        ready = ops[now & (kind != OP_DELAY)]
        self.op_array("ready")[ready] = round(t)
        flow = self.s.op_flow
        recv = flow[ready[self.s.op_kind[ready] == OP_RECV]]
        np.asarray(self.recv_ready)[recv] = 1  # nothing has arrived yet
        sends = flow[ready[self.s.op_kind[ready] == OP_SEND]]
        ptr = self.parts.ptr
        parts = np.repeat(ptr[sends], np.diff(ptr)[sends]) + _ranks_within(np.diff(ptr)[sends])
        qp = self.parts.qp[parts]
        _, first = np.unique(qp, return_index=True)
        lead = np.zeros(parts.size, bool)
        lead[first] = True
        for q, p in zip(qp[~lead].tolist(), parts[~lead].tolist(), strict=True):  # behind the first on its qp
            self.fifo.setdefault(q, deque()).append(p)
        self.start_parts(parts[lead], t)

    def start_parts(self, p: np.ndarray, t: float | np.ndarray) -> None:
        """:meth:`start_part` of parts ``p`` (in order, on distinct idle queue pairs) as arrays, at ``t`` (one
        time, or each part's)."""
        if not p.size:
            return
        ts = np.full(p.size, float(t)) if np.ndim(t) == 0 else np.asarray(t, float)
        qp = np.asarray(self.part_qp)[p]
        self.sending.update(zip(qp.tolist(), p.tolist(), strict=True))
        fab = self.fab
        fab.start_many(p, np.asarray(self.wire)[p], ts)
        from emulator.drivers.fluid_event_kernels import first_starts

        first_starts(p, ts, np.asarray(self.part_flow), np.asarray(self.send_op_l),
                     np.asarray(self.recv_op_l), self.op_array("start"), np.asarray(self.lat),
                     np.asarray(self.first_pkt_ns))  # fmt: skip
        rows = np.empty((4, p.size), np.int64)  # rank, time, queue pair, rate: one row per log
        rows[0], rows[1], rows[2], rows[3] = np.asarray(self.part_src)[p], np.rint(ts), qp, fab.cc.rc[qp]
        for a, row in zip(self._rate_log, rows, strict=True):
            a.frombytes(row.tobytes())

    def sent_done(self, p: int, t: float) -> None:
        qp = self.part_qp[p]
        if self.sending.get(qp) == p:
            del self.sending[qp]
        self.start_next(qp, t)

    # -- the loop -----------------------------------------------------------------------------------
    def run(self, time_limit_ns: int, wall_timeout_s: float | None) -> tuple[str, float, float]:
        wall0 = time.perf_counter()
        deadline = wall0 + wall_timeout_s if wall_timeout_s is not None else None
        # with a wall deadline, congested stretches are advanced in slices so the deadline is seen
        slice_ns = _DEADLINE_SLICE_NS if deadline is not None else math.inf
        step_ns = float(self.fab.cfg.step_ns)
        n_ops = self.s.n_ops
        t = 0.0
        reason = "deadlock"
        try:
            self.start_roots(0.0)
            heap, fab = self.heap, self.fab
            while self.n_done < n_ops:
                if deadline is not None and time.perf_counter() > deadline:
                    reason = "wall_timeout"
                    break
                self.events += 1
                t_next = heap[0][0] if heap else math.inf
                if fab.active and t < t_next:
                    if t >= time_limit_ns:
                        reason = "time_limit"
                        break
                    ahead = fab.fixed_step_ns()
                    if ahead:  # the next slice is a step: its events start their flows part-way into it
                        self.handle_within(min(t + ahead, float(time_limit_ns)))
                        held = []
                    else:  # events of the next step's length that only record are held past the cut (see hold)
                        held = self.hold(t, t + step_ns)
                    t_next = heap[0][0] if heap else math.inf
                    lim = min(t_next, float(time_limit_ns), t + slice_ns)
                    t, sent, dl = fab.advance(t, lim)
                    if held:
                        self.release(held, t)
                    if len(sent) >= fluid_events.BATCH_FROM:
                        self.sent_done_many([f for f, _ in sent], t)
                    else:
                        for f, _ts in sent:
                            self.sent_done(f, t)
                    if dl:
                        self.delivered(dl, t)
                    continue
                if not heap:
                    break
                ev_t, _, kind, x = heapq.heappop(heap)
                if ev_t > time_limit_ns:
                    reason = "time_limit"
                    break
                t = max(t, ev_t)
                self.handle(kind, x, t)
        except KeyboardInterrupt:  # Ctrl-C: stop here and return what was measured
            reason = "interrupted"
        if self.n_done == n_ops:
            reason = "complete"
        return reason, t, time.perf_counter() - wall0

    def op_array(self, name: str) -> np.ndarray:
        """A per-op record (``ready``, ``start``, ``end``, ``cnps``, ``ce``) as a numpy view."""
        return np.asarray(getattr(self, name))

    def records(self) -> dict[int, RankRecords]:
        """Per rank its ops' columns (views of one contiguous array per column: a record per rank allocated and
        filled apart cost ~0.4 s of page faults at 4 M ops), counters and rate samples."""
        from emulator.drivers.fluid_record_kernels import rank_columns

        s = self.s
        ptr = np.asarray(s.rank_op_ptr[:s.world_size + 1], np.int64)
        c, sums = rank_columns(*(self.op_array(k) for k in ("ready", "start", "end", "cnps", "ce")),
                               np.asarray(s.op_kind, np.int64), np.asarray(s.op_flow, np.int64), self.packets,
                               np.asarray(s.flow_size_bytes, np.int64), ptr)  # fmt: skip
        cols = dict(zip(("ready_ns", "start_ns", "end_ns", "packets", "cnps", "ce_marks"), c, strict=True))
        cols = {k: cols[k] if k in cols else np.zeros(s.n_ops, np.int64) for k in OP_COLUMNS}
        names = ("bytes_sent", "packets_sent", "bytes_received", "packets_received", "cnps_sent", "cnps_received",
                 "ce_marks")  # fmt: skip
        samples = self.rate_samples()
        out: dict[int, RankRecords] = {}
        for r, (lo, hi, row) in enumerate(zip(ptr[:-1].tolist(), ptr[1:].tolist(), sums.tolist(), strict=True)):
            rec = RankRecords(rank=r, n_ops=0)
            rec.n_ops = hi - lo
            for k, col in cols.items():
                setattr(rec, k, col[lo:hi])
            rec.counters = dict(zip(names, row, strict=True))
            rec.rate_t_ns, rec.rate_qp, rec.rate_bps = samples.get(r, ([], [], []))
            out[r] = rec
        return out

    def fabric_report(self, end_ns: float) -> FabricReport:
        fab = self.fab
        ports = []
        for i, spec in enumerate(fab.ports):
            tx = float(fab.tx_bytes[i])
            ports.append(PortReport(
                spec.port_id, spec.name, spec.kind, spec.rate_bps,
                dequeued_packets=round(tx / fab.pkt_bytes), dequeued_bytes=round(tx),
                peak_queue_bytes=round(float(fab.peak_queue[i])),
                mean_queue_bytes=float(fab.queue_integral[i]) / end_ns if end_ns > 0 else 0.0,
                marked_packets=round(float(fab.marked_packets[i])),
                dropped_packets=round(float(fab.dropped_bytes[i]) / fab.pkt_bytes),
                dropped_bytes=round(float(fab.dropped_bytes[i])),
                loss_packets=round(float(fab.faults.lost_bytes[i]) / fab.pkt_bytes) if fab.faults else 0,
                xoff_time_ns=round(float(fab.xoff_time_ns[i])), xoff_count=int(fab.xoff_count[i]),
                paused_time_ns=round(float(fab.paused_time_ns[i])),
                utilisation=tx * 8e9 / (spec.rate_bps * end_ns) if end_ns > 0 else 0.0,
            ))  # fmt: skip
        n_s = len(fab.samples_t)
        q = np.array(fab.samples_q, np.int64).reshape(n_s, len(ports)) if n_s else np.zeros((0, len(ports)), np.int64)
        samples = QueueSamples.of(fab.samples_t * len(ports), np.repeat(np.arange(len(ports)), n_s), q.T.reshape(-1))
        return FabricReport("fluid", tuple(ports), samples, {"estimates": ESTIMATES_NOTE})


def run_fluid(schedule: Schedule, sim_config: SimConfig, endpoint_config: EndpointConfig, *,
              fluid: FluidConfig | None = None, seed: int | None = None, time_limit_ns: int = 10_000_000_000,
              wall_timeout_s: float | None = None, merge_ns: float = 0.0) -> DriverResult:  # fmt: skip
    """Run ``schedule`` on the fluid fabric; the result has the shape of the sim driver's.

    Deterministic: with ``seed`` marks are drawn from a generator seeded with it, without they are the
    model's expected values. ``merge_ns``: the merge tolerance (module docstring), 0 = exact.
    """
    if not isinstance(time_limit_ns, int) or time_limit_ns <= 0:
        raise ConfigError(f"fluid: time limit must be a positive integer of ns, got {time_limit_ns!r}")
    if isinstance(merge_ns, bool) or not isinstance(merge_ns, (int, float)) or not 0 <= merge_ns < math.inf:
        raise ConfigError(f"fluid: merge_ns must be a finite number of ns >= 0, got {merge_ns!r}")
    check_memory(schedule)
    keep_large_blocks()  # per-slice temporaries of MBs reuse the heap instead of mmap/munmap each slice
    large = schedule.n_flows >= fluid_warm.WARM_FROM_FLOWS  # a helper compiles (one started early: too small, stopped)
    warm = fluid_warm.start() if large else fluid_warm.cancel()
    try:
        run = _Run(schedule, sim_config, endpoint_config, fluid or FluidConfig(), seed, merge_ns)
        if warm is not None:  # the kernels the helper has not compiled meanwhile, before the loop needs them
            warm.join(note=functools.partial(print, file=sys.stderr))
        reason, now, wall_s = run.run(time_limit_ns, wall_timeout_s)
    finally:
        if warm is not None:
            warm.stop()
    end_ns = float(run.op_array("end").max()) if reason == "complete" and schedule.n_ops else now
    records = run.records()
    incomplete = [r for r, rec in records.items() if (rec.end_ns < 0).any()]
    errors = []
    if incomplete:
        left = ", ".join(map(str, incomplete[:16])) + (" ..." if len(incomplete) > 16 else "")
        why = contract.STOPPED_TEXT.get(reason, reason)
        errors.append(f"fluid fabric stopped at {round(now)} ns: {why}; ranks not done: {left}")
    health = {"world_size": schedule.world_size, "stop_reason": reason, "end_ns": round(end_ns),
              "events": run.events, "steps": run.fab.steps, "calm_events": run.fab.calm.events, "packets": int(run.packets.sum()), "hops": 0,
              "wall_s": wall_s, "packets_per_wall_s": int(run.packets.sum()) / wall_s if wall_s > 0 else 0.0,
              "warnings": [ESTIMATES_NOTE]}  # fmt: skip
    return DriverResult(driver="fluid", records=records, fabric=run.fabric_report(max(end_ns, now)), health=health,
                        complete=not incomplete, errors=errors, interrupted=reason == "interrupted",
                        wall_ns=int(wall_s * 1e9))


@dataclass(frozen=True, slots=True)
class FluidDriver:
    """The fluid fabric as a :class:`~emulator.drivers.contract.Driver`: :func:`run_fluid` with these arguments."""

    config: SimConfig
    endpoint: EndpointConfig
    seed: int | None = None
    time_limit_ns: int = 10_000_000_000
    wall_timeout_s: float | None = None
    name: str = "fluid"
    merge_ns: float = 0.0

    def run(self, schedule: Schedule, progress: Progress = None) -> DriverResult:
        return run_fluid(schedule, self.config, self.endpoint, seed=self.seed, time_limit_ns=self.time_limit_ns,
                         wall_timeout_s=self.wall_timeout_s, merge_ns=self.merge_ns)
