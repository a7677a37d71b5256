"""Clock offset of an agent relative to the controller, from NTP-style exchanges (sans-IO).

One exchange: the controller stamps ``t1_ns`` when it sends, the agent ``t2_ns`` when it receives and
``t3_ns`` when it answers, the controller ``t4_ns`` when the answer arrives (each on its own monotonic
clock). Whatever the one-way delays (each ≥ 0), the agent's offset θ (agent clock − controller clock)
lies in ``[θᵢ − δᵢ/2, θᵢ + δᵢ/2]`` with θᵢ = ((t2 − t1) + (t3 − t4)) / 2 and round trip
δᵢ = (t4 − t1) − (t3 − t2). :func:`estimate_offset` keeps the minimum-RTT samples and intersects their
intervals: the offset is the middle of the intersection, its uncertainty half its width. If the
intervals do not meet (a clock stepped or drifted during the exchanges), the minimum-RTT sample alone
gives the estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from emulator.errors import RunError


@dataclass(frozen=True, slots=True)
class ClockSample:
    """One exchange (ns; t1/t4 on the controller's clock, t2/t3 on the agent's)."""

    t1_ns: int
    t2_ns: int
    t3_ns: int
    t4_ns: int

    @property
    def rtt_ns(self) -> int:
        return max(0, (self.t4_ns - self.t1_ns) - (self.t3_ns - self.t2_ns))

    @property
    def offset_ns(self) -> float:
        return ((self.t2_ns - self.t1_ns) + (self.t3_ns - self.t4_ns)) / 2


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """Agent clock − controller clock, with the half-width of the interval it is known to lie in."""

    offset_ns: int
    uncertainty_ns: int
    min_rtt_ns: int
    samples: int
    kept: int

    def to_agent_ns(self, controller_ns: int) -> int:
        """A controller-clock time on the agent's clock."""
        return controller_ns + self.offset_ns

    def to_dict(self) -> dict[str, int]:
        return {"offset_ns": self.offset_ns, "uncertainty_ns": self.uncertainty_ns,
                "min_rtt_ns": self.min_rtt_ns, "samples": self.samples, "kept": self.kept}


def estimate_offset(samples: Sequence[ClockSample], keep_fraction: float = 0.5) -> ClockOffset:
    """The offset from the ``keep_fraction`` of ``samples`` with the smallest round trips (module docstring)."""
    if not samples:
        raise RunError("clock offset: no exchange answered")
    ordered = sorted(samples, key=lambda s: s.rtt_ns)
    kept = ordered[:max(1, int(len(ordered) * keep_fraction))]
    lo = max(s.offset_ns - s.rtt_ns / 2 for s in kept)
    hi = min(s.offset_ns + s.rtt_ns / 2 for s in kept)
    if lo > hi:  # inconsistent intervals: fall back to the best single sample
        best = kept[0]
        lo, hi = best.offset_ns - best.rtt_ns / 2, best.offset_ns + best.rtt_ns / 2
    mid = (lo + hi) / 2
    # round outward so the integer interval still contains the real one
    return ClockOffset(offset_ns=round(mid), uncertainty_ns=math.ceil((hi - lo) / 2 + 0.5),
                       min_rtt_ns=ordered[0].rtt_ns, samples=len(samples), kept=len(kept))
