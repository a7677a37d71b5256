"""What a half of an endpoint (:mod:`~emulator.endpoint.sender`, :mod:`~emulator.endpoint.receiver`) is
given by its rank at construction: narrow state, no reference to the rank."""

from __future__ import annotations

from collections.abc import Callable

from emulator.endpoint.events import FlowEvent
from emulator.endpoint.records import RankRecords


class RankHalf:
    """``records`` takes the per-packet counts, ``events`` the :class:`FlowEvent` actions (in order);
    ``push_timer(t_ns, kind, obj)`` arms a timer and returns its sequence number (a newer one for the same
    object supersedes it)."""

    #: slots: per-packet attributes at fixed offsets and methods found on the type (both halves have over 29
    #: attributes, past CPython 3.11's inline values); a dict too, for what a test or tool sets on one instance
    __slots__ = ("rank", "rec", "events", "_push_timer", "t0_ns", "__dict__")

    def __init__(self, rank: int, records: RankRecords, events: list[FlowEvent],
                 push_timer: Callable[[int, int, object], int]) -> None:
        self.rank = rank
        self.rec = records
        self.events = events
        self._push_timer = push_timer
        #: the run's time origin (set when the rank starts): event times are relative to it
        self.t0_ns = 0
