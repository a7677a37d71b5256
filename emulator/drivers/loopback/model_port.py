"""The software switch's egress port: a :class:`~emulator.fabric.batch_port.BatchPort` that also knows when its
wire went idle and which queue a late arrival left behind.

A batch that reaches the switch after the model clock passed its model arrival time (its sender's or the
switch's process got the CPU late: *lateness beyond the horizon*) cannot join the port at that time any
more. Two cases:

* **The port is idle** when it arrives, or **busy since before** its model arrival: the batch is served
  from its model arrival (or from when the wire went idle, or behind the queue, whichever is later), as
  the model would have served it: the port's busy time is the model's. Its departures may lie in the
  past: the switch forwards them at once and records the lag. Lateness leaves no queue behind.
* **The port went busy after** its model arrival: the idle time the port had between that time and its
  busy period is lost (the batch joins behind packets that arrived after it), and at a port loaded near
  its rate that lost time stays as a queue the model would not have. The port is then *tainted* until its
  queue next empties (from an empty queue on, the model is exact again), and every ECN mark it makes
  while tainted counts in ``lag_marks``: marks the machine's lateness may have made
  (:func:`emulator.instruments.fidelity.lag_queue_verdict` judges them).

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

    def late_arrival_ns(self, model_arrival_ns: int, out: list) -> int:
        """The time a batch joins this port whose model arrival ``model_arrival_ns`` the model clock already
        passed (departures due by then are appended to ``out`` first): its model arrival, or when the wire
        went idle if later (an idle port; a busy one serves it behind its queue). A port that went busy after
        that time lost the idle time in between: it is tainted until its queue next empties."""
        t = model_arrival_ns
        if self.next_departure_ns is not None and self.next_departure_ns <= t:
            self.advance(t, out)
        if self.next_departure_ns is None:
            return max(t, self.idle_since_ns)
        if self.busy_since_ns > t:
            self.unplaced_late_batches += 1
            self.tainted = True
        return t

    def _start(self, t_ns: int) -> None:
        was_idle = self.next_departure_ns is None
        super()._start(t_ns)
        if self.next_departure_ns is None:
            self.idle_since_ns = t_ns
            self.tainted = False
        elif was_idle:
            self.busy_since_ns = t_ns

    def _mark_runs(self, out: list, buf: Any, off: int, m: int, seg: int, tos: int, d0: int, s: int,
                   b0: int, w: int) -> None:
        if not self.tainted:
            super()._mark_runs(out, buf, off, m, seg, tos, d0, s, b0, w)
            return
        before = self.marked_packets
        super()._mark_runs(out, buf, off, m, seg, tos, d0, s, b0, w)
        self.lag_marks += self.marked_packets - before
