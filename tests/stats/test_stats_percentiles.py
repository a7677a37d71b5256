import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulator.instruments.percentiles import (
    Distribution,
    nearest_rank,
    percentile,
    percentiles,
    summarize,
    summarize_by,
)


def test_nearest_rank_known_samples():
    x = [15, 20, 35, 40, 50]  # textbook nearest-rank example
    assert percentile(x, 5) == 15
    assert percentile(x, 30) == 20
    assert percentile(x, 40) == 20
    assert percentile(x, 50) == 35
    assert percentile(x, 100) == 50
    assert percentile(x, 0) == 15


def test_unsorted_input_and_ties():
    x = [3, 1, 2, 2, 2, 9]
    # sorted: 1 2 2 2 3 9; p50 -> rank 3 -> 2; p75 -> ceil(4.5)=5 -> 3; p90 -> ceil(5.4)=6 -> 9
    assert percentiles(x, [50, 75, 90]) == [2, 3, 9]


def test_p999_rank_is_exact_decimal():
    # ceil(99.9/100*1000) must be 999, not 1000 as float arithmetic would give.
    assert nearest_rank(99.9, 1000) == 999
    x = np.arange(1, 1001)
    assert percentile(x, 99.9) == 999
    assert percentile(x, 99) == 990
    assert nearest_rank(99.9, 10_000) == 9990


def test_small_n_p99_is_max():
    for n in range(1, 100):
        x = np.arange(n) * 7
        assert percentile(x, 99) == x.max()
    assert percentile(np.arange(100), 99) == 98  # n = 100: rank 99 (1-based) -> value 98
    assert percentile(np.arange(101), 99) == 99  # ceil(99.99) = 100 -> value 99


def test_empty_and_bad_p():
    assert percentile([], 50) is None
    assert percentiles([], [50, 99]) == [None, None]
    with pytest.raises(ValueError):
        percentile([1], 101)
    with pytest.raises(ValueError):
        percentile([1], -1)
    with pytest.raises(ValueError):
        percentile([1.0, float("nan")], 50)


def test_summarize_empty_one_and_all_equal():
    e = summarize([])
    assert e == Distribution.empty()
    assert e.count == 0 and e.min is None and e.p99 is None and e.mean is None and e.cv is None

    one = summarize(np.array([42], dtype=np.int64))
    assert one.count == 1
    assert one.min == one.p50 == one.p90 == one.p99 == one.p999 == one.max == 42
    assert isinstance(one.p50, int)
    assert one.mean == 42.0 and one.stdev == 0.0 and one.cv == 0.0

    eq = summarize([5, 5, 5, 5])
    assert eq.min == eq.p50 == eq.max == 5 and eq.stdev == 0.0 and eq.cv == 0.0

    zeros = summarize([0, 0])
    assert zeros.mean == 0.0 and zeros.cv is None  # undefined, not a silent zero


def test_summarize_known_sample():
    x = [2, 4, 4, 4, 5, 5, 7, 9]
    d = summarize(x)
    assert d.count == 8 and d.min == 2 and d.max == 9
    assert d.p50 == 4  # rank 4
    assert d.p90 == 9 and d.p99 == 9 and d.p999 == 9  # n < 100: p99 = max
    assert d.mean == 5.0
    assert d.stdev == 2.0  # population stdev of this classic sample
    assert d.cv == pytest.approx(0.4)
    assert Distribution.from_dict(d.to_dict()) == d


def test_summarize_exact_mean_for_huge_ints():
    big = np.array([2**62, 2**62, 2**62 + 2], dtype=np.int64)
    d = summarize(big)
    assert d.mean == float((3 * 2**62 + 2) / 3)


def test_summarize_floats_keep_inf():
    d = summarize([1.0, 2.0, math.inf])
    assert d.max == math.inf and d.p50 == 2.0


@given(st.lists(st.integers(min_value=-(10**12), max_value=10**12), min_size=1, max_size=300),
       st.floats(min_value=0, max_value=100))
def test_percentile_matches_definition_and_bounds(xs, p):
    s = sorted(xs)
    k = min(max(math.ceil(Fraction(repr(p)) * len(s) / 100), 1), len(s))
    got = percentile(np.array(xs, dtype=np.int64), p)
    assert got == s[k - 1]
    assert s[0] <= got <= s[-1]
    d = summarize(xs)
    assert d.min <= d.p50 <= d.p90 <= d.p99 <= d.p999 <= d.max


def test_summarize_by_groups_and_orders_keys():
    t = np.array([1, 0, 1, 0, 1])
    size = np.array([8, 8, 8, 4, 8])
    v = np.array([10, 20, 30, 40, 50])
    out = summarize_by([t, size], v)
    assert list(out) == [(0, 4), (0, 8), (1, 8)]
    assert out[(1, 8)].count == 3 and out[(1, 8)].p50 == 30 and out[(1, 8)].max == 50
    assert out[(0, 4)].min == 40
    single = summarize_by(np.array([2, 1, 2]), np.array([1, 2, 3]))
    assert list(single) == [(1,), (2,)]
    assert summarize_by([np.array([], dtype=int)], np.array([], dtype=int)) == {}
    with pytest.raises(ValueError):
        summarize_by([np.array([1, 2])], np.array([1]))
