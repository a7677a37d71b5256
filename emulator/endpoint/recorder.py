"""The recorder: turns an endpoint's :class:`~emulator.endpoint.events.FlowEvent` stream into the
:class:`~emulator.endpoint.records.RankRecords` the results are built from.

A driver feeds it every event the endpoint hands out, in order (``consume(ep.events())``). Op milestones
fill ``ready_ns``/``start_ns``/``end_ns`` and the lag counters; RATE events the rate samples; the
congestion and recovery kinds (:class:`~emulator.endpoint.events.FlowEventKind`) the event log, where a
``retransmit`` row grows by the RETRANSMITTED events of its queue pair. Per-packet counters are not
events (they would cost a call per packet): the endpoint's halves count them in ``records`` directly. With
``qps_per_peer`` > 1 the STARTED events carrying a wire QP and the FLOW_HELD events fill the part log.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from emulator.endpoint.events import FlowEvent, FlowEventKind, OpEventKind
from emulator.endpoint.records import MAX_EVENTS, PART_HELD, PART_STARTED, RankRecords
from emulator.schedule.model import OP_RECV, OP_SEND, Schedule

if TYPE_CHECKING:
    from emulator.endpoint.config import EndpointConfig

_ORIGIN, _READY, _STARTED, _DONE, _RATE, _MORE, _HELD = (int(k) for k in OpEventKind)
_RETRANSMIT = int(FlowEventKind.RETRANSMIT)
_LOG_KINDS = frozenset(int(k) for k in FlowEventKind)
#: the rank counters, all present (zero) from the start
COUNTERS = ("bytes_sent", "bytes_received", "retx_bytes", "packets_sent", "packets_received", "acks_sent",
            "acks_received", "naks_sent", "naks_received", "cnps_sent", "cnps_received", "retransmits",
            "timeouts", "ce_marks", "dup_packets", "out_of_order", "late_ops", "lag_max_ns", "malformed",
            "unknown_qp", "bad_packets", "opcode_errors", "stale_acks", "other_aeth", "unknown_opcode",
            "rate_samples_dropped", "events_dropped")  # fmt: skip


class Recorder:
    """Fills one rank's records from its events (see the module docstring)."""

    def __init__(self, rank: int, op_kinds: list[int], *, late_threshold_ns: int,
                 max_events: int = MAX_EVENTS, qps_per_peer: int = 1) -> None:
        """``op_kinds``: the kind (``OP_SEND``/``OP_RECV``/``OP_DELAY``) of every local op of the rank;
        ``qps_per_peer`` > 1: keep the part log (``RankRecords.part_*``)."""
        self.records = RankRecords(rank=rank, n_ops=len(op_kinds), max_events=max_events)
        self.records.counters.update(dict.fromkeys(COUNTERS, 0))
        self._kind = op_kinds
        #: the per-op time columns as memoryviews: an int store or load without a numpy scalar (consume)
        self._times = tuple(memoryview(getattr(self.records, c)) for c in ("ready_ns", "start_ns", "end_ns"))
        self._late_ns = late_threshold_ns
        self._retx_row: dict[int, int] = {}
        self._parts = qps_per_peer > 1
        #: the run's time origin on the driver's clock (from the ORIGIN event)
        self.t0_ns = 0

    @classmethod
    def for_rank(cls, schedule: Schedule, rank: int, config: EndpointConfig) -> Recorder:
        """The recorder of ``rank``'s ops in ``schedule`` (lag threshold and event cap from ``config``)."""
        lo, hi = int(schedule.rank_op_ptr[rank]), int(schedule.rank_op_ptr[rank + 1])
        return cls(rank, schedule.op_kind[lo:hi].tolist(), late_threshold_ns=config.late_threshold_ns,
                   max_events=config.max_events, qps_per_peer=config.qps_per_peer)

    def consume(self, events: Iterable[FlowEvent]) -> None:
        """Apply ``events`` in order (one loop: an event is a tuple unpacked here, no call per event)."""
        rec = self.records
        (ready_ns, start_ns, end_ns), op_kind = self._times, self._kind
        for kind, t_ns, qp, psn, packets, op, value in events:
            if kind == _DONE:
                end_ns[op] = t_ns
                if op_kind[op] == OP_RECV and start_ns[op] < 0:
                    start_ns[op] = t_ns
            elif kind == _READY:
                ready_ns[op] = t_ns
            elif kind == _STARTED:
                if self._parts and qp >= 0:
                    rec.log_part(op, qp, PART_STARTED, t_ns)
                if start_ns[op] >= 0:
                    continue
                start_ns[op] = t_ns
                if op_kind[op] == OP_SEND:
                    lag = t_ns - ready_ns[op]
                    counters = rec.counters
                    if lag > self._late_ns:
                        counters["late_ops"] += 1
                    if lag > counters["lag_max_ns"]:
                        counters["lag_max_ns"] = int(lag)
            elif kind == _RATE:
                rec.rate_t_ns.append(t_ns)
                rec.rate_qp.append(qp)
                rec.rate_bps.append(value)
            elif kind == _MORE:
                row = self._retx_row.get(qp, -1)
                if row >= 0:
                    rec.event_packets[row] += packets
            elif kind in _LOG_KINDS:
                row = rec.log_event(t_ns, kind, qp, psn, packets, op)
                if kind == _RETRANSMIT:
                    self._retx_row[qp] = row
            elif kind == _ORIGIN:
                self.t0_ns = t_ns
            elif kind == _HELD:  # the RECV's end is its OP_DONE; with Q > 1 each part's end is logged
                if self._parts:
                    rec.log_part(op, qp, PART_HELD, t_ns)
            else:
                raise ValueError(f"rank {rec.rank}: unknown flow event kind {kind}")

    def on_event(self, ev: FlowEvent) -> None:
        """Apply one event (``consume`` of one)."""
        self.consume((ev,))
