"""Distributions whose memory stays flat however long the run: exact up to a limit, histograms above it.

Theory of operation
-------------------
A :class:`SummaryPolicy` decides, per *grouping* (one call: a whole sample, or a sample cut by key
columns such as collective type, process group or rank), how its distributions are computed:

* **exact** when the grouping holds at most ``exact_limit`` samples: the nearest-rank summaries of
  :mod:`emulator.instruments.percentiles` (one sort of at most ``exact_limit`` values, so memory is bounded
  by the limit, not by the run);
* **histogram** above it: the values are read in chunks of ``chunk_size``; inside a chunk they are
  ordered once by key (one ``lexsort`` of the chunk, never a sorted copy per group) and every key's
  slice is recorded into that key's histogram (``record_many``). Non-negative integer samples (ns)
  use :class:`~emulator.instruments.histogram.LogLinearHistogram`, anything else (floats, negative values)
  :class:`~emulator.instruments.histogram.FloatLogHistogram`; both have the relative error
  ``2^-(sub_bucket_bits + 1)`` (0.39 % for the default 7 bits). Recording chunk by chunk equals
  merging per-chunk histograms, which equals one histogram of everything (bucket-wise addition).

Histogram summaries keep ``count``, ``min`` and ``max`` exact and the mean exact up to one rounding
(the integer histogram keeps the sum as a Python int; the float one as a float64 sum per chunk). The
spread is the second central moment combined chunk by chunk with Chan's parallel formula in
float64 (more stable than a raw sum of squares), giving ``stdev`` and ``cv``. Percentiles are the
bucket holding the nearest-rank sample, its midpoint clamped to ``[min, max]`` — never above the max
nor below the min; rank 1 and rank n are the exact min and max. Such a summary carries
``approx_relative_error`` (``"approx": {"relative_error": e}`` in JSON) so readers know.

Peak memory of the histogram path is ``O(chunk_size + groups × buckets)`` beyond the caller's input
arrays. Key columns may be passed as a callable ``keys(a, b)`` returning the key columns of rows
``a:b``, so even the key columns need not exist for the whole sample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from emulator.instruments.histogram import DEFAULT_SUB_BUCKET_BITS, FloatLogHistogram, LogLinearHistogram
from emulator.instruments.percentiles import Distribution, Number, key_runs, summarize, summarize_by

KeyColumns = Sequence[np.ndarray] | np.ndarray | Callable[[int, int], Sequence[np.ndarray]]

DEFAULT_EXACT_LIMIT = 1_000_000
DEFAULT_CHUNK_SIZE = 1 << 16  # ~5 MiB of temporaries per chunk


@dataclass(frozen=True, slots=True)
class SummaryPolicy:
    """Exact below ``exact_limit`` samples per grouping, log-linear histograms above it."""

    exact_limit: int = DEFAULT_EXACT_LIMIT
    chunk_size: int = DEFAULT_CHUNK_SIZE
    sub_bucket_bits: int = DEFAULT_SUB_BUCKET_BITS

    def __post_init__(self) -> None:
        for name in ("exact_limit", "chunk_size", "sub_bucket_bits"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "exact_limit" else 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.sub_bucket_bits > 20:
            raise ValueError(f"sub_bucket_bits must be at most 20, got {self.sub_bucket_bits}")

    @property
    def relative_error(self) -> float:
        """Bound on a histogram percentile's relative error."""
        return 1 / (2 << self.sub_bucket_bits)

    def is_exact(self, n: int) -> bool:
        return n <= self.exact_limit


EXACT = SummaryPolicy(exact_limit=2**62)


def _histogram_for(values: np.ndarray, bits: int) -> Callable[[], LogLinearHistogram | FloatLogHistogram]:
    if values.dtype.kind in "iu" and int(values.min()) >= 0:
        return lambda: LogLinearHistogram(bits)
    return lambda: FloatLogHistogram(bits)


def _finish(h: LogLinearHistogram | FloatLogHistogram, integer: bool) -> Distribution:
    d = h.to_distribution()
    if integer and isinstance(h, FloatLogHistogram) and d.count:
        # signed integer samples went through the float histogram: report whole numbers, still in range
        lo, hi = int(d.min), int(d.max)  # type: ignore[arg-type]

        def whole(x: Number | None) -> Number | None:
            return None if x is None else min(max(round(x), lo), hi)

        d = Distribution(d.count, lo, whole(d.p50), whole(d.p90), whole(d.p99), whole(d.p999), hi, d.mean,
                         d.stdev, d.cv, approx_relative_error=d.approx_relative_error)
    return d


def _check(values: np.ndarray) -> np.ndarray:
    arr = np.asarray(values).reshape(-1)
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"samples must be numbers, got dtype {arr.dtype}")
    return arr


def summarize_bounded(values: np.ndarray, policy: SummaryPolicy | None = None) -> Distribution:
    """:func:`~emulator.instruments.percentiles.summarize` with the memory bound of ``policy``."""
    arr = _check(values)
    pol = policy or SummaryPolicy()
    if pol.is_exact(arr.shape[0]):
        return summarize(arr)
    h = _histogram_for(arr, pol.sub_bucket_bits)()
    for a in range(0, arr.shape[0], pol.chunk_size):
        h.record_many(arr[a : a + pol.chunk_size])
    return _finish(h, arr.dtype.kind in "iu")


def _key_fn(keys: KeyColumns, n: int) -> Callable[[int, int], list[np.ndarray]]:
    if callable(keys):
        fn = keys
        return lambda a, b: [np.asarray(c) for c in fn(a, b)]
    cols = [np.asarray(keys)] if isinstance(keys, np.ndarray) else [np.asarray(k) for k in keys]
    for c in cols:
        if c.shape != (n,):
            raise ValueError(f"key column of length {c.shape[0]} does not match {n} values")
    return lambda a, b: [c[a:b] for c in cols]


def summarize_by_bounded(
    keys: KeyColumns, values: np.ndarray, policy: SummaryPolicy | None = None
) -> dict[tuple[Number, ...], Distribution]:
    """:func:`~emulator.instruments.percentiles.summarize_by` with the memory bound of ``policy``.

    ``keys`` is one key column, a sequence of aligned key columns, or a callable ``keys(a, b)``
    giving the key columns of rows ``a:b``. Returns ``{(k1, k2, ...): Distribution}`` in ascending key
    order. Exact when ``len(values) <= policy.exact_limit``, else every group is histogram-based.
    """
    arr = _check(values)
    pol = policy or SummaryPolicy()
    n = int(arr.shape[0])
    fn = _key_fn(keys, n)
    if pol.is_exact(n):
        return summarize_by(fn(0, n), arr) if n else {}
    make = _histogram_for(arr, pol.sub_bucket_bits)
    hists: dict[tuple[Number, ...], LogLinearHistogram | FloatLogHistogram] = {}
    for a in range(0, n, pol.chunk_size):
        b = min(n, a + pol.chunk_size)
        cols, v = fn(a, b), arr[a:b]
        if any(c.shape != v.shape for c in cols):
            raise ValueError(f"key columns of rows {a}:{b} do not match {b - a} values")
        order = np.lexsort(tuple(reversed(cols)))  # first column most significant
        sc = [c[order] for c in cols]
        sv = v[order]
        for s, e in key_runs(sc, sv.shape[0]):
            key = tuple(c[s].item() for c in sc)
            h = hists.get(key)
            if h is None:
                h = hists[key] = make()
            h.record_many(sv[s:e])
    integer = arr.dtype.kind in "iu"
    return {k: _finish(hists[k], integer) for k in sorted(hists)}
