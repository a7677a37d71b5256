"""A switch of N egress ports with a forwarding function and per-port link latency, for virtual time.

Theory of operation
-------------------
``receive(pkt, now_ns)`` asks the forwarding function for an egress port and offers the packet to that
port (:class:`~emulator.fabric.port.EgressPort`: tail drop, priorities, RED/ECN at dequeue, PFC). The
simulator asks ``next_departure_ns()`` for the earliest instant any port finishes a packet (a lazily
cleaned heap, so it stays cheap with hundreds of ports) and then calls ``pop_departures(now_ns)``, which
dequeues every packet due by then in time order and returns :class:`Departure` records carrying the CE
decision and the arrival time at the far end of the link (departure + the port's ``latency_ns``). A
driver that prefers port-level control can call ``enqueue(port, …)``, ``next_departure_ns(port)`` and
``dequeue(port, now_ns)`` directly. PFC XOFF/XON transitions of all ports are collected by
``drain_pfc_events()``; what a pause means upstream (which ports or hosts to stop) is the driver's
topology decision, applied with ``pause(port, now_ns)`` / ``resume(port, now_ns)``.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Sequence
from typing import Any

from emulator.fabric.port import EgressPort, PfcEvent, PortConfig, PortCounters
from emulator.pacing.red import UniformSource


@dataclasses.dataclass(frozen=True, slots=True)
class Departure:
    port: int
    pkt: Any
    ce_marked: bool
    departed_ns: int
    arrival_ns: int


class Switch:
    """N egress ports sharing one forwarding function and one seeded random source."""

    def __init__(self, ports: Sequence[PortConfig], forward: Callable[[Any], int], rng: UniformSource,
                 start_ns: int = 0) -> None:
        if not ports:
            raise ValueError("a switch needs at least one port")
        self.ports = [EgressPort(cfg, rng, i, start_ns) for i, cfg in enumerate(ports)]
        self._forward = forward
        self._heap: list[tuple[int, int]] = []
        self.unroutable_packets = 0

    def _note(self, port: int) -> None:
        t = self.ports[port].next_departure_ns()
        if t is not None:
            heapq.heappush(self._heap, (t, port))

    def receive(self, pkt: Any, now_ns: int) -> bool:
        """Forward and enqueue; False if dropped (buffer full, or no such port)."""
        port = self._forward(pkt)
        if not isinstance(port, int) or not 0 <= port < len(self.ports):
            self.unroutable_packets += 1
            return False
        return self.enqueue(port, pkt, now_ns)

    def enqueue(self, port: int, pkt: Any, now_ns: int) -> bool:
        p = self.ports[port]
        before = p.next_departure_ns()
        ok = p.enqueue(pkt, now_ns)
        if p.next_departure_ns() != before:
            self._note(port)
        return ok

    def next_departure_ns(self, port: int | None = None) -> int | None:
        """Next departure of one port, or of the whole switch when ``port`` is None."""
        if port is not None:
            return self.ports[port].next_departure_ns()
        heap = self._heap
        while heap:
            t, i = heap[0]
            if self.ports[i].next_departure_ns() == t:
                return t
            heapq.heappop(heap)
        return None

    def dequeue(self, port: int, now_ns: int) -> tuple[Any, bool]:
        pkt, ce = self.ports[port].dequeue(now_ns)
        self._note(port)
        return pkt, ce

    def pop_departures(self, now_ns: int) -> list[Departure]:
        """Every packet that leaves by ``now_ns``, oldest first."""
        out: list[Departure] = []
        while True:
            t = self.next_departure_ns()
            if t is None or t > now_ns:
                return out
            _, i = heapq.heappop(self._heap)
            pkt, ce = self.dequeue(i, t)
            out.append(Departure(i, pkt, ce, t, t + self.ports[i].config.latency_ns))

    def pause(self, port: int, now_ns: int) -> None:
        self.ports[port].pause(now_ns)

    def resume(self, port: int, now_ns: int) -> None:
        before = self.ports[port].next_departure_ns()
        self.ports[port].resume(now_ns)
        if self.ports[port].next_departure_ns() != before:
            self._note(port)

    def drain_pfc_events(self) -> list[PfcEvent]:
        events = [e for p in self.ports for e in p.drain_events()]
        events.sort(key=lambda e: (e.t_ns, e.port))
        return events

    def counters(self, now_ns: int) -> list[PortCounters]:
        return [p.counters(now_ns) for p in self.ports]
