"""Straggler figures per collective instance, per rank and over a run (docs/metrics.md §5).

Theory of operation
-------------------
Everything is computed per instance first (vectorised over the CSR member rows of
:class:`~emulator.stats.collectives.CollectiveRecords`), then aggregated. With ``T_r = end_r −
start_r`` and "median" meaning the nearest-rank p50 over the instance's members (an observed value,
the lower middle one for an even member count):

* **slowest rank**: the member with the largest ``T_r`` (ties: the lowest rank id);
* **last finishers**: every member whose ``end_r`` equals the instance's largest end (ties count
  for all tied ranks);
* **skew** = ``max end_r − median end_r``; ``skew_fraction`` = skew / CCT (NaN when CCT = 0);
* **end spread** = ``max end_r − min end_r`` (CCL-Bench's per-iteration straggler delay SD_k);
* **straggler delay** = ``(max T − min T) / max T`` (0 when max T = 0);
* **straggler slowdown** = ``max T / min T`` (+inf when only min T is 0, 1 when both are 0);
* **slow members**: ``T_r > k × median T`` (``k = slow_factor``, 1.5 by default).

**Lateness** (our definition): ``lateness_r = end_r − median end`` of the same instance. It is
negative for ranks that finish early, zero for the median rank, and its maximum over the members is
the instance's skew. A rank's *mean lateness* averages it over the instances it took part in: a
persistent straggler shows a clearly positive mean, a healthy rank about zero or below. The variant
against the first finisher (``end_r − min end``, never negative) is kept as
``mean_lateness_vs_first_ns``.

**Against the algorithm's own order** (``ideal_start_ns`` / ``ideal_end_ns`` given: the same member rows
timed on an empty fabric, e.g. by :func:`emulator.drivers.ideal.run_ideal`): some ranks finish late by design
(the last hops of a ring broadcast), so each figure is judged against that ideal instead:

* the ideal order is taken at the instance's own pace: with ``rel_r = end_r − first start`` and
  ``ideal rel_r`` the same on the empty fabric, ``pace`` = the median over the members of
  ``rel_r / ideal rel_r`` and ``excess_r = rel_r − pace × ideal rel_r``;
* lateness is ``excess_r − median excess`` (the variant against the first finisher: ``excess_r − min
  excess``): zero for a rank exactly as late as the algorithm makes it, whatever the fabric's pace;
* slow means ``T_r / ideal T_r > k × median over the members of that ratio`` (a uniformly slower fabric
  flags nobody);
* last finishers are the members with the largest excess lateness, and only when it exceeds
  ``late_tolerance × CCT`` (an instance that ran in the algorithm's order has no last finisher);
* ``excess_skew_ns`` = the instance's largest excess lateness (0 when it ran exactly in ideal order).

The raw skew, end spread, straggler delay and slowdown stay measured facts (not corrected).

Per rank across instances: how many instances it took part in, how often it was a last finisher,
how often it was slow, and ``expected_last_count`` = Σ over its instances of (last finishers /
members) — what its last-finisher count would be if the last place were drawn at random. A
``last_ratio`` well above 1 marks a persistent straggler.

Over the run: distributions (nearest-rank) of skew, skew fraction, straggler delay and slowdown;
the histogram of last-finisher counts (``{count: number of ranks}``, ranks that were never last
included with count 0); instances with at least one slow member.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulator.instruments.percentiles import Distribution
from emulator.stats.bounded import EXACT, SummaryPolicy, summarize_bounded
from emulator.stats.collectives import (
    CollectiveRecords,
    InstanceTimes,
    instance_times,
    segment_lower_median,
    segment_max,
    segment_min,
)

DEFAULT_SLOW_FACTOR = 1.5
#: excess lateness (fraction of the instance's CCT) below which no member counts as a last finisher
DEFAULT_LATE_TOLERANCE = 0.05


@dataclass(frozen=True, slots=True, eq=False)
class InstanceStragglers:
    """Per-instance straggler figures (arrays of length n_instances)."""

    slowest_rank: np.ndarray  # int64
    median_end_ns: np.ndarray  # int64
    skew_ns: np.ndarray  # int64
    skew_fraction: np.ndarray  # float64, skew / CCT
    end_spread_ns: np.ndarray  # int64, max end − min end
    straggler_delay: np.ndarray  # float64
    straggler_slowdown: np.ndarray  # float64
    n_last: np.ndarray  # int64, tied last finishers
    n_slow: np.ndarray  # int64, members with T > k × median T
    excess_skew_ns: np.ndarray  # int64, largest excess lateness over the ideal order (= skew without one)


@dataclass(frozen=True, slots=True, eq=False)
class MemberStragglers:
    """Per-member-row figures (aligned with the records' member rows)."""

    lateness_ns: np.ndarray  # end − median end
    lateness_vs_first_ns: np.ndarray  # end − min end
    is_last: np.ndarray  # bool
    is_slow: np.ndarray  # bool


@dataclass(frozen=True, slots=True, eq=False)
class RankStragglers:
    """Per-rank figures across instances (arrays aligned with ``rank``, ascending)."""

    rank: np.ndarray
    instances: np.ndarray
    last_count: np.ndarray
    expected_last_count: np.ndarray  # float64
    slow_count: np.ndarray
    mean_lateness_ns: np.ndarray  # float64
    mean_lateness_vs_first_ns: np.ndarray  # float64
    max_lateness_ns: np.ndarray  # int64

    @property
    def last_ratio(self) -> np.ndarray:
        """last_count / expected_last_count (1 = last as often as chance would make it)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.last_count / self.expected_last_count

    def to_rows(self) -> list[dict[str, float | int]]:
        ratio = self.last_ratio
        return [
            {
                "rank": int(self.rank[i]),
                "instances": int(self.instances[i]),
                "last_count": int(self.last_count[i]),
                "expected_last_count": float(self.expected_last_count[i]),
                "last_ratio": float(ratio[i]),
                "slow_count": int(self.slow_count[i]),
                "mean_lateness_ns": float(self.mean_lateness_ns[i]),
                "mean_lateness_vs_first_ns": float(self.mean_lateness_vs_first_ns[i]),
                "max_lateness_ns": int(self.max_lateness_ns[i]),
            }
            for i in range(self.rank.shape[0])
        ]


@dataclass(frozen=True, slots=True)
class StragglerSummary:
    """Run-level aggregate (over instances, then over ranks)."""

    instances: int
    ranks: int
    slow_factor: float
    skew_ns: Distribution
    skew_fraction: Distribution
    end_spread_ns: Distribution
    straggler_delay: Distribution
    straggler_slowdown: Distribution
    instances_with_slow_rank: int
    last_finisher_histogram: dict[int, int]  # last-finisher count → number of ranks
    most_often_last_rank: int | None
    most_often_last_count: int
    basis: str  # "ideal" (judged against the algorithm's empty-fabric order) or "median"
    excess_skew_ns: Distribution

    @property
    def median_skew_ns(self) -> int | float | None:
        return self.skew_ns.p50

    @property
    def p99_skew_ns(self) -> int | float | None:
        return self.skew_ns.p99

    def to_dict(self) -> dict[str, object]:
        return {
            "instances": self.instances,
            "ranks": self.ranks,
            "slow_factor": self.slow_factor,
            "skew_ns": self.skew_ns.to_dict(),
            "skew_fraction": self.skew_fraction.to_dict(),
            "end_spread_ns": self.end_spread_ns.to_dict(),
            "straggler_delay": self.straggler_delay.to_dict(),
            "straggler_slowdown": self.straggler_slowdown.to_dict(),
            "instances_with_slow_rank": self.instances_with_slow_rank,
            "last_finisher_histogram": {str(k): v for k, v in self.last_finisher_histogram.items()},
            "most_often_last_rank": self.most_often_last_rank,
            "most_often_last_count": self.most_often_last_count,
            "basis": self.basis,
            "excess_skew_ns": self.excess_skew_ns.to_dict(),
        }


@dataclass(frozen=True, slots=True, eq=False)
class StragglerAnalysis:
    times: InstanceTimes
    instances: InstanceStragglers
    members: MemberStragglers
    ranks: RankStragglers
    summary: StragglerSummary


def _ratio(num: np.ndarray, den: np.ndarray, zero_over_zero: float, pos_over_zero: float) -> np.ndarray:
    num = num.astype(np.float64)
    den = den.astype(np.float64)
    safe = np.where(den == 0, 1.0, den)
    out = num / safe
    out = np.where(den == 0, np.where(num == 0, zero_over_zero, pos_over_zero), out)
    return out


def _compact(rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct ranks, index of each row's rank) — bincount path for dense rank ids."""
    if rank.size and int(rank.max()) < 4 * rank.size + 1024:
        present = np.flatnonzero(np.bincount(rank))
        lut = np.zeros(int(rank.max()) + 1, dtype=np.int64)
        lut[present] = np.arange(present.shape[0])
        return present.astype(np.int64), lut[rank]
    u, inv = np.unique(rank, return_inverse=True)
    return u, inv.reshape(-1)


def analyze_stragglers(records: CollectiveRecords, slow_factor: float = DEFAULT_SLOW_FACTOR,
                       policy: SummaryPolicy | None = None, ideal_start_ns: np.ndarray | None = None,
                       ideal_end_ns: np.ndarray | None = None,
                       late_tolerance: float = DEFAULT_LATE_TOLERANCE) -> StragglerAnalysis:
    """All straggler figures of a set of collective instances (see module docstring).

    ``policy`` bounds the memory of the run-level distributions (exact by default). ``ideal_start_ns``
    and ``ideal_end_ns`` (aligned with the member rows) judge lateness against the algorithm's order.
    """
    if not slow_factor > 0:
        raise ValueError(f"slow_factor must be positive, got {slow_factor}")
    if (ideal_start_ns is None) != (ideal_end_ns is None):
        raise ValueError("give both ideal_start_ns and ideal_end_ns, or neither")
    times = instance_times(records)
    ptr, seg = records.member_ptr, records.member_instance
    end, rank, t = records.end_ns, records.rank, times.completion_ns

    # -- per instance
    max_t, min_t = segment_max(t, ptr), segment_min(t, ptr)
    med_t = segment_lower_median(t, ptr, seg)
    med_end = segment_lower_median(end, ptr, seg)
    first_end = segment_min(end, ptr)
    last_end = times.last_end_ns
    big = np.iinfo(np.int64).max
    slowest = segment_min(np.where(t == max_t[seg], rank, big), ptr)
    lateness = end - med_end[seg]
    lateness_first = end - first_end[seg]
    if ideal_end_ns is None:
        is_last = end == last_end[seg]
        is_slow = t > slow_factor * med_t[seg]
        excess_skew = last_end - med_end
    else:
        i_end = np.asarray(ideal_end_ns, dtype=np.int64)
        i_start = np.asarray(ideal_start_ns, dtype=np.int64)
        if i_end.shape != end.shape or i_start.shape != end.shape:
            raise ValueError("ideal_start_ns and ideal_end_ns must be aligned with the member rows")
        # the ideal finish order at the instance's own pace: scale = median over members of actual / ideal
        rel = (end - times.first_start_ns[seg]).astype(np.float64)
        irel = (i_end - segment_min(i_start, ptr)[seg]).astype(np.float64)
        pace = segment_lower_median(rel / np.maximum(irel, 1.0), ptr, seg)
        excess = np.rint(rel - pace[seg] * irel).astype(np.int64)
        lateness = excess - segment_lower_median(excess, ptr, seg)[seg]
        lateness_first = excess - segment_min(excess, ptr)[seg]
        ratio = t / np.maximum(i_end - i_start, 1).astype(np.float64)
        is_slow = ratio > slow_factor * segment_lower_median(ratio, ptr, seg)[seg]
        excess_skew = segment_max(lateness, ptr)
        late = excess_skew > late_tolerance * (last_end - times.first_start_ns)
        is_last = (lateness == excess_skew[seg]) & late[seg]
    n_inst = records.n_instances
    n_last = np.bincount(seg[is_last], minlength=n_inst).astype(np.int64)
    n_slow = np.bincount(seg[is_slow], minlength=n_inst).astype(np.int64)
    skew = last_end - med_end
    inst = InstanceStragglers(
        slowest_rank=slowest,
        median_end_ns=med_end,
        skew_ns=skew,
        skew_fraction=_ratio(skew, times.cct_ns, np.nan, np.nan),
        end_spread_ns=last_end - first_end,
        straggler_delay=_ratio(max_t - min_t, max_t, 0.0, np.nan),
        straggler_slowdown=_ratio(max_t, min_t, 1.0, np.inf),
        n_last=n_last,
        n_slow=n_slow,
        excess_skew_ns=excess_skew,
    )

    # -- per member
    members = MemberStragglers(lateness, lateness_first, is_last, is_slow)

    # -- per rank
    ranks_u, rix = _compact(rank)
    nr = ranks_u.shape[0]
    participations = np.bincount(rix, minlength=nr).astype(np.int64)
    max_late = np.full(nr, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(max_late, rix, lateness)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(times.n_members > 0, n_last / np.maximum(times.n_members, 1), 0.0)[seg]
        per_rank = RankStragglers(
            rank=ranks_u,
            instances=participations,
            last_count=np.bincount(rix[is_last], minlength=nr).astype(np.int64),
            expected_last_count=np.bincount(rix, weights=share, minlength=nr),
            slow_count=np.bincount(rix[is_slow], minlength=nr).astype(np.int64),
            mean_lateness_ns=np.bincount(rix, weights=lateness.astype(np.float64), minlength=nr) / participations,
            mean_lateness_vs_first_ns=np.bincount(rix, weights=lateness_first.astype(np.float64), minlength=nr)
            / participations,
            max_lateness_ns=max_late,
        )

    # -- over the run
    counts, nranks = np.unique(per_rank.last_count, return_counts=True)
    if nr:
        top = int(np.argmax(per_rank.last_count))  # first (lowest rank) among the maxima
        top_rank, top_count = int(ranks_u[top]), int(per_rank.last_count[top])
    else:
        top_rank, top_count = None, 0
    pol = policy or EXACT
    summary = StragglerSummary(
        instances=n_inst,
        ranks=int(nr),
        slow_factor=float(slow_factor),
        skew_ns=summarize_bounded(skew, pol),
        skew_fraction=summarize_bounded(inst.skew_fraction[~np.isnan(inst.skew_fraction)], pol),
        end_spread_ns=summarize_bounded(inst.end_spread_ns, pol),
        straggler_delay=summarize_bounded(inst.straggler_delay[~np.isnan(inst.straggler_delay)], pol),
        straggler_slowdown=summarize_bounded(inst.straggler_slowdown, pol),
        instances_with_slow_rank=int(np.count_nonzero(n_slow)),
        last_finisher_histogram={int(c): int(k) for c, k in zip(counts.tolist(), nranks.tolist(), strict=True)},
        most_often_last_rank=top_rank,
        most_often_last_count=top_count,
        basis="median" if ideal_end_ns is None else "ideal",
        excess_skew_ns=summarize_bounded(excess_skew, pol),
    )
    return StragglerAnalysis(times, inst, members, per_rank, summary)
