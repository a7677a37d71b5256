"""Congestion point (CP): RED-style ECN marking of ECT packets by egress queue length, decided at dequeue.

Theory of operation
-------------------
For the instantaneous queue length ``q`` in bytes (docs/dcqcn.md §2)::

    p(q) = 0                                   q <= Kmin
    p(q) = Pmax · (q − Kmin)/(Kmax − Kmin)     Kmin < q <= Kmax
    p(q) = 1                                   q >  Kmax

DCTCP-style step marking is ``Kmin = Kmax = K, Pmax = 1``. :class:`RedMarker` draws from the seeded
generator it was given (``random.Random`` or ``numpy.random.Generator``: anything with ``random()``) only
when ``0 < p < 1``, so runs with the same seed and the same packet sequence mark the same packets. The
queue model (``emulator.fabric.port``) calls :meth:`RedMarker.should_mark` as a packet leaves the queue.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from emulator.errors import ConfigError


class UniformSource(Protocol):
    def random(self) -> float: ...


@dataclasses.dataclass(frozen=True, slots=True)
class RedParams:
    """Congestion-point marking: probability 0 up to Kmin, linear to Pmax at Kmax, 1 beyond Kmax."""

    kmin_bytes: int = 5_000
    kmax_bytes: int = 200_000
    pmax: float = 0.01

    def __post_init__(self) -> None:
        for name in ("kmin_bytes", "kmax_bytes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(f"red: knob {name!r} must be a non-negative integer, got {v!r}")
        if self.kmax_bytes < self.kmin_bytes:
            raise ConfigError(f"red: knob 'kmax_bytes' = {self.kmax_bytes} is below 'kmin_bytes' = {self.kmin_bytes}")
        if isinstance(self.pmax, bool) or not isinstance(self.pmax, (int, float)) or not 0.0 <= self.pmax <= 1.0:
            raise ConfigError(f"red: knob 'pmax' must be within [0, 1], got {self.pmax!r}")


def mark_probability(params: RedParams, queue_bytes: int) -> float:
    """p(q) of the RED curve above."""
    if queue_bytes <= params.kmin_bytes:
        return 0.0
    if queue_bytes > params.kmax_bytes:
        return 1.0
    return params.pmax * (queue_bytes - params.kmin_bytes) / (params.kmax_bytes - params.kmin_bytes)


class RedMarker:
    """Marking decisions for one egress queue, drawing chance from a seeded generator."""

    def __init__(self, params: RedParams, rng: UniformSource) -> None:
        self.params = params
        self._rng = rng

    def probability(self, queue_bytes: int) -> float:
        return mark_probability(self.params, queue_bytes)

    def should_mark(self, queue_bytes: int) -> bool:
        p = mark_probability(self.params, queue_bytes)
        if p <= 0.0:
            return False
        if p >= 1.0:
            return True
        return self._rng.random() < p
