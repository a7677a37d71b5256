"""One comparison of two fluid active-flow views (:class:`emulator.fabric.fluid_view._View`), field by field."""

from __future__ import annotations

import numpy as np

from emulator.fabric.fluid_view import _View


def assert_same_view(got: _View, want: _View) -> None:
    """``got`` and ``want`` hold the same arrays (dtype and values), order flag and levels."""
    for name in ("a", "qa", "host", "qps", "inv", "qp_fb_ns"):
        x, y = getattr(got, name), getattr(want, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert got.in_order == want.in_order and len(got.levels) == len(want.levels)
    for x, y in zip(got.levels, want.levels, strict=True):
        assert x[0] == y[0]
        for u, w in zip(x[1:], y[1:], strict=True):
            assert u.dtype == w.dtype and np.array_equal(u, w)
