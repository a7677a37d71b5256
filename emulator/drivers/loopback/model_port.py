"""The software switch's egress port: a :class:`~emulator.fabric.batch_port.BatchPort` that also knows when its
wire went idle and which queue a late arrival left behind.

A batch that reaches the switch after the model clock passed its model arrival time (its sender's or the
switch's process got the CPU late: *lateness beyond the horizon*) cannot join the port at that time any
more. Two cases:

* **The port is idle** when it arrives, or **busy since before** its model arrival: the batch is served
  from its model arrival (or from when the wire went idle if later; at a busy port after the packets that
  arrived before it), as the model would have served it: the port's busy time is the model's. Its departures may lie in the
  past: the switch forwards them at once and records the lag. Lateness leaves no queue behind.
* **The port went busy after** its model arrival: the idle time the port had between that time and its
  busy period is lost (the batch waits for the packet on the wire, which arrived after it), and at a port
  loaded near its rate that lost time stays as a queue the model would not have: up to the lost time at the port
  rate, no more than the batch (``lag_excess_bytes``). The port is *tainted* until its queue next
  empties (from an empty queue on, the model is exact again). An ECN mark it makes while tainted on a
  queue that, less that excess, is at or below Kmin counts in ``lag_marks``: a mark the machine's
  lateness made (:func:`emulator.instruments.fidelity.with_lag_marks` judges them).

Sans-IO, like the port it extends.
"""

from __future__ import annotations

from typing import Any

from emulator.fabric.batch_port import BatchPort


class ModelPort(BatchPort):
    """A switch egress port that serves a late batch from its model time where its wire was idle, and
    counts the marks a queue left by a late batch produced (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: when the wire last went idle (the last departure of a busy period)
        self.idle_since_ns = 0
        #: when the current busy period began
        self.busy_since_ns = 0
        #: late batches the port went busy after (their lateness may leave a queue)
        self.unplaced_late_batches = 0
        #: ECN marks made while a late batch's queue may persist (until the port next empties)
        self.lag_marks = 0
        self.tainted = False
        #: the queue a late batch's lost idle time may have left, until the port next empties
        self.lag_excess_bytes = 0
        #: per sender (its id > 0), the arrival of the last packet of its last late batch served from when the
        #: wire went idle: its later packets arrive no earlier (a sender's packets reach a port in its order)
        self.sender_floor_ns: dict[int, int] = {}

    def late_arrival_ns(self, model_arrival_ns: int, n: int, seg: int, last: int, out: list, sender: int = 0,
                        gap_ns: int = 0) -> int:
        """The time a batch (``n`` packets of ``seg`` payload bytes, the last ``last``, ``gap_ns`` apart, from
        ``sender``) joins this port whose model arrival ``model_arrival_ns`` the model clock already passed
        (departures due by then are appended to ``out`` first): its model arrival, or when the wire went idle
        if later (an idle port; a busy one serves it behind its queue), which then holds the sender's later
        batches behind it (``sender_floor_ns``). A port that went busy after that time lost the idle time in
        between: it is tainted until it next empties."""
        t = model_arrival_ns
        if self.next_departure_ns is not None and self.next_departure_ns <= t:
            self.advance(t, out)
        if self.next_departure_ns is None:
            if self.idle_since_ns > t and sender > 0:
                self.sender_floor_ns[sender] = self.idle_since_ns + (n - 1) * gap_ns
            return max(t, self.idle_since_ns)
        lost_ns = self.busy_since_ns - max(t, self.idle_since_ns)
        if lost_ns > 0:
            self.unplaced_late_batches += 1
            self.tainted = True
            wire_bytes = (n - 1) * (seg + self.over) + last + self.over
            self.lag_excess_bytes += min(wire_bytes, lost_ns * self._rate // 8_000_000_000)
        return t

    def _start(self, t_ns: int) -> None:
        was_idle = self.next_departure_ns is None
        super()._start(t_ns)
        if self.next_departure_ns is None:
            self.idle_since_ns = t_ns
            self.tainted = False
            self.lag_excess_bytes = 0
        elif was_idle:
            self.busy_since_ns = t_ns

    def _mark_runs(self, out: list, buf: Any, off: int, m: int, seg: int, tos: int, d0: int, s: int,
                   b0: int, w: int) -> None:
        if not self.tainted:
            super()._mark_runs(out, buf, off, m, seg, tos, d0, s, b0, w)
            return
        before = self.marked_packets
        super()._mark_runs(out, buf, off, m, seg, tos, d0, s, b0, w)
        # packet j leaves b0 − (j+1)·w behind; without the excess it would be at or below Kmin from j0 on
        j0 = max(0, -(-(b0 - self.lag_excess_bytes - self._kmin) // w) - 1)
        self.lag_marks += min(self.marked_packets - before, max(0, m - j0))
