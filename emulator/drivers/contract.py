"""What every driver (sim, loopback, direct) returns: :class:`DriverResult`.

One shape for all three ways to run, so ``emulator run`` and the results writer never care which driver
ran. Fields:

* ``records`` — :class:`~emulator.endpoint.records.RankRecords` by rank. Always present for every rank
  the driver heard from, also when the run did not complete (a rank died, hung, the run timed out or was
  interrupted): then they hold what was measured up to the last snapshot (``-1`` times = did not happen).
* ``fabric`` — switch counters: ``{"ports": [per-port dict], "queue_samples": {...}, ...}``. A per-port
  dict has ``port`` (loopback: the port toward rank ``port``), ``name``, ``kind``, ``rate_bps``,
  ``enqueued_packets/bytes``, ``dequeued_packets/bytes``, ``marked_packets/bytes`` (ECN CE),
  ``dropped_packets/bytes``, ``peak_queue_bytes``, ``mean_queue_bytes``, ``xoff_time_ns``,
  ``paused_time_ns``, ``utilisation`` (dequeued bits / (rate × elapsed)). ``queue_samples`` holds parallel
  lists ``t_ns``, ``port``, ``queue_bytes``. Empty for ``direct`` (the real network keeps its own counters).
* ``health`` — how well the driver kept up: lag percentiles (``*_lag_ns`` dicts with p50/p99/p999/max/
  count), late counts, socket drops (``SO_RXQ_OVFL``), send errors. The run is honest only if these
  are small; ``health["warnings"]`` lists what a reader must know (e.g. "switch forwarded 12% of packets
  more than 500 µs late").
* ``complete`` — every rank finished every op; ``errors`` — one line each ("rank 5 (worker pid 1234)
  died: exit code -9", "rank 3 hung: no progress for 5.0 s", "interrupted by the user").
* ``wall_ns`` — wall time of the run from the common t0 to the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from emulator.endpoint.records import RankRecords


@dataclass
class DriverResult:
    """The outcome of one run by any driver (see module docstring)."""

    driver: str
    records: dict[int, RankRecords]
    fabric: dict[str, Any] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)
    complete: bool = False
    errors: list[str] = field(default_factory=list)
    wall_ns: int = 0

    def bytes_counter(self, key: str) -> int:
        """Sum of one endpoint counter (e.g. ``bytes_received``) over all ranks."""
        return sum(int(rec.counters.get(key, 0)) for rec in self.records.values())
