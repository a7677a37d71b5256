"""The one contract every driver keeps: a :class:`Driver` runs a schedule and returns a :class:`DriverResult`.

A driver is whatever carries the ranks' datagrams: the virtual-time sim (:mod:`emulator.drivers.sim`),
the flow-level fluid fabric (:mod:`emulator.drivers.fluid`), the software switch over loopback sockets
(:mod:`emulator.drivers.loopback`), real links (:mod:`emulator.drivers.direct`). ``emulator run``, the
results writer and the analysis never care which one ran: they read a :class:`DriverResult` only.

Fabric counters have one vocabulary, :class:`PortReport` (the counters of
:class:`~emulator.fabric.port.EgressPort` plus the port's identity), gathered with the queue-depth samples
in a :class:`FabricReport`; a driver without a fabric of its own (direct: the real network keeps its
counters) reports ``fabric=None``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from emulator.endpoint.records import RankRecords
from emulator.fabric.port import PortCounters
from emulator.schedule.model import Schedule

Progress = Callable[[dict], None] | None
#: the error line of a run the user stopped (Ctrl-C)
INTERRUPTED_TEXT = "interrupted by the user (Ctrl-C)"
#: the error text of each way a virtual-time run (sim, fluid) stops short (``health["stop_reason"]``); the
#: profile's ``timeout`` is both its simulated-time and its wall-clock limit
STOPPED_TEXT = {"deadlock": "no event left (deadlock)",
                "time_limit": "the virtual-time limit (the profile's timeout) was reached",
                "wall_timeout": "the wall-clock limit (the profile's timeout) ran out; raise timeout (e.g. --set timeout=600s)",
                "interrupted": INTERRUPTED_TEXT}


@dataclass(frozen=True, slots=True)
class PortReport:
    """Counters of one egress port over a run (a NIC uplink, a switch port); bytes are wire bytes.

    ``kind`` is ``host`` for a NIC uplink (its queue is the sender's own backlog), else the switch port's
    role (``down``, ``up``). ``loss_packets`` counts injected loss on the port's link; ``xoff_time_ns`` /
    ``xoff_count``: PFC XOFF asserted upstream; ``paused_time_ns``: paused by PFC from downstream;
    ``utilisation`` = dequeued bits / (rate × elapsed). A model that does not track a counter (the fluid
    fabric: enqueued, PFC) reports 0 for it.
    """

    port: int
    name: str
    kind: str
    rate_bps: float
    enqueued_packets: int = 0
    enqueued_bytes: int = 0
    dequeued_packets: int = 0
    dequeued_bytes: int = 0
    marked_packets: int = 0
    marked_bytes: int = 0
    dropped_packets: int = 0
    dropped_bytes: int = 0
    loss_packets: int = 0
    peak_queue_bytes: int = 0
    mean_queue_bytes: float = 0.0
    xoff_time_ns: int = 0
    xoff_count: int = 0
    paused_time_ns: int = 0
    utilisation: float = 0.0

    @classmethod
    def from_counters(cls, c: PortCounters, *, name: str, kind: str, rate_bps: float,
                      loss_packets: int = 0) -> PortReport:  # fmt: skip
        """The report of a port model's counters (utilisation over the counters' elapsed time)."""
        util = c.dequeued_bytes * 8e9 / (rate_bps * c.elapsed_ns) if c.elapsed_ns > 0 else 0.0
        return cls(c.port, name, kind, float(rate_bps), c.enqueued_packets, c.enqueued_bytes, c.dequeued_packets,
                   c.dequeued_bytes, c.marked_packets, c.marked_bytes, c.dropped_packets, c.dropped_bytes,
                   loss_packets, c.peak_queue_bytes, c.mean_queue_bytes, c.xoff_time_ns, c.xoff_count,
                   c.paused_time_ns, util)  # fmt: skip

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PortReport:
        """The inverse of :meth:`to_dict` (how a report crosses a process boundary)."""
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass(frozen=True, slots=True)
class QueueSamples:
    """Queue depths over time, parallel int64 arrays: sample ``i`` is ``queue_bytes[i]`` on ``port[i]`` at
    ``t_ns[i]`` (port-major, time order within a port)."""

    t_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    port: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    queue_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @classmethod
    def of(cls, t_ns: Any, port: Any, queue_bytes: Any) -> QueueSamples:
        return cls(np.asarray(t_ns, np.int64), np.asarray(port, np.int64), np.asarray(queue_bytes, np.int64))

    def of_port(self, port: int) -> tuple[np.ndarray, np.ndarray]:
        """``(t_ns, queue_bytes)`` of one port."""
        sel = self.port == port
        return self.t_ns[sel], self.queue_bytes[sel]

    def to_dict(self) -> dict[str, list[int]]:
        return {"t_ns": self.t_ns.tolist(), "port": self.port.tolist(), "queue_bytes": self.queue_bytes.tolist()}


@dataclass(frozen=True, slots=True)
class FabricReport:
    """What a driver's fabric counted: every port, queue samples, and driver-specific scalar ``notes``
    (e.g. the loopback switch's ``unroutable_packets``, the fluid fabric's ``estimates`` caveat)."""

    kind: str
    ports: tuple[PortReport, ...] = ()
    queue_samples: QueueSamples = field(default_factory=QueueSamples)
    notes: Mapping[str, Any] = field(default_factory=dict)

    def port_named(self, name: str) -> PortReport:
        for p in self.ports:
            if p.name == name:
                return p
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The stored form (results ``driver.fabric`` and the analysis input)."""
        return {"kind": self.kind, "ports": [p.to_dict() for p in self.ports],
                "queue_samples": self.queue_samples.to_dict(), **self.notes}


