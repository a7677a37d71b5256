"""The rank endpoint: one rank's schedule executed as RoCEv2 traffic, sans-IO (no sockets, clock or global RNG).

Theory of operation
-------------------
A driver owns time and I/O; the endpoint takes inputs and hands out typed actions
(:mod:`~emulator.endpoint.events`). Inputs: ``start(now, t0)`` once (``t0``, default ``now``, is the run's
time origin, common to every rank of the run: every event time is relative to it), ``receive(datagram,
ecn, now)`` for every arriving datagram or GRO batch, ``timer(now)`` when a timer is due. Actions:
:class:`Transmit` datagrams to put on the wire (``datagrams_to_send``/``poll_transmit``), a
:class:`TimerRequest` for the next call (``timer_request``; ``next_timer_ns`` is the same as a bare int),
and :class:`FlowEvent` milestones (op ready/started/done, rate changes, CNP/NAK/retransmit/timeout) from
``events()``, which the driver feeds to the rank's :class:`~emulator.endpoint.recorder.Recorder`: the
recorder, not the endpoint, fills the :class:`~emulator.endpoint.records.RankRecords` (per-packet counts
go straight into its records, not through events). ``poll(now)`` does all of it in one call and returns
every action. ``done`` turns True when every op of the rank has completed; ``records`` is the recorder's,
also when the run stops early. An endpoint built without a recorder makes its own and feeds it at the end
of every call.

**Operations** (``Schedule`` semantics, per local op)::

    blocked ──parents complete──▶ (wait not_before) ──▶ ready ──▶ running ──▶ complete
                                                          │                    │
                                         ready_ns = max(parents' end, t0 + not_before_ns)
                                                                               └─ children's parent
                                                                                  counts drop by one

* A parent counter per op (CSR children lists built once with numpy) makes release O(children).
* Ready time is the *scheduled* start: a DELAY completes ``duration_ns`` after it (even when the driver
  calls ``handle_timer`` late), so children's ready times do not inherit driver lateness; a SEND's start
  is when its first packet is handed to the driver — ``start − ready`` is the generator lag, counted as
  ``late_ops`` beyond ``late_threshold_ns`` and as ``lag_max_ns``.
* SEND: running from ready (the flow is posted to its queue pair, :mod:`~emulator.endpoint.sender`;
  with ``qps_per_peer`` = Q > 1 its parts to Q wire queue pairs, :mod:`~emulator.endpoint.qpn`);
  complete when its last byte (of every part) is acknowledged. RECV: complete at the later of ready and the moment
  every byte of its flow is held (:mod:`~emulator.endpoint.receiver`); data may arrive before the RECV
  is ready (RDMA WRITE needs no posted receive). DELAY: complete at ready + duration.
* ``not_before_ns`` (open loop) is relative to t0; a timer releases the op at exactly that time.

**Wire, in brief** (details in the two halves' docstrings). A flow is one RC RDMA WRITE message on its
queue pair (several of at most 2^31 − 1 bytes when longer, ``EndpointConfig.message_bytes``):
FIRST/MIDDLE…/LAST or ONLY, RETH virtual address = flow id, PSN continuing across the QP's messages
modulo 2^24. *Sender* (:mod:`~emulator.endpoint.sender`), per QP: idle → sending →
waiting-ack → idle, with retransmitting (go-back-N from the NAKed PSN or, after a retransmit timeout,
from the oldest unacknowledged one). Each QP is paced by a token bucket at its rate controller's rate
(DCQCN paper/firmware, fixed or none; CNPs cut it, the controller's timers raise it) and the whole rank
by a token bucket at the NIC line rate; a visit builds one GSO batch. *Receiver*
(:mod:`~emulator.endpoint.receiver`), per QP: expected PSN; in order → accept, ahead → one NAK per gap,
behind → duplicate, re-ACK; coalesced cumulative ACKs (one per QP per ``receive`` call, or, with
``EndpointConfig.defer_acks`` set by a socket driver that drains several GRO batches per wake-up, one per QP per
``poll_transmit``, carrying the latest ePSN). *NP*: a CE-marked data packet yields a CNP to the
sender-side QPN, at most one per ``min_time_between_cnps`` per QP. ACK/NAK/CNP leave ahead of data in
``poll_transmit``.

**Timers** live in one heap of ``(t_ns, seq, kind, obj)``: DELAY ends, not-before releases, rate
controller deadlines, retransmit timeouts and NP deadlines; superseded entries are skipped lazily by
sequence number, so every event costs O(log n). ``next_timer_ns`` is the minimum of that heap, of the
send heap (the earliest pacer-permitted send, see sender), and "now" when control packets wait.

**Per-rank cost**: construction is O(ops + edges) with numpy; every later step is per batch or per
packet header with O(log n) heap work, so schedules of 10^5–10^6 ops run.
"""

