"""How the summaries are computed: :class:`AnalysisOptions` (stored in results.json ``analysis``) and the
empty-fabric run that the ``ideal`` straggler basis judges against (:func:`ideal_ops`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from emulator.errors import ResultsError
from emulator.instruments.histogram import DEFAULT_SUB_BUCKET_BITS
from emulator.schedule.model import Schedule
from emulator.stats.bounded import DEFAULT_EXACT_LIMIT, SummaryPolicy
from emulator.stats.stragglers import DEFAULT_LATE_TOLERANCE, DEFAULT_SLOW_FACTOR
from emulator.stats.tables import op_table

#: default cap on ``iteration.per_iteration`` (first 500 and last 500 measured iterations)
DEFAULT_PER_ITERATION_LIMIT = 1000

#: what straggler figures are judged against (see :class:`AnalysisOptions`)
STRAGGLER_BASES = ("ideal", "median")


@dataclass(frozen=True, slots=True)
class AnalysisOptions:
    """How the summaries are computed; stored in results.json (``analysis``) so recompute agrees."""

    slow_factor: float = DEFAULT_SLOW_FACTOR
    late_threshold_ns: int = 10_000
    bucket_fraction: float = 0.05
    # ideal (standalone) FCT on an empty fabric
    rate_bps: float = 25e9
    latency_ns: int = 1000
    mtu_bytes: int = 4096
    uplink_rate_bps: float | None = None
    rank_leaf: tuple[int, ...] = field(default=())
    # memory bound of the distributions (see emulator.stats.bounded): exact nearest rank up to
    # exact_limit samples per grouping, log-linear histograms of 2^-(bits+1) relative error above it
    exact_limit: int = DEFAULT_EXACT_LIMIT
    histogram_sub_bucket_bits: int = DEFAULT_SUB_BUCKET_BITS
    # iteration.per_iteration keeps the first and the last per_iteration_limit // 2 measured iterations
    per_iteration_limit: int = DEFAULT_PER_ITERATION_LIMIT
    # stragglers judged against the algorithm's own order on an empty fabric ("ideal") or the median ("median")
    straggler_basis: str = "ideal"
    late_tolerance: float = DEFAULT_LATE_TOLERANCE

    @property
    def policy(self) -> SummaryPolicy:
        return SummaryPolicy(exact_limit=int(self.exact_limit), sub_bucket_bits=int(self.histogram_sub_bucket_bits))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rank_leaf"] = list(self.rank_leaf)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AnalysisOptions:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        if data:
            kw.setdefault("straggler_basis", "median")  # stored before the ideal basis existed
        if kw.get("straggler_basis", "ideal") not in STRAGGLER_BASES:
            raise ResultsError(f"results.json key analysis.straggler_basis must be one of "
                               f"{', '.join(STRAGGLER_BASES)}, got {kw['straggler_basis']!r}")
        if "rank_leaf" in kw:
            kw["rank_leaf"] = tuple(kw["rank_leaf"])
        for key in ("exact_limit", "histogram_sub_bucket_bits", "per_iteration_limit"):
            if key not in kw:
                continue  # written before the option existed: the default applies
            v = kw[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (key != "exact_limit" and v < 1):
                raise ResultsError(f"results.json key analysis.{key} must be a positive integer, got {v!r}")
        if kw.get("histogram_sub_bucket_bits", 1) > 20:
            raise ResultsError(f"results.json key analysis.histogram_sub_bucket_bits must be at most 20, "
                               f"got {kw['histogram_sub_bucket_bits']}")
        return cls(**kw)

    def path(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(base RTT ns, bottleneck bit/s) per flow: 2 links each way on one leaf, 4 via a spine."""
        cross = np.zeros(src.shape[0], dtype=bool)
        if self.rank_leaf:
            leaf = np.asarray(self.rank_leaf, dtype=np.int64)
            ok = (src < leaf.shape[0]) & (dst < leaf.shape[0])
            cross[ok] = leaf[src[ok]] != leaf[dst[ok]]
        rtt = np.where(cross, 8, 4) * float(self.latency_ns)
        bottleneck = np.full(src.shape[0], float(self.rate_bps))
        if self.uplink_rate_bps:
            bottleneck = np.where(cross, min(float(self.rate_bps), float(self.uplink_rate_bps)), bottleneck)
        return rtt, bottleneck


#: the last ideal run (schedule, its parameters, op table): results.json and collectives.csv share it
_LAST_IDEAL: list[tuple[Schedule, tuple[float, int, int], dict[str, np.ndarray]]] = []


def ideal_ops(schedule: Schedule, opts: AnalysisOptions) -> dict[str, np.ndarray] | None:
    """The op table of ``schedule`` run on an empty fabric (None unless stragglers use the ideal basis)."""
    if opts.straggler_basis != "ideal":
        return None
    key = (float(opts.rate_bps), int(opts.latency_ns), int(opts.mtu_bytes))
    if _LAST_IDEAL and _LAST_IDEAL[0][0] is schedule and _LAST_IDEAL[0][1] == key:
        return _LAST_IDEAL[0][2]
    from emulator.drivers.ideal import run_ideal

    res = run_ideal(schedule, rate_bps=opts.rate_bps, latency_ns=opts.latency_ns, mtu_bytes=opts.mtu_bytes)
    table = op_table(schedule, res.records)
    _LAST_IDEAL[:] = [(schedule, key, table)]
    return table
