"""A fluid (flow-level) fabric: queue pairs as rates, ports as fluid queues, DCQCN as numpy arrays.

Theory of operation
-------------------
Sans-IO: the caller (:mod:`emulator.drivers.fluid`) starts flows on queue pairs and calls
:meth:`FluidFabric.advance` with the virtual time it may run to; nothing here reads a clock.

*Paths.* Every port of a topology sits on one of four levels in the order a packet meets them: NIC
(``host``), leaf uplink (``up``), spine downlink (``spine_down``), switch → host (``down``). A queue pair's
path (:func:`qp_paths`) holds one port per level or -1, found with the packet sim's routing
(:mod:`emulator.fabric.topology`, ECMP on the RoCEv2 UDP source port), so a flow takes the same path as
in the packet sim.

*A slice of ``dt``.* A sending queue pair offers its DCQCN current rate (its line rate while bytes of the
GSO batch its pacer released ahead are still at the NIC: after a cut, up to one batch leaves at line rate,
as in the packet sim); a NIC shares its line rate among its queue pairs in proportion to their rates. Level by level, a switch port holds per queue pair a
backlog (bytes); what arrives joins it, and the port serves ``rate × dt`` from the sum, in proportion to
each backlog (the fluid limit of a FIFO); once a queue pair's input to the port stops, its backlog leaves
first, evenly over one queueing delay, as behind a FIFO (:mod:`emulator.fabric.fluid_fifo`). The port's
queue is the sum of the backlogs; RED/ECN marks a fraction ``p(queue)`` of what it serves. A packet is marked if any port on its path marks it.

*Notification point.* CE-marked packets of a queue pair accumulate: the expected number, or with a
``seed`` a draw as the packet sim's paced stream gives them — each whole packet that arrives in the slice
(from a random phase per queue pair, which breaks the symmetry of identical flows) is marked with the
slice's marked fraction. One CNP goes out when a whole marked packet has come and the NP's quiet interval
since the last CNP is over (``defer``: marks in the quiet interval count; otherwise whole marked packets
in it are lost and a part of the next one carries over; interval 0: one CNP per marked packet).
A CNP reaches the reaction point ``(2·hops − 1) × latency`` later (the marked packet's remaining hops and
the way back), then :class:`~emulator.fabric.fluid_cc.FluidDcqcn` cuts the rate.

*Adaptive steps.* While a queue holds bytes, a port is offered more than its rate or a CNP is in flight,
slices are ``step_ns`` long. Otherwise rates are constant until the next event — a queue pair finishing
its bytes, a DCQCN increase or cut deadline, a byte-counter increase, or the caller's limit — and one
slice jumps there. The cost therefore grows with active queue pairs and congested time, not with bytes.

Marks and CNPs are expected values of the model (fractional marks are kept), not counted packets.
*PFC* (optional, ``pfc``): a switch port whose queue reaches XOFF pauses every port whose link ends at
its switch (its upstream neighbours, NICs included), as in the packet sim, until its queue is back at XON;
a paused port serves nothing (a paused NIC sends nothing) and a port paused by several XOFFs resumes after
the last. The state changes at the end of a slice and holds for the next one.
*Tail drop.* What a port's queue holds beyond the buffer is dropped; a flow that loses bytes sends them
again, plus, once per loss epoch, what go-back-N wastes (:mod:`emulator.fabric.fluid_drop`: under DCQCN
drops follow arrivals and a flow's epoch opens once a whole packet's worth is lost). Links have no random
loss; a link that goes down loses what its port sends (:mod:`emulator.fabric.fluid_loss`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from emulator.errors import ConfigError
from emulator.fabric.fluid_calm import Calm
from emulator.fabric.fluid_cc import FluidDcqcn
from emulator.fabric.fluid_drop import TailDrop
from emulator.fabric.fluid_fifo import fifo_service, stopped_flows
from emulator.fabric.fluid_loss import LinkFaults
from emulator.fabric.port import PfcParams
from emulator.fabric.topology import Topology
from emulator.pacing.red import RedParams

LEVELS = ("host", "up", "spine_down", "down")
_BYTES_PER_BIT_NS = 1e-9 / 8  # bytes sent in 1 ns at 1 bps


@dataclasses.dataclass(frozen=True, slots=True)
class FluidConfig:
    """Knobs of the fluid model itself (the fabric's rates, buffers and marking come from the profile).

    * ``step_ns``: slice length while the fabric is congested (queues, overload or CNPs in flight).
    * ``done_backlog_bytes``: a flow whose sender is done counts as delivered once less than this many of
      its bytes are left in queues (the fluid limit never empties a shared queue exactly).
    * ``sample_interval_ns`` / ``max_samples``: per-port queue samples (halved when full, as in the sim).
    """

    step_ns: int = 1_000
    done_backlog_bytes: float = 256.0
    sample_interval_ns: int = 10_000
    max_samples: int = 2048

    def __post_init__(self) -> None:
        for name in ("step_ns", "sample_interval_ns", "max_samples"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"fluid: {name!r} must be an integer >= 1, got {v!r}")
        if not self.done_backlog_bytes > 0:
            raise ConfigError(f"fluid: 'done_backlog_bytes' must be positive, got {self.done_backlog_bytes!r}")


def qp_paths(topo: Topology, src: np.ndarray, dst: np.ndarray, sport: np.ndarray) -> np.ndarray:
    """Ports per level (``[n, 4]``, -1 = level not on the path) of flows ``src → dst`` with UDP ``sport``.

    The packet sim's forwarding (:meth:`Topology.egress`) as tables: a switch sends to a host it serves
    on that host's port; otherwise up on the uplink ECMP picks (:func:`ecmp_indices`, the arrays form of
    :meth:`Topology.spine_of`), and the spine down to the destination's leaf. Cost: numpy passes over the
    flows, Python per rank and per port only.
    """
    n = int(src.shape[0])
    path = np.full((n, 4), -1, np.int64)
    path[:, 0] = src
    if not n:
        return path
    ports = topo.ports
    edge = np.array([ports[r].peer for r in range(topo.n_ranks)], np.int64)  # each rank's switch
    down = np.array([topo.egress(int(edge[r]), 0, r, 0) for r in range(topo.n_ranks)], np.int64)
    if (down < 0).any():
        raise ConfigError(f"fluid: no route to rank {int(np.flatnonzero(down < 0)[0])}")
    path[:, 3] = down[dst]
    cross = np.flatnonzero(edge[src] != edge[dst])
    if cross.size:
        uplinks: dict[int, list[int]] = {}
        spine_down: dict[tuple[int, int], int] = {}
        for spec in ports:
            if spec.kind == "up":
                uplinks.setdefault(spec.owner, []).append(spec.port_id)
            elif spec.kind == "spine_down":
                spine_down[(spec.owner, spec.peer)] = spec.port_id
        s_, d_ = src[cross], dst[cross]
        n_up = max((len(u) for u in uplinks.values()), default=1)
        table = np.full((topo.n_ranks + topo.n_switches, n_up), -1, np.int64)  # leaf node, spine index -> uplink port
        for owner, ups in uplinks.items():
            table[owner, : len(ups)] = ups
        pick = ecmp_indices(s_, d_, sport[cross], n_up) if topo.ecmp else np.zeros(cross.size, np.int64)
        up = table[edge[s_], pick]
        if (up < 0).any():
            bad = int(np.flatnonzero(up < 0)[0])
            raise ConfigError(f"fluid: no route from rank {int(s_[bad])} to rank {int(d_[bad])}")
        sw = topo.n_ranks  # switch nodes follow the ranks
        to_leaf = np.full((topo.n_switches, topo.n_switches), -1, np.int64)  # spine, leaf -> spine downlink
        for (spine, leaf_node), port in spine_down.items():
            to_leaf[spine - sw, leaf_node - sw] = port
        path[cross, 1] = up
        path[cross, 2] = to_leaf[np.array([p.peer for p in ports], np.int64)[up] - sw, edge[d_] - sw]
    return path


def _crc32_table() -> np.ndarray:
    k = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        k = np.where(k & 1, (k >> 1) ^ np.uint32(0xEDB88320), k >> 1)
    return k.astype(np.uint32)


_CRC32 = _crc32_table()


def ecmp_indices(src: np.ndarray, dst: np.ndarray, sport: np.ndarray, n: int) -> np.ndarray:
    """:func:`emulator.fabric.topology.ecmp_index` for arrays: CRC-32 of the big-endian (src, dst, sport)."""
    words = ((src, 4), (dst, 4), (sport & 0xFFFF, 2))
    crc = np.full(src.shape[0], 0xFFFFFFFF, np.uint32)
    for v, width in words:
        v = np.asarray(v).astype(np.uint64) & np.uint64(0xFFFFFFFF)
        for shift in range(8 * (width - 1), -1, -8):
            byte = ((v >> np.uint64(shift)) & np.uint64(0xFF)).astype(np.uint32)
            crc = _CRC32[(crc ^ byte) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
    return ((crc ^ np.uint32(0xFFFFFFFF)) % np.uint32(n)).astype(np.int64)


def udp_source_ports(qp: np.ndarray) -> np.ndarray:
    """RoCEv2 UDP source port of each schedule queue pair (:func:`emulator.wire.marking.udp_source_port` of
    its sender and receiver QP numbers, for arrays)."""
    lq = qp.astype(np.uint64) * np.uint64(2) + np.uint64(3)
    rq = qp.astype(np.uint64) * np.uint64(2) + np.uint64(2)
    v = lq * rq
    v ^= v >> np.uint64(20)
    v ^= v >> np.uint64(40)
    fl = v & np.uint64(0xFFFFF)
    low = (fl & np.uint64(0x3FFF)) ^ ((fl & np.uint64(0xFC000)) >> np.uint64(14))
    return (low | np.uint64(0xC000)).astype(np.int64)


def _qp_in_order(qp: np.ndarray, flows: np.ndarray, ph: np.ndarray, content: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A queue pair's flows leave a port in order (FIFO within the queue pair): what the port serves of the
    queue pair's flows goes to its earliest flow (lowest id: the driver posts a queue pair's flows in id
    order) first, up to what each holds."""
    order = np.lexsort((flows, qp, ph))
    p, q = ph[order], qp[order]
    new = np.r_[True, (p[1:] != p[:-1]) | (q[1:] != q[:-1])]
    if new.all():  # one flow per queue pair and port
        return out
    c = content[order]
    gid = np.cumsum(new) - 1
    served = np.bincount(gid, out[order])
    ahead = np.cumsum(c) - c
    ahead -= ahead[np.flatnonzero(new)][gid]
    res = np.empty_like(out)
    res[order] = np.clip(served[gid] - ahead, 0.0, c)
    return res


