"""The fluid model's own knobs (:class:`FluidConfig`); the fabric's rates, buffers and marking come from the
profile. :mod:`emulator.fabric.fluid` is the model they tune."""

from __future__ import annotations

import dataclasses

from emulator.errors import ConfigError


@dataclasses.dataclass(frozen=True, slots=True)
class FluidConfig:
    """Knobs of the fluid model itself (the fabric's rates, buffers and marking come from the profile).

    * ``step_ns``: slice length while the fabric is congested (queues, overload or CNPs in flight), at ports
      of 25 Gb/s and faster; a slower fabric's slices carry its slowest port as many bytes
      (:func:`emulator.drivers.fluid.port_step`).
    * ``done_backlog_bytes``: a flow whose sender is done counts as delivered once less than this many of
      its bytes are left in queues (the fluid limit never empties a shared queue exactly).
    * ``sample_interval_ns`` / ``max_samples``: per-port queue samples (halved when full, as in the sim).
    * ``fifo_epochs``: 0 = a switch port serves by backlog share, stopped tails first; K >= 2 = as a FIFO
      of K arrival epochs (:mod:`emulator.fabric.fluid_fifo`: departures follow the arrival mix one
      queueing delay later; K float32 per flow and switch level).
    * ``tail_delivery``: a flow delivered in a congested slice is delivered when its last bytes left
      (:mod:`emulator.fabric.fluid_tail`), not at the slice's end (off: bench/RESULTS.md, fluidring3).
    * ``nic_round_robin``: a NIC serves its queue pairs as the packet sim's round robin does (fluid_nic): its own
      batch first in posting order, then max-min fair in the rates they want, the last round in posting order;
      off: processor sharing in proportion to the rates (bench/RESULTS.md, fluidacc6 and fluidacc7).
    * ``mark_epochs`` (default 3): 0 = a switch port's ECN marks fall on its flows in proportion to what each is
      served; K >= 2 = as a FIFO of K arrival epochs would serve them (the packet sim marks on departure), the service
      staying by backlog share; ignored with ``fifo_epochs`` (whose service is that FIFO) and without ECN.
      K may be fractional: epochs of ``1 / (K − 1)`` of the queue in ``ceil(K)`` slots.
    * ``cnps_behind`` (default on): a CNP fired while the queue pair's previous one is on its way follows it (one
      behind at most); off: it is lost.
    * ``cnp_after_ticks`` (off): a CNP reaching a queue pair at ``t`` comes after its DCQCN clocks due by ``t``,
      as :mod:`emulator.pacing.dcqcn` orders equal times — a monitor tick at ``t`` cuts for the CNPs before
      it and the CNP at ``t`` waits for the next; off: the CNP first, and a train of CNPs one monitor period
      apart (ConnectX: 4 µs, the NP's interval) cuts every other period. On, the 64-rank 400 Gb/s ring's
      cuts follow the packet sim's cut for cut, and sim_mixed_ar_a2a's All-Reduce p99 falls to 0.853 of the
      packet sim's over 16 seeds (off 0.907): not the default (bench/RESULTS.md, fmark16).

    ``mark_epochs = 3`` with ``cnps_behind`` meets every accuracy row the model met without them, pooled over
    16 seeds, and closes sim_mixed_ar_a2a's All-Reduce p50 (1.069 → 1.004); each alone does not, nor K = 3.5
    or 4 (bench/RESULTS.md, fmix13–fmix15).
    """

    step_ns: int = 1_000
    done_backlog_bytes: float = 256.0
    sample_interval_ns: int = 10_000
    max_samples: int = 2048
    fifo_epochs: int = 0
    tail_delivery: bool = False
    nic_round_robin: bool = True
    mark_epochs: float = 3
    cnps_behind: bool = True
    cnp_after_ticks: bool = False

    def __post_init__(self) -> None:
        for name in ("step_ns", "sample_interval_ns", "max_samples"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"fluid: {name!r} must be an integer >= 1, got {v!r}")
        k = self.fifo_epochs
        if isinstance(k, bool) or not isinstance(k, int) or k == 1 or k < 0:
            raise ConfigError(f"fluid: 'fifo_epochs' must be 0 (off) or an integer >= 2, got {k!r}")
        m = self.mark_epochs
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not (m == 0 or m >= 2):
            raise ConfigError(f"fluid: 'mark_epochs' must be 0 (off) or a number >= 2, got {m!r}")
        if not self.done_backlog_bytes > 0:
            raise ConfigError(f"fluid: 'done_backlog_bytes' must be positive, got {self.done_backlog_bytes!r}")
