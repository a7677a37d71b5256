"""Flow completion time, ideal FCT, slowdown and HPCC-style size buckets (docs/metrics.md §3, §6).

Theory of operation
-------------------
Input is one row per flow: ``size_bytes`` (payload), ``scheduled_start_ns`` (when the schedule said
the flow may start), ``actual_start_ns`` (first byte handed to the wire; −1 = never started) and
``end_ns`` (last byte delivered/acknowledged; −1 = unfinished).

* ``fct_scheduled_ns = end − scheduled_start`` — THE flow completion time (a lagging generator
  cannot hide latency: coordinated omission, docs/metrics.md §6);
* ``fct_actual_ns = end − actual_start`` — kept beside it;
* ``ideal_fct_ns = base_rtt_ns + wire_bytes × 8 × 10^9 / bottleneck_bps`` (float ns) where
  ``wire_bytes = size + packets × per_packet_overhead_bytes + first_packet_extra_bytes`` and
  ``packets = max(1, ceil(size / mtu_payload_bytes))``. Defaults follow docs/rocev2.md: 62 B per packet
  (Eth 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 + FCS 4, untagged) plus a 16 B RETH on the first
  packet of a WRITE; add 20 B per packet (preamble/SFD/IFG) or 4 B (VLAN) through the parameter if the
  bottleneck rate counts them. Payload padding to 4 B (at most 3 B per flow) is ignored.
* ``slowdown = fct_scheduled / ideal``, **floored at 1** (HPCC);
* ``achieved_rate_bps = size × 8 × 10^9 / (end − actual_start)`` (payload bits per second while
  the flow was actually in flight).

Unfinished flows keep −1 in the integer columns and NaN in the float ones; they are never
dropped silently — :func:`slowdown_by_size` counts them per bucket.

Size buckets (HPCC ``fct_analysis.py`` convention): flows sorted by size and cut into equal-count
buckets (5 % by default). A boundary that would separate flows of the same size is moved up to the
end of that size, so every size lives in one bucket (a bucket may thus hold more than 5 %, and
empty buckets are dropped). With explicit ``edges`` (ascending byte cut points) bucket ``i`` holds
``edges[i-1] <= size < edges[i]`` (unbounded at both ends). Percentiles are nearest rank over the
finished flows of the bucket.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from emulator.instruments.percentiles import Distribution, percentile_sorted
from emulator.stats.bounded import EXACT, SummaryPolicy, summarize_bounded

ROCEV2_IPV4_OVERHEAD_BYTES = 62  # Eth 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 + FCS 4
RETH_BYTES = 16
DEFAULT_MTU_PAYLOAD_BYTES = 4096


def _i64(x: np.ndarray | Sequence[int], name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array")
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def ideal_fct_ns(
    size_bytes: np.ndarray | int,
    base_rtt_ns: np.ndarray | float,
    bottleneck_bps: np.ndarray | float,
    mtu_payload_bytes: int = DEFAULT_MTU_PAYLOAD_BYTES,
    per_packet_overhead_bytes: int = ROCEV2_IPV4_OVERHEAD_BYTES,
    first_packet_extra_bytes: int = RETH_BYTES,
) -> np.ndarray:
    """Standalone FCT on an empty fabric (float ns), element-wise over broadcastable inputs."""
    if mtu_payload_bytes < 1:
        raise ValueError(f"mtu_payload_bytes must be positive, got {mtu_payload_bytes}")
    if per_packet_overhead_bytes < 0 or first_packet_extra_bytes < 0:
        raise ValueError("header overheads must not be negative")
    size = np.asarray(size_bytes, dtype=np.int64)
    bps = np.asarray(bottleneck_bps, dtype=np.float64)
    if (size < 0).any():
        raise ValueError("flow sizes must not be negative")
    if (bps <= 0).any():
        raise ValueError("bottleneck_bps must be positive")
    packets = np.maximum(1, -(-size // mtu_payload_bytes))
    wire = size + packets * per_packet_overhead_bytes + first_packet_extra_bytes
    return np.asarray(base_rtt_ns, dtype=np.float64) + wire.astype(np.float64) * 8e9 / bps


@dataclass(frozen=True, slots=True, eq=False)
class FlowStats:
    """Per-flow figures (arrays aligned with the input rows; see module docstring)."""

    size_bytes: np.ndarray
    finished: np.ndarray  # bool
    fct_scheduled_ns: np.ndarray  # int64, −1 unfinished
    fct_actual_ns: np.ndarray  # int64, −1 unfinished
    ideal_fct_ns: np.ndarray  # float64
    slowdown: np.ndarray  # float64, ≥ 1, NaN unfinished
    achieved_rate_bps: np.ndarray  # float64, NaN unfinished (inf for a zero-length flight)

    @property
    def unfinished(self) -> int:
        return int(np.count_nonzero(~self.finished))

    def summary(self, policy: SummaryPolicy | None = None) -> FlowSummary:
        """Distributions over the finished flows (exact, or histogram-based above ``policy.exact_limit``)."""
        f = self.finished
        pol = policy or EXACT
        return FlowSummary(
            flows=int(f.shape[0]),
            finished=int(np.count_nonzero(f)),
            unfinished=self.unfinished,
            fct_scheduled_ns=summarize_bounded(self.fct_scheduled_ns[f], pol),
            fct_actual_ns=summarize_bounded(self.fct_actual_ns[f], pol),
            slowdown=summarize_bounded(self.slowdown[f], pol),
            achieved_rate_bps=summarize_bounded(self.achieved_rate_bps[f & np.isfinite(self.achieved_rate_bps)], pol),
        )


@dataclass(frozen=True, slots=True)
class FlowSummary:
    flows: int
    finished: int
    unfinished: int
    fct_scheduled_ns: Distribution
    fct_actual_ns: Distribution
    slowdown: Distribution
    achieved_rate_bps: Distribution

    def to_dict(self) -> dict[str, object]:
        return {"flows": self.flows, "finished": self.finished, "unfinished": self.unfinished,
                "fct_scheduled_ns": self.fct_scheduled_ns.to_dict(), "fct_actual_ns": self.fct_actual_ns.to_dict(),
                "slowdown": self.slowdown.to_dict(), "achieved_rate_bps": self.achieved_rate_bps.to_dict()}


def flow_stats(
    size_bytes: np.ndarray,
    scheduled_start_ns: np.ndarray,
    actual_start_ns: np.ndarray,
    end_ns: np.ndarray,
    base_rtt_ns: np.ndarray | float,
    bottleneck_bps: np.ndarray | float,
    mtu_payload_bytes: int = DEFAULT_MTU_PAYLOAD_BYTES,
    per_packet_overhead_bytes: int = ROCEV2_IPV4_OVERHEAD_BYTES,
    first_packet_extra_bytes: int = RETH_BYTES,
) -> FlowStats:
    """FCT (both starts), ideal FCT, slowdown and achieved rate of every flow."""
    size = _i64(size_bytes, "size_bytes")
    sched = _i64(scheduled_start_ns, "scheduled_start_ns")
    actual = _i64(actual_start_ns, "actual_start_ns")
    end = _i64(end_ns, "end_ns")
    if not (size.shape == sched.shape == actual.shape == end.shape):
        raise ValueError("flow arrays must have equal length")
    finished = end >= 0
    if (finished & (actual < 0)).any():
        i = int(np.flatnonzero(finished & (actual < 0))[0])
        raise ValueError(f"flow {i} finished but has no actual start")
    for name, start in (("scheduled", sched), ("actual", actual)):
        bad = finished & (end < start)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"flow {i} ends at {int(end[i])} ns before its {name} start {int(start[i])} ns")
    ideal = np.broadcast_to(
        ideal_fct_ns(size, base_rtt_ns, bottleneck_bps, mtu_payload_bytes, per_packet_overhead_bytes,
                     first_packet_extra_bytes),
        size.shape,
    ).astype(np.float64)
    fct_s = np.where(finished, end - sched, -1)
    fct_a = np.where(finished, end - actual, -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        slowdown = np.where(finished, np.maximum(1.0, fct_s / ideal), np.nan)
        flight = (end - actual).astype(np.float64)
        rate = np.where(finished, size.astype(np.float64) * 8e9 / flight, np.nan)
        rate = np.where(finished & (flight == 0), np.inf, rate)
    return FlowStats(size, finished, fct_s, fct_a, ideal, slowdown, rate)


@dataclass(frozen=True, slots=True)
class SizeBucket:
    """Slowdown of the flows in one size range (inclusive min/max of the sizes present)."""

    min_size_bytes: int
    max_size_bytes: int
    flows: int
    unfinished: int
    median_slowdown: float | None
    p95_slowdown: float | None
    p99_slowdown: float | None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _bucket(sizes: np.ndarray, slow: np.ndarray, finished: np.ndarray) -> SizeBucket:
    done = np.sort(slow[finished])
    have = done.shape[0] > 0
    return SizeBucket(
        min_size_bytes=int(sizes.min()),
        max_size_bytes=int(sizes.max()),
        flows=int(sizes.shape[0]),
        unfinished=int(np.count_nonzero(~finished)),
        median_slowdown=float(percentile_sorted(done, 50)) if have else None,
        p95_slowdown=float(percentile_sorted(done, 95)) if have else None,
        p99_slowdown=float(percentile_sorted(done, 99)) if have else None,
    )


def slowdown_by_size(
    stats: FlowStats, bucket_fraction: float = 0.05, edges: Sequence[int] | None = None
) -> list[SizeBucket]:
    """HPCC-style slowdown per size bucket (equal-count buckets, or explicit byte ``edges``)."""
    size, slow, fin = stats.size_bytes, stats.slowdown, stats.finished
    n = size.shape[0]
    if n == 0:
        return []
    order = np.argsort(size, kind="stable")
    size, slow, fin = size[order], slow[order], fin[order]
    if edges is not None:
        e = np.asarray(list(edges), dtype=np.int64)
        if e.ndim != 1 or (np.diff(e) <= 0).any():
            raise ValueError("size bucket edges must be strictly ascending")
        cuts = np.searchsorted(size, e, side="left")
    else:
        if not 0 < bucket_fraction <= 1:
            raise ValueError(f"bucket_fraction must be in (0, 1], got {bucket_fraction}")
        k = max(1, round(1 / bucket_fraction))
        cut_list = []
        for j in range(1, k):
            c = (j * n) // k
            if 0 < c < n and size[c - 1] == size[c]:  # would split one size: move to its end
                c = int(np.searchsorted(size, size[c], side="right"))
            cut_list.append(c)
        cuts = np.asarray(cut_list, dtype=np.int64)
    bounds = np.unique(np.concatenate(([0], cuts, [n])))
    out = []
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if b > a:
            out.append(_bucket(size[a:b], slow[a:b], fin[a:b]))
    return out
