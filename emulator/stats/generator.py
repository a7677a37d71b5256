"""Generator health: how long flows waited between their scheduled start and their first packet
(docs/metrics.md §6), and the timing-fidelity verdict of socket runs.

Theory of operation
-------------------
For every flow (or operation) with a scheduled start, ``lag = actual_start − scheduled_start`` in
ns of the run's time base (emulated time under time dilation). The scheduled start is the flow's
*ready* time (dependencies met, not-before passed); the actual start is its first packet leaving
the sender. The lag therefore holds the sender's own queueing (a queue pair sends its flows in order,
the NIC is shared, DCQCN paces a cut rate) as well as any lateness of the machine, and it is not zero
on the sim. A long tail is the latency a naive "from the actual send" timer would hide (coordinated
omission). The machine's lateness alone is :func:`timing_fidelity`'s: per packet, how far behind its
pacer's time it reached the switch (and the switch forwarded it) beyond the switch's horizon.
The lag distribution is reported with nearest-rank percentiles; negative lag (started early) is
kept, not clipped. A flow is *late* when ``lag > late_threshold_ns``. Flows whose actual start is
−1 never started and are counted apart (``not_started``), never silently dropped.

Packet-level counts (late, skipped, not sent in time) are counted by the engine; this module only
carries them into the report next to the flow-level figures.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from emulator.instruments.percentiles import Distribution
from emulator.stats.bounded import EXACT, SummaryPolicy, summarize_bounded

DEFAULT_LATE_THRESHOLD_NS = 10_000  # 10 µs


@dataclass(frozen=True, slots=True)
class GeneratorHealth:
    flows: int
    started: int
    not_started: int
    late_threshold_ns: int
    flows_late: int  # lag > late_threshold_ns
    late_fraction: float | None  # flows_late / started (None when nothing started)
    lag_ns: Distribution
    packets_late: int
    packets_skipped: int
    packets_unsent: int

    def to_dict(self) -> dict[str, object]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["lag_ns"] = self.lag_ns.to_dict()
        return d


def lag_ns(scheduled_start_ns: np.ndarray, actual_start_ns: np.ndarray) -> np.ndarray:
    """``actual − scheduled`` of the started rows (actual start ≥ 0)."""
    sched = np.asarray(scheduled_start_ns, dtype=np.int64)
    actual = np.asarray(actual_start_ns, dtype=np.int64)
    if sched.shape != actual.shape or sched.ndim != 1:
        raise ValueError("scheduled_start_ns and actual_start_ns must be 1-D arrays of equal length")
    started = actual >= 0
    return actual[started] - sched[started]


def generator_health(
    scheduled_start_ns: np.ndarray,
    actual_start_ns: np.ndarray,
    late_threshold_ns: int = DEFAULT_LATE_THRESHOLD_NS,
    packets_late: int = 0,
    packets_skipped: int = 0,
    packets_unsent: int = 0,
    policy: SummaryPolicy | None = None,
) -> GeneratorHealth:
    """Lag distribution, late and never-started flows, plus the engine's packet counters.

    ``policy`` bounds the memory of the lag distribution (exact by default).
    """
    if late_threshold_ns < 0:
        raise ValueError(f"late_threshold_ns must not be negative, got {late_threshold_ns}")
    for name, v in (("packets_late", packets_late), ("packets_skipped", packets_skipped),
                    ("packets_unsent", packets_unsent)):
        if v < 0:
            raise ValueError(f"{name} must not be negative, got {v}")
    lag = lag_ns(scheduled_start_ns, actual_start_ns)
    flows = int(np.shape(scheduled_start_ns)[0])
    started = int(lag.shape[0])
    late = int(np.count_nonzero(lag > late_threshold_ns))
    return GeneratorHealth(
        flows=flows,
        started=started,
        not_started=flows - started,
        late_threshold_ns=int(late_threshold_ns),
        flows_late=late,
        late_fraction=late / started if started else None,
        lag_ns=summarize_bounded(lag, policy or EXACT),
        packets_late=int(packets_late),
        packets_skipped=int(packets_skipped),
        packets_unsent=int(packets_unsent),
    )


