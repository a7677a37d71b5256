"""The rate-controller contract the endpoint uses, plus the two trivial controllers.

Theory of operation
-------------------
A rate controller is the reaction point (RP) of one queue pair. It is a sans-IO state machine: it never
reads a clock. The endpoint feeds it three kinds of input, each stamped with the current time:

* ``on_cnp(now_ns)`` — a Congestion Notification Packet arrived for this queue pair;
* ``on_bytes_sent(n_bytes, now_ns)`` — the queue pair put ``n_bytes`` on the wire (drives byte counters);
  it may return False to say that no input since the controller was made changed its rate or set a
  timer (the driver then has nothing to read back); None otherwise;
* ``on_timer(now_ns)`` — the driver honoured the deadline returned by ``next_timer_ns()``.

Every input first brings all internal clocks up to ``now_ns`` (a late ``on_timer`` call is harmless:
the missed periods are replayed in order), then acts. The driver reads ``rate_bps`` after each call
and hands it to the pacer. ``next_timer_ns()`` returns the next absolute deadline or ``None`` when the
controller is idle (for DCQCN: at line rate with nothing to recover).

:class:`NoCongestionControl` (preset ``none``) stays at line rate and ignores CNPs; :class:`FixedRate`
(preset ``fixed``) holds a constant rate. Both let runs compare with and without congestion control.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True, slots=True)
class RateState:
    """A snapshot for tracing: what the controller believes at ``t_ns``."""

    t_ns: int
    rate_bps: float
    target_rate_bps: float
    alpha: float
    time_stage: int         # timer increase events since the last cut
    byte_stage: int         # byte-counter increase events since the last cut
    cnps_received: int
    cuts: int               # rate reductions applied
    increase_events: int


def slot_names(cls: type) -> tuple[str, ...]:
    """Every ``__slots__`` entry of ``cls`` and its bases, bases first."""
    return tuple(name for k in reversed(cls.__mro__) for name in k.__dict__.get("__slots__", ()))


def slotted_copy(cls: type) -> Callable[[object], object]:
    """A ``copy(self)`` for instances of the slotted ``cls`` whose slots hold immutable values: a new instance
    with every slot of ``self``, set by one store each (generated: no loop, no ``getattr``/``setattr`` calls)."""
    body = "".join(f"    c.{name} = self.{name}\n" for name in slot_names(cls))
    ns: dict[str, object] = {"_new": object.__new__, "_cls": cls}
    exec(f"def copy(self):\n    c = _new(_cls)\n{body}    return c\n", ns)  # noqa: S102 - names from __slots__
    return ns["copy"]  # type: ignore[return-value]


@runtime_checkable
class RateController(Protocol):
    """What the endpoint calls on the reaction point of one queue pair."""

    name: str

    @property
    def rate_bps(self) -> float: ...

    def on_cnp(self, now_ns: int) -> None: ...

    def on_bytes_sent(self, n_bytes: int, now_ns: int) -> bool | None: ...

    def on_timer(self, now_ns: int) -> None: ...

    def next_timer_ns(self) -> int | None: ...

    def state(self) -> RateState: ...


class _Constant:
    """A controller whose rate never changes; counts CNPs so traces still show them."""

    name = "constant"

    def __init__(self, rate_bps: float) -> None:
        self._rate_bps = float(rate_bps)
        self._cnps = 0
        self._t_ns = 0

    @property
    def rate_bps(self) -> float:
        return self._rate_bps

    def on_cnp(self, now_ns: int) -> None:
        self._cnps += 1
        self._t_ns = now_ns

    def on_bytes_sent(self, n_bytes: int, now_ns: int) -> None:
        self._t_ns = now_ns

    def on_timer(self, now_ns: int) -> None:
        self._t_ns = now_ns

    def next_timer_ns(self) -> int | None:
        return None

    def state(self) -> RateState:
        return RateState(self._t_ns, self._rate_bps, self._rate_bps, 0.0, 0, 0, self._cnps, 0, 0)


class NoCongestionControl(_Constant):
    """Preset ``none``: line rate, CNPs ignored (but counted)."""

    name = "none"


class FixedRate(_Constant):
    """Preset ``fixed``: a constant rate, CNPs ignored (but counted)."""

    name = "fixed"