from __future__ import annotations

import dataclasses
import heapq
import struct
from collections import deque
from collections.abc import Sequence

import numpy as np

from emulator.endpoint import wake
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.events import FlowEvent, OpEventKind, TimerRequest, Transmit
from emulator.endpoint.feedback import T_CTRL, T_RTO
from emulator.endpoint.qpn import part_sizes
from emulator.endpoint.receiver import T_NP, ReceiverSide
from emulator.endpoint.recorder import Recorder
from emulator.endpoint.records import RankRecords
from emulator.endpoint.sender import SenderSide
from emulator.errors import ConfigError, ScheduleError
from emulator.schedule.model import OP_DELAY, OP_RECV, OP_SEND, Schedule
from emulator.wire import WireError, parse_aeth
from emulator.wire.packets import unpack_bth
from emulator.wire.stamp import read_cnp_stamp

__all__ = ["EndpointConfig", "FlowEvent", "RankEndpoint", "TimerRequest", "Transmit"]

_ev = tuple.__new__  # _ev(FlowEvent, its seven fields): an event without the named tuple's __new__ frame
T_DELAY = 0
T_NOT_BEFORE = 1
_S_BLOCKED, _S_READY, _S_DONE = 0, 1, 2
_EV_ORIGIN, _EV_READY, _EV_STARTED, _EV_DONE = (int(k) for k in list(OpEventKind)[:4])


