"""What one rank measured: columnar records, filled by the recorder (:mod:`~emulator.endpoint.recorder`)
from the endpoint's events and by its halves' per-packet counts, read by stats and results.

Every array is indexed by the rank's *local* op index ``i`` (global op id = ``schedule.rank_op_ptr[rank] + i``),
so nothing is allocated per packet or per event. Times are integer ns relative to the run's t0 (chosen by
the driver); ``-1`` means "did not happen" (an incomplete run keeps what it measured).

Per op (every kind):
    ``ready_ns``  the op's dependencies were satisfied and its not-before time had come — the *scheduled*
                  start: completion times are measured from here so a lagging generator cannot hide latency;
    ``start_ns``  SEND: first packet handed to the driver; RECV: first packet arrived; DELAY: = ready_ns;
    ``end_ns``    SEND: last byte acknowledged; RECV: every byte held; DELAY: wait over.
Per SEND op (zero elsewhere): ``packets`` data packets sent (incl. retransmits), ``retx_packets``,
    ``cnps`` CNPs received on the flow's QP while it was active, ``timeouts``.
Per RECV op (zero elsewhere): ``packets`` data packets accepted, ``ce_marks`` CE-marked packets seen,
    ``cnps`` CNPs sent, ``naks`` PSN-sequence NAKs sent, ``dup_packets`` duplicates dropped.
Rate samples: ``rate_t_ns``, ``rate_qp``, ``rate_bps`` (sampled on change, bounded in count).

Event log (bounded: at most ``max_events`` per rank, the rest only counted in ``counters["events_dropped"]``
so a truncated log is visible): one row per congestion or loss event, in the order they happened, in the
columns ``event_t_ns`` (relative to t0), ``event_kind`` (a :class:`~emulator.endpoint.events.FlowEventKind` code), ``event_qp``
(the queue pair, ``Schedule.flow_qp``), ``event_psn`` (24-bit wire PSN, see below), ``event_packets`` and
``event_op`` (the local op the event belongs to, -1 if none):

    ``cnp_sent``      receiver: the NP sent a CNP; psn = the QP's expected PSN then; op = the RECV op.
    ``cnp_received``  sender: a CNP reached the QP's rate controller; psn = next PSN to send; op = the
                      SEND op it is charged to (as ``cnps``).
    ``nak_sent``      receiver: a PSN-sequence-error NAK; psn = the expected PSN it carries.
    ``nak_received``  sender: psn = the NAK's PSN; packets = packets sent from it on (to go again).
    ``retransmit``    sender: a go-back-N rewind to psn; packets = packets re-sent because of it (grows
                      as they go out: the sum over a rank equals ``counters["retransmits"]`` while no
                      event was dropped).
    ``timeout``       sender: the retransmit timer fired; psn = oldest unacknowledged PSN; packets = packets
                      outstanding (a ``retransmit`` row at the same time follows).

Part log (``qps_per_peer`` = Q > 1 only, when every flow is split over Q wire queue pairs): one row per
milestone of a part, ``part_op`` (local op), ``part_qp`` (the wire queue pair, ``flow_qp · Q + k`` for part
``k``), ``part_kind`` (:data:`PART_STARTED`: SEND first packet handed to the driver, RECV first packet
arrived; :data:`PART_HELD`: RECV every byte of the part held) and ``part_t_ns``; the earliest row of a
kind counts (a part longer than one message opens once per message).

Events are rare (a CNP at most once per NP interval per QP, a NAK once per gap), so appending to Python
lists costs nothing measurable; nothing is logged per packet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from emulator.endpoint.events import FlowEventKind

OP_COLUMNS = ("ready_ns", "start_ns", "end_ns", "packets", "retx_packets", "cnps", "timeouts",
              "ce_marks", "naks", "dup_packets")
RATE_COLUMNS = ("rate_t_ns", "rate_qp", "rate_bps")
#: event-log columns and their dtypes in :meth:`RankRecords.to_arrays`
EVENT_COLUMNS: dict[str, type] = {"event_t_ns": np.int64, "event_kind": np.int8, "event_qp": np.int32,
                                  "event_psn": np.int32, "event_packets": np.int64, "event_op": np.int32}
#: per-part columns (``qps_per_peer`` > 1 only) and their dtypes in :meth:`RankRecords.to_arrays`
PART_COLUMNS: dict[str, type] = {"part_op": np.int32, "part_qp": np.int32, "part_kind": np.int8,
                                 "part_t_ns": np.int64}
#: ``part_kind``: the part's first packet sent (SEND) or arrived (RECV); every byte of the part held (RECV)
PART_STARTED, PART_HELD = 0, 1
#: ``event_kind`` codes (:class:`~emulator.endpoint.events.FlowEventKind`)
EV_CNP_SENT, EV_CNP_RECEIVED, EV_NAK_SENT, EV_NAK_RECEIVED, EV_RETRANSMIT, EV_TIMEOUT = (int(k) for k in FlowEventKind)
#: default bound of the event log per rank
MAX_EVENTS = 100_000


@dataclass
class RankRecords:
    """Columnar measurements of one rank (see module docstring)."""

    rank: int
    n_ops: int
    ready_ns: np.ndarray = field(init=False)
    start_ns: np.ndarray = field(init=False)
    end_ns: np.ndarray = field(init=False)
    packets: np.ndarray = field(init=False)
    retx_packets: np.ndarray = field(init=False)
    cnps: np.ndarray = field(init=False)
    timeouts: np.ndarray = field(init=False)
    ce_marks: np.ndarray = field(init=False)
    naks: np.ndarray = field(init=False)
    dup_packets: np.ndarray = field(init=False)
    rate_t_ns: list[int] = field(default_factory=list)
    rate_qp: list[int] = field(default_factory=list)
    rate_bps: list[int] = field(default_factory=list)
    event_t_ns: list[int] = field(default_factory=list)
    event_kind: list[int] = field(default_factory=list)
    event_qp: list[int] = field(default_factory=list)
    event_psn: list[int] = field(default_factory=list)
    event_packets: list[int] = field(default_factory=list)
    event_op: list[int] = field(default_factory=list)
    part_op: list[int] = field(default_factory=list)
    part_qp: list[int] = field(default_factory=list)
    part_kind: list[int] = field(default_factory=list)
    part_t_ns: list[int] = field(default_factory=list)
    #: events beyond this many are dropped and counted in ``counters["events_dropped"]``
    max_events: int = MAX_EVENTS
    #: free-form counters (bytes_sent, bytes_received, acks_sent, cnps_sent, cnps_received, ...)
    counters: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("ready_ns", "start_ns", "end_ns"):
            setattr(self, name, np.full(self.n_ops, -1, dtype=np.int64))
        for name in OP_COLUMNS[3:]:
            setattr(self, name, np.zeros(self.n_ops, dtype=np.int64))

    def count(self, key: str, n: int = 1) -> None:
        self.counters[key] = self.counters.get(key, 0) + n

    def count_lag(self, late_key: str, max_key: str, late_ns: int, bound_ns: int) -> None:
        """One event acted on ``late_ns`` after its model time: counted in ``late_key`` when beyond ``bound_ns``
        (0: no bound), the largest such lag kept in ``max_key``."""
        counters = self.counters
        if bound_ns and late_ns > bound_ns:
            counters[late_key] = counters.get(late_key, 0) + 1
        if late_ns > counters.get(max_key, 0):
            counters[max_key] = late_ns

    def log_event(self, t_ns: int, kind: int, qp: int, psn: int, packets: int, op: int) -> int:
        """Append one event (``t_ns`` relative to t0); returns its row, or -1 when the log is full (then the
        event is only counted in ``counters["events_dropped"]``)."""
        row = len(self.event_t_ns)
        if row >= self.max_events:
            self.counters["events_dropped"] = self.counters.get("events_dropped", 0) + 1
            return -1
        self.event_t_ns.append(t_ns)
        self.event_kind.append(kind)
        self.event_qp.append(qp)
        self.event_psn.append(psn)
        self.event_packets.append(packets)
        self.event_op.append(op)
        return row

    def log_part(self, op: int, qp: int, kind: int, t_ns: int) -> None:
        """Append one part milestone (see the module docstring)."""
        self.part_op.append(op)
        self.part_qp.append(qp)
        self.part_kind.append(kind)
        self.part_t_ns.append(t_ns)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain arrays (for npz files or pickling across processes): every column of the class (the part
        log's only when it has rows)."""
        out = {name: getattr(self, name) for name in OP_COLUMNS}
        out["rate_t_ns"] = np.asarray(self.rate_t_ns, dtype=np.int64)
        out["rate_qp"] = np.asarray(self.rate_qp, dtype=np.int32)
        out["rate_bps"] = np.asarray(self.rate_bps, dtype=np.int64)
        n = len(self.event_t_ns)  # the same length for every event column (a snapshot may race no append)
        for name, dtype in EVENT_COLUMNS.items():
            out[name] = np.asarray(getattr(self, name)[:n], dtype=dtype)
        n = len(self.part_t_ns)
        for name, dtype in PART_COLUMNS.items() if n else ():  # the part log only where there is one (Q > 1)
            out[name] = np.asarray(getattr(self, name)[:n], dtype=dtype)
        return out

    @classmethod
    def from_arrays(cls, rank: int, arrays: dict[str, np.ndarray], counters: dict[str, int]) -> RankRecords:
        rec = cls(rank=rank, n_ops=int(arrays["ready_ns"].shape[0]))
        for name in OP_COLUMNS:
            setattr(rec, name, np.asarray(arrays[name], dtype=np.int64))
        rec.rate_t_ns = [int(x) for x in arrays.get("rate_t_ns", ())]
        rec.rate_qp = [int(x) for x in arrays.get("rate_qp", ())]
        rec.rate_bps = [int(x) for x in arrays.get("rate_bps", ())]
        # both logs are optional: records written before the event log existed have none, and only runs with
        # qps_per_peer > 1 have a part log
        for label, columns, key in (("event", EVENT_COLUMNS, "event_t_ns"), ("part", PART_COLUMNS, "part_t_ns")):
            n = len(arrays.get(key, ()))
            for name in columns:
                col = np.asarray(arrays.get(name, np.zeros(n, np.int64))).tolist()
                if len(col) != n:
                    raise ValueError(f"rank {rank}: {label} column '{name}' has {len(col)} rows, {key} {n}")
                setattr(rec, name, col)
        rec.counters = dict(counters)
        return rec
