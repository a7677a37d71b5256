"""One switch egress port: strict-priority queues, serialization at the port rate, tail drop, RED/ECN
marking at dequeue, optional PFC-style XOFF/XON, and counters. Sans-IO, driven in virtual time.

Theory of operation
-------------------
A packet is any object with ``size_bytes`` (optional ``ect: bool`` — default True — and
``priority: int`` 0–7, higher served first, default 0); :class:`SimPacket` is a ready-made one.

* **Admission** (``enqueue``): if the port's bytes (queued + the one being serialized) plus the packet
  would exceed ``buffer_bytes`` the packet is dropped (tail drop) and counted; otherwise it joins the
  queue of its priority.
* **Service**: the port serializes one packet at a time, non-preemptively. When it is idle and not
  paused, it takes the head of the highest non-empty priority and finishes it ``⌈size·8/rate⌉`` ns after
  the start; the start is the later of the previous departure and the packet's arrival, so a driver that
  calls ``dequeue`` exactly at ``next_departure_ns()`` gets back-to-back transmission at the port rate.
* **Departure** (``dequeue(now_ns)`` with ``now_ns ≥ next_departure_ns()``): the packet leaves, its
  bytes leave the queue, and the ECN decision is taken on the queue it leaves behind (as the DCQCN ns-3
  models do): an ECT packet is CE-marked with the RED probability of that length. The port then starts
  the next packet at the departure instant.
* **PFC** (optional): when the queue reaches ``xoff_bytes`` the port asserts XOFF (a
  :class:`PfcEvent` with ``pause=True`` for the driver to deliver upstream); when it falls to
  ``xon_bytes`` it asserts XON. Independently, ``pause(now)``/``resume(now)`` model a PFC pause received
  from downstream: the packet on the wire finishes, no new one starts until resume.
* **Counters**: packets/bytes enqueued, dequeued, CE-marked and dropped; peak queue; time-weighted mean
  queue; time XOFF was asserted; time paused by downstream.

Times passed to a port never go back (virtual time).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Hashable
from typing import Any

from emulator.errors import ConfigError
from emulator.pacing.red import RedMarker, RedParams, UniformSource

N_PRIORITIES = 8


def serialization_ns(size_bytes: int, rate_bps: int) -> int:
    """Time a port at ``rate_bps`` (an integer) takes to put ``size_bytes`` on the wire: ⌈size·8/rate⌉ ns."""
    return -(-size_bytes * 8 * 10**9 // rate_bps)


@dataclasses.dataclass(frozen=True, slots=True)
class PfcParams:
    """Pause thresholds on the port's queue: XOFF at ``xoff_bytes``, XON once back at ``xon_bytes``."""

    xoff_bytes: int
    xon_bytes: int

    def __post_init__(self) -> None:
        if not (isinstance(self.xoff_bytes, int) and isinstance(self.xon_bytes, int)) \
                or self.xon_bytes < 0 or self.xoff_bytes <= 0:
            raise ConfigError(f"pfc: 'xoff_bytes' and 'xon_bytes' must be positive integers, "
                              f"got {self.xoff_bytes!r} / {self.xon_bytes!r}")
        if self.xon_bytes > self.xoff_bytes:
            raise ConfigError(f"pfc: 'xon_bytes' = {self.xon_bytes} is above 'xoff_bytes' = {self.xoff_bytes}")