class _View:
    """Index arrays of the active flows, rebuilt only when a flow starts or is delivered."""

    __slots__ = ("a", "qa", "host", "levels", "qps", "inv", "qp_fb_ns")

    def __init__(self, a: np.ndarray, path: np.ndarray, flow_qp: np.ndarray, fb_delay_ns: np.ndarray,
                 qp_shared: bool = True) -> None:  # fmt: skip
        self.a = a
        self.qa = flow_qp[a]
        self.host = path[a, 0]
        self.levels = []
        for lv in (1, 2, 3):
            p = path[a, lv]
            rows = np.flatnonzero(p >= 0)
            if rows.size:
                self.levels.append((lv, rows, p[rows], a[rows]))
        if qp_shared:
            self.qps, first, self.inv = np.unique(self.qa, return_index=True, return_inverse=True)
            self.qp_fb_ns = fb_delay_ns[a[first]]
        else:  # one flow per queue pair (a is sorted by flow, not by queue pair: keep the pairing)
            self.qps, self.inv, self.qp_fb_ns = self.qa, np.arange(a.size), fb_delay_ns[a]


class FluidFabric:
    """Fluid state of every port, flow and queue pair (see module docstring). Times are ns (float inside).

    Flows are indexed by flow id: ``path[f]`` its ports, ``flow_qp[f]`` the queue pair whose rate
    controller paces it. The caller starts a queue pair's next flow only after the previous one has left
    the NIC, so at most one flow per queue pair sends while earlier ones may still drain from queues.
    """

    def __init__(self, topo: Topology, path: np.ndarray, flow_qp: np.ndarray, cc: FluidDcqcn, *,
                 red: RedParams | None, np_interval_ns: int, np_defer: bool, mtu_bytes: int,
                 wire_overhead_bytes: int, buffer_bytes: int, latency_ns: int, seed: int | None = None,
                 config: FluidConfig | None = None, pfc: PfcParams | None = None,
                 link_down: dict[int, list[tuple[int, int]]] | None = None,
                 retransmit_timeout_ns: int = 1_000_000, nic_batch_bytes: float = 0.0) -> None:  # fmt: skip
        n_flows = int(path.shape[0])
        self.path = path
        self.qp = flow_qp.astype(np.int64)
        self.cc = cc
        self.cfg = config = config or FluidConfig()
        self.red = red
        self.np_interval_ns = float(np_interval_ns)
        self.np_defer = np_defer
        self.rng = np.random.default_rng(seed) if seed is not None else None
        self.pkt_bytes = float(mtu_bytes + wire_overhead_bytes)
        self.buffer_bytes = float(buffer_bytes)
        self.ports = topo.ports
        self.rate = np.array([p.rate_bps for p in topo.ports], float)
        n_ports = self.rate.size
        self.n_ports = n_ports
        hops = (path >= 0).sum(axis=1)
        self.fb_delay_ns = (2 * hops - 1) * float(latency_ns)
        # per flow
        self.send_left = np.zeros(n_flows)
        # DCQCN's pacer hands the NIC a whole batch at once: bytes released ahead of the rate, sent at line rate
        self.nic_batch = float(nic_batch_bytes) if cc.enabled else 0.0
        self.credit = np.zeros(n_flows)
        self.backlog = np.zeros((n_flows, 4))
        self.flow_ce = np.zeros(n_flows)  # expected CE-marked packets of the flow
        # per queue pair: the notification point
        n_qp = cc.n
        self.mark_acc = np.zeros(n_qp)
        # where each queue pair's packet stream stands within a packet (random phase: identical flows differ)
        self.pkt_phase = self.rng.random(n_qp) if self.rng is not None else np.zeros(n_qp)
        self.last_cnp_ns = np.full(n_qp, -np.inf)
        self.cnp_due_ns = np.full(n_qp, np.inf)
        self.cnps_sent = np.zeros(n_qp, np.int64)
        self.np_marks = np.zeros(n_qp)  # CE-marked packets the NP saw (drawn with a seed, else expected)
        self._active: dict[int, None] = {}  # active flows: the view of a few among many is built from it
        self._is_active = np.zeros(n_flows, bool)  # ... and that of many from this mask
        self._qp_shared = bool(n_flows) and int(np.bincount(self.qp).max()) > 1
        self._dirty = True
        self._v = _View(np.zeros(0, np.int64), path, self.qp, self.fb_delay_ns)
        self.drain_ns = np.full((n_flows, 4), np.inf)  # when a flow's last queued bytes leave a port (FIFO)
        self.drain_bpns = np.zeros((n_flows, 3), np.float32)  # ... the bytes per ns its tail leaves at (switch levels)
        self.rtt_ns = 2 * hops * float(latency_ns)
        # per port
        self.queue = np.zeros(n_ports)
        self.tx_bytes = np.zeros(n_ports)
        self.marked_packets = np.zeros(n_ports)
        self.peak_queue = np.zeros(n_ports)
        self.queue_integral = np.zeros(n_ports)  # byte·ns
        self.drops = TailDrop(n_flows, n_ports, self.rate, self.rtt_ns, self.pkt_bytes, spread=cc.enabled)
        self.dropped_bytes = self.drops.dropped_bytes
        self.pfc = pfc
        self.owner = np.array([p.owner for p in topo.ports], np.int64)
        self.peer = np.array([p.peer for p in topo.ports], np.int64)
        self.pfc_port = np.array([p.kind != "host" for p in topo.ports], bool) if pfc else np.zeros(n_ports, bool)
        self.xoff = np.zeros(n_ports, bool)  # the port asserts XOFF upstream
        self.paused = np.zeros(n_ports, bool)  # an XOFF from the port's downstream switch holds it
        self.xoff_time_ns = np.zeros(n_ports)
        self.xoff_count = np.zeros(n_ports, np.int64)
        self.paused_time_ns = np.zeros(n_ports)
        self.samples_t: list[int] = []
        self.samples_q: list[np.ndarray] = []
        self.sample_every = config.sample_interval_ns
        self.next_sample = 0.0
        self.steps = 0
        self.calm = Calm(self)
        #: links that go down and the loss epochs they open (emulator.fabric.fluid_loss)
        self.faults = LinkFaults(link_down or {}, n_ports, n_flows, self.fb_delay_ns, retransmit_timeout_ns)

    # -- caller's inputs ----------------------------------------------------------------------------
    def start(self, flow: int, wire_bytes: float, now_ns: float) -> None:
        """Flow ``flow`` starts sending ``wire_bytes`` (payload + per-packet overhead) at ``now_ns``."""
        self.send_left[flow] = max(float(wire_bytes), 1e-9)
        if self.nic_batch:
            self.credit[flow] = min(self.nic_batch, float(wire_bytes))
        self._active[flow] = None
        self._is_active[flow] = True
        self._dirty = True
        if self.calm.on and not self.calm.start(flow, now_ns):
            self.calm.leave(now_ns)

    @property
    def active(self) -> int:
        return len(self._active)

    # -- the loop -----------------------------------------------------------------------------------
    def advance(self, now_ns: float, limit_ns: float) -> tuple[float, list[tuple[int, float]], list[int]]:
        """Run from ``now_ns`` until ``limit_ns`` or until a flow finishes sending or is delivered.

        Returns (time reached, [(flow, time its last byte left the NIC)], [flows delivered by then]).
        """
        t = float(now_ns)
        sent_done: list[tuple[int, float]] = []
        delivered: list[int] = []
        while t < limit_ns and self._active and not sent_done and not delivered:
            if self.calm.on and self.faults.busy(t):
                self.calm.leave(t)  # a link is down: step in slices
            if self.calm.on:
                lim = float(limit_ns)
                if (lim := min(lim, self.faults.next_change_ns(t))) < limit_ns:
                    t = self.calm.advance(t, lim, sent_done, delivered)
                    if t >= lim and self.calm.on:
                        self.calm.leave(t)  # a link goes down or comes up: step in slices
                    continue
                t = self.calm.advance(t, lim, sent_done, delivered)
                if t >= self.next_sample:
                    self._sample(t)
                continue
            t = self._step(t, float(limit_ns), sent_done, delivered)
        return t, sent_done, delivered

    def _view(self) -> _View:
        if self._dirty:
            k = len(self._active)
            a = np.sort(np.fromiter(self._active, np.int64, k)) if 64 * k < self._is_active.size \
                else np.flatnonzero(self._is_active)  # fmt: skip
            self._v = _View(a, self.path, self.qp, self.fb_delay_ns, self._qp_shared)
            self._dirty = False
        return self._v

    def _offered_bps(self, v: _View, left: np.ndarray, t: float) -> np.ndarray:
        want = np.where(left > 0, self.cc.rc[v.qa], 0.0)
        if self.nic_batch:
            want = np.where((self.credit[v.a] > 0) & (left > 0), self.rate[v.host], want)
        if t < self.drops.open_until_ns:
            want[self.drops.stalled(v.a, t)] = 0.0
        load = np.bincount(v.host, want, self.n_ports)
        share = np.minimum(1.0, np.divide(self.rate, load, out=np.ones_like(load), where=load > 0))
        return np.where(self.paused[v.host], 0.0, want * share[v.host])

    def _congested(self, v: _View, x: np.ndarray) -> bool:
        if self.queue.max(initial=0.0) > 0 or self.xoff.any() or np.isfinite(self.cnp_due_ns[v.qps]).any():
            return True
        if self.np_defer and (self.mark_acc[v.qps] >= 1).any():
            return True
        if self.nic_batch and ((self.credit[v.a] > 0) & (x > self.cc.rc[v.qa] * (1 + 1e-9))).any():
            return True  # a batch drains at line rate ahead of a cut rate
        for _, rows, ports, _ in v.levels:
            if (np.bincount(ports, x[rows], self.n_ports) > self.rate * (1 + 1e-9)).any():
                return True
        return False

    def _jump_ns(self, v: _View, x: np.ndarray, left: np.ndarray, t: float, limit: float) -> float:
        """Time to the next event while rates are constant and no queue holds bytes."""
        dt = limit - t
        sending = x > 0
        if sending.any():
            bps = x[sending] * _BYTES_PER_BIT_NS
            dt = min(dt, float((left[sending] / bps).min()))
            to_inc = self.cc.bytes_to_next_increase(v.qa[sending]) / bps
            dt = min(dt, float(to_inc.min()))
        return min(dt, self.cc.next_deadline_ns(v.qps) - t)

    def _step(self, t: float, limit: float, sent_done: list[tuple[int, float]], delivered: list[int]) -> float:
        v = self._view()
        a = v.a
        left = self.send_left[a]
        x = self._offered_bps(v, left, t)
        faults = self.faults
        if self._congested(v, x) or faults.sending_in_epoch(a, x) or t < self.drops.open_until_ns:
            dt = float(self.cfg.step_ns)
        else:
            if self.calm.wait:
                self.calm.wait -= 1
            elif not faults.busy(t) and self.calm.try_enter(a, v.qps, x, t):
                return t  # the calm regime runs from here (see emulator.fabric.fluid_calm)
            dt = self._jump_ns(v, x, left, t, limit)
            dt = min(dt, faults.next_change_ns(t) - t)
        dt = max(1.0, min(dt, limit - t))
        t_end = t + dt
        self.steps += 1
        # NIC: send
        sent = np.minimum(left, x * dt * _BYTES_PER_BIT_NS)
        finishing = (left > 0) & (sent >= left * (1 - 1e-12))
        sent = np.where(finishing, left, sent)
        if t < self.drops.open_until_ns:  # go-back-N: what a flow sends in its loss epoch is sent again
            waste = self.drops.wasted(a, sent, t, t_end)
            finishing &= waste <= 0
            left = np.where(finishing, 0.0, left - sent + waste)
        else:
            left = np.where(finishing, 0.0, left - sent)
        if finishing.any():
            bps = np.maximum(x[finishing], 1e-300) * _BYTES_PER_BIT_NS
            t_fin = np.minimum(t + self.send_left[a[finishing]] / bps, t_end)
            sent_done.extend(zip(a[finishing].tolist(), t_fin.tolist(), strict=True))
        self.tx_bytes += np.bincount(v.host, sent, self.n_ports)
        if self.nic_batch:  # the pacer releases at the rate; the NIC sends what was released
            released = self.cc.rc[v.qa] * dt * _BYTES_PER_BIT_NS
            self.credit[a] = np.where(left > 0, np.clip(self.credit[a] + released - sent, 0.0, self.nic_batch), 0.0)
        # switch levels
        p_mark = self._mark_probability(self.queue)
        unmarked = np.ones(a.size)
        inflow = sent
        down = faults.down(t)
        if down is not None:
            inflow = self._lose(a, v.host, sent, np.zeros(a.size), down, t_end)
        cap = np.where(self.paused, 0.0, self.rate * dt * _BYTES_PER_BIT_NS)
        q_before = self.queue.copy()
        for lv, rows, ph, flows in v.levels:
            content = self.backlog[flows, lv] + inflow[rows]
            out = self._fifo_tail(flows, lv, ph, inflow[rows], content, t_end, dt, cap)
            total = np.bincount(ph, content, self.n_ports)
            if v.qps.size < a.size:  # some queue pair has more than one flow active
                out = _qp_in_order(self.qp[flows], flows, ph, content, out)
            rest = content - out
            queue = np.bincount(ph, rest, self.n_ports)
            served = total - queue
            over = queue - self.buffer_bytes
            if (over > 0).any():
                left[rows] += self.drops.drop(flows, ph, rest, inflow[rows], queue, over, left[rows], t_end)
                queue = np.minimum(queue, self.buffer_bytes)
            self.backlog[flows, lv] = rest
            used = total > 0
            self.queue[used] = queue[used]
            self.tx_bytes += served
            self.marked_packets += served / self.pkt_bytes * p_mark
            unmarked[rows] *= 1.0 - p_mark[ph]
            inflow = inflow.copy()
            inflow[rows] = out
            if down is not None:
                inflow[rows] = self._lose(flows, ph, out, self.backlog[flows, 1:lv + 1].sum(axis=1), down, t_end,
                                          self.backlog[flows, lv + 1:].sum(axis=1))  # fmt: skip
        if faults.n_open:
            path_down = (down[self.path[a]] & (self.path[a] >= 0)).any(axis=1) if down is not None \
                else np.zeros(a.size, bool)  # fmt: skip
            left += faults.slice_end(a, sent, inflow, path_down, t_end)
        self.send_left[a] = left
        self._port_stats(q_before, dt)
        if self.pfc is not None:
            self._pfc_update(dt)
        # notification point, then the reaction point
        marked = inflow / self.pkt_bytes * (1.0 - unmarked)
        self.flow_ce[a] += marked
        qps = v.qps
        self._notify(v, np.bincount(v.inv, marked, qps.size), np.bincount(v.inv, inflow, qps.size) / self.pkt_bytes,
                     t_end)
        due = qps[self.cnp_due_ns[qps] <= t_end]
        if due.size:
            self.cnp_due_ns[due] = np.inf
            self.cc.on_cnp(due, t_end)
        self.cc.advance(qps, np.bincount(v.inv, sent, qps.size), t_end)
        # delivered flows leave the active set
        idle = np.flatnonzero(left <= 0)  # sent everything: delivered once (almost) nothing is left queued
        gone = idle[self.backlog[a[idle]].sum(axis=1) < self.cfg.done_backlog_bytes]
        if faults.n_open:
            gone = gone[~faults.in_epoch[a[gone]]]  # go-back-N: the flow's wasted bytes are still to be sent again
        if gone.size:
            done = a[gone]
            self._is_active[done] = False
            for f in done.tolist():
                del self._active[f]
            self.backlog[done] = 0.0
            delivered.extend(done.tolist())
            self._dirty = True
            self.queue = self._queues_from_backlog()
        if t_end >= self.next_sample:
            self._sample(t_end)
        return t_end

    def _lose(self, flows: np.ndarray, ports: np.ndarray, out: np.ndarray, queued: np.ndarray, down: np.ndarray,
              t_end: float, ahead: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
        """What ``ports`` pass on of ``out``: nothing where the port's link is down (lost, see fluid_loss)."""
        dead = down[ports]
        if not dead.any():
            return out
        self.faults.lose(flows, ports, np.where(dead, out, 0.0), queued, t_end, ahead)
        return np.where(dead, 0.0, out)

    def _pfc_update(self, dt: float) -> None:
        """Count the slice's XOFF and pause time, then XOFF above the XOFF threshold and XON at or below XON."""
        self.xoff_time_ns += np.where(self.xoff, dt, 0.0)
        self.paused_time_ns += np.where(self.paused, dt, 0.0)
        q = self.queue
        on = self.pfc_port & ~self.xoff & (q >= self.pfc.xoff_bytes)
        off = self.xoff & (q <= self.pfc.xon_bytes)
        if not (on.any() or off.any()):
            return
        self.xoff_count += on
        self.xoff = (self.xoff | on) & ~off
        at_node = np.bincount(self.owner[self.xoff], minlength=int(max(self.owner.max(), self.peer.max())) + 1)
        self.paused = at_node[self.peer] > 0

    def _fifo_tail(self, flows: np.ndarray, lv: int, ph: np.ndarray, inflow: np.ndarray, content: np.ndarray,
                   t_end: float, dt: float, cap: np.ndarray) -> np.ndarray:
        """What each flow leaves the ports ``ph`` with in the slice, of its ``content``, each port at most ``cap``:
        a stopped queue pair's tail as behind a FIFO, the rest by backlog (:mod:`emulator.fabric.fluid_fifo`)."""
        stopped = stopped_flows(self.qp[flows] if self._qp_shared else None, ph, inflow, content, self.n_ports)
        dl, bpns = self.drain_ns[flows, lv], self.drain_bpns[flows, lv - 1]
        newly = stopped & np.isinf(dl)
        if newly.any():  # its last byte came behind the port's queue: it leaves one queueing delay later
            wait = self.queue[ph[newly]] * 8e9 / self.rate[ph[newly]]
            dl[newly] = t_end - dt + wait
            bpns[newly] = content[newly] / np.maximum(wait, dt)
        dl[~stopped] = np.inf
        bpns[~stopped] = 0.0
        self.drain_ns[flows, lv], self.drain_bpns[flows, lv - 1] = dl, bpns
        return fifo_service(ph, content, stopped, dl, bpns, t_end, dt, cap, self.n_ports)

    def _queues_from_backlog(self) -> np.ndarray:
        v = self._view()
        q = np.zeros(self.n_ports)
        for lv, _, ph, flows in v.levels:
            q += np.bincount(ph, self.backlog[flows, lv], self.n_ports)
        return q

    def _mark_probability(self, q: np.ndarray) -> np.ndarray:
        r = self.red
        if r is None:
            return np.zeros_like(q)
        span = max(r.kmax_bytes - r.kmin_bytes, 1)
        p = np.clip((q - r.kmin_bytes) / span, 0.0, 1.0) * r.pmax
        p[q > r.kmax_bytes] = 1.0
        p[q <= r.kmin_bytes] = 0.0
        return p

    def _notify(self, v: _View, marked: np.ndarray, arrived: np.ndarray, t_end: float) -> None:
        """The NP of each queue pair: ``marked`` of its ``arrived`` packets (expected values) came in the slice."""
        qps = v.qps
        if self.rng is not None:  # the paced stream's whole packets, each CE-marked with the slice's fraction
            # (the stream advances while marks are expected: the calm regime, which has none, need not track it)
            phase = self.pkt_phase[qps] + np.where(marked > 0, arrived, 0.0)
            whole = np.floor(phase)
            self.pkt_phase[qps] = phase - whole
            hit = np.flatnonzero((whole > 0) & (marked > 0))  # no draw where none is expected
            drawn = np.zeros(qps.size)
            if hit.size:
                p = np.clip(marked[hit] / np.maximum(arrived[hit], 1e-12), 0.0, 1.0)
                drawn[hit] = self.rng.binomial(whole[hit].astype(np.int64), p)
            marked = drawn
        tau = self.np_interval_ns
        quiet = t_end < self.last_cnp_ns[qps] + tau
        acc = self.mark_acc[qps] + marked
        if tau <= 0:
            n = np.floor(acc)
            acc -= n
        elif self.np_defer:  # marks in the quiet interval count: one CNP when it is over
            n = ((acc >= 1.0) & ~quiet).astype(float)
            acc = np.where(n > 0, 0.0, acc)
        else:  # one CNP for a whole marked packet outside the quiet interval; inside it, whole ones are lost
            n = ((acc >= 1.0) & ~quiet).astype(float)
            acc -= np.floor(acc)  # the next marked packet's part that has come carries over
        self.mark_acc[qps] = acc
        self.np_marks[qps] += marked
        fire = n > 0
        if fire.any():
            qf = qps[fire]
            self.cnps_sent[qf] += n[fire].astype(np.int64)
            self.last_cnp_ns[qf] = t_end
            pending = self.cnp_due_ns[qf]
            self.cnp_due_ns[qf] = np.where(np.isfinite(pending), pending, t_end + v.qp_fb_ns[fire])

    def _port_stats(self, q_before: np.ndarray, dt: float) -> None:
        q = self.queue
        self.queue_integral += (q_before + q) * (dt / 2)
        np.maximum(self.peak_queue, q, out=self.peak_queue)

    def _sample(self, t: float) -> None:
        """One sample per step that reaches the next grid point (one point for an idle gap)."""
        self.samples_t.append(int(self.next_sample))
        self.samples_q.append(self.queue.astype(np.int64))
        self.next_sample = (t // self.sample_every + 1) * self.sample_every
        if len(self.samples_t) >= self.cfg.max_samples:
            self.samples_t = self.samples_t[::2]
            self.samples_q = self.samples_q[::2]
            self.sample_every *= 2
