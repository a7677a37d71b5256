"""The fluid driver's records in one compiled pass (fluid_record_kernels.rank_columns) are the numpy form's:
per op its columns, per rank its counters."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.drivers.fluid_record_kernels import rank_columns
from emulator.schedule.model import OP_DELAY, OP_RECV, OP_SEND


def _numpy(ready, start, end, cnps, ce, kind, flow, flow_packets, flow_size, ptr):  # noqa: ANN001, ANN202
    pk = np.where(flow >= 0, flow_packets[np.maximum(flow, 0)], 0)
    size = np.where(flow >= 0, flow_size[np.maximum(flow, 0)], 0)
    is_send, is_recv, done = kind == OP_SEND, kind == OP_RECV, end >= 0
    cols = np.stack([ready, start, end, np.where(is_send | (is_recv & done), pk, 0), cnps, np.where(is_recv, ce, 0)])
    sent, got = is_send & (start >= 0), is_recv & done
    sums = [[int(x[lo:hi].sum()) for x in (np.where(sent, size, 0), np.where(sent, pk, 0), np.where(got, size, 0),
                                            np.where(got, pk, 0), np.where(is_recv, cnps, 0), np.where(is_send, cnps, 0), ce)]
            for lo, hi in zip(ptr[:-1], ptr[1:], strict=True)]  # fmt: skip
    return cols, sums


@settings(max_examples=40, deadline=None)
@given(counts=st.lists(st.integers(0, 8), min_size=1, max_size=10), seed=st.integers(0, 2**32 - 1))
def test_rank_columns_is_the_numpy_form(counts: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    n, nf = int(ptr[-1]), 6
    ready, start, end = (rng.integers(-1, 3, n) * rng.integers(1, 10**9, n) for _ in range(3))
    cnps, ce = rng.integers(0, 50, n), rng.integers(0, 50, n)
    kind = rng.choice(np.array([OP_SEND, OP_RECV, OP_DELAY], np.int64), n)
    flow = np.where(kind == OP_DELAY, -1, rng.integers(0, nf, n))
    flow_packets, flow_size = rng.integers(1, 10**6, nf), rng.integers(1, 10**12, nf)
    args = (ready, start, end, cnps, ce, kind, flow, flow_packets, flow_size, ptr)
    cols, sums = rank_columns(*args)
    want_cols, want_sums = _numpy(*args)
    assert cols.dtype == np.int64 and np.array_equal(cols, want_cols)
    assert sums.tolist() == want_sums
