import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.instruments.histogram import LogLinearHistogram
from emulator.instruments.percentiles import percentile, summarize

PS = [0, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 99.99, 100]
values_st = st.lists(
    st.one_of(st.integers(0, 300), st.integers(0, 10**7), st.integers(0, 10**13)), min_size=1, max_size=400
)


def test_layout_bounds_cover_every_value():
    h = LogLinearHistogram(3)  # B = 8: coarse, to exercise many levels
    prev_hi = -1
    for idx in range(0, 8 * 20):
        lo, hi = h.bucket_bounds(idx)
        assert lo == prev_hi + 1  # contiguous, no gaps or overlaps
        assert h.bucket_index(lo) == idx and h.bucket_index(hi) == idx
        prev_hi = hi
    vals = np.array([0, 7, 8, 15, 16, 17, 2**40 + 3, 2**53 + 1, 2**62 - 1, 2**63 - 1], dtype=np.int64)
    assert h._indices(vals).tolist() == [h.bucket_index(int(v)) for v in vals]


@settings(max_examples=150, deadline=None)
@given(values_st, st.sampled_from([4, 6, 7, 10]))
def test_percentile_error_bound_against_exact(xs, bits):
    h = LogLinearHistogram(bits)
    arr = np.array(xs, dtype=np.int64)
    h.record_many(arr)
    for p in PS:
        exact = percentile(arr, p)
        got = h.percentile(p)
        assert arr.min() <= got <= arr.max()  # clamped: never outside what was observed
        assert abs(got - exact) <= h.relative_error * exact
    assert h.count == len(xs) and h.min == min(xs) and h.max == max(xs) and h.sum == sum(xs)
    assert h.percentile(0) == min(xs) and h.percentile(100) == max(xs)


@settings(max_examples=100, deadline=None)
@given(values_st, values_st, values_st)
def test_merge_equals_record_all(a, b, c):
    parts = []
    for xs in (a, b, c):
        h = LogLinearHistogram()
        h.record_many(np.array(xs, dtype=np.int64))
        parts.append(h)
    merged = parts[0].copy().merge(parts[1]).merge(parts[2])
    whole = LogLinearHistogram()
    whole.record_many(np.array(a + b + c, dtype=np.int64))
    assert merged == whole
    assert merged.percentiles(PS) == whole.percentiles(PS)
    assert merged.stdev == pytest.approx(float(np.std(np.array(a + b + c, dtype=np.float64))), rel=1e-6, abs=1e-3)


def test_record_and_record_many_agree():
    xs = [0, 1, 5, 1000, 1000, 123456789, 2**40]
    one = LogLinearHistogram()
    for x in xs:
        one.record(x)
    many = LogLinearHistogram()
    many.record_many(np.array(xs, dtype=np.int64))
    assert one == many
    rep = LogLinearHistogram()
    rep.record(1000, count=3)
    three = LogLinearHistogram()
    three.record_many(np.array([1000, 1000, 1000]))
    assert rep == three


def test_distribution_exact_scalars_and_empty():
    h = LogLinearHistogram()
    assert h.percentile(50) is None
    assert h.to_distribution().count == 0 and h.to_distribution().p99 is None
    xs = np.array([10_000, 20_000, 30_000, 40_000], dtype=np.int64)
    h.record_many(xs)
    d, exact = h.to_distribution(), summarize(xs)
    assert (d.count, d.min, d.max, d.mean) == (exact.count, exact.min, exact.max, exact.mean)
    assert d.stdev == pytest.approx(exact.stdev) and d.cv == pytest.approx(exact.cv)
    assert d.p99 == 40_000  # n < 100: p99 = max, exactly


def test_single_value_reads_back_exactly():
    h = LogLinearHistogram()
    h.record(987_654_321)
    assert h.percentiles([0, 50, 99, 100]) == [987_654_321] * 4


def test_clamp_never_above_max_locust_bug():
    # Midpoint of the top bucket would exceed the max; the clamp must prevent it.
    h = LogLinearHistogram(2)
    h.record_many(np.array([1000] * 99 + [1001], dtype=np.int64))
    for p in PS:
        assert 1000 <= h.percentile(p) <= 1001


def test_dict_round_trip_is_json_and_sparse():
    h = LogLinearHistogram.for_relative_error(0.01)
    assert h.relative_error <= 0.01
    h.record_many(np.array([3, 5_000, 5_001, 7 * 10**9], dtype=np.int64))
    d = json.loads(json.dumps(h.to_dict()))
    assert len(d["bucket_index"]) <= 4
    back = LogLinearHistogram.from_dict(d)
    assert back == h and back.percentiles(PS) == h.percentiles(PS)
    assert LogLinearHistogram.from_dict(LogLinearHistogram().to_dict()).count == 0


def test_from_dict_rejects_damage_with_key_name():
    good = LogLinearHistogram()
    good.record_many(np.array([1, 2, 3]))
    d = good.to_dict()
    with pytest.raises(ValueError, match="count"):
        LogLinearHistogram.from_dict({**d, "count": 4})
    with pytest.raises(ValueError, match="bucket_count"):
        LogLinearHistogram.from_dict({**d, "bucket_count": [1]})
    with pytest.raises(ValueError, match="version"):
        LogLinearHistogram.from_dict({**d, "version": 99})
    with pytest.raises(ValueError, match="sum"):
        LogLinearHistogram.from_dict({k: v for k, v in d.items() if k != "sum"})
    with pytest.raises(ValueError, match="min"):
        LogLinearHistogram.from_dict({**d, "min": 500})


def test_bad_input_rejected():
    h = LogLinearHistogram()
    with pytest.raises(ValueError):
        h.record(-1)
    with pytest.raises(ValueError):
        h.record(1.5)
    with pytest.raises(ValueError):
        h.record_many(np.array([1.0, 2.0]))
    with pytest.raises(ValueError):
        h.record_many(np.array([1, -2]))
    with pytest.raises(ValueError):
        h.merge(LogLinearHistogram(5))
    with pytest.raises(ValueError):
        LogLinearHistogram(0)


def test_memory_stays_flat():
    h = LogLinearHistogram()
    rng = np.random.default_rng(1)
    for _ in range(20):
        h.record_many(rng.integers(0, 2**62, size=10_000))
    assert h._counts.shape[0] <= (64 - 7) * 128
    assert h.count == 200_000
