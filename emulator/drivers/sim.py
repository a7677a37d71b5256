"""The virtual-time driver: rank endpoints on a simulated fabric, deterministic for a seed.

Theory of operation
-------------------
One heap of events ``(t_ns, seq, kind, a, b)`` orders everything; ``seq`` breaks ties in insertion order,
so a run is a pure function of (schedule, configs, seed). (``ARRIVE`` events, made in that order when every
link has the same latency, wait in a FIFO beside the heap; the loop takes the lesser of the two heads.) Four kinds of event (and ``STOP``, pushed at
``(now, -1)`` when the last rank is done, so the loop stops there; ``events`` counts the others, as pushed
minus left):

* ``DEPART(port)``: an egress port (:class:`~emulator.fabric.port.EgressPort`: strict priorities, tail
  drop, RED/ECN decided at dequeue, PFC) finishes serialising a packet at its rate. A CE decision sets the
  packet's ECN to CE. The packet reaches the port's far end ``latency_ns`` later (``ARRIVE``). The port's
  next departure, if any, is scheduled at once (a port serialises back to back).
* ``ARRIVE(port, packet)`` at the far end of a link: a switch looks the egress port up in the topology
  (:mod:`emulator.fabric.topology`: by destination rank, ECMP on the UDP source port at leaves) and
  enqueues the packet there; a host first applies the injected loss (seeded), then hands the datagram
  to its endpoint's ``receive``.
* ``WAKE(rank)``: the endpoint's ``next_timer_ns`` has come: ``handle_timer`` then service. A wake with no
  timer due and no control packet waiting, whose sender visit sends one packet (the per-packet pacing's
  usual wake, for a queue pair alone on its NIC or one of many in the NIC's round-robin), takes
  ``RankEndpoint.visit_one`` instead: the same state changes, transmits and send-heap entries, without
  the general poll around them (:mod:`emulator.endpoint.visit`).
* ``INJECT(rank)`` (packet trains, ``SimConfig.train_ns`` > 0): the send time of the rank's next train
  packet has come: every packet due by now joins the NIC port.

*Servicing* an endpoint (after a receive or a wake; not after a *quiet* data packet — no CE mark, nothing
for the endpoint to hand out but a message's first packet's event, which is recorded, no wake due by now —
which leaves nothing to send and the next wake where it was, so skipping it changes no result) pulls
``poll_transmit``: every GSO batch is cut into its datagrams here, at the host, and each datagram joins the
NIC port of that rank (in a train: at its own send time, ``Transmit.t_ns + j·step_ns``), which
serialises at the host link rate (frame = UDP payload + ``wire_overhead_bytes``). A NIC backlog of
``nic_queue_bytes`` or more (a PFC pause, or simply a full line) stops the driver from pulling data —
control packets still go — until the NIC port drains below it; then the endpoint is woken. The next
wake is ``next_timer_ns`` (without data sends while the NIC is backed up); superseded wakes are
skipped lazily.

PFC: an XOFF from a switch port pauses every port whose link ends at that switch (its upstream
neighbours, NICs included) until the matching XON; a port paused by several XOFFs resumes after the last.

Queue depths are sampled on a grid of ``sample_interval_ns`` before each event is processed (the values
hold since the previous event, so the samples are exact); across idle gaps a single sample stands for the
whole gap. The run stops when every endpoint is done (``complete``), when no event is left although some
are not (``deadlock``), at ``time_limit_ns`` of virtual time, after ``wall_timeout_s`` of real time, or
on Ctrl-C (``interrupted``: the ``KeyboardInterrupt`` is caught); records are returned in every case
(after an interrupt the event in progress may be half applied, e.g. a counter of the packet being
received not yet bumped).
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import itertools
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from emulator.drivers.contract import (
    STOPPED_TEXT,
    DriverResult,
    Progress,
)
from emulator.drivers.sim_report import SimReport
from emulator.drivers.sim_types import SIM_SLOTS, SimConfig
from emulator.endpoint.config import EndpointConfig, virtual_addresses
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.events import OpEventKind, Transmit
from emulator.endpoint.qpn import receiver_qpn, sender_qpn
from emulator.endpoint.recorder import Recorder
from emulator.endpoint.visit import SHORT_FIRST, SHORT_LAST_BYTES, header_only_packets
from emulator.errors import ConfigError
from emulator.fabric.port import EgressPort, PortConfig
from emulator.fabric.topology import Topology, build_topology, link_down_intervals
from emulator.schedule.model import OP_RECV, Schedule
from emulator.wire.marking import udp_source_port

__all__ = ["SimConfig", "SimDriver", "run_sim"]

_DEPART, _ARRIVE, _WAKE, _INJECT = 0, 1, 2, 3
#: every rank is done: pushed at (now, -1), so it is the next event popped (``served``)
_STOP = 4
#: a NIC port's buffer (never reached: the driver stops pulling data at ``nic_queue_bytes``); below 2**30 so that
#: its compares take the interpreter's one-digit int path
_NIC_BUFFER_BYTES = (1 << 30) - 1
_new = object.__new__
_EV_STARTED = int(OpEventKind.OP_STARTED)
_SHORT_MAX = SHORT_FIRST.size  # the longest header-only packet (visit); a full FIRST or MIDDLE is longer
#: the endpoint's properties read per packet, as plain functions (a property's getter costs the interpreter a
#: re-entry per read; a Python function called from Python does not)
_ep_done = RankEndpoint.done.fget
#: container allocations between two collections of the cyclic GC's youngest generation during a run
_GC_GEN0 = 10_000


@contextlib.contextmanager
def _fewer_collections(gen0: int = _GC_GEN0):
    """Python's cyclic GC collects its youngest generation every ``gen0`` container allocations (Python's
    default: 700) until the block ends, then its thresholds are restored. A run allocates packets, heap entries
    and events per hop that reference counts free young, and queue pairs per message that live on: frequent
    collections would scan the survivors again and again (a few per cent of a short-message All-to-All)."""
    old = gc.get_threshold()
    gc.set_threshold(max(gen0, old[0]), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


class _Pkt:
    """A datagram in flight through the simulated fabric (internal, mutable: ECN changes on the way).

    ``route[i]`` is the egress port switch ``n_ranks + i`` sends it out of (-2: not looked up yet), shared
    by every packet of the same (source rank, destination rank, destination QP). Made with ``object.__new__``
    and its slots set by ``_Sim.inject`` (no ``__init__`` frame per packet)."""

    __slots__ = ("size_bytes", "ect", "priority", "data", "src", "dst", "sport", "ecn", "route")


class _Sim(SimReport):
    __slots__ = SIM_SLOTS
    def __init__(self, schedule: Schedule, cfg: SimConfig, ecfg: EndpointConfig, seed: int) -> None:
        n = schedule.world_size
        self.n = n
        self.cfg = cfg
        self.topo: Topology = build_topology(cfg.topology, n, cfg.port_rate_bps, cfg.latency_ns)
        self.mark_rng = random.Random(seed)
        self.loss_rng = random.Random(seed * 7919 + 1)
        self.ports: list[EgressPort] = []
        for spec in self.topo.ports:
            if spec.kind == "host":
                pc = PortConfig(rate_bps=spec.rate_bps, buffer_bytes=_NIC_BUFFER_BYTES, latency_ns=spec.latency_ns)
            else:
                pc = PortConfig(rate_bps=spec.rate_bps, buffer_bytes=cfg.buffer_bytes, red=cfg.red, pfc=cfg.pfc,
                                latency_ns=spec.latency_ns)  # fmt: skip
            self.ports.append(EgressPort(pc, self.mark_rng, spec.port_id))
        self.peer = [s.peer for s in self.topo.ports]
        self.lat = [s.latency_ns for s in self.topo.ports]
        self.pfc_ports = frozenset(s.port_id for s in self.topo.ports if s.kind != "host") if cfg.pfc else frozenset()
        self.pause_cnt = [0] * len(self.ports)
        self.loss_cnt = [0] * len(self.ports)
        self.down = link_down_intervals(self.topo, cfg.link_down)
        #: each rank's recorder, fed the endpoint's events after every receive or wake (``service``)
        self.recorders = [Recorder.for_rank(schedule, r, ecfg) for r in range(n)]
        self.eps = [RankEndpoint(r, schedule, ecfg, rec) for r, rec in enumerate(self.recorders)]
        #: the bytes a header-only FIRST or MIDDLE packet stands for beyond its own (``visit.header_only_packets``; a
        #: header-only LAST carries its full length)
        self.short_pad = header_only_packets(self.eps)
        #: packet trains (``SimConfig.train_ns``): per rank, (send time, packet) not yet at its NIC port
        self.pending: list[deque[tuple[int, _Pkt]]] = [deque() for _ in range(n)]
        self.heap: list[tuple] = []
        #: ARRIVE events in (time, seq) order beside the heap: every link has the same latency, so they are made
        #: in that order (``run``; in the heap when latencies differ)
        self.arrivals: deque[tuple] = deque()
        #: the heap's tie-break: 1, 2, 3, ... in push order
        self.next_seq = itertools.count(1).__next__
        self.wake_t: list[int | None] = [None] * n
        self.blocked = [False] * n
        self.done = [False] * n
        self.n_done = 0
        self.sport_cache: dict[int, int] = {}
        #: per rank: destination QPN × ranks + destination rank -> (UDP source port, shared route list)
        self.flow_cache: list[dict[int, tuple[int, list[int]]]] = [{} for _ in range(n)]
        self.prio = dict(cfg.dscp_priorities)
        #: IP TOS byte -> (priority, ECN, ECT) of a transmit
        self.tos_info: dict[int, tuple[int, int, bool]] = {}
        self.max_batches = cfg.max_batches_per_poll
        self.over = cfg.wire_overhead_bytes
        self.n_switches = self.topo.n_switches
        self.nic_limit = cfg.nic_queue_bytes
        self.events = self.hops = 0
        self.samples_t: list[int] = []
        self.samples_q: list[list[int]] = [[] for _ in self.ports]
        self.sample_every = cfg.sample_interval_ns
        self.next_sample = 0
        #: skip servicing a rank after a quiet data packet (``run``); off only to test that it changes nothing
        self.skip_quiet = True
        #: a wake whose sender visit sends one packet takes ``RankEndpoint.visit_one``; off only to test that it
        #: changes nothing
        self.one_visits = True
        self.bind()
        ptr = schedule.rank_op_ptr
        self.recv_ops = [np.flatnonzero(schedule.op_kind[int(ptr[r]):int(ptr[r + 1])] == OP_RECV) for r in range(n)]

    # -- helpers ------------------------------------------------------------------------------------
    def bind(self) -> None:
        """The ports' and endpoints' methods called per packet, as their classes' functions: on an instance of more
        than 29 attributes (its own dict; CPython 3.11) a method call takes the generic lookup, a probe of that dict
        cold at 64 ranks. Again when a run starts: a method replaced on the class before then is the one called."""
        self.offer, self.depart, ep = EgressPort.offer, EgressPort.depart, RankEndpoint
        self.receive, self.visit_one, self.handle_timer = ep.receive, ep.visit_one, ep.handle_timer
        self.poll_transmit, self.next_timer_ns = ep.poll_transmit, ep.next_timer_ns

    @property
    def packets(self) -> int:
        """Datagrams put on NIC links so far: those each NIC port took (or dropped) and train packets waiting."""
        return sum(port.enqueued_packets + port.dropped_packets for port in self.ports[: self.n]) + sum(
            map(len, self.pending))

    def push(self, t: int, kind: int, a: int, b: object = None) -> None:
        heapq.heappush(self.heap, (t, self.next_seq(), kind, a, b))

    def _sport(self, dqpn: int) -> int:
        q = (dqpn - 2) >> 1
        sp = self.sport_cache.get(q)
        if sp is None:
            sp = self.sport_cache[q] = udp_source_port(sender_qpn(q), receiver_qpn(q))
        return sp

    def inject(self, r: int, tx: Transmit, t: int) -> None:
        """Cut ``tx`` into its datagrams and queue them at rank ``r``'s NIC port (never a PFC port)."""
        dst, data, seg, tos, t_i, step = tx
        info = self.tos_info.get(tos)
        if info is None:
            ecn = tos & 3
            info = self.tos_info[tos] = (self.prio.get(tos >> 2, self.cfg.default_priority), ecn, ecn != 0)
        prio, ecn, ect = info
        over = self.over
        flows = self.flow_cache[r]
        port = self.ports[r]
        if not seg or seg >= len(data):  # one datagram (the sim's per-packet visit, every control packet)
            dqpn = (data[5] << 16) | (data[6] << 8) | data[7] if len(data) >= 8 else 0
            key = dqpn * self.n + dst
            flow = flows.get(key)
            if flow is None:
                flow = flows[key] = (self._sport(dqpn), [-2] * self.n_switches)
            pkt = _new(_Pkt)  # no __init__ frame: the slots set here
            size = len(data)
            if size <= _SHORT_MAX:  # a header-only FIRST, MIDDLE or LAST (or a control packet): as the full one
                if data[0] <= 0x07:
                    size += self.short_pad
                elif size == SHORT_LAST_BYTES:  # (no other packet is 22 bytes long) its full length after the stamp
                    size = (data[20] << 8) | data[21]
            pkt.size_bytes = size + over
            pkt.ect = ect
            pkt.priority = prio
            pkt.data = data
            pkt.src = r
            pkt.dst = dst
            pkt.sport, pkt.route = flow
            pkt.ecn = ecn
            if t_i > t:  # a train's packet waits for its send time
                pending = self.pending[r]
                if not pending:
                    heapq.heappush(self.heap, (t_i, self.next_seq(), _INJECT, r, None))
                pending.append((t_i, pkt))
                return
            d = self.offer(port, pkt, t)
            if d:
                heapq.heappush(self.heap, (d, self.next_seq(), _DEPART, r, None))
            return
        pieces = tx.datagrams()
        heap = self.heap
        pending = self.pending[r]
        for piece in pieces:
            dqpn = (piece[5] << 16) | (piece[6] << 8) | piece[7] if len(piece) >= 8 else 0
            flow = flows.get(dqpn * self.n + dst)
            if flow is None:
                flow = flows[dqpn * self.n + dst] = (self._sport(dqpn), [-2] * self.n_switches)
            pkt = _new(_Pkt)
            pkt.size_bytes = len(piece) + over
            pkt.ect = ect
            pkt.priority = prio
            pkt.data = piece
            pkt.src = r
            pkt.dst = dst
            pkt.sport, pkt.route = flow
            pkt.ecn = ecn
            if t_i > t:  # a train's later packet waits for its send time (a rank's send times never go back)
                if not pending:
                    heapq.heappush(heap, (t_i, self.next_seq(), _INJECT, r, None))
                pending.append((t_i, pkt))
            else:
                d = self.offer(port, pkt, t)
                if d:
                    heapq.heappush(heap, (d, self.next_seq(), _DEPART, r, None))
            t_i += step

    def release(self, r: int, t: int) -> None:
        """Queue rank ``r``'s train packets whose send time has come at its NIC port."""
        pending = self.pending[r]
        port = self.ports[r]
        before = port.departure_ns
        while pending and pending[0][0] <= t:
            port.enqueue(pending.popleft()[1], t)
        after = port.departure_ns
        if after is not None and after != before:
            heapq.heappush(self.heap, (after, self.next_seq(), _DEPART, r, None))
        if pending:
            heapq.heappush(self.heap, (pending[0][0], self.next_seq(), _INJECT, r, None))
        if not self.blocked[r] and port.queue_bytes >= self.nic_limit:
            self.blocked[r] = True

    def service(self, r: int, t: int) -> None:
        """Pull the endpoint's transmits after a receive or a wake, record its events, set its next wake."""
        self.served(r, t, self.poll_transmit(self.eps[r], t, 0 if self.blocked[r] else self.max_batches))

    def served(self, r: int, t: int, txs: list[Transmit], top: bool = False) -> None:
        """Queue the transmits rank ``r``'s endpoint handed out at ``t``, record its events, set its next wake.

        ``top``: the rank's WAKE event being handled is still the event heap's top (``run`` takes it off only here):
        the next wake takes its place (one sift), or it is popped. Nothing pushed here goes above it (a departure
        or a train's send time is later than ``t``) but the STOP, which takes its place instead."""
        ep = self.eps[r]
        blocked = self.blocked[r]
        if txs:
            for tx in txs:
                self.inject(r, tx, t)
            # only an inject grows the NIC queue: below the limit at the last service unless blocked
            if not blocked and self.ports[r].queue_bytes >= self.nic_limit:
                blocked = self.blocked[r] = True
        events = ep.pending_events
        if events:
            self.recorders[r].consume(events)
            events.clear()
            # an op's completion appends its event, so a rank becomes done only in a service with events (the
            # STOP event takes no tie-break number: pushing it before the wake changes no order)
            if not self.done[r] and _ep_done(ep):
                self.done[r] = True
                self.n_done += 1
                if self.n_done == self.n:
                    if top:
                        heapq.heapreplace(self.heap, (t, -1, _STOP, r, None))
                        top = False
                    else:
                        heapq.heappush(self.heap, (t, -1, _STOP, r, None))
        nt = self.next_timer_ns(ep, not blocked)  # positional: a call with keywords is not specialised
        if nt is not None:
            if nt < t:
                nt = t
            if nt != self.wake_t[r]:
                self.wake_t[r] = nt
                if top:
                    heapq.heapreplace(self.heap, (nt, self.next_seq(), _WAKE, r, None))
                    return
                heapq.heappush(self.heap, (nt, self.next_seq(), _WAKE, r, None))
        else:
            self.wake_t[r] = None
        if top:
            heapq.heappop(self.heap)

    def _pfc(self, port_id: int, t: int) -> None:
        for ev in self.ports[port_id].drain_events():
            upstream = self.topo.ingress_ports(self.topo.ports[port_id].owner)
            for u in upstream:
                if ev.pause:
                    self.pause_cnt[u] += 1
                    if self.pause_cnt[u] == 1:
                        self.ports[u].pause(t)
                else:
                    self.pause_cnt[u] -= 1
                    if self.pause_cnt[u] == 0:
                        before = self.ports[u].next_departure_ns()
                        self.ports[u].resume(t)
                        after = self.ports[u].next_departure_ns()
                        if after is not None and after != before:
                            self.push(max(after, t), _DEPART, u)

    # -- the loop -----------------------------------------------------------------------------------
    def run(self, time_limit_ns: int, wall_timeout_s: float | None,
            progress: Callable[[dict], None] | None = None, progress_interval_s: float = 0.25) -> tuple[str, int]:
        wall0 = time.perf_counter()
        deadline = wall0 + wall_timeout_s if wall_timeout_s is not None else None
        next_report = wall0 + progress_interval_s
        now = 0
        reason = "deadlock"
        stop = None
        self.bind()
        try:
            for ep in self.eps:
                ep.start(0)
            for r in range(self.n):
                self.service(r, 0)
            heap = self.heap
            fifo = len(set(self.lat)) == 1
            ports, eps, lat, peer = self.ports, self.eps, self.lat, self.peer
            blocked, wake_t = self.blocked, self.wake_t
            pfc_ports = self.pfc_ports
            pfc = bool(pfc_ports)
            service, poll_transmit = self.service, self.poll_transmit  # (service's body, inline below)
            served = self.served
            max_batches = self.max_batches
            egress = self.topo.egress
            next_seq = self.next_seq
            n_ranks = self.n
            loss = self.cfg.loss
            loss_random = self.loss_rng.random
            down = self.down
            nic_limit = self.cfg.nic_queue_bytes
            heappop, heappush, heapreplace = heapq.heappop, heapq.heappush, heapq.heapreplace
            offer, depart, receive, visit_one, handle_timer = self.offer, self.depart, self.receive, self.visit_one, \
                self.handle_timer
            timed = deadline is not None or progress is not None
            skip_quiet = self.skip_quiet
            one_visits = self.one_visits
            limit1 = time_limit_ns + 1
            next_check = min(self.next_sample, limit1)
            arrivals = self.arrivals
            popleft = arrivals.popleft
            lat0 = lat[0] if lat else 0
            #: the wall clock and progress (if timed) are looked at on the first event whose tie-break number reaches this
            seq_check = 2048

            def checkpoint(t: int, seq: int) -> str | None:
                """At the event (t, seq): the time limit, the sample grid, and at the first tie-break number of every
                2048 the wall clock and progress; why the run stops there, if it does."""
                nonlocal next_check, next_report, now, seq_check
                if t >= next_check:
                    if t >= limit1:
                        return "time_limit"
                    self.sample(t)
                    next_check = min(self.next_sample, limit1)
                if seq >= seq_check:
                    seq_check = (seq | 2047) + 1
                    if timed:
                        wall = time.perf_counter()
                        if deadline is not None and wall > deadline:
                            now = t
                            return "wall_timeout"
                        if progress is not None and wall >= next_report:
                            next_report = wall + progress_interval_s
                            progress(self.progress_info(t, wall - wall0))
                return None

            while True:
                if arrivals and (not heap or arrivals[0] < heap[0]):  # ARRIVE: the FIFO's head is next
                    t, seq, a, b = popleft()
                    if (t >= next_check or seq >= seq_check) and (stop := checkpoint(t, seq)):
                        break
                    now = t
                    if down and a in down and any(lo <= t - lat[a] < hi for lo, hi in down[a]):
                        self.loss_cnt[a] += 1  # the link was down when the packet left the port
                        continue
                    node = peer[a]
                    if node >= n_ranks:
                        e = b.route[node - n_ranks]
                        if e == -2:
                            e = b.route[node - n_ranks] = egress(node, b.src, b.dst, b.sport)
                        d = offer(ports[e], b, t)
                        if d:
                            heappush(heap, (d, next_seq(), _DEPART, e, None))
                        if pfc and e in pfc_ports:
                            self._pfc(e, t)
                    else:
                        if loss and loss_random() < loss:
                            self.loss_cnt[a] += 1
                            continue
                        ep = eps[node]
                        data = b.data
                        # (receive returns has_output after it)
                        if not receive(ep, data, b.ecn, t):
                            if skip_quiet and b.ecn != 3 and 6 <= data[0] <= 11:
                                w = wake_t[node]
                                if w is None or w > t:
                                    continue  # a quiet data packet: servicing would change nothing
                        elif skip_quiet and b.ecn != 3 and len(evs := ep.pending_events) == 1 and \
                                evs[0][0] == _EV_STARTED and not ep._ctrl_out and not ep._rx.pending:
                            w = wake_t[node]  # a message's first packet, quiet but for its event: recorded alone
                            if w is None or w > t:
                                self.recorders[node].consume(evs)
                                evs.clear()
                                continue
                        served(node, t, poll_transmit(ep, t, 0 if blocked[node] else max_batches))
                    continue
                if not heap:
                    break
                t, seq, kind, a, b = heap[0]  # taken off below: a port's next departure replaces it in one sift
                if (t >= next_check or seq >= seq_check) and (stop := checkpoint(t, seq)):
                    heappop(heap)
                    break
                now = t
                if kind == _DEPART:
                    port = ports[a]
                    if port.departure_ns != t:
                        heappop(heap)
                        continue
                    pkt = depart(port, t)  # a CE mark sets its ecn
                    nd = port.departure_ns
                    if nd is not None:
                        heapreplace(heap, (nd, next_seq(), _DEPART, a, None))
                    else:
                        heappop(heap)
                    if fifo:
                        arrivals.append((t + lat0, next_seq(), a, pkt))
                    else:
                        heappush(heap, (t + lat[a], next_seq(), _ARRIVE, a, pkt))
                    if a < n_ranks:
                        if blocked[a] and port.queue_bytes < nic_limit:
                            blocked[a] = False
                            service(a, t)
                    elif pfc and a in pfc_ports:
                        self._pfc(a, t)
                    continue
                if kind == _WAKE:  # taken off by served (top): the rank's next wake replaces it in one sift
                    if wake_t[a] != t:
                        heappop(heap)
                        continue
                    wake_t[a] = None
                    ep = eps[a]
                    if one_visits and not blocked[a]:  # the wake of a one-packet visit (RankEndpoint.visit_one)
                        txs = visit_one(ep, t, max_batches)
                        if txs is not None:
                            served(a, t, txs, True)
                            continue
                    handle_timer(ep, t)
                    served(a, t, poll_transmit(ep, t, 0 if blocked[a] else max_batches), True)
                    continue
                heappop(heap)
                if kind == _ARRIVE:  # (latencies differ: not in the FIFO) the FIFO's front, handled there next
                    arrivals.appendleft((t, seq, a, b))
                elif kind == _INJECT:
                    self.release(a, t)
                else:  # _STOP (pushed with no tie-break number: not counted below)
                    reason = "complete"
                    break
            if stop:
                reason = stop
        except KeyboardInterrupt:  # Ctrl-C: stop here and return what was measured
            reason = "interrupted"
        unprocessed = reason == "time_limit"  # the event popped at the limit was left as it was
        # every event pushed (the tie-break counts them) and popped was processed, but the one the loop stopped at
        self.events = self.next_seq() - 1 - len(self.heap) - len(self.arrivals) - unprocessed
        self.hops = sum(port.dequeued_packets for port in self.ports)  # a departure is a hop
        for ep, rec in zip(self.eps, self.recorders, strict=True):  # the events of a step cut short too
            rec.consume(ep.events())
        if self.n_done == self.n:
            reason = "complete"
        self.wall_s = time.perf_counter() - wall0
        if progress is not None and reason != "interrupted":
            progress(self.progress_info(now, self.wall_s))
        return reason, now