class RankEndpoint:
    """Executes the ops of one rank (see the module docstring)."""

    #: slotted as the halves (half.RankHalf), with a dict too
    __slots__ = ("rank", "config", "n_ops", "op_base", "_kind", "_own_recorder", "recorder", "_counts",
                 "_events", "pending_events", "_flow", "_dur", "_nb", "_child_idx", "_child_ptr",
                 "_pending", "_state", "_held", "_n_done", "_send_info", "_timers", "_seq", "_ctrl_out",
                 "_now", "t0_ns", "started", "defer_acks", "_qps_per_peer", "_parts_left", "_lag", "_tx",
                 "_rx", "_one_ok", "__dict__")

    def __init__(self, rank: int, schedule: Schedule, config: EndpointConfig,
                 recorder: Recorder | None = None) -> None:
        """``recorder``: where the driver feeds this rank's events (``recorder.consume(ep.events())``; its
        records also take the per-packet counters). Without one the endpoint makes its own and feeds it
        at the end of every call (a standalone endpoint: tests, benches)."""
        if not 0 <= rank < schedule.world_size:
            raise ScheduleError(f"rank {rank} is outside the schedule's world of {schedule.world_size}")
        if config.icrc == "compute":
            for name in ("rank_addresses", "dest_endpoints"):
                n = len(getattr(config, name))
                if n < schedule.world_size and (n or name == "rank_addresses"):
                    raise ConfigError(f"endpoint config: icrc 'compute' needs an address per rank: '{name}' lists "
                                      f"{n} for {schedule.world_size} ranks")
        self.rank = rank
        cap = (schedule.meta.get("nic_rate_bps") or {}).get(str(rank))  # an injected slow NIC (schedule.perturb)
        if cap is not None and float(cap) < config.line_rate_bps:
            config = dataclasses.replace(config, line_rate_bps=float(cap))
        self.config = config
        lo, hi = int(schedule.rank_op_ptr[rank]), int(schedule.rank_op_ptr[rank + 1])
        n = hi - lo
        self.n_ops = n
        self.op_base = lo
        kinds = schedule.op_kind[lo:hi]
        self._kind: list[int] = kinds.tolist()
        self._own_recorder = recorder is None
        if recorder is None:
            recorder = Recorder.for_rank(schedule, rank, config)
        elif recorder.records.n_ops != n:
            raise ValueError(f"rank {rank}: the recorder has {recorder.records.n_ops} ops, the rank {n}")
        self.recorder = recorder
        self._counts = recorder.records  # per-packet columns and counters (not events)
        #: events not yet handed out (``events()``)
        self._events: list[FlowEvent] = []
        #: the same list: a driver feeding a recorder may consume it and clear it in place (``events()``
        #: without the copy)
        self.pending_events = self._events
        self._flow: list[int] = schedule.op_flow[lo:hi].tolist()
        self._dur: list[int] = schedule.op_duration_ns[lo:hi].tolist()
        self._nb: list[int] = schedule.op_not_before_ns[lo:hi].tolist()
        # dependencies -> children CSR (local ids)
        dptr = schedule.dep_ptr[lo : hi + 1].astype(np.int64)
        counts = np.diff(dptr)
        parents = schedule.dep_idx[int(dptr[0]) : int(dptr[-1])].astype(np.int64) - lo
        if parents.size and (parents.min() < 0 or parents.max() >= n):
            raise ScheduleError(f"rank {rank}: an op depends on an op of another rank")
        owners = np.repeat(np.arange(n, dtype=np.int64), counts)
        order = np.argsort(parents, kind="stable")
        self._child_idx: list[int] = owners[order].tolist()
        self._child_ptr: list[int] = np.concatenate(([0], np.cumsum(np.bincount(parents, minlength=n)))).tolist()
        self._pending: list[int] = counts.tolist()
        self._state = [_S_BLOCKED] * n
        self._held = bytearray(n)  # RECV: every byte of the flow is here
        self._n_done = 0
        # flows this rank sends / receives
        self._send_info: dict[int, tuple[int, int, int, int]] = {}
        recv_flows: dict[int, tuple[int, int, int, int]] = {}
        local = np.arange(n)
        for kind_code, sel in ((OP_SEND, kinds == OP_SEND), (OP_RECV, kinds == OP_RECV)):
            ops = local[sel]
            fl = schedule.op_flow[lo:hi][sel].astype(np.int64)
            if fl.size and (fl.min() < 0 or fl.max() >= schedule.n_flows):
                raise ScheduleError(f"rank {rank}: a SEND/RECV op names a flow outside the flow table")
            qp = schedule.flow_qp[fl].tolist()
            size = schedule.flow_size_bytes[fl].tolist()
            if kind_code == OP_SEND:
                peer = schedule.flow_dst[fl].tolist()
                for o, f, q, p, s in zip(ops.tolist(), fl.tolist(), qp, peer, size, strict=True):
                    self._send_info[o] = (f, q, p, s)
            else:
                peer = schedule.flow_src[fl].tolist()
                for o, f, q, p, s in zip(ops.tolist(), fl.tolist(), qp, peer, size, strict=True):
                    recv_flows[f] = (o, q, p, s)
        self._timers: list[tuple[int, int, int, object]] = []
        self._seq = 0
        self._ctrl_out: list[Transmit] = []
        self._now = 0
        self.t0_ns = 0
        self.started = False
        #: coalesce ACKs over the receive calls between two poll_transmit calls (module docstring)
        self.defer_acks = config.defer_acks
        #: wire QPs per schedule qp, and per SEND op the parts of its flow not yet acknowledged
        self._qps_per_peer = config.qps_per_peer
        self._parts_left: dict[int, int] = {}
        ev = self._events
        #: with model_time_service: how far the sender's service runs behind the driver's clock (config)
        self._lag = config.service_lag_ns if config.model_time_service else 0
        self._tx = SenderSide(rank, config, self._counts, ev, self.push_timer, self._on_send_acked)
        self._rx = ReceiverSide(rank, config, recv_flows, self._counts, ev, self.push_timer, self.emit,
                                self._held, self._on_flow_received)
        #: the sender's one-packet visit may stand for a wake (``visit_one``)
        self._one_ok = self._tx.one_packet_visits() and not self._lag

    # -- the driver-facing API ----------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._n_done == self.n_ops

    @property
    def ops_completed(self) -> int:
        return self._n_done

    @property
    def has_output(self) -> bool:
        """Control packets, ACKs to coalesce or events wait to be handed out (``poll_transmit``, ``events``)."""
        return bool(self._ctrl_out or self._events or self._rx.pending)

    def start(self, now_ns: int, t0_ns: int | None = None) -> None:
        """Start the rank at ``now_ns``: release every op without parents.

        ``t0_ns`` is the run's time origin (default ``now_ns``): every record is relative to it, ops
        without parents are ready at it and not-before times count from it. A driver whose ranks start
        at different moments (worker processes that wake up at different times after a common "go")
        must pass the common origin: otherwise each rank's records have their own time base, a receive
        can appear to end before its send started, and the late start is hidden instead of showing up
        as generator lag (``start_ns − ready_ns`` of the first SENDs). With ``model_time_service`` the rank
        starts at the origin whatever ``now_ns`` (its sends are served on model time from there).
        """
        if self.started:
            return
        t0 = now_ns if t0_ns is None else t0_ns
        if t0 > now_ns:
            raise ValueError(f"rank {self.rank}: time origin {t0} ns is after the start time {now_ns} ns")
        if self._tx.model_time:  # every rank starts at the origin; a late worker's packets show as switch lag
            now_ns = t0
        self.started = True
        self.t0_ns = t0
        self._tx.t0_ns = self._rx.t0_ns = t0
        self._events.append(FlowEvent(_EV_ORIGIN, t0))
        self._now = now_ns
        pending = self._pending
        work: deque[tuple[int, int]] = deque()
        for i in range(self.n_ops):
            if pending[i] == 0:
                self._release(i, t0, work)
        self._drain(work)
        if self._own_recorder:
            self._record()

    def receive(self, data: bytes | bytearray | memoryview, ecn: int, now_ns: int, segment_size: int = 0) -> bool:
        """One datagram, or a GRO batch of ``segment_size``-byte segments (the last may be shorter); returns
        :attr:`has_output` after it."""
        if now_ns > self._now:
            self._now = now_ns
        if self._timers and self._timers[0][0] <= now_ns:
            self.handle_timer(now_ns)
        ce = ecn & 3 == 3
        if not segment_size or segment_size >= len(data):  # one datagram: _one's data dispatch, inline (a frame
            try:  # fewer per packet on the sim)
                opcode, w1, w2 = unpack_bth(data)
                if opcode <= 0x0B and opcode >= 0x06:
                    # the class's function (emulator.drivers.sim, ``_Sim.bind``): no method lookup
                    ReceiverSide.on_data(self._rx, opcode, w1 & 0xFFFFFF, w2 & 0xFFFFFF, w2 >= 0x80000000, data, ce,
                                         now_ns)
                else:
                    self._control(opcode, w1, w2, data, now_ns)
            except (WireError, IndexError, KeyError, struct.error):
                self._counts.counters["malformed"] += 1
        else:
            mv = memoryview(data)
            pos = self._rx.on_batch(mv, segment_size, ce, now_ns)
            end = len(mv)
            while pos < end:
                self._one(mv[pos : pos + segment_size], ce, now_ns)
                pos += segment_size
        rx = self._rx
        if rx.pending and not self.defer_acks:
            rx.flush_acks()
        if self._own_recorder and self._events:
            self._record()
        return bool(self._ctrl_out or self._events or rx.pending)

    def scan_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int] | None:
        """For a driver's compiled scan of GRO batches (:func:`emulator.endpoint.rx_table.scan_block`): the
        queue pair of each table row, the receiver's queue-pair table (from now on: call before the first
        packet), the RECV ops' packet column, the full MIDDLE row's bytes and ``ack_every_packets``; None when
        the receiver has no batch fast path to scan (``batch_fast_paths`` off, or ``delivery_stamps``: their
        times are per packet)."""
        rx = self._rx
        if not rx.fast or rx.delivery_stamps:
            return None
        table = rx.use_table()
        return rx.table_qps, table, self._counts.packets, rx._row, rx.ack_every

    def scan_tick(self, now_ns: int) -> None:
        """What :meth:`receive` does first, before a compiled scan: the clock, and the timers due by ``now_ns``."""
        if now_ns > self._now:
            self._now = now_ns
        if self._timers and self._timers[0][0] <= now_ns:
            self.handle_timer(now_ns)

    def scan_accepted(self, rows: int, due: Sequence[int]) -> bool:
        """Book what a compiled scan accepted: ``rows`` full-MTU packets (counters) and the queue pairs whose
        ACK it made due (in that order, as :meth:`receive` would have queued them); returns :attr:`has_output`."""
        rx = self._rx
        counters = self._counts.counters
        counters["packets_received"] += rows
        counters["bytes_received"] += rows * rx.mtu
        if len(due):
            rx.pending.extend(map(rx.qps.__getitem__, due))
        if rx.pending and not self.defer_acks:
            rx.flush_acks()
        return bool(self._ctrl_out or self._events or rx.pending)

    def _one(self, pkt: bytes | bytearray | memoryview, ce: bool, now_ns: int) -> None:
        try:
            opcode, w1, w2 = unpack_bth(pkt)
            if opcode <= 0x0B and opcode >= 0x06:
                self._rx.on_data(opcode, w1 & 0xFFFFFF, w2 & 0xFFFFFF, w2 >= 0x80000000, pkt, ce, now_ns)
            else:
                self._control(opcode, w1, w2, pkt, now_ns)
        except (WireError, IndexError, KeyError, struct.error):
            self._counts.counters["malformed"] += 1

    def _control(self, opcode: int, w1: int, w2: int, pkt: bytes | bytearray | memoryview, now_ns: int) -> None:
        """A datagram that is not RDMA WRITE data (``w1``, ``w2``: its BTH words 1 and 2): ACK/NAK, CNP or unknown."""
        if opcode == 0x11:
            syndrome, msn = parse_aeth(pkt)
            if self._rx.delivery_stamps:  # the loopback switch's model delivery time (mod 2^24 ns) in the MSN
                now_ns -= (now_ns - msn) & 0xFFFFFF
            self._tx.on_ack(w1 & 0xFFFFFF, syndrome, w2 & 0xFFFFFF, now_ns)
        elif opcode == 0x81:
            if self._rx.delivery_stamps:  # the loopback switch's model delivery time in its reserved bytes
                now_ns = self._cnp_ns(pkt, now_ns)
            self._tx.on_cnp(w1 & 0xFFFFFF, now_ns)
        else:
            self._counts.counters["unknown_opcode"] += 1

    def _cnp_ns(self, pkt: bytes | bytearray | memoryview, now_ns: int) -> int:
        """When the sender acts on a CNP under ``delivery_stamps``: the model delivery time it carries, or, when
        the sender's service already passed that time (model time service), the service's time: the packets
        served in between went at the old rate, and the cut lasts from when it can act, as long as the
        controller says (``now_ns`` without a stamp, or with a later one). Counted in ``cnps_timed``; with
        ``feedback_lag_bound_ns``, one acted on more than that after its model time in ``cnps_acted_late``,
        and the largest such lag of the rank in ``cnp_lag_max_ns``."""
        t = read_cnp_stamp(pkt)
        if not 0 <= t <= now_ns:
            return now_ns
        self._counts.count("cnps_timed")
        late = self._tx.served_ns - t
        if late <= 0:
            return t
        self._counts.count_lag("cnps_acted_late", "cnp_lag_max_ns", late, self.config.feedback_lag_bound_ns)
        return t + late

    def _post_passed(self, late_ns: int) -> None:
        """A SEND made ready ``late_ns`` after the model-time service had passed its time (its delivery was read
        late): it joins the round robin later than the sim's would (every SEND posted on model time counts in
        ``posts_timed``). Counted in ``posts_passed``, beyond
        ``feedback_lag_bound_ns`` in ``posts_late``, the largest in ``post_lag_max_ns``."""
        self._counts.count("posts_passed")
        self._counts.count_lag("posts_late", "post_lag_max_ns", late_ns, self.config.feedback_lag_bound_ns)

    def handle_timer(self, now_ns: int) -> None:
        """Run every timer due by ``now_ns`` in (time, sequence) order; with ``model_time_service`` the
        rate controllers' and the NP's timers act at their own (model) time, not at the late wake-up's."""
        if now_ns > self._now:
            self._now = now_ns
        timers = self._timers
        if not timers or timers[0][0] > now_ns:  # nothing due (a wake for the pacers alone)
            if self._own_recorder and self._events:
                self._record()
            return
        work: deque[tuple[int, int]] = deque()
        model_time = self._tx.model_time
        while timers and timers[0][0] <= now_ns:
            t, seq, kind, obj = heapq.heappop(timers)
            if kind == T_DELAY:
                work.append((obj, t))  # type: ignore[arg-type]
                self._drain(work)
            elif kind == T_NOT_BEFORE:
                self._make_ready(obj, t, work)  # type: ignore[arg-type]
                self._drain(work)
            elif kind == T_CTRL:  # on model time, at its own time: a late wake-up moves no rate change
                self._tx.on_ctrl_timer(obj, seq, t if model_time else now_ns)  # type: ignore[arg-type]
            elif kind == T_RTO:
                self._tx.on_rto(obj, seq, now_ns)  # type: ignore[arg-type]
            elif kind == T_NP:
                self._rx.on_np_timer(seq, t if model_time else now_ns)
        if self._own_recorder and self._events:
            self._record()

    def restart_pacers(self, now_ns: int) -> int:
        """A wall-time driver's first send for this rank went at ``now_ns``: ``SenderFeedback.restart_pacers``."""
        return self._tx.restart_pacers(now_ns)

    def sent_late(self, paced_ns: int, sent_ns: int) -> bool:
        """A driver's send of what was paced at ``paced_ns`` ended at ``sent_ns``: ``SenderFeedback.sent_late``;
        False, not called, while every queue pair is at the line rate at a constant rate (nothing to hold)."""
        tx = self._tx
        if tx.const_rate and not tx.paced_qps:  # rates that never change, all at the line rate
            return False
        return tx.sent_late(paced_ns, sent_ns)

    def poll_transmit(self, now_ns: int, max_batches: int = 64) -> list[Transmit]:
        """Control packets (ACK/NAK/CNP) first, then up to ``max_batches`` data batches the pacers allow.

        With ``model_time_service`` the timers due by ``now_ns`` run first (a driver may call this later than
        its last :meth:`handle_timer`): the service never passes a due op's post or a rate change."""
        if now_ns > self._now:
            self._now = now_ns
        if self._tx.model_time and self._timers and self._timers[0][0] <= now_ns:
            self.handle_timer(now_ns)
        if self._rx.pending:
            self._rx.flush_acks()
        out = self._ctrl_out
        self._ctrl_out = []
        if max_batches > 0:
            self._tx.poll(now_ns - self._lag, max_batches, out)
        if self._own_recorder and self._events:
            self._record()
        return out

    def visit_one(self, now_ns: int, max_batches: int = 64) -> list[Transmit] | None:
        """``handle_timer(now_ns)`` then ``poll_transmit(now_ns, max_batches)`` when no timer is due, no control
        packet waits and the sender's next visit sends one packet (:mod:`~emulator.endpoint.visit`): the same
        transmits and state; None, having done nothing, otherwise."""
        if not self._one_ok or self._ctrl_out or self._rx.pending:
            return None
        timers = self._timers
        if timers and timers[0][0] <= now_ns:
            return None
        if now_ns > self._now:
            self._now = now_ns
        out: list[Transmit] = []
        if not SenderSide.visit_one(self._tx, now_ns, max_batches, out):  # the class's function (receive)
            return None
        if self._own_recorder and self._events:
            self._record()
        return out

    #: the driver's per-service question, with the sender's send heap and NIC read inline (one frame)
    next_timer_ns = wake.next_timer_ns

    # -- typed actions (aioquic-shaped) -------------------------------------------------------------
    def timer(self, now_ns: int) -> None:
        """Run every timer due by ``now_ns`` (the same as :meth:`handle_timer`)."""
        self.handle_timer(now_ns)

    def datagrams_to_send(self, now_ns: int, max_batches: int = 64) -> list[Transmit]:
        """The :class:`Transmit` actions due now (the same as :meth:`poll_transmit`)."""
        return self.poll_transmit(now_ns, max_batches)

    def timer_request(self, *, transmit: bool = True) -> TimerRequest | None:
        """When to call :meth:`timer`/:meth:`poll` next (None: not until a datagram arrives)."""
        t = self.next_timer_ns(transmit=transmit)
        return None if t is None else TimerRequest(t)

    def events(self) -> Sequence[FlowEvent]:
        """The :class:`FlowEvent` actions since the last call, in the order they happened (for a recorder)."""
        if not self._events:
            return ()
        out = self._events[:]
        self._events.clear()
        return out

    def poll(self, now_ns: int, max_batches: int = 64) -> list[Transmit | TimerRequest | FlowEvent]:
        """Start the rank (origin ``now_ns``) if it has not started, run due timers and return every action:
        the transmits due, the events so far, and a :class:`TimerRequest` last (none when idle)."""
        if not self.started:
            self.start(now_ns)
        self.handle_timer(now_ns)
        out: list[Transmit | TimerRequest | FlowEvent] = list(self.poll_transmit(now_ns, max_batches))
        out.extend(self.events())
        req = self.timer_request()
        if req is not None:
            out.append(req)
        return out

    @property
    def records(self) -> RankRecords:
        """The recorder's records (complete up to the last :meth:`events` a driver consumed, or, with the
        endpoint's own recorder, up to the last call)."""
        return self.recorder.records

    def _record(self) -> None:
        self.recorder.consume(self._events)
        self._events.clear()

    # -- services for the sender and receiver -------------------------------------------------------
    def push_timer(self, t_ns: int, kind: int, obj: object) -> int:
        self._seq += 1
        heapq.heappush(self._timers, (t_ns, self._seq, kind, obj))
        return self._seq

    def emit(self, tx: Transmit) -> None:
        self._ctrl_out.append(tx)

    def _on_send_acked(self, op: int, now_ns: int) -> None:
        left = self._parts_left.pop(op, 1) - 1
        if left > 0:  # another part of the flow is still unacknowledged
            self._parts_left[op] = left
            return
        self._complete(op, now_ns)

    def _on_flow_received(self, op: int, now_ns: int) -> None:
        self._held[op] = 1
        if self._state[op] == _S_READY:
            self._complete(op, now_ns)

    # -- the op state machine -----------------------------------------------------------------------
    def _release(self, i: int, t_ns: int, work: deque[tuple[int, int]]) -> None:
        """Parents of ``i`` are complete at ``t_ns``: wait for not-before, or become ready."""
        nb = self._nb[i]
        if nb >= 0 and self.t0_ns + nb > t_ns:
            self.push_timer(self.t0_ns + nb, T_NOT_BEFORE, i)
            return
        self._make_ready(i, t_ns, work)

    def _make_ready(self, i: int, t_ns: int, work: deque[tuple[int, int]]) -> None:
        self._state[i] = _S_READY
        events = self._events
        events.append(_ev(FlowEvent, (_EV_READY, t_ns - self.t0_ns, -1, 0, 0, i, 0)))
        kind = self._kind[i]
        if kind == OP_SEND:
            flow, qp, dst, size = self._send_info[i]  # type: ignore[misc]
            q_per = self._qps_per_peer
            # on model time a SEND joins the round-robin when it became ready (never before the last visit)
            if self._tx.model_time:
                at = max(t_ns, self._tx.served_ns)
                counters = self._counts.counters
                counters["posts_timed"] = counters.get("posts_timed", 0) + 1
                if at > t_ns:
                    self._post_passed(at - t_ns)
            else:
                at = self._now
            if q_per == 1:
                self._tx.post(i, flow, qp, dst, size, at)
            else:  # part k on wire qp q·Q + k (emulator.endpoint.qpn)
                parts = part_sizes(size, q_per)
                self._parts_left[i] = len(parts)
                for k, part_bytes in parts:
                    self._tx.post(i, flow, qp * q_per + k, dst, part_bytes, at)
        elif kind == OP_RECV:
            if self._held[i]:
                work.append((i, t_ns))
        elif kind == OP_DELAY:
            events.append(FlowEvent(_EV_STARTED, t_ns - self.t0_ns, op=i))
            d = self._dur[i]
            if d <= 0:
                work.append((i, t_ns))
            else:
                self.push_timer(t_ns + d, T_DELAY, i)

    def _complete(self, i: int, t_ns: int) -> None:
        """``_drain(deque([(i, t_ns)]))``, without a deque unless a child is released (an op's completion usually
        releases none: its child waits for other parents)."""
        state = self._state
        if state[i] == _S_DONE:
            return
        state[i] = _S_DONE
        self._n_done += 1
        self._events.append(_ev(FlowEvent, (_EV_DONE, t_ns - self.t0_ns, -1, 0, 0, i, 0)))
        pending = self._pending
        cptr = self._child_ptr
        work = None
        for c in self._child_idx[cptr[i] : cptr[i + 1]]:
            pending[c] -= 1
            if pending[c] == 0:
                if work is None:
                    work = deque()
                self._release(c, t_ns, work)
        if work:
            self._drain(work)

    def _drain(self, work: deque[tuple[int, int]]) -> None:
        """Complete ops (breadth first) and release the children whose last parent completed."""
        events = self._events
        state = self._state
        pending = self._pending
        cptr, cidx = self._child_ptr, self._child_idx
        while work:
            i, t = work.popleft()
            if state[i] == _S_DONE:
                continue
            state[i] = _S_DONE
            self._n_done += 1
            events.append(_ev(FlowEvent, (_EV_DONE, t - self.t0_ns, -1, 0, 0, i, 0)))
            for c in cidx[cptr[i] : cptr[i + 1]]:
                pending[c] -= 1
                if pending[c] == 0:
                    self._release(c, t, work)

