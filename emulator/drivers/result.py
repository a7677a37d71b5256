"""What every driver (sim, loopback, direct) returns: :class:`DriverResult`.

One shape for all three ways to run, so ``emulator run`` and the results writer never care which driver
ran. Fields:

* ``records`` — :class:`~emulator.endpoint.records.RankRecords` by rank. Always present for every rank
  the driver heard from, also when the run did not complete (a rank died, hung, the run timed out or was
  interrupted): then they hold what was measured up to the last snapshot (``-1`` times = did not happen).
* ``fabric`` — switch counters: ``{"ports": [per-port dict], ...}``; a per-port dict has exactly the
  fields of the sim driver's :class:`~emulator.drivers.sim_types.PortReport` (``port_id``, ``name``,
  ``kind``, ``rate_bps``, ``tx_packets``, ``tx_bytes``, ``peak_queue_bytes``, ``mean_queue_bytes``,
  ``ecn_marked_packets``, ``dropped_packets``, ``dropped_bytes``, ``loss_packets``, ``pause_time_ns``,
  ``xoff_time_ns``, ``utilisation``, ``sample_t_ns``, ``sample_queue_bytes``). Loopback: port r is the
  software switch's port toward rank r. Empty for ``direct`` (the real network keeps its own counters).
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

    @property
    def ranks_missing(self) -> list[int]:
        """Ranks of the world for which no records came back (only known with ``health['world_size']``)."""
        n = int(self.health.get("world_size", 0))
        return [r for r in range(n) if r not in self.records]

    def bytes_counter(self, key: str) -> int:
        """Sum of one endpoint counter (e.g. ``bytes_received``) over all ranks."""
        return sum(int(rec.counters.get(key, 0)) for rec in self.records.values())

    @classmethod
    def from_sim(cls, sim: Any) -> DriverResult:
        """The same shape from a :class:`~emulator.drivers.sim_types.SimResult`."""
        errors = [] if sim.complete else [
            f"sim run stopped: {sim.stop_reason}; ranks not done: " + ", ".join(map(str, sim.incomplete_ranks))]
        health = {"world_size": len(sim.records), "stop_reason": sim.stop_reason, "events": sim.stats.events,
                  "packets": sim.stats.packets, "hops": sim.stats.hops, "sim_wall_s": sim.stats.wall_s,
                  "sim_end_ns": sim.end_ns, "warnings": []}
        return cls(driver="sim", records=dict(sim.records), fabric={"kind": "sim", "ports": sim.fabric_counters()},
                   health=health, complete=bool(sim.complete), errors=errors, wall_ns=int(sim.stats.wall_s * 1e9))
