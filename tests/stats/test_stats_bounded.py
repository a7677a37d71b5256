"""Memory-bounded distributions (emulator.stats.bounded): exact below the limit, histograms above it.

Above the limit the percentiles must stay within the histogram's stated relative error of the exact
nearest-rank ones and inside [min, max]; count/min/max/mean must be exact; recording chunk by chunk
must equal merging per-chunk histograms and one histogram of everything; and the memory of computing
the distributions must stop growing with the number of samples.
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.instruments.histogram import FloatLogHistogram, LogLinearHistogram
from emulator.instruments.percentiles import Distribution, percentile, summarize, summarize_by
from emulator.stats.bounded import SummaryPolicy, summarize_bounded, summarize_by_bounded

PCT = (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9))
SMALL = SummaryPolicy(exact_limit=100, chunk_size=997)  # odd chunk: groups straddle chunk borders


def _assert_close(approx: Distribution, exact: Distribution, err: float) -> None:
    assert approx.approx_relative_error == err and exact.approx_relative_error is None
    assert approx.count == exact.count and approx.min == exact.min and approx.max == exact.max
    assert math.isclose(approx.mean, exact.mean, rel_tol=1e-12, abs_tol=1e-9)
    assert math.isclose(approx.stdev, exact.stdev, rel_tol=1e-6, abs_tol=1e-6)
    for name, _ in PCT:
        a, e = getattr(approx, name), getattr(exact, name)
        assert exact.min <= a <= exact.max, name  # never outside what was observed
        assert abs(a - e) <= err * abs(e) + 1e-12, (name, a, e)


def _ns_sample(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    body = rng.lognormal(11, 0.6, n)
    tail = rng.random(n) < 0.01
    body[tail] *= rng.uniform(5, 50, int(tail.sum()))  # a long tail, like a congested collective
    return body.astype(np.int64)


def test_exact_at_or_below_the_limit_is_the_plain_summary() -> None:
    x = _ns_sample(100, 1)
    assert summarize_bounded(x, SMALL) == summarize(x)
    assert summarize_bounded(x, SMALL).to_dict() == summarize(x).to_dict()
    assert "approx" not in summarize_bounded(x, SMALL).to_dict()
    keys = np.arange(100) % 3
    assert summarize_by_bounded(keys, x, SMALL) == summarize_by(keys, x)


def test_above_the_limit_within_the_stated_error_for_ns() -> None:
    x = _ns_sample(50_000, 2)
    d = summarize_bounded(x, SMALL)
    _assert_close(d, summarize(x), SMALL.relative_error)
    assert d.to_dict()["approx"] == {"relative_error": SMALL.relative_error} == {"relative_error": 2**-8}
    assert Distribution.from_dict(d.to_dict()) == d
    assert d.mean == int(x.sum()) / x.size  # exact sum, one rounding


@pytest.mark.parametrize("bits", [3, 5, 7, 10])
def test_grouped_per_key_matches_exact_per_key(bits: int) -> None:
    x = _ns_sample(30_000, bits)
    rank = np.random.default_rng(bits).integers(0, 16, x.size)
    size = (np.arange(x.size) // 7) % 3
    pol = SummaryPolicy(exact_limit=1000, chunk_size=4099, sub_bucket_bits=bits)
    exact = summarize_by([rank, size], x)
    for keys in ([rank, size], lambda a, b: [rank[a:b], size[a:b]]):
        approx = summarize_by_bounded(keys, x, pol)
        assert list(approx) == list(exact)  # same keys, ascending
        for k in exact:
            _assert_close(approx[k], exact[k], pol.relative_error)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 300), st.integers(0, 10**12)), min_size=1, max_size=300),
       st.integers(1, 50), st.sampled_from([2, 4, 7]))
def test_property_ints_any_chunking(xs: list[int], chunk: int, bits: int) -> None:
    x = np.array(xs, dtype=np.int64)
    pol = SummaryPolicy(exact_limit=0, chunk_size=chunk, sub_bucket_bits=bits)
    d, e = summarize_bounded(x, pol), summarize(x)
    assert d.count == e.count and d.min == e.min and d.max == e.max and d.mean == e.mean
    for name, p in PCT:
        a = getattr(d, name)
        assert e.min <= a <= e.max and abs(a - percentile(x, p)) <= pol.relative_error * percentile(x, p)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.floats(-1e12, 1e12, allow_nan=False), st.floats(-1, 1, allow_nan=False),
                          st.just(0.0), st.just(-0.0)), min_size=1, max_size=300),
       st.integers(1, 50), st.sampled_from([2, 4, 7]))
def test_property_floats_and_signed_values(xs: list[float], chunk: int, bits: int) -> None:
    x = np.array(xs, dtype=np.float64)
    pol = SummaryPolicy(exact_limit=0, chunk_size=chunk, sub_bucket_bits=bits)
    d, e = summarize_bounded(x, pol), summarize(x)
    assert d.count == e.count and d.min == e.min and d.max == e.max
    for name, p in PCT:
        a, ex = getattr(d, name), percentile(x, p)
        # relative bound; subnormals (below 2^-1022) only get an absolute one of that size
        assert e.min <= a <= e.max and abs(a - ex) <= pol.relative_error * abs(ex) * (1 + 1e-12) + 2.0**-1022


def test_signed_integers_stay_whole_numbers() -> None:
    x = _ns_sample(5000, 3) - 60_000  # e.g. a lag that is sometimes negative
    d = summarize_bounded(x, SMALL)
    e = summarize(x)
    assert all(isinstance(getattr(d, n), int) for n, _ in PCT)
    for name, _ in PCT:
        assert abs(getattr(d, name) - getattr(e, name)) <= SMALL.relative_error * abs(getattr(e, name)) + 0.5


def test_infinite_values_have_their_own_bucket() -> None:
    x = np.concatenate((np.linspace(1, 2, 1000), np.full(5, np.inf)))  # slowdown max/min with a zero min
    d = summarize_bounded(x, SMALL)
    assert d.max == math.inf and d.p999 == math.inf and d.p99 < 2.01 and d.count == 1005
    assert summarize_bounded(-x, SMALL).min == -math.inf and summarize_bounded(-x, SMALL).p50 < 0
    with pytest.raises(ValueError, match="NaN"):
        summarize_bounded(np.array([1.0, np.nan] * 200), SMALL)


@pytest.mark.parametrize("cls", [LogLinearHistogram, FloatLogHistogram])
def test_merge_of_chunk_histograms_equals_one_histogram(cls) -> None:
    x = _ns_sample(20_000, 4)
    one = cls(6)
    one.record_many(x)
    parts = []
    for a in range(0, x.size, 3001):
        h = cls(6)
        h.record_many(x[a:a + 3001])
        parts.append(h)
    merged = cls(6)
    for h in parts:
        merged.merge(h)
    chunked = cls(6)
    for a in range(0, x.size, 3001):
        chunked.record_many(x[a:a + 3001])
    assert merged == one == chunked
    a, b = merged.to_distribution(), one.to_distribution()
    assert (a.count, a.min, a.p50, a.p90, a.p99, a.p999, a.max) == (b.count, b.min, b.p50, b.p90, b.p99, b.p999, b.max)
    with pytest.raises(ValueError, match="sub_bucket_bits"):
        one.merge(cls(5))


def test_policy_validation() -> None:
    for bad in ({"exact_limit": -1}, {"chunk_size": 0}, {"sub_bucket_bits": 0}, {"sub_bucket_bits": 21},
                {"exact_limit": 1.5}):
        with pytest.raises(ValueError):
            SummaryPolicy(**bad)


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _three_groupings(x: np.ndarray, inst_rank: np.ndarray, inst_type: np.ndarray, pol: SummaryPolicy) -> None:
    summarize_bounded(x, pol)  # whole sample
    summarize_by_bounded(lambda a, b: [inst_rank[a:b]], x, pol)  # per rank
    summarize_by_bounded(lambda a, b: [inst_type[a:b]], x, pol)  # per type


def test_memory_stays_flat_above_the_limit() -> None:
    # 16 ranks: the histogram path's peak (~1.1 MB, bucket arrays per group) is then under a quarter of one
    # copy from n = 800k on (64 ranks needed n = 1.5M for the same margin)
    n = 800_000
    x = _ns_sample(n, 5)
    rank = (np.arange(n) % 16).astype(np.int64)
    ctype = ((np.arange(n) // 64) % 3).astype(np.int64)
    hist = SummaryPolicy(exact_limit=10_000, chunk_size=1 << 14)
    exact = SummaryPolicy(exact_limit=n)
    hist_peak = _peak_bytes(lambda: _three_groupings(x, rank, ctype, hist))
    exact_peak = _peak_bytes(lambda: _three_groupings(x, rank, ctype, exact))
    one_copy = n * 8
    # the exact path sorts (and squares) at least one full copy per grouping; the histogram path only
    # ever holds a chunk plus the bucket arrays
    assert exact_peak > one_copy
    assert hist_peak < one_copy // 4, (hist_peak, exact_peak)
    # and it does not grow with n: twice the samples, about the same peak
    x2 = np.concatenate((x, x))
    rank2, ctype2 = np.concatenate((rank, rank)), np.concatenate((ctype, ctype))
    hist_peak2 = _peak_bytes(lambda: _three_groupings(x2, rank2, ctype2, hist))
    assert hist_peak2 < hist_peak * 1.5 + (1 << 20)
