"""Notification point (NP): turns CE-marked arrivals into CNPs, at most one per interval per queue pair.

Theory of operation
-------------------
Per queue pair the NP remembers when it last sent a CNP. A data packet that arrives with ECN = CE
triggers a CNP at once if none was sent for that queue pair in the last ``min_time_between_cnps_ns``
(0 = answer every CE packet). Packets without CE never trigger anything. A CE packet inside the quiet
interval is either ignored (ConnectX ``min_time_between_cnps``) or, with ``defer`` (the paper's NP: "at
most one CNP per N per flow, only if a marked packet arrived in that window"), remembered: one CNP then
goes out when the interval ends, returned by :meth:`CnpGenerator.on_timer` at the deadline given by
:meth:`CnpGenerator.next_timer_ns`. The queue-pair key is any hashable the endpoint chooses.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Hashable

from emulator.errors import ConfigError


@dataclasses.dataclass(frozen=True, slots=True)
class NpParams:
    """Notification-point settings: at most one CNP per ``min_time_between_cnps_ns`` per queue pair.

    ``defer``: a CE packet arriving inside the quiet interval is remembered and answered by one CNP when
    the interval ends (paper NP); without it such packets are simply not answered (ConnectX).
    """

    min_time_between_cnps_ns: int = 4_000
    defer: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.min_time_between_cnps_ns, bool) or not isinstance(self.min_time_between_cnps_ns, int) \
                or self.min_time_between_cnps_ns < 0:
            raise ConfigError(f"np: knob 'min_time_between_cnps_ns' must be a non-negative integer, "
                              f"got {self.min_time_between_cnps_ns!r}")
        if not isinstance(self.defer, bool):
            raise ConfigError(f"np: knob 'defer' must be true or false, got {self.defer!r}")


class CnpGenerator:
    """CNP pacing for all queue pairs of one receiver."""

    def __init__(self, params: NpParams | None = None) -> None:
        self.params = params or NpParams()
        self._last_ns: dict[Hashable, int] = {}
        self._pending: dict[Hashable, int] = {}
        self._heap: list[tuple[int, int, Hashable]] = []
        self._seq = 0
        self.ce_packets = 0
        self.cnps_sent = 0
        self.ce_unanswered = 0   # CE packets that did not trigger a CNP of their own

    def on_packet(self, qp: Hashable, ce_marked: bool, now_ns: int) -> bool:
        """A data packet arrived; True means: send a CNP for ``qp`` now."""
        if not ce_marked:
            return False
        self.ce_packets += 1
        interval = self.params.min_time_between_cnps_ns
        last = self._last_ns.get(qp)
        if last is None or now_ns - last >= interval:
            if qp in self._pending:     # a deferred CNP that the driver has not collected yet is this one
                del self._pending[qp]
            self._last_ns[qp] = now_ns
            self.cnps_sent += 1
            return True
        self.ce_unanswered += 1
        if self.params.defer and qp not in self._pending:
            due = last + interval
            self._pending[qp] = due
            heapq.heappush(self._heap, (due, self._seq, qp))
            self._seq += 1
        return False

    def next_timer_ns(self) -> int | None:
        while self._heap:
            due, _, qp = self._heap[0]
            if self._pending.get(qp) == due:
                return due
            heapq.heappop(self._heap)
        return None

    def last_cnp_ns(self, qp: Hashable) -> int | None:
        """When the last CNP of ``qp`` went (a deferred one: the end of its quiet interval), None before any."""
        return self._last_ns.get(qp)

    def on_timer(self, now_ns: int) -> list[Hashable]:
        """Queue pairs whose deferred CNP is due by ``now_ns`` (send one CNP for each)."""
        out: list[Hashable] = []
        while self._heap and self._heap[0][0] <= now_ns:
            due, _, qp = heapq.heappop(self._heap)
            if self._pending.get(qp) != due:
                continue
            del self._pending[qp]
            self._last_ns[qp] = due
            self.cnps_sent += 1
            out.append(qp)
        return out