@dataclasses.dataclass(frozen=True, slots=True)
class PortConfig:
    """An egress port: rate, buffer, optional marking and pause, and the propagation delay of its link."""

    rate_bps: float
    buffer_bytes: int
    red: RedParams | None = None
    pfc: PfcParams | None = None
    latency_ns: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.rate_bps, bool) or not isinstance(self.rate_bps, (int, float)) or self.rate_bps <= 0:
            raise ConfigError(f"port: 'rate_bps' must be positive, got {self.rate_bps!r}")
        if isinstance(self.buffer_bytes, bool) or not isinstance(self.buffer_bytes, int) or self.buffer_bytes <= 0:
            raise ConfigError(f"port: 'buffer_bytes' must be a positive integer, got {self.buffer_bytes!r}")
        if isinstance(self.latency_ns, bool) or not isinstance(self.latency_ns, int) or self.latency_ns < 0:
            raise ConfigError(f"port: 'latency_ns' must be a non-negative integer, got {self.latency_ns!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class SimPacket:
    """A packet as the fabric model sees it; ``payload`` carries whatever the driver needs (datagram bytes)."""

    size_bytes: int
    flow: Hashable = 0
    src: int = 0
    dst: int = 0
    seq: int = 0
    ect: bool = True
    priority: int = 0
    sent_ns: int = 0
    payload: Any = None


@dataclasses.dataclass(frozen=True, slots=True)
class PfcEvent:
    """The port crossed a PFC threshold: ``pause`` True = XOFF asserted, False = XON."""

    port: int
    t_ns: int
    pause: bool


@dataclasses.dataclass(frozen=True, slots=True)
class PortCounters:
    port: int
    enqueued_packets: int
    enqueued_bytes: int
    dequeued_packets: int
    dequeued_bytes: int
    marked_packets: int
    marked_bytes: int
    dropped_packets: int
    dropped_bytes: int
    queue_bytes: int
    peak_queue_bytes: int
    mean_queue_bytes: float
    xoff_time_ns: int
    xoff_count: int
    paused_time_ns: int
    elapsed_ns: int


class EgressPort:
    """The queue model of one egress port (see the module docstring).

    ``departure_ns`` (the same as ``next_departure_ns()``) and ``queue_bytes`` are plain attributes, read
    by the sim driver on every event. Slotted: its 37 attributes in the object itself, at fixed offsets (as a
    dict, more than CPython 3.11's 29 inline ones, each port's attributes and method lookups would go
    through a dict of its own)."""

    __slots__ = ("config", "port_id", "_rate", "_buffer", "_marker", "_rng", "_kmin", "_kmax", "_pmax", "_pfc",
                 "_xoff_bytes", "_xon_bytes", "_queues", "_nonempty", "_slots", "_cur", "departure_ns", "queue_bytes",
                 "_ser", "_paused", "_paused_since", "_xoff", "_xoff_since", "_events", "_t0", "_t_last", "_area",
                 "dequeued_packets", "dequeued_bytes", "marked_packets", "marked_bytes", "dropped_packets",
                 "dropped_bytes", "peak_queue_bytes", "xoff_time_ns", "xoff_count", "paused_time_ns")  # fmt: skip

    def __init__(self, config: PortConfig, rng: UniformSource, port_id: int = 0, start_ns: int = 0) -> None:
        self.config = config
        self.port_id = port_id
        self._rate = int(round(config.rate_bps))
        self._buffer = config.buffer_bytes
        red = config.red
        self._marker = RedMarker(red, rng) if red is not None else None
        self._rng = rng
        #: no marker: the buffer, which no queue exceeds (admission), so ``dequeue``'s first test rules marking out
        #: (a buffer below 2**30 bytes is a one-digit int: the interpreter's fast compare)
        self._kmin = red.kmin_bytes if red is not None else config.buffer_bytes
        self._kmax = red.kmax_bytes if red is not None else 0
        self._pmax = red.pmax if red is not None else 0.0
        pfc = config.pfc
        self._pfc = pfc
        self._xoff_bytes = pfc.xoff_bytes if pfc is not None else 0
        self._xon_bytes = pfc.xon_bytes if pfc is not None else 0
        self._queues: list[deque[tuple[Any, int]]] = [deque() for _ in range(N_PRIORITIES)]
        self._nonempty = 0                               # bit p set: queue p holds packets
        #: priority -> (its queue, its bit in ``_nonempty``); the keys 0..7 also match True, 3.0, ...
        self._slots = {p: (q, 1 << p) for p, q in enumerate(self._queues)}
        self._cur: Any = None                            # the packet on the wire
        #: when the packet on the wire finishes (None: idle)
        self.departure_ns: int | None = None
        #: bytes held by the port, including the packet being serialized
        self.queue_bytes = 0
        self._ser: dict[int, int] = {}
        self._paused = False
        self._paused_since = 0
        self._xoff = False
        self._xoff_since = 0
        self._events: list[PfcEvent] = []
        self._t0 = start_ns
        self._t_last = start_ns
        #: Σ size × departure time − Σ size × arrival time over the packets admitted: the queue's time
        #: integral up to ``t`` is ``_area + queue_bytes × t`` (``queue_area``), with no per-event interval
        self._area = 0
        self.dequeued_packets = self.dequeued_bytes = 0
        self.marked_packets = self.marked_bytes = 0
        self.dropped_packets = self.dropped_bytes = 0
        self.peak_queue_bytes = 0
        self.xoff_time_ns = 0
        self.xoff_count = 0
        self.paused_time_ns = 0

    # -- queries --------------------------------------------------------------------------------------
    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def xoff_asserted(self) -> bool:
        return self._xoff

    @property
    def enqueued_packets(self) -> int:
        """Packets admitted so far: those gone and those held."""
        return self.dequeued_packets + sum(map(len, self._queues)) + (self._cur is not None)

    @property
    def enqueued_bytes(self) -> int:
        """Bytes admitted so far: those gone and those held."""
        return self.dequeued_bytes + self.queue_bytes

    def serialization_ns(self, size_bytes: int) -> int:
        s = self._ser.get(size_bytes)
        if s is None:
            s = self._ser[size_bytes] = serialization_ns(size_bytes, self._rate)
        return s

    def queue_area(self, now_ns: int) -> int:
        """∫ queue bytes dt from the start to ``now_ns`` (at or after the last enqueue or dequeue), in byte·ns."""
        return self._area + self.queue_bytes * now_ns

    def next_departure_ns(self) -> int | None:
        """When the packet on the wire finishes (call ``dequeue`` then), or None when idle."""
        return self.departure_ns

    def drain_events(self) -> list[PfcEvent]:
        """PFC XOFF/XON transitions since the last call, oldest first."""
        out, self._events = self._events, []
        return out

    def counters(self, now_ns: int) -> PortCounters:
        self._account(now_ns)
        elapsed = self._t_last - self._t0
        xoff = self.xoff_time_ns + (self._t_last - self._xoff_since if self._xoff else 0)
        paused = self.paused_time_ns + (self._t_last - self._paused_since if self._paused else 0)
        return PortCounters(
            self.port_id, self.enqueued_packets, self.enqueued_bytes, self.dequeued_packets, self.dequeued_bytes,
            self.marked_packets, self.marked_bytes, self.dropped_packets, self.dropped_bytes, self.queue_bytes,
            self.peak_queue_bytes, self.queue_area(self._t_last) / elapsed if elapsed > 0 else float(self.queue_bytes),
            xoff,
            self.xoff_count, paused, elapsed,
        )

    # -- inputs ---------------------------------------------------------------------------------------
    def _account(self, now_ns: int) -> None:
        if now_ns > self._t_last:
            self._t_last = now_ns

    def enqueue(self, pkt: Any, now_ns: int) -> bool:
        """Offer a packet; False if tail-dropped."""
        dropped = self.dropped_packets
        self.offer(pkt, now_ns)
        return self.dropped_packets == dropped

    def offer(self, pkt: Any, now_ns: int) -> int:
        """Offer a packet (``enqueue``): its departure time when it went straight on the wire of an idle port
        (the one departure a driver must schedule), else 0 (queued behind others, paused, or tail-dropped)."""
        size = pkt.size_bytes
        q_bytes = self.queue_bytes + size
        if q_bytes > self._buffer:
            self.dropped_packets += 1
            self.dropped_bytes += size
            self._account(now_ns)
            return 0
        self.queue_bytes = q_bytes
        self._area -= size * now_ns  # the queue's time integral, telescoped (``queue_area``)
        self._t_last = now_ns
        if q_bytes > self.peak_queue_bytes:
            self.peak_queue_bytes = q_bytes
        if self._pfc is not None and not self._xoff and q_bytes >= self._xoff_bytes:
            self._xoff = True
            self._xoff_since = now_ns
            self.xoff_count += 1
            self._events.append(PfcEvent(self.port_id, now_ns, True))
        if self._cur is None and not self._paused and not self._nonempty:  # idle: straight on the wire
            self._cur = pkt
            s = self._ser.get(size)
            if s is None:
                s = self._ser[size] = serialization_ns(size, self._rate)
            d = self.departure_ns = now_ns + s
            return d
        try:
            slot = self._slots.get(pkt.priority)
        except AttributeError:
            slot = self._slots[0]
        if slot is None:  # a priority out of 0..7 or not integral: clamped
            slot = self._slots[min(N_PRIORITIES - 1, max(0, int(pkt.priority)))]
        q, bit = slot
        q.append((pkt, now_ns))
        self._nonempty |= bit
        if self._cur is None and not self._paused:
            self._start_next(now_ns)
            return self.departure_ns  # type: ignore[return-value]
        return 0

    def _start_next(self, t_ns: int) -> None:
        ne = self._nonempty
        if not ne:
            self._cur = None
            self.departure_ns = None
            return
        p = ne.bit_length() - 1
        q = self._queues[p]
        pkt, arrived_ns = q.popleft()
        if not q:
            self._nonempty = ne & ~(1 << p)
        self._cur = pkt
        self.departure_ns = (t_ns if t_ns >= arrived_ns else arrived_ns) + self.serialization_ns(pkt.size_bytes)

    def dequeue(self, now_ns: int) -> tuple[Any, bool]:
        """The packet whose serialization has finished by ``now_ns``, and whether it leaves CE-marked."""
        done_ns = self.departure_ns
        if done_ns is None or done_ns > now_ns:
            raise RuntimeError(f"port {self.port_id}: no packet departs by t={now_ns} ns "
                               f"(next departure: {done_ns})")
        pkt = self._cur
        size = pkt.size_bytes
        q_bytes = self.queue_bytes - size
        self.queue_bytes = q_bytes
        self._area += size * now_ns
        self._t_last = now_ns
        self.dequeued_packets += 1
        self.dequeued_bytes += size
        ce = False
        if q_bytes > self._kmin and self._marker is not None and getattr(pkt, "ect", True):
            # RED on the queue left behind (emulator.pacing.red.mark_probability, same arithmetic)
            if q_bytes > self._kmax:
                ce = True
            else:
                p = self._pmax * (q_bytes - self._kmin) / (self._kmax - self._kmin)
                ce = p > 0.0 and (p >= 1.0 or self._rng.random() < p)
            if ce:
                self.marked_packets += 1
                self.marked_bytes += size
        if self._xoff and q_bytes <= self._xon_bytes:
            self._xoff = False
            self.xoff_time_ns += now_ns - self._xoff_since
            self._events.append(PfcEvent(self.port_id, now_ns, False))
        ne = self._nonempty
        if self._paused or not ne:
            self._cur = None
            self.departure_ns = None
            return pkt, ce
        p = ne.bit_length() - 1  # _start_next(done_ns), inline: the next packet goes on the wire
        q = self._queues[p]
        nxt, arrived_ns = q.popleft()
        if not q:
            self._nonempty = ne & ~(1 << p)
        self._cur = nxt
        nsize = nxt.size_bytes
        s = self._ser.get(nsize)
        if s is None:
            s = self._ser[nsize] = serialization_ns(nsize, self._rate)
        self.departure_ns = (done_ns if done_ns >= arrived_ns else arrived_ns) + s
        return pkt, ce

    def depart(self, now_ns: int) -> Any:
        """``dequeue(now_ns)`` for a driver that calls it exactly at ``departure_ns``, on packets with a mutable
        ``ecn``: the packet leaving, its ``ecn`` set to 3 (CE) when marked (the same RED arithmetic and draws);
        the next departure, if any, is then in ``departure_ns``."""
        pkt = self._cur
        size = pkt.size_bytes
        q_bytes = self.queue_bytes - size
        self.queue_bytes = q_bytes
        self._area += size * now_ns
        self._t_last = now_ns
        self.dequeued_packets += 1
        self.dequeued_bytes += size
        if q_bytes > self._kmin and self._marker is not None and getattr(pkt, "ect", True):
            if q_bytes > self._kmax:
                ce = True
            else:
                p = self._pmax * (q_bytes - self._kmin) / (self._kmax - self._kmin)
                ce = p > 0.0 and (p >= 1.0 or self._rng.random() < p)
            if ce:
                self.marked_packets += 1
                self.marked_bytes += size
                pkt.ecn = 3
        if self._xoff and q_bytes <= self._xon_bytes:
            self._xoff = False
            self.xoff_time_ns += now_ns - self._xoff_since
            self._events.append(PfcEvent(self.port_id, now_ns, False))
        ne = self._nonempty
        if self._paused or not ne:
            self._cur = None
            self.departure_ns = None
            return pkt
        p = ne.bit_length() - 1
        q = self._queues[p]
        nxt, arrived_ns = q.popleft()
        if not q:
            self._nonempty = ne & ~(1 << p)
        self._cur = nxt
        nsize = nxt.size_bytes
        s = self._ser.get(nsize)
        if s is None:
            s = self._ser[nsize] = serialization_ns(nsize, self._rate)
        self.departure_ns = (now_ns if now_ns >= arrived_ns else arrived_ns) + s
        return pkt

    def pause(self, now_ns: int) -> None:
        """A PFC pause from downstream: finish the packet on the wire, start no new one."""
        if not self._paused:
            self._account(now_ns)
            self._paused = True
            self._paused_since = now_ns

    def resume(self, now_ns: int) -> None:
        if self._paused:
            self._account(now_ns)
            self._paused = False
            self.paused_time_ns += now_ns - self._paused_since
            if self._cur is None:
                self._start_next(now_ns)
