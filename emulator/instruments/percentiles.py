"""Exact nearest-rank percentiles and one-line summaries of a sample (docs/metrics.md §7).

Theory of operation
-------------------
For ``n`` sorted samples ``x[1..n]`` and ``0 < p <= 100`` the percentile is ``x[ceil(p/100 · n)]``
(nearest rank, no interpolation). It is always an observed value, so it is never above the maximum
nor below the minimum; ``p = 100`` is the maximum and, for ``n < 100``, p99 is the maximum too — which
is why every :class:`Distribution` carries ``count``. ``p = 0`` is accepted and means the minimum.

The rank is computed in exact rational arithmetic from the *decimal* spelling of ``p`` (99.9 is
999/10, not the binary float just above it), so ``p99.9`` of 1000 samples is ``x[999]`` and not
``x[1000]`` as a naive float ``ceil`` would give.

The median everywhere in this package is the nearest-rank p50, ``x[ceil(n/2)]`` (the lower middle
value for even ``n``): an observed value, an integer for integer nanoseconds.

``stdev`` is the population standard deviation (ddof = 0, like numpy's default); ``cv`` is
``stdev / |mean|`` and is None when the mean is 0 (undefined). Empty samples give ``count = 0`` and
None for every other field — never a silent zero. NaN samples are rejected with ValueError.

:func:`summarize_by` groups samples by one or more key columns (e.g. collective type and size, or
rank) with one sort, then summarises each group.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

Number = int | float

#: The percentiles a :class:`Distribution` carries, by field name.
STANDARD_PERCENTILES: tuple[tuple[str, float], ...] = (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9))


def _p_fraction(p: float) -> Fraction:
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise ValueError(f"percentile must be a number, got {p!r}")
    frac = Fraction(int(p)) if isinstance(p, (int, np.integer)) else Fraction(repr(float(p)))
    if not 0 <= frac <= 100:
        raise ValueError(f"percentile must be within [0, 100], got {p}")
    return frac


def nearest_rank(p: float, n: int) -> int:
    """1-based nearest rank ``ceil(p/100 · n)`` clamped to ``[1, n]`` (``n >= 1``)."""
    if n < 1:
        raise ValueError("nearest_rank needs at least one sample")
    rank = math.ceil(_p_fraction(p) * n / 100)
    return min(max(rank, 1), n)


def _as_sample(values: Iterable[Number] | np.ndarray) -> np.ndarray:
    arr = np.asarray(values if isinstance(values, np.ndarray) else list(values))
    if arr.ndim != 1:
        arr = arr.reshape(-1)
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"samples must be numbers, got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and np.isnan(arr).any():
        raise ValueError("samples contain NaN")
    return arr


def _py(x: np.generic | Number) -> Number:
    """numpy scalar → Python int/float (ints stay ints so nanoseconds stay exact)."""
    return x.item() if isinstance(x, np.generic) else x


def percentile_sorted(sorted_values: np.ndarray, p: float) -> Number:
    """Nearest-rank percentile of an already ascending-sorted, non-empty array."""
    return _py(sorted_values[nearest_rank(p, int(sorted_values.shape[0])) - 1])


def percentile(values: Iterable[Number] | np.ndarray, p: float) -> Number | None:
    """Nearest-rank percentile of ``values`` (None when empty)."""
    arr = _as_sample(values)
    if arr.size == 0:
        return None
    return percentile_sorted(np.sort(arr, kind="stable"), p)


def percentiles(values: Iterable[Number] | np.ndarray, ps: Sequence[float]) -> list[Number | None]:
    """Several nearest-rank percentiles with one sort."""
    arr = _as_sample(values)
    if arr.size == 0:
        return [None for _ in ps]
    s = np.sort(arr, kind="stable")
    return [percentile_sorted(s, p) for p in ps]


@dataclass(frozen=True, slots=True)
class Distribution:
    """Summary of one sample. All fields but ``count`` are None when ``count == 0``.

    ``approx_relative_error`` is None for an exact summary. A summary read from a histogram (see
    :mod:`emulator.stats.bounded`) sets it to the bound on ``|p − exact p| / exact p`` of its
    percentiles; :meth:`to_dict` then adds ``"approx": {"relative_error": e}`` (and nothing for an
    exact one, so exact summaries keep their historical JSON shape).
    """

    count: int
    min: Number | None
    p50: Number | None
    p90: Number | None
    p99: Number | None
    p999: Number | None
    max: Number | None
    mean: float | None
    stdev: float | None
    cv: float | None
    approx_relative_error: float | None = None

    @classmethod
    def empty(cls) -> Distribution:
        return cls(0, None, None, None, None, None, None, None, None, None)

    @property
    def approx(self) -> bool:
        return self.approx_relative_error is not None

    @property
    def median(self) -> Number | None:
        return self.p50

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {name: getattr(self, name) for name in _DIST_FIELDS}
        if self.approx_relative_error is not None:
            d["approx"] = {"relative_error": self.approx_relative_error}
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Distribution:
        approx = data.get("approx")
        err = approx.get("relative_error") if isinstance(approx, Mapping) else None
        return cls(**{name: data.get(name) for name in _DIST_FIELDS}, approx_relative_error=err)

    @classmethod
    def schema_load(cls, data: Any, path: str) -> Distribution:
        """:meth:`from_dict` with every key and value checked (the hook of :mod:`emulator.schema`)."""
        from emulator.schema import SchemaError, suggest

        if not isinstance(data, Mapping):
            raise SchemaError(path, f"expected a distribution mapping, got {type(data).__name__}")
        for key, value in data.items():
            if key not in cls.SCHEMA_KEYS:
                raise SchemaError(f"{path}.{key}", "unknown key" + suggest(str(key), cls.SCHEMA_KEYS))
            if key == "approx":
                if not isinstance(value, Mapping) or not isinstance(value.get("relative_error"), (int, float)):
                    raise SchemaError(f"{path}.approx", "expected {relative_error: number}")
            elif value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise SchemaError(f"{path}.{key}", f"expected a number or null, got {type(value).__name__} {value!r}")
        if not isinstance(data.get("count", 0), int):
            raise SchemaError(f"{path}.count", f"expected an integer, got {data.get('count')!r}")
        return cls.from_dict({"count": 0, **data})

    def dump(self) -> dict[str, Any]:
        return self.to_dict()


#: the JSON keys of a :class:`Distribution` (``approx`` is added only for histogram-based ones)
_DIST_FIELDS: tuple[str, ...] = ("count", "min", "p50", "p90", "p99", "p999", "max", "mean", "stdev", "cv")
#: the keys (and their types) a metric path may take below a distribution
Distribution.SCHEMA_KEYS = {**{k: Number | None for k in _DIST_FIELDS}, "approx": Any}  # type: ignore[attr-defined]


def exact_int_sum(arr: np.ndarray) -> int:
    """Sum of an integer array as a Python int, without int64 overflow."""
    if arr.size == 0:
        return 0
    peak = max(abs(int(arr.min())), abs(int(arr.max())))
    if peak * arr.size < 2**62:
        return int(arr.sum(dtype=np.int64))
    return sum(int(x) for x in arr.tolist())


def _cv(mean: float, stdev: float) -> float | None:
    if mean == 0 or not math.isfinite(mean):
        return None
    return stdev / abs(mean)


def summarize_sorted(s: np.ndarray) -> Distribution:
    """:func:`summarize` for an ascending-sorted array (no copy, no re-sort)."""
    n = int(s.shape[0])
    if n == 0:
        return Distribution.empty()
    if s.dtype.kind in "iu":
        mean = exact_int_sum(s) / n  # exact sum, one rounding
    else:
        mean = float(np.mean(s))
    if math.isfinite(mean):
        stdev = float(np.sqrt(np.mean(np.square(s.astype(np.float64) - mean))))
    else:
        stdev = math.nan
    pct = {name: percentile_sorted(s, p) for name, p in STANDARD_PERCENTILES}
    return Distribution(
        count=n, min=_py(s[0]), max=_py(s[-1]), mean=mean, stdev=stdev, cv=_cv(mean, stdev), **pct
    )


def summarize(values: Iterable[Number] | np.ndarray) -> Distribution:
    """Count, min, p50, p90, p99, p99.9, max (nearest rank), mean, stdev and cv of ``values``."""
    return summarize_sorted(np.sort(_as_sample(values), kind="stable"))


def summarize_by(
    keys: np.ndarray | Sequence[np.ndarray], values: np.ndarray
) -> dict[tuple[Number, ...], Distribution]:
    """Summaries of ``values`` grouped by one key column or a sequence of aligned key columns.

    Returns ``{(k1, k2, ...): Distribution}`` in ascending key order (keys are Python scalars, always
    tuples, even for a single key column).
    """
    cols = [np.asarray(keys)] if isinstance(keys, np.ndarray) else [np.asarray(k) for k in keys]
    vals = _as_sample(values)
    for c in cols:
        if c.shape != vals.shape:
            raise ValueError(f"key column of length {c.shape[0]} does not match {vals.shape[0]} values")
    if vals.size == 0:
        return {}
    # Sort by keys (first column most significant), then by value inside each group.
    order = np.lexsort((vals, *reversed(cols)))
    sk = [c[order] for c in cols]
    sv = vals[order]
    return {tuple(_py(c[a]) for c in sk): summarize_sorted(sv[a:b]) for a, b in key_runs(sk, sv.shape[0])}


def key_runs(sorted_cols: Sequence[np.ndarray], n: int) -> list[tuple[int, int]]:
    """``(start, end)`` of every run of equal keys in ``n`` rows already sorted by the key columns."""
    if n == 0:
        return []
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for c in sorted_cols:
        change[1:] |= c[1:] != c[:-1]
    starts = np.flatnonzero(change).tolist()
    return list(zip(starts, [*starts[1:], n], strict=True))
