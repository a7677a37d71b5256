"""A mergeable HDR-style log-linear histogram of non-negative integer nanoseconds (docs/metrics.md §7).

Theory of operation
-------------------
With ``b = sub_bucket_bits`` and ``B = 2**b``, values below ``B`` get one bucket each (exact). A value
``v >= B`` with bit length ``L`` falls in level ``k = L - b - 1 >= 0``; inside a level the buckets are
``2**k`` wide and indexed linearly by ``v >> k`` (which lies in ``[B, 2B)``)::

    index(v) = v                      if v < B
             = k * B + (v >> k)       otherwise

so every power of two is split into ``B`` equal buckets and the bucket width is at most ``v / B``.
A bucket is represented by its midpoint, so a value read back is within ``1 / (2B)`` of any value
recorded in it (``b = 7``: 0.39 %, ``b = 6``: 0.78 %; :meth:`for_relative_error` picks ``b``).

Counts are exact; ``count``, ``min``, ``max`` and ``sum`` are kept exactly beside the buckets and the
second central moment is kept in float (Chan's parallel formula) for stdev and cv. A percentile walks
the cumulative counts to the bucket holding the nearest-rank sample ``x[ceil(p/100 · n)]`` — exactly
the bucket the exact sample is in, because buckets are ordered — and returns that bucket's
midpoint clamped to ``[min, max]``. Hence ``|hist_p - exact_p| <= relative_error · exact_p`` and a
percentile never leaves the observed range (the Locust bug). Ranks 1 and n (p = 0, p = 100, and
any p whose rank is an extreme) return the exact min and max.

Merging is bucket-wise addition plus the exact scalars: ``a.merge(b)`` equals recording everything
into one histogram. Never average percentiles; merge histograms and read the merged one.

:class:`FloatLogHistogram` applies the same layout to float64 bit patterns (sign, exponent and the
top mantissa bits) for samples that are not non-negative integers, with the same error bound.

Memory is flat: the bucket array grows only up to the highest index seen, at most
``(64 - b) * B`` int64 counters (58 KiB for ``b = 7``) whatever the run length. :meth:`to_dict` stores
only the non-empty buckets.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from emulator.instruments.percentiles import Distribution, exact_int_sum, nearest_rank

DEFAULT_SUB_BUCKET_BITS = 7
HISTOGRAM_FORMAT_VERSION = 1
_MAX_VALUE = 2**63 - 1


def _checked_bits(sub_bucket_bits: Any) -> int:
    if isinstance(sub_bucket_bits, bool) or not isinstance(sub_bucket_bits, int) or not 1 <= sub_bucket_bits <= 20:
        raise ValueError(f"sub_bucket_bits must be an int in [1, 20], got {sub_bucket_bits!r}")
    return sub_bucket_bits


def _check_same_layout(mine: int, theirs: int) -> None:
    if theirs != mine:
        raise ValueError(f"cannot merge histograms with sub_bucket_bits {mine} and {theirs}")


def _bucket_percentiles(counts: np.ndarray, count: int, lo: Any, hi: Any, ps: list[float] | tuple[float, ...],
                        midpoint: Callable[[int], Any]) -> list[Any]:
    """Nearest-rank percentiles of bucket ``counts`` (in value order): the midpoint of the bucket holding
    the rank clamped to ``[lo, hi]`` (the exact min and max), and the extremes themselves for ranks 1 and n."""
    if count == 0:
        return [None for _ in ps]
    cum = np.cumsum(counts)
    out: list[Any] = []
    for p in ps:
        rank = nearest_rank(p, count)
        if rank == 1 or rank == count:  # the extremes are known exactly
            out.append(lo if rank == 1 else hi)
            continue
        out.append(min(max(midpoint(int(np.searchsorted(cum, rank, side="left"))), lo), hi))
    return out


class LogLinearHistogram:
    """Accumulator of integer ns values; see the module docstring for the bucket layout."""

    __slots__ = ("sub_bucket_bits", "_b", "_counts", "count", "min", "max", "sum", "_m2")

    def __init__(self, sub_bucket_bits: int = DEFAULT_SUB_BUCKET_BITS) -> None:
        self.sub_bucket_bits = _checked_bits(sub_bucket_bits)
        self._b = 1 << sub_bucket_bits
        self._counts = np.zeros(0, dtype=np.int64)
        self.count = 0
        self.min: int | None = None
        self.max: int | None = None
        self.sum = 0
        self._m2 = 0.0

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def for_relative_error(cls, relative_error: float) -> LogLinearHistogram:
        """Smallest layout whose read-back error is at most ``relative_error`` (e.g. 0.01)."""
        if not 0 < relative_error < 0.5:
            raise ValueError(f"relative_error must be in (0, 0.5), got {relative_error}")
        bits = max(1, math.ceil(math.log2(1 / (2 * relative_error))))
        return cls(bits)

    @property
    def relative_error(self) -> float:
        """Bound on |read-back − recorded| / recorded for any single value."""
        return 1 / (2 * self._b)

    def copy(self) -> LogLinearHistogram:
        h = LogLinearHistogram(self.sub_bucket_bits)
        h._counts = self._counts.copy()
        h.count, h.min, h.max, h.sum, h._m2 = self.count, self.min, self.max, self.sum, self._m2
        return h

    # -- bucket layout ------------------------------------------------------------------------------
    def bucket_index(self, value: int) -> int:
        b, big = self.sub_bucket_bits, self._b
        if value < big:
            return value
        k = value.bit_length() - b - 1
        return k * big + (value >> k)

    def _indices(self, values: np.ndarray) -> np.ndarray:
        big = self._b
        v = values.astype(np.int64, copy=False)
        idx = v.copy()
        hi = v >= big
        if hi.any():
            vh = v[hi]
            _, exp = np.frexp(vh.astype(np.float64))  # exp = bit length, or one more after rounding up
            k = exp.astype(np.int64) - self.sub_bucket_bits - 1
            k -= (vh >> k) < big  # undo a float round-up to the next power of two
            idx[hi] = k * big + (vh >> k)
        return idx

    def bucket_bounds(self, index: int) -> tuple[int, int]:
        """Inclusive ``(lowest, highest)`` value that maps to bucket ``index``."""
        big = self._b
        if index < big:
            return index, index
        k = index // big - 1
        mant = index - k * big
        return mant << k, ((mant + 1) << k) - 1

    def _ensure(self, top_index: int) -> None:
        if top_index >= self._counts.shape[0]:
            grown = np.zeros(max(top_index + 1, 2 * self._counts.shape[0], 2 * self._b), dtype=np.int64)
            grown[: self._counts.shape[0]] = self._counts
            self._counts = grown

    # -- recording ------------------------------------------------------------------------------------
    def _add_moments(self, n: int, total: int, m2: float) -> None:
        if self.count == 0:
            self._m2 = m2
        else:
            delta = total / n - self.sum / self.count
            self._m2 += m2 + delta * delta * self.count * n / (self.count + n)
        self.count += n
        self.sum += total

    def record(self, value: int, count: int = 1) -> None:
        """Record ``value`` (a non-negative integer ns) ``count`` times."""
        if isinstance(value, (bool, float)) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"histogram values must be integers (ns), got {value!r}")
        value = int(value)
        if not 0 <= value <= _MAX_VALUE:
            raise ValueError(f"histogram values must be within [0, 2**63), got {value}")
        if count < 1:
            raise ValueError(f"count must be positive, got {count}")
        idx = self.bucket_index(value)
        self._ensure(idx)
        self._counts[idx] += count
        self.min = value if self.min is None else min(self.min, value)
        self.max = value if self.max is None else max(self.max, value)
        self._add_moments(count, value * count, 0.0)

    def record_many(self, values: np.ndarray) -> None:
        """Record every element of an integer array (vectorised)."""
        arr = np.asarray(values)
        if arr.size == 0:
            return
        if arr.dtype.kind not in "iu":
            raise ValueError(f"histogram values must be an integer array (ns), got dtype {arr.dtype}")
        arr = arr.reshape(-1)
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi > _MAX_VALUE:
            raise ValueError(f"histogram values must be within [0, 2**63), got {lo if lo < 0 else hi}")
        idx = self._indices(arr)
        top = int(idx.max())
        self._ensure(top)
        self._counts[: top + 1] += np.bincount(idx, minlength=top + 1)
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)
        total = exact_int_sum(arr)
        m2 = float(np.sum(np.square(arr.astype(np.float64) - total / arr.size)))
        self._add_moments(int(arr.size), total, m2)

    def merge(self, other: LogLinearHistogram) -> LogLinearHistogram:
        """Add ``other`` into this histogram (same layout required); returns ``self``."""
        _check_same_layout(self.sub_bucket_bits, other.sub_bucket_bits)
        if other.count == 0:
            return self
        n = other._counts.shape[0]
        self._ensure(n - 1)
        self._counts[:n] += other._counts
        self.min = other.min if self.min is None else min(self.min, other.min)  # type: ignore[type-var]
        self.max = other.max if self.max is None else max(self.max, other.max)  # type: ignore[type-var]
        self._add_moments(other.count, other.sum, other._m2)
        return self

    # -- reading ----------------------------------------------------------------------------------------
    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    @property
    def stdev(self) -> float | None:
        return math.sqrt(max(self._m2, 0.0) / self.count) if self.count else None

    def percentile(self, p: float) -> int | None:
        """Nearest-rank percentile read from the buckets, clamped to ``[min, max]`` (None if empty)."""
        return self.percentiles([p])[0]

    def percentiles(self, ps: list[float] | tuple[float, ...]) -> list[int | None]:
        return _bucket_percentiles(self._counts, self.count, self.min, self.max, ps,
                                   lambda i: sum(self.bucket_bounds(i)) // 2)

    def to_distribution(self) -> Distribution:
        """A :class:`Distribution`: exact count/min/max/mean, bucket percentiles, float stdev."""
        if self.count == 0:
            return Distribution.empty()
        p50, p90, p99, p999 = self.percentiles([50, 90, 99, 99.9])
        mean, stdev = self.mean, self.stdev
        cv = stdev / abs(mean) if mean else None  # type: ignore[operator]
        return Distribution(self.count, self.min, p50, p90, p99, p999, self.max, mean, stdev, cv,
                            approx_relative_error=self.relative_error)

    # -- persistence ------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        nz = np.flatnonzero(self._counts)
        return {
            "format": "log-linear-ns",
            "version": HISTOGRAM_FORMAT_VERSION,
            "sub_bucket_bits": self.sub_bucket_bits,
            "count": self.count,
            "min": self.min,
            "max": self.max,
            "sum": self.sum,
            "m2": self._m2,
            "bucket_index": nz.tolist(),
            "bucket_count": self._counts[nz].tolist(),
        }

    @classmethod
    def from_dict(cls, data: Any) -> LogLinearHistogram:
        """Inverse of :meth:`to_dict`. Damaged input raises ValueError naming the key."""
        if not isinstance(data, dict):
            raise ValueError(f"histogram must be a mapping, got {type(data).__name__}")
        for key in ("sub_bucket_bits", "count", "sum", "bucket_index", "bucket_count"):
            if key not in data:
                raise ValueError(f"histogram lacks key {key!r}")
        if data.get("format", "log-linear-ns") != "log-linear-ns":
            raise ValueError(f"histogram key 'format' is {data['format']!r}, expected 'log-linear-ns'")
        if int(data.get("version", 1)) > HISTOGRAM_FORMAT_VERSION:
            raise ValueError(f"histogram key 'version' is {data['version']}, newer than {HISTOGRAM_FORMAT_VERSION}")
        h = cls(data["sub_bucket_bits"])
        idx = np.asarray(data["bucket_index"], dtype=np.int64)
        cnt = np.asarray(data["bucket_count"], dtype=np.int64)
        if idx.shape != cnt.shape or idx.ndim != 1:
            raise ValueError("histogram keys 'bucket_index' and 'bucket_count' differ in length")
        if idx.size and (idx.min() < 0 or idx.max() >= (64 - h.sub_bucket_bits) * h._b or (cnt < 1).any()):
            raise ValueError("histogram key 'bucket_index' or 'bucket_count' holds an impossible value")
        total = int(cnt.sum())
        if total != int(data["count"]):
            raise ValueError(f"histogram key 'count' is {data['count']} but the buckets hold {total}")
        if total:
            if data.get("min") is None or data.get("max") is None:
                raise ValueError("histogram lacks key 'min' or 'max'")
            h._ensure(int(idx.max()))
            h._counts[idx] = cnt
            h.min, h.max = int(data["min"]), int(data["max"])
            if h.bucket_index(h.min) != int(idx.min()) or h.bucket_index(h.max) != int(idx.max()):
                raise ValueError("histogram keys 'min'/'max' do not match the lowest/highest bucket")
        h.count, h.sum, h._m2 = total, int(data["sum"]), float(data.get("m2", 0.0))
        return h

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LogLinearHistogram):
            return NotImplemented
        a, b = self.to_dict(), other.to_dict()
        a.pop("m2"), b.pop("m2")
        return a == b and math.isclose(self._m2, other._m2, rel_tol=1e-9, abs_tol=1e-6)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"LogLinearHistogram(sub_bucket_bits={self.sub_bucket_bits}, count={self.count}, "
            f"min={self.min}, max={self.max})"
        )


class FloatLogHistogram:
    """Mergeable log-linear histogram of any finite or infinite float64 (and negative) sample.

    The companion of :class:`LogLinearHistogram` for samples that are not non-negative integer ns
    (slowdowns, fractions, rates, signed lags). A value's bucket key keeps its sign, its exponent and
    the top ``sub_bucket_bits`` mantissa bits: for ``v >= 0`` the key is the IEEE-754 bit pattern
    shifted right by ``52 - b``, plus one; ``0`` has key 0 (exact); for ``v < 0`` the key is ``-key(-v)``.
    Keys are monotone in the value, each binade ``[2^e, 2^(e+1))`` is split into ``2^b`` equal buckets
    and the bucket midpoint is within ``2^-(b+1)`` of any value in it (the same bound as the integer
    histogram; subnormals below ``2^-1022`` only get an absolute bound of that size). ``±inf`` have
    buckets of their own. Non-empty buckets are kept sparse (sorted keys and counts), so memory depends on the
    spread of the values, never on their number. Count, min and max are exact, the sum is a float64
    (pairwise numpy sums per batch) and the second central moment is combined with Chan's formula.
    """

    __slots__ = ("sub_bucket_bits", "_shift", "_keys", "_counts", "count", "min", "max", "sum", "_m2")

    def __init__(self, sub_bucket_bits: int = DEFAULT_SUB_BUCKET_BITS) -> None:
        self.sub_bucket_bits = _checked_bits(sub_bucket_bits)
        self._shift = 52 - sub_bucket_bits
        self._keys = np.zeros(0, dtype=np.int64)
        self._counts = np.zeros(0, dtype=np.int64)
        self.count = 0
        self.min: float | None = None
        self.max: float | None = None
        self.sum = 0.0
        self._m2 = 0.0

    @property
    def relative_error(self) -> float:
        return 1 / (2 << self.sub_bucket_bits)

    def _key(self, v: np.ndarray) -> np.ndarray:
        a = np.abs(v).view(np.int64) >> self._shift
        a += v != 0  # zero has key 0 to itself
        return np.where(v < 0, -a, a)

    def _bounds(self, key: int) -> tuple[float, float]:
        if key == 0:
            return 0.0, 0.0
        mag = abs(key) - 1
        lo = np.array([mag << self._shift], dtype=np.int64).view(np.float64)[0]
        hi = np.array([((mag + 1) << self._shift) - 1], dtype=np.int64).view(np.float64)[0]
        lo_f, hi_f = float(lo), float(hi)
        if math.isinf(lo_f):
            hi_f = lo_f  # the +inf bucket (its upper bit patterns are NaNs, never recorded)
        return (lo_f, hi_f) if key >= 0 else (-hi_f, -lo_f)

    def _add(self, keys: np.ndarray, counts: np.ndarray) -> None:
        k = np.concatenate((self._keys, keys))
        c = np.concatenate((self._counts, counts))
        u, inv = np.unique(k, return_inverse=True)
        self._keys = u
        self._counts = np.bincount(inv.reshape(-1), weights=c, minlength=u.shape[0]).astype(np.int64)

    def _add_moments(self, n: int, total: float, m2: float) -> None:
        if self.count == 0:
            self._m2 = m2
        elif math.isfinite(total) and math.isfinite(self.sum):
            delta = total / n - self.sum / self.count
            self._m2 += m2 + delta * delta * self.count * n / (self.count + n)
        else:
            self._m2 = math.nan
        self.count += n
        self.sum += total

    def record_many(self, values: np.ndarray) -> None:
        """Record every element of a numeric array (NaN is refused)."""
        arr = np.asarray(values).reshape(-1)
        if arr.size == 0:
            return
        if arr.dtype.kind not in "iuf":
            raise ValueError(f"histogram values must be numbers, got dtype {arr.dtype}")
        v = arr.astype(np.float64) + 0.0  # a fresh array; −0.0 becomes +0.0
        if np.isnan(v).any():
            raise ValueError("histogram values contain NaN")
        keys, counts = np.unique(self._key(v), return_counts=True)
        self._add(keys, counts.astype(np.int64))
        lo, hi = float(v.min()), float(v.max())
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)
        with np.errstate(invalid="ignore", over="ignore"):
            total = float(v.sum())
            m2 = float(np.sum(np.square(v - total / v.size))) if math.isfinite(total) else math.nan
        self._add_moments(int(v.size), total, m2)

    def merge(self, other: FloatLogHistogram) -> FloatLogHistogram:
        """Add ``other`` into this histogram (same layout required); returns ``self``."""
        _check_same_layout(self.sub_bucket_bits, other.sub_bucket_bits)
        if other.count == 0:
            return self
        self._add(other._keys, other._counts)
        self.min = other.min if self.min is None else min(self.min, other.min)  # type: ignore[type-var]
        self.max = other.max if self.max is None else max(self.max, other.max)  # type: ignore[type-var]
        self._add_moments(other.count, other.sum, other._m2)
        return self

    def percentiles(self, ps: list[float] | tuple[float, ...]) -> list[float | None]:
        """Nearest-rank percentiles: bucket midpoints clamped to ``[min, max]``; extremes exact."""
        return _bucket_percentiles(self._counts, self.count, self.min, self.max, ps, self._midpoint)

    def _midpoint(self, i: int) -> float:
        lo, hi = self._bounds(int(self._keys[i]))
        return lo if lo == hi else lo / 2 + hi / 2

    def to_distribution(self) -> Distribution:
        """Exact count/min/max, float mean, bucket percentiles; marked approximate."""
        if self.count == 0:
            return Distribution.empty()
        p50, p90, p99, p999 = self.percentiles([50, 90, 99, 99.9])
        mean = self.sum / self.count
        stdev = math.sqrt(max(self._m2, 0.0) / self.count) if math.isfinite(self._m2) else math.nan
        cv = stdev / abs(mean) if mean and math.isfinite(mean) else None
        return Distribution(self.count, self.min, p50, p90, p99, p999, self.max, mean, stdev, cv,
                            approx_relative_error=self.relative_error)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FloatLogHistogram):
            return NotImplemented
        return (self.sub_bucket_bits == other.sub_bucket_bits and np.array_equal(self._keys, other._keys)
                and np.array_equal(self._counts, other._counts) and (self.count, self.min, self.max)
                == (other.count, other.min, other.max) and math.isclose(self.sum, other.sum, rel_tol=1e-12)
                and math.isclose(self._m2, other._m2, rel_tol=1e-9, abs_tol=1e-6))

    __hash__ = None  # type: ignore[assignment]
