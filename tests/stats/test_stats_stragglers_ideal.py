"""Stragglers judged against the algorithm's own per-rank finish order on an empty fabric (issue 9, item 10)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.stats import CollectiveRecords, analyze_stragglers

#: one ring-broadcast-like instance of 8 ranks: rank h finishes after h hops of 100 µs on the empty fabric
IDEAL_END = np.array([100_000 * (h + 1) for h in range(8)], dtype=np.int64)
ZERO = np.zeros(8, dtype=np.int64)


def _records(end: np.ndarray) -> CollectiveRecords:
    return CollectiveRecords.from_csr(np.array([0, 8]), np.arange(8), ZERO, end)


def test_the_last_hops_of_a_ring_are_not_stragglers_against_the_ideal_order() -> None:
    actual = 2 * IDEAL_END  # the fabric runs at half the ideal pace, in the algorithm's own order
    median = analyze_stragglers(_records(actual))
    assert median.summary.basis == "median"
    assert median.members.is_slow[-2:].all() and median.summary.most_often_last_rank == 7  # the old verdict
    a = analyze_stragglers(_records(actual), ideal_start_ns=ZERO, ideal_end_ns=IDEAL_END)
    assert a.summary.basis == "ideal"
    assert not a.members.is_slow.any() and not a.members.is_last.any()
    assert a.summary.most_often_last_count == 0 and int(a.instances.excess_skew_ns[0]) == 0
    assert (a.members.lateness_ns == 0).all()
    assert a.instances.skew_ns[0] == median.instances.skew_ns[0]  # the measured skew itself is unchanged


def test_a_rank_slower_than_its_place_in_the_order_is_flagged_with_its_excess() -> None:
    actual = 2 * IDEAL_END
    actual[3] += 500_000  # rank 3 (a middle hop) finishes 500 µs later than its place in the ring implies
    a = analyze_stragglers(_records(actual), ideal_start_ns=ZERO, ideal_end_ns=IDEAL_END)
    assert a.members.is_slow.tolist() == [r == 3 for r in range(8)]
    assert a.members.is_last.tolist() == [r == 3 for r in range(8)]
    assert a.summary.most_often_last_rank == 3 and a.summary.most_often_last_count == 1
    assert int(a.instances.excess_skew_ns[0]) == 500_000 == int(a.members.lateness_ns[3])


@settings(max_examples=60, deadline=None)
@given(ideal=st.lists(st.integers(1_000, 10**7), min_size=2, max_size=12),
       pace=st.floats(1.0, 50.0), offset=st.integers(0, 10**9))
def test_any_order_at_any_uniform_pace_has_no_straggler(ideal: list[int], pace: float, offset: int) -> None:
    n = len(ideal)
    ideal_end = np.asarray(ideal, dtype=np.int64)
    start = np.full(n, offset, dtype=np.int64)
    end = offset + np.rint(pace * ideal_end).astype(np.int64)
    recs = CollectiveRecords.from_csr(np.array([0, n]), np.arange(n), start, end)
    a = analyze_stragglers(recs, ideal_start_ns=np.zeros(n, dtype=np.int64), ideal_end_ns=ideal_end)
    assert not a.members.is_slow.any()
    assert not a.members.is_last.any() and a.summary.most_often_last_count == 0
    # rounding of the ends only: each end is off by ≤ 0.5 ns, and the pace estimated from the median member
    # carries its error into every member's excess scaled by ideal_j / ideal_median (≤ max / min)
    rounding_ns = 2 + ideal_end.max() / ideal_end.min()
    assert np.abs(a.members.lateness_ns).max() <= rounding_ns + 1e-4 * (end.max() - offset)
