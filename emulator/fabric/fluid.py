"""A fluid (flow-level) fabric: queue pairs as rates, ports as fluid queues, DCQCN as numpy arrays.

Theory of operation
-------------------
Sans-IO: the caller (:mod:`emulator.drivers.fluid`) starts flows on queue pairs and calls
:meth:`FluidFabric.advance` with the virtual time it may run to; nothing here reads a clock.

*Paths.* Every port of a topology sits on one of four levels in the order a packet meets them: NIC
(``host``), leaf uplink (``up``), spine downlink (``spine_down``), switch → host (``down``). A queue pair's
path (:func:`~emulator.fabric.fluid_paths.qp_paths`) holds one port per level or -1, found with the packet
sim's routing (:mod:`emulator.fabric.topology`, ECMP on the RoCEv2 UDP source port), so a flow takes the
same path as in the packet sim.

*A slice of ``dt``.* A sending queue pair offers its DCQCN current rate (its line rate while bytes its pacer
released ahead are at the NIC: what it earned since its queue pair's last flow, at most a GSO batch,
:mod:`~emulator.fabric.fluid_nic`); a NIC shares its line rate among its queue pairs as the packet sim's round
robin does: the batch it holds first in posting order, then max-min fair in their rates, the last round in
posting order (``FluidConfig.nic_round_robin``; off: in proportion to their rates). Level by level, a switch
port holds per queue pair a backlog (bytes); what arrives joins it, and the port serves ``rate × dt`` from the
sum, in proportion to each backlog (the fluid limit of a FIFO); once a queue pair's input to the port stops,
its backlog leaves first, evenly over one queueing delay, as behind a FIFO. With ``FluidConfig.fifo_epochs`` =
K the backlog is split by arrival epoch and the port serves the oldest epoch first, each epoch's flows in
proportion to what they brought in it (:mod:`emulator.fabric.fluid_fifo`). The port's queue is the sum of the
backlogs; RED/ECN marks a fraction ``p(queue)`` of what it serves, in proportion to what each flow is served
(with ``FluidConfig.mark_epochs``, as such a FIFO of arrival epochs would serve them). A packet is marked if any
port on its path marks it.

*Notification point.* CE-marked packets of a queue pair accumulate: the expected number, or with a
``seed`` a draw as the packet sim's paced stream gives them — each whole packet that arrives in the slice
(from a random phase per queue pair, which breaks the symmetry of identical flows) is marked with the
slice's marked fraction. One CNP goes out when a whole marked packet has come and the NP's quiet interval
since the last CNP is over (``defer``: marks in the quiet interval count; otherwise whole marked packets
in it are lost and a part of the next one carries over; interval 0: one CNP per marked packet).
A CNP reaches the reaction point ``(2·hops − 1) × latency`` later (the marked packet's remaining hops and
the way back; with ``FluidConfig.cnps_behind`` one fired while the previous one is on its way follows it,
:mod:`~emulator.fabric.fluid_notify`), then :class:`~emulator.fabric.fluid_cc.FluidDcqcn` cuts the rate.

*Adaptive steps.* While a queue holds bytes, a port is offered more than its rate or a CNP is in flight,
slices are ``step_ns`` long. Otherwise rates are constant until the next event — a queue pair finishing its
bytes, a DCQCN increase or cut deadline, a byte-counter increase, or the caller's limit — and one slice jumps
there. The cost therefore grows with active queue pairs and congested time, not with bytes. A flow may start
ahead of the fabric's time (:meth:`FluidFabric.start`): in a congested step it sends from its start for the
rest of the slice (the slice's mean rate; its NIC's share counts that part); an uncongested slice ends at its
start. Marks and CNPs are expected values of the model (fractional marks are kept), not counted packets.
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

import importlib
import math

import numpy as np

from emulator.fabric.fluid_calm import Calm
from emulator.fabric.fluid_cc import FluidDcqcn
from emulator.fabric.fluid_config import FluidConfig
from emulator.fabric.fluid_drop import TailDrop
from emulator.fabric.fluid_fifo import qp_in_order as _qp_in_order
from emulator.fabric.fluid_fifo import stopped_flows
from emulator.fabric.fluid_loss import LinkFaults
from emulator.fabric.fluid_nic import (
    NicBatch,
    idle_clock,
    last_round,
    max_min_share,
    proportional_share,
    sending_count,
    sent_last,
    start_credit,
    start_credit_one,
)
from emulator.fabric.fluid_notify import notify
from emulator.fabric.fluid_pfc import pfc_update
from emulator.fabric.fluid_tail import still_late, tail_ns
from emulator.fabric.fluid_view import COMPILED_FROM, _View, active_sorted, updated
from emulator.fabric.port import PfcParams
from emulator.fabric.topology import Topology
from emulator.pacing.red import RedParams

LEVELS = ("host", "up", "spine_down", "down")


class _Kernels:
    """Compiled loops (``K``: fluid_kernels, ``SK``: fluid_step_kernels) imported (numba and its cached loops
    loaded) at the first use: a run that stays calm never steps a slice and need not pay for it."""

    def __init__(self, name: str, module: str) -> None:
        self.name, self.module = name, module

    def __getattr__(self, attr: str):
        globals()[self.name] = mod = importlib.import_module(f"emulator.fabric.{self.module}")
        return getattr(mod, attr)


K, SK = _Kernels("K", "fluid_kernels"), _Kernels("SK", "fluid_step_kernels")
LK = _Kernels("LK", "fluid_level_kernels")
_COMPILED_FROM_FLOWS = 50_000  # active flows from which the offered rates use compiled loops before any slice
_BYTES_PER_BIT_NS = 1e-9 / 8  # bytes sent in 1 ns at 1 bps
#: a level without FIFO tails: no stopped rows, drain times or drain rates
_NO_TAIL = (np.zeros(0, bool), np.zeros(0), np.zeros(0, np.float32))
_NO_LEVEL = (np.zeros(0, np.int64), np.zeros(0, np.int64))  # a level without flows: no flows, no ports
_NO_EP = np.zeros((0, 1), np.float32)  # a fused level without the marks' epochs: their weights, not read


class FluidFabric:
    """Fluid state of every port, flow and queue pair (see module docstring). Times are ns (float inside).

    Flows are indexed by flow id: ``path[f]`` its ports, ``flow_qp[f]`` the queue pair whose rate
    controller paces it. The caller starts a queue pair's next flow only after the previous one has left
    the NIC, so at most one flow per queue pair sends while earlier ones may still drain from queues.
    """

    #: the view of compiled size is brought up to date from the last one (fluid_view.updated), not built afresh
    view_update = True

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
        self.nic = NicBatch(n_ports, n_flows, self.nic_batch if config.nic_round_robin and not link_down else 0.0, self.rate)
        self._bl = np.zeros((4, n_flows))  # per level contiguous: the slice reads one level at a time
        self.backlog = self._bl.T
        self.flow_ce = np.zeros(n_flows)  # expected CE-marked packets of the flow
        # per queue pair: the notification point
        n_qp = cc.n
        self.mark_acc = np.zeros(n_qp)
        # where each queue pair's packet stream stands within a packet (random phase: identical flows differ)
        self.pkt_phase = self.rng.random(n_qp) if self.rng is not None else np.zeros(n_qp)
        self.last_cnp_ns = np.full(n_qp, -np.inf)
        self.cnp_due_ns = np.full(n_qp, np.inf)  # the next CNP to reach each queue pair's reaction point
        self.cnp_next_ns = np.full(n_qp, np.inf)  # ... and one fired behind it (FluidConfig.cnps_behind)
        self.cnps_sent = np.zeros(n_qp, np.int64)
        self.np_marks = np.zeros(n_qp)  # CE-marked packets the NP saw (drawn with a seed, else expected)
        self._active: dict[int, None] = {}  # active flows: the view of a few among many is built from it
        self.now_ns = 0.0  # the time the fabric has reached
        self.start_ns = np.zeros(n_flows)  # when each flow starts sending
        self.delivered_ns = np.zeros(0)  # per flow the last advance delivered: when its last bytes left (fluid_tail)
        #: flows started after the fabric's time (part-way into its next slice), until the fabric reaches them
        self._late: dict[int, None] = {}
        self._is_active = np.zeros(n_flows, bool)  # ... and that of many from this mask
        self._qp_shared = bool(n_flows) and int(np.bincount(self.qp).max()) > 1
        self.qp_idle_ns = idle_clock(cc.n, self._qp_shared)  # per queue pair: when its pacer's bucket was empty
        self.qp_sending = sending_count(cc.n, self._qp_shared)  # ... and its flows not done sending
        self._dirty = True  # the view is to be built afresh (flows started); its rows delivered since, to drop:
        self._gone_rows: np.ndarray | None = None
        self._v = _View(np.zeros(0, np.int64), path, self.qp, self.fb_delay_ns)
        self._drain = np.full((4, n_flows), np.inf)
        self.drain_ns = self._drain.T  # when a flow's last queued bytes leave a port (FIFO)
        self._drain_bpns = np.zeros((3, n_flows), np.float32)  # ... the bytes per ns its tail leaves at (switch levels)
        self.rtt_ns = 2 * hops * float(latency_ns)
        self._ep: np.ndarray | None = None  # per switch level and flow: bytes per epoch (fifo_epochs; 1st slice)
        # per port
        self.queue = np.zeros(n_ports)
        self._ep_head = np.zeros(n_ports, np.int64)  # per port: its oldest epoch's slot, slots in use, their bytes
        self._ep_used = np.ones(n_ports, np.int64)
        self._ep_tot = np.zeros((n_ports, math.ceil(config.fifo_epochs or config.mark_epochs)))
        self.tx_bytes = np.zeros(n_ports)
        self.marked_packets = np.zeros(n_ports)
        self.peak_queue = np.zeros(n_ports)
        self.queue_integral = np.zeros(n_ports)  # byte·ns
        self.drops = TailDrop(n_flows, n_ports, self.rate, self.rtt_ns, self.pkt_bytes, spread=cc.enabled, seed=seed)
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
        """Flow ``flow`` starts sending ``wire_bytes`` (payload + per-packet overhead) at ``now_ns``, which may
        lie ahead of the fabric's time (:attr:`now_ns`): it then starts part-way into the slice that reaches it
        and sends there for the part after ``now_ns`` (:meth:`fixed_step_ns`: when the next slice's length does
        not depend on such starts). An idle fabric's time moves to ``now_ns``."""
        if not self._active:
            self.now_ns = max(self.now_ns, float(now_ns))
        self.send_left[flow] = max(float(wire_bytes), 1e-9)
        if self.nic_batch:
            now = float(now_ns)
            self.credit[flow] = credit = start_credit_one(self.nic_batch, float(wire_bytes), self.cc.rc, self.qp_idle_ns,
                                                          int(self.qp[flow]), now, self.qp_sending)  # fmt: skip
            if self.nic.batch:  # nic_round_robin
                self.nic.give_one(flow, int(self.path[flow, 0]), credit, now, self.tx_bytes)
        self._active[flow] = None
        self._is_active[flow] = True
        self._dirty = True
        self.start_ns[flow] = now_ns
        if now_ns > self.now_ns:
            if self.calm.on:  # the calm regime's closed form runs from the fabric's time: step from there
                self.calm.leave(self.now_ns)
            self._late[flow] = None
        elif self.calm.on and not self.calm.start(flow, now_ns):
            self.calm.leave(now_ns)

    def start_many(self, flows: np.ndarray, wire_bytes: np.ndarray, now_ns: float | np.ndarray) -> None:
        """:meth:`start` for each of ``flows`` (distinct, not active) in order, as arrays; ``now_ns``: one or each's."""
        now = np.asarray(now_ns, float)
        now = np.full(flows.shape, float(now)) if now.ndim == 0 else now
        if self.calm.on:
            for f, w, t in zip(flows.tolist(), wire_bytes.tolist(), now.tolist(), strict=True):
                self.start(f, w, t)
            return
        if not self._active and flows.size:
            self.now_ns = max(self.now_ns, float(now[0]))
        self.start_ns[flows] = now
        self._late.update(dict.fromkeys(flows[now > self.now_ns].tolist()))
        self.send_left[flows] = np.maximum(wire_bytes, 1e-9)
        if self.nic_batch:
            self.credit[flows] = start_credit(self.nic_batch, wire_bytes, self.cc.rc, self.qp_idle_ns, self.qp[flows], now,
                                              self.qp_sending)  # fmt: skip
            if self.nic.batch:
                self.nic.give(flows, self.path[flows, 0], self.credit[flows], now, self.tx_bytes)
        self._active.update(dict.fromkeys(flows.tolist()))
        self._is_active[flows] = True
        self._dirty = True

    @property
    def active(self) -> int:
        return len(self._active)

    # -- the loop -----------------------------------------------------------------------------------
    def advance(self, now_ns: float, limit_ns: float) -> tuple[float, list[tuple[int, float]], list[int]]:
        """Run from ``now_ns`` until ``limit_ns`` or until a flow finishes sending or is delivered.

        Returns (time reached, [(flow, time its last byte left the NIC)], [flows delivered, at :attr:`delivered_ns`]).
        """
        t = self.now_ns = max(self.now_ns, float(now_ns))
        sent_done: list[tuple[int, float]] = []
        delivered: list[int] = []
        t = self.now_ns = self._advance(t, float(limit_ns), sent_done, delivered)
        return t, sent_done, delivered

    def fixed_step_ns(self) -> float:
        """The length of the fabric's next slice from :attr:`now_ns` when it is a congested step of
        ``step_ns`` whatever flows start part-way into it (a queue holds bytes or a port is paused), else 0:
        a caller may start flows at their own times within it without cutting it."""
        if self.calm.on or not self._active or not (self.queue.max(initial=0.0) > 0 or self.xoff.any()):
            return 0.0
        return float(self.cfg.step_ns)

    def _advance(self, t: float, limit_ns: float, sent_done: list[tuple[int, float]], delivered: list[int]) -> float:
        while t < limit_ns and self._active and not sent_done and not delivered:
            if self.calm.on and self.faults.busy(t):
                self.calm.leave(t)  # a link is down: step in slices
            if self.calm.on:
                lim = float(limit_ns)
                if (lim := min(lim, self.faults.next_change_ns(t))) < limit_ns:
                    t = self.calm.advance(t, lim, sent_done, delivered)
                    self.delivered_ns = np.full(len(delivered), t)
                    if t >= lim and self.calm.on:
                        self.calm.leave(t)  # a link goes down or comes up: step in slices
                    continue
                t = self.calm.advance(t, lim, sent_done, delivered)
                self.delivered_ns = np.full(len(delivered), t)
                if t >= self.next_sample:
                    self._sample(t)
                continue
            t = self._step(t, float(limit_ns), sent_done, delivered)
        return t

    def _view(self) -> _View:
        if (self._dirty or self._gone_rows is not None) and self.view_update and \
                (v := updated(self._v, self._is_active, self._active, self.path, self.qp, self.fb_delay_ns,
                              self._qp_shared)) is not None:  # fmt: skip
            self._v = v  # the last view's flows still active and those started since, merged
        elif self._dirty:
            k = len(self._active)
            a = active_sorted(self._v.a, self._is_active, self._active) if 64 * k < self._is_active.size else np.flatnonzero(self._is_active)
            self._v = _View(a, self.path, self.qp, self.fb_delay_ns, self._qp_shared)
        elif self._gone_rows is not None:  # only deliveries since: the view without them, as built afresh
            self._v = self._v.without(self._gone_rows, self.fb_delay_ns, self._qp_shared)
        self._dirty, self._gone_rows = False, None
        return self._v

    def _offered_bps(self, v: _View, left: np.ndarray, t: float,
                     part: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:  # fmt: skip
        """Each flow's rate over the slice from ``t``: its queue pair's rate (line rate while a batch is at
        the NIC), its NIC shared round robin (``FluidConfig.nic_round_robin``) or in proportion. ``part``: rows
        that send only a fraction of the slice (a late start) and that fraction: their mean rate, and their NIC's
        share counts what they offer on average."""
        compiled = v.a.size >= _COMPILED_FROM_FLOWS or (v.a.size >= COMPILED_FROM and not isinstance(K, _Kernels))
        if not compiled:  # numpy: a run that turns out calm loads no compiled loop
            want = np.where(left > 0, self.cc.rc[v.qa], 0.0)
            if self.nic_batch:
                want = np.where((self.credit[v.a] > 0) & (left > 0), self.rate[v.host], want)
        else:
            want = K.offered(left, self.cc.rc, v.qa, self.credit, v.a, self.rate, v.host, bool(self.nic_batch))
        if part is not None:
            want[part[0]] *= part[1]
        if t < self.drops.open_until_ns:
            want[self.drops.stalled(v.a, t)] = 0.0
        if not self.cfg.nic_round_robin:  # processor sharing: in proportion to the wants
            if compiled:
                return SK.nic_share(want, v.host, self.rate, self.paused)
            return proportional_share(want, v.host, self.rate, self.paused)[0]
        x, over = (SK.nic_max_min if compiled else max_min_share)(want, v.host, self.rate, self.paused)  # round robin
        x = last_round(x, want, over, left, v.host, self.pkt_bytes, dt := float(self.cfg.step_ns))
        return self.nic.first(x, want, left, v.a, v.host, self.rate, self.paused, dt)

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
            if (held := self.nic.held(v.a[sending])).any():  # a NIC's batch sent: its shares change
                dt = min(dt, float((self.nic.head[v.a[sending][held]] / bps[held]).min()))
        return min(dt, self.cc.next_deadline_ns(v.qps) - t)

    def _calm_enter(self, v: _View, left: np.ndarray, x: np.ndarray, t: float) -> bool:
        """Enter the calm regime if it holds at ``t``, judged without the NICs' batches (which it does not keep)."""
        if not (held := self.nic.held(v.a)).any():
            return self.calm.try_enter(v.a, v.qps, x, t)
        heads, pending = self.nic.head[v.a[held]], self.nic.pending
        self.nic.drop(v.a[held])
        if self.calm.try_enter(v.a, v.qps, self._offered_bps(v, left, t), t):
            return True
        self.nic.head[v.a[held]], self.nic.pending = heads, pending
        return False

    def _step(self, t: float, limit: float, sent_done: list[tuple[int, float]], delivered: list[int]) -> float:
        v = self._view()
        a = v.a
        if a.size >= COMPILED_FROM:  # the view's loops are loaded: DCQCN's and the NICs' too
            self.cc.use_compiled()
            self.nic.use_compiled()
        left = self.send_left[a]
        x = self._offered_bps(v, left, t)
        faults = self.faults
        late, self._late = still_late(self._late, self.start_ns, a, t) if self._late else (None, self._late)
        if self._congested(v, x) or faults.sending_in_epoch(a, x) or t < self.drops.open_until_ns:
            dt = float(self.cfg.step_ns)
        else:
            if self.calm.wait:
                self.calm.wait -= 1
            elif late is None and not faults.busy(t) and self._calm_enter(v, left, x, t):
                return t  # the calm regime runs from here (see emulator.fabric.fluid_calm)
            dt = self._jump_ns(v, x, left, t, limit)
            dt = min(dt, faults.next_change_ns(t) - t, late[1].min() - t if late is not None else dt)
        dt = max(1.0, min(dt, limit - t))
        t_end = t + dt
        self.steps += 1
        if late is not None:  # a late flow sends from its start: its mean rate over the slice
            frac = np.clip((t_end - late[1]) / dt, 0.0, 1.0)
            x_full, x = x, self._offered_bps(v, left, t, (late[0], frac))
            x_full[late[0]] = np.divide(x[late[0]], frac, out=x_full[late[0]].copy(), where=frac > 0)
        # NIC: send
        sent, finishing = K.nic_send(left, x, dt, _BYTES_PER_BIT_NS)
        if self.nic.pending >= 1.0:  # heads, and what the NIC takes ahead of the wire behind them
            self.nic.sent(a, v.host, sent, left, self.credit[a], self.cc.rc[v.qa], dt)
        elif self.nic.ahead_total >= 1.0:
            self.nic.sent_ahead(a, v.host, sent)
        if t < self.drops.open_until_ns:  # go-back-N: what a flow sends in its loss epoch is sent again
            waste = self.drops.wasted(a, sent, t, t_end)
            finishing &= waste <= 0
            left = np.where(finishing, 0.0, left - sent + waste)
        else:
            left = K.left_after(left, sent, finishing)
        fin = None  # rows that finish sending in the slice, and when
        if finishing.any():
            if late is None:
                bps, t0 = np.maximum(x[finishing], 1e-300) * _BYTES_PER_BIT_NS, t
            else:  # at its rate from its start
                bps = np.maximum(x_full[finishing], 1e-300) * _BYTES_PER_BIT_NS
                t0 = np.maximum(t, self.start_ns[a[finishing]])
            with np.errstate(over="ignore"):  # a rate floored at 1e-300 finishes at t_end: inf is the intent
                t_fin = np.minimum(t0 + self.send_left[a[finishing]] / bps, t_end)
            fin = (np.flatnonzero(finishing), t_fin)
            sent_done.extend(zip(a[finishing].tolist(), t_fin.tolist(), strict=True))
            sent_last(self.qp_idle_ns, self.qp[a[finishing]], t_fin, self.qp_sending)
        self.tx_bytes += K.port_sum(v.host, sent, self.n_ports)
        if self.nic_batch:  # the pacer releases at the rate; the NIC sends what was released
            K.release_credit(self.credit, a, self.cc.rc, v.qa, left, sent, dt, _BYTES_PER_BIT_NS, self.nic_batch)
        # switch levels
        p_mark = self._mark_probability(self.queue)
        unmarked = np.ones(a.size)
        inflow = sent.copy()  # each level passes on what its ports serve (sent stays the NIC's)
        down = faults.down(t)
        if down is not None:
            inflow = self._lose(a, v.host, inflow, np.zeros(a.size), down, t_end)
        cap = np.where(self.paused, 0.0, self.rate * dt * _BYTES_PER_BIT_NS)
        q_before = self.queue.copy()
        k_epochs = self.cfg.fifo_epochs
        k_marks = self.cfg.mark_epochs if not k_epochs and self.red is not None else 0
        if (k_epochs or k_marks) and self._ep is None:
            self._ep = np.zeros((3, self.path.shape[0], math.ceil(k_epochs or k_marks)), np.float32)
        spans = float(k_marks - 1) if k_marks else 0.0  # the marks' epochs: a new one per 1/spans of the queue
        fused = not k_epochs and down is None  # a level of compiled size in one call (fluid_level_kernels)
        for (lv, rows, ph, flows), in_order in zip(v.levels, v.in_order, strict=True):
            if fused and flows.size >= COMPILED_FROM:
                over, out, rest, total, queue, fo = LK.level_step(
                    self._bl[lv], self._drain[lv], self._drain_bpns[lv - 1], flows, rows, ph, in_order, inflow,
                    self.qp, self.queue, self.rate, t_end, dt, cap, self.buffer_bytes, self.tx_bytes,
                    self.marked_packets, self.pkt_bytes, p_mark, unmarked, self._ep[lv - 1] if k_marks else _NO_EP,
                    self._ep_head, self._ep_used, self._ep_tot, q_before, spans)  # fmt: skip
                if not over:
                    continue
            else:
                content, at = K.level_in(self._bl[lv], self._drain[lv], flows, rows, inflow)
                stop, dl, bpns = _NO_TAIL
                if at.size and flows.size >= COMPILED_FROM:  # the rule below as one compiled loop
                    stop, dl, bpns = SK.fifo_tail(at, flows, rows, ph, inflow, content, self.qp, in_order,
                                                  self._drain[lv], self._drain_bpns[lv - 1], self.queue, self.rate,
                                                  t_end, dt)  # fmt: skip
                elif at.size:  # elsewhere no input stopped and no drain time is set: the rule changes nothing there
                    arriving = None
                    if in_order:  # a flow followed at its port by its queue pair's next one has not stopped
                        key = self.qp[flows] * self.n_ports + ph
                        arriving = (key[at], key[inflow[rows] > 0])
                    stop, dl, bpns = self._fifo_tail(flows[at], lv, ph[at], inflow[rows[at]], content[at], t_end, dt,
                                                     arriving)  # fmt: skip
                if k_epochs:
                    out, rest, total, queue = K.fifo_epochs(ph, flows, rows, content, inflow, self._ep[lv - 1],
                                                            self._ep_head, self._ep_used, self._ep_tot, q_before, cap,
                                                            self.n_ports, float(k_epochs - 1))  # fmt: skip
                else:
                    out, rest, total, queue = K.serve(ph, content, at, stop, dl, bpns, t_end, dt, cap, self.n_ports)
                    if k_marks:  # the marks fall on what a FIFO of arrival epochs would serve (fluid_fifo)
                        fo = K.fifo_epochs(ph, flows, rows, content, inflow, self._ep[lv - 1], self._ep_head,
                                           self._ep_used, self._ep_tot, q_before, cap, self.n_ports, spans)[0]
                if in_order:  # some queue pair has more than one flow at a port of this level
                    in_qp = SK.qp_in_order if flows.size >= COMPILED_FROM else _qp_in_order
                    out = in_qp(self.qp[flows], flows, ph, content, out)
                    rest, queue = K.remainder(ph, content, out, self.n_ports)
            if queue.max(initial=0.0) > self.buffer_bytes:  # tail drop (the queue kept is clipped below)
                left[rows] += self.drops.drop(flows, ph, rest, inflow[rows], queue, queue - self.buffer_bytes,
                                              left[rows], t_end)  # fmt: skip
            if k_marks:
                K.level_out_marks(self._bl[lv], flows, rows, ph, rest, out, inflow, unmarked, p_mark, fo)
            else:
                K.level_out(self._bl[lv], flows, rows, ph, rest, out, inflow, unmarked, p_mark)
            SK.port_account(total, queue, self.buffer_bytes, self.queue, self.tx_bytes, self.marked_packets,
                            self.pkt_bytes, p_mark)  # fmt: skip
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
            pfc_update(self, dt)
        # notification point, then the reaction point
        marked = K.marks(inflow, unmarked, self.pkt_bytes, self.flow_ce, a)
        qps = v.qps
        if self._qp_shared:  # per queue pair (v.qps order): the sum of its flows; else one flow each, in order
            marked, inflow, sent = K.qp_sums(v.inv, qps.size, marked, inflow, sent)  # np.bincount of each
        self._notify(v, marked, inflow / self.pkt_bytes, t_end)
        due = K.cnps_due(self.cnp_due_ns, self.cnp_next_ns, qps, t_end)
        if due.size:
            self.cc.on_cnp(due, t_end)
        self.cc.advance(qps, sent, t_end)
        # delivered flows leave the active set
        # sent everything: delivered once (almost) nothing is left queued
        gone = K.delivered(left, self._bl, a, self.cfg.done_backlog_bytes)
        if faults.n_open:
            gone = gone[~faults.in_epoch[a[gone]]]  # go-back-N: the flow's wasted bytes are still to be sent again
        if gone.size:
            done = a[gone]
            self.delivered_ns = tail_ns(self.path, self._drain, a, gone, fin, q_before, cap, t, dt) \
                if self.cfg.tail_delivery else np.full(gone.size, t_end)  # fmt: skip
            self._is_active[done] = False
            list(map(self._active.pop, done.tolist()))
            self.backlog[done] = 0.0
            if self._ep is not None:
                self._ep[:, done] = 0.0
            delivered.extend(done.tolist())
            # the ports' queues over this view: the delivered flows' backlogs, now 0, add nothing to the sums
            self.queue = self._queues_from_backlog()
            self._gone_rows = gone  # dropped from the view when next asked for, unless flows start before

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

    def _fifo_tail(self, flows: np.ndarray, lv: int, ph: np.ndarray, inflow: np.ndarray, content: np.ndarray, t_end: float,
                   dt: float, arriving: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, ...]:  # fmt: skip
        """The FIFO state of ``flows`` at their ports ``ph`` (level ``lv``) for the slice ending at ``t_end``:
        which have stopped (:func:`~emulator.fabric.fluid_fifo.stopped_flows`; ``arriving``: the flows' and the
        arriving flows' queue pair × port keys where a queue pair has two flows at a port), when their tails
        have left and the bytes per ns they leave at (set at the stop, cleared when the input resumes)."""
        stopped = stopped_flows(inflow, content, *(arriving or ()))
        dl, bpns = self._drain[lv, flows], self._drain_bpns[lv - 1, flows]
        newly = stopped & np.isinf(dl)
        if newly.any():  # its last byte came behind the port's queue: it leaves one queueing delay later
            wait = self.queue[ph[newly]] * 8e9 / self.rate[ph[newly]]
            dl[newly] = t_end - dt + wait
            bpns[newly] = content[newly] / np.maximum(wait, dt)
        dl[~stopped] = np.inf
        bpns[~stopped] = 0.0
        self._drain[lv, flows], self._drain_bpns[lv - 1, flows] = dl, bpns
        return stopped, dl, bpns

    def _queues_from_backlog(self) -> np.ndarray:
        by_lv = {lv: (flows, ph) for lv, _, ph, flows in self._view().levels}  # the sum of their level_sum arrays
        return K.level_queues(self._bl, *(x for lv in (1, 2, 3) for x in by_lv.get(lv, _NO_LEVEL)), self.n_ports)

    def _mark_probability(self, q: np.ndarray) -> np.ndarray:
        r = self.red
        return np.zeros_like(q) if r is None else K.mark_probability(q, r.kmin_bytes * 1.0, r.kmax_bytes * 1.0, r.pmax * 1.0)

    def _notify(self, v: _View, marked: np.ndarray, arrived: np.ndarray, t_end: float) -> None:
        """The NP of each queue pair: ``marked`` of its ``arrived`` packets (expected values) came in the slice
        (:func:`emulator.fabric.fluid_notify.notify`)."""
        notify(self, v, marked, arrived, t_end, v.a.size >= COMPILED_FROM)

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
