"""The fluid driver's per-rank counters summed for all ranks at once (one cumulative sum, not a loop)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.drivers.fluid import _rank_sums


@settings(max_examples=50, deadline=None)
@given(counts=st.lists(st.integers(0, 6), min_size=1, max_size=12), seed=st.integers(0, 2**32 - 1))
def test_rank_sums_are_each_ranks_sum(counts: list[int], seed: int) -> None:
    ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    x = np.random.default_rng(seed).integers(-(2**40), 2**40, int(ptr[-1]))
    got = _rank_sums(x, ptr)
    assert got == [int(x[lo:hi].sum()) for lo, hi in zip(ptr[:-1], ptr[1:], strict=True)]
    assert all(type(v) is int for v in got)  # Python ints, as the records' counters are