def run_sim(schedule: Schedule, sim_config: SimConfig, endpoint_config: EndpointConfig, *, seed: int,
            time_limit_ns: int = 10_000_000_000, wall_timeout_s: float | None = None,
            progress: Progress = None, progress_interval_s: float = 0.25) -> DriverResult:  # fmt: skip
    """Run every rank of ``schedule`` on the simulated fabric until done, deadlock or a limit.

    Deterministic for a given ``seed`` (unless ``wall_timeout_s`` or Ctrl-C cuts the run short). Returns
    the records of every rank (partial ones too), per-port fabric counters and, in ``health``, why the
    run stopped (``stop_reason``: complete, deadlock, time_limit, wall_timeout or interrupted), its
    virtual ``end_ns`` and speed (``events``, ``packets``, ``hops``, ``wall_s``, ``packets_per_wall_s``).
    ``progress`` is called about every ``progress_interval_s`` of wall time with ``elapsed_s``,
    ``virtual_ns``, ``bytes_delivered`` and ``packets_delivered`` (payload accepted by the receivers),
    ``flows_done`` (RECV ops ended), ``ops_done``, ``ranks_done`` and ``ranks``, and once more when the
    run stops (unless interrupted); it does not change the run.
    """
    if endpoint_config.wire_overhead_bytes != sim_config.wire_overhead_bytes:
        raise ConfigError(f"sim: endpoint wire_overhead_bytes {endpoint_config.wire_overhead_bytes} differs from "
                          f"the fabric's {sim_config.wire_overhead_bytes}")  # fmt: skip
    if not isinstance(time_limit_ns, int) or time_limit_ns <= 0:
        raise ConfigError(f"sim: time limit must be a positive integer of ns, got {time_limit_ns!r}")
    if endpoint_config.icrc == "compute" and not endpoint_config.rank_addresses:  # no sockets: virtual hosts
        endpoint_config = replace(endpoint_config, rank_addresses=virtual_addresses(schedule.world_size))
    if sim_config.train_ns:  # packet trains (SimConfig.train_ns): whole batches, each packet at its stamp
        endpoint_config = replace(endpoint_config, pace_full_batches=True, stamp_spread_ns=sim_config.train_ns)
    with _fewer_collections():
        sim = _Sim(schedule, sim_config, endpoint_config, seed)
        reason, now = sim.run(time_limit_ns, wall_timeout_s, progress, progress_interval_s)
    end_ns = now
    if reason == "complete":
        end_ns = max((int(rec.records.end_ns.max()) if ep.n_ops else 0) for ep, rec in zip(sim.eps, sim.recorders, strict=True)) if sim.eps else 0
    records = {r: rec.records for r, rec in enumerate(sim.recorders)}
    incomplete = [r for r, ep in enumerate(sim.eps) if not ep.done]
    wall_s = sim.wall_s
    health = {"world_size": sim.n, "stop_reason": reason, "end_ns": end_ns, "events": sim.events,
              "packets": sim.packets, "hops": sim.hops, "wall_s": wall_s,
              "packets_per_wall_s": sim.packets / wall_s if wall_s > 0 else 0.0, "warnings": []}
    errors = []
    if incomplete:
        left = ", ".join(map(str, incomplete[:16])) + (" ..." if len(incomplete) > 16 else "")
        errors.append(f"sim stopped at {end_ns} ns: {STOPPED_TEXT.get(reason, reason)}; ranks not done: {left}")
    return DriverResult(driver="sim", records=records, fabric=sim.fabric(max(end_ns, now)), health=health,
                        complete=not incomplete, errors=errors, interrupted=reason == "interrupted",
                        wall_ns=int(wall_s * 1e9))


@dataclass(frozen=True, slots=True)
class SimDriver:
    """The sim as a :class:`~emulator.drivers.contract.Driver`: :func:`run_sim` with these arguments."""

    config: SimConfig
    endpoint: EndpointConfig
    seed: int
    time_limit_ns: int = 10_000_000_000
    wall_timeout_s: float | None = None
    name: str = "sim"

    def run(self, schedule: Schedule, progress: Progress = None) -> DriverResult:
        return run_sim(schedule, self.config, self.endpoint, seed=self.seed, time_limit_ns=self.time_limit_ns,
                       wall_timeout_s=self.wall_timeout_s, progress=progress)
