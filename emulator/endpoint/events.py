"""What the endpoint hands out, as typed actions: :class:`Transmit` (datagrams for the driver to put on the
wire), :class:`TimerRequest` (when to call it again) and :class:`FlowEvent` (what happened to an op or a
queue pair, for a recorder: :mod:`~emulator.endpoint.recorder`). :class:`FlowEventKind` are the congestion
and recovery events of the results' event log, :class:`OpEventKind` the milestones the recorder turns into
the per-op and rate columns.

Immutable and picklable, so socket drivers can pass them between processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple


class FlowEventKind(IntEnum):
    """A congestion or recovery event on a queue pair, as logged in ``RankRecords.event_kind``; the
    results format stores each by its lower-case name (:mod:`emulator.results.events`)."""

    CNP_SENT = 0
    CNP_RECEIVED = 1
    NAK_SENT = 2
    NAK_RECEIVED = 3
    RETRANSMIT = 4
    TIMEOUT = 5


class OpEventKind(IntEnum):
    """Milestones that are not rows of the event log (codes apart from :class:`FlowEventKind`)."""

    #: the rank's time origin: ``t_ns`` is t0 on the driver's clock (always the first event)
    ORIGIN = 16
    #: ``op`` is ready (dependencies met, not-before passed)
    OP_READY = 17
    #: ``op`` started (SEND: first packet handed out; RECV: first packet arrived; DELAY: ready)
    OP_STARTED = 18
    #: ``op`` completed
    OP_DONE = 19
    #: ``qp``'s rate changed to ``value`` b/s
    RATE = 20
    #: ``packets`` more re-sent by ``qp``'s latest go-back-N rewind (grows its ``retransmit`` row)
    RETRANSMITTED = 21
    #: every byte of RECV ``op``'s flow is here (the op completes once it is also ready)
    FLOW_HELD = 22


@dataclass(frozen=True, slots=True)
class TimerRequest:
    """Call the endpoint's ``timer`` (or ``poll``) again at ``t_ns`` at the latest, unless a datagram comes first."""

    t_ns: int


class FlowEvent(NamedTuple):
    """One thing that happened at ``t_ns`` (relative to the run's origin; ORIGIN: the origin itself).

    ``kind`` is a :class:`FlowEventKind` or :class:`OpEventKind` code; ``qp``, ``psn``, ``packets`` and
    ``op`` (the rank's local op, -1 if none) as in the event log (:mod:`~emulator.endpoint.records`);
    ``value`` is the rate in b/s of a RATE event. A named tuple: immutable and picklable like the other
    actions, and made with one tuple allocation (several per message of every queue pair).
    """

    kind: int
    t_ns: int
    qp: int = -1
    psn: int = 0
    packets: int = 0
    op: int = -1
    value: int = 0


def split_segments(data: bytes | bytearray | memoryview, segment_size: int) -> list:
    """The datagrams of a GSO/GRO buffer (all ``segment_size`` bytes, the last may be shorter)."""
    n = len(data)
    if not segment_size or segment_size >= n:
        return [data]
    mv = memoryview(data)
    return [mv[o : o + segment_size] for o in range(0, n, segment_size)]


class Transmit(NamedTuple):
    """One datagram, or one GSO batch of equal-size segments (the last may be shorter).

    ``data`` is the UDP payload (BTH ... ICRC; a batch = segments back to back); ``segment_size`` is 0
    for a single datagram, else the GSO segment size; ``tos`` is the IP TOS byte (DSCP << 2 | ECN);
    ``t_ns`` is the time the sender's pacer meant the data batch to leave (also stamped in its packets,
    :mod:`~emulator.wire.stamp`), -1 for control packets; with a stamp spread, segment ``j`` of the batch
    is meant to leave at ``t_ns + j·step_ns``. A named tuple: immutable and cheap to make (the sender makes
    one per GSO batch).
    """

    dst_rank: int
    data: bytes | bytearray | memoryview
    segment_size: int
    tos: int
    t_ns: int = -1
    step_ns: int = 0

    def datagrams(self) -> list:
        """The datagrams this transmit puts on the wire (views into ``data`` for a batch)."""
        return split_segments(self.data, self.segment_size)


class TransmitRun(NamedTuple):
    """``sends`` equal GSO sends back to back in one buffer: what ``sends`` :class:`Transmit` objects of
    ``len(data) // sends`` bytes each would put on the wire, in order, send ``i`` meant to leave at ``t_ns +
    i·k·step_ns`` (``k`` its packets). A sender with ``EndpointConfig.run_transmits`` hands out a run of
    MIDDLE batches written into its reused buffers this way, so a driver puts the run on the wire with one
    step of its own (one ``sendmmsg`` from compiled code: :mod:`~emulator.drivers.sockets.tx_compiled`)."""

    dst_rank: int
    data: bytes | bytearray | memoryview
    segment_size: int
    tos: int
    t_ns: int
    step_ns: int
    sends: int

    def parts(self) -> list[Transmit]:
        """The :class:`Transmit` of each send, in order."""
        return run_parts(self)

    def datagrams(self) -> list:
        """The datagrams this run puts on the wire (views into ``data``)."""
        return [d for tx in run_parts(self) for d in tx.datagrams()]


def run_parts(run: TransmitRun) -> list[Transmit]:
    """``run``'s sends as :class:`Transmit` objects (:class:`TransmitRun`)."""
    dst, data, seg, tos, t_ns, step, m = run
    size = len(data) // m
    dt = (size // seg if seg else 1) * step
    mv = memoryview(data)
    return [Transmit(dst, mv[i * size : (i + 1) * size], seg, tos, t_ns + i * dt, step) for i in range(m)]


def expand_runs(txs) -> list:
    """``txs`` with every :class:`TransmitRun` replaced by its sends (``txs`` itself
    when it holds none)."""
    for i, tx in enumerate(txs):
        if type(tx) is TransmitRun:
            out = list(txs[:i])
            for t in txs[i:]:
                if type(t) is TransmitRun:
                    out.extend(run_parts(t))
                else:
                    out.append(t)
            return out
    return txs
