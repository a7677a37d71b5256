"""The one builder of the schedule's op layout and dependency CSR, shared by the compiler and compose."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from emulator.schedule.model import dependencies, op_layout


@given(st.integers(0, 30).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, max(n - 1, 0)), st.integers(0, max(n - 1, 0))),
                         max_size=60 if n else 0))))
def test_dependencies_lists_each_ops_parents_once_in_order(case) -> None:
    n_ops, edges = case
    child = np.array([c for c, _ in edges], dtype=np.int64)
    parent = np.array([p for _, p in edges], dtype=np.int64)
    dep_ptr, dep_idx = dependencies(child, parent, n_ops)
    assert dep_ptr.shape == (n_ops + 1,) and dep_ptr[0] == 0 and dep_ptr[-1] == dep_idx.shape[0]
    assert dep_idx.dtype == np.int32
    for op in range(n_ops):
        expect = sorted({p for c, p in edges if c == op})
        assert dep_idx[dep_ptr[op] : dep_ptr[op + 1]].tolist() == expect


def test_op_layout_groups_ops_by_rank() -> None:
    op_rank, ptr = op_layout(np.array([2, 0, 3]))
    assert op_rank.tolist() == [0, 0, 2, 2, 2] and op_rank.dtype == np.int32
    assert ptr.tolist() == [0, 2, 2, 5]