@dataclass(frozen=True)
class DriverResult:
    """The outcome of one run by any driver.

    * ``records`` — :class:`~emulator.endpoint.records.RankRecords` by rank, for every rank the driver
      heard from, also when the run did not complete (a rank died or hung, a time limit, Ctrl-C): then
      they hold what was measured up to the last snapshot (``-1`` times = did not happen).
    * ``fabric`` — the fabric's counters (None: the driver has none, e.g. direct).
    * ``health`` — how well the driver kept up (JSON-ready; stored as the results' ``driver.health``):
      lag percentiles (``*_lag_ns`` dicts with p50/p99/p999/max/count), late counts, socket drops, send
      errors, the sim's ``stop_reason``/``events``/``packets``; ``health["warnings"]`` lists what a reader
      must know (e.g. "switch forwarded 12% of packets more than 500 µs late").
    * ``complete`` — every rank finished every op; ``errors`` — one line each ("rank 5 (worker pid 1234)
      died: exit code -9", "rank 3 hung: no progress for 5.0 s").
    * ``interrupted`` — the user stopped the run (Ctrl-C); the records are what was measured until then.
    * ``wall_ns`` — wall time of the run from the common t0 to the end.
    * ``previous_attempt`` — an earlier run of the same schedule the driver replaced by this one (the
      loopback fabric under ``time_dilation: auto`` re-runs a run whose timing was not faithful), kept
      whole; None without one.
    """

    driver: str
    records: dict[int, RankRecords]
    fabric: FabricReport | None = None
    health: dict[str, Any] = field(default_factory=dict)
    complete: bool = False
    errors: list[str] = field(default_factory=list)
    interrupted: bool = False
    wall_ns: int = 0
    previous_attempt: DriverResult | None = None

    def bytes_counter(self, key: str) -> int:
        """Sum of one endpoint counter (e.g. ``bytes_received``) over all ranks."""
        return sum(int(rec.counters.get(key, 0)) for rec in self.records.values())

    def incomplete_ranks(self) -> tuple[int, ...]:
        """Ranks with an op that did not end, in rank order."""
        return tuple(r for r in sorted(self.records) if bool((self.records[r].end_ns < 0).any()))

    def fabric_dict(self) -> dict[str, Any]:
        """:meth:`FabricReport.to_dict`, or ``{}`` without a fabric."""
        return self.fabric.to_dict() if self.fabric is not None else {}


@runtime_checkable
class Driver(Protocol):
    """Runs every rank of a compiled schedule on one kind of fabric.

    To add a driver (e.g. ranks on remote hosts), write one module with a frozen dataclass holding
    everything the run needs (its fabric config, the :class:`~emulator.endpoint.config.EndpointConfig`,
    seed, timeouts), a ``name`` and a ``run`` method, then let :func:`emulator.run.runner.make_driver`
    build it from a profile. ``run`` must:

    * run the schedule's warmup and measured iterations in one go (they are in the schedule already);
    * return a :class:`DriverResult` in every case it can — a rank that died or hung, a timeout, Ctrl-C
      (catch ``KeyboardInterrupt``, set ``interrupted``) — with the records measured so far: nothing
      measured is lost; raise an :class:`~emulator.errors.EmulatorError` subclass only for bad input
      found before anything ran (it becomes one ``error: ...`` line, exit 2);
    * put each fabric counter in :class:`PortReport` (one vocabulary for every fabric), or report
      ``fabric=None`` when it has none;
    * call ``progress`` (when given) every fraction of a second with what it knows of ``elapsed_s``,
      ``virtual_ns``, ``bytes_delivered``, ``packets_delivered``, ``flows_done``, ``ops_done``,
      ``ranks_done`` and ``ranks``; the call must not change the run.
    """

    name: str

    def run(self, schedule: Schedule, progress: Progress = None) -> DriverResult: ...
