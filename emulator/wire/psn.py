"""24-bit packet sequence numbers: modular add, signed distance and serial-number comparison.

Theory of operation: a PSN lives in ``[0, 2**24)`` and wraps. Comparisons use serial-number arithmetic
(RFC 1982 style, which is how IBTA defines the valid/duplicate PSN regions): ``b`` is *after* ``a`` when the
forward distance ``(b - a) mod 2**24`` is in ``[1, 2**23)``. :func:`psn_diff` returns that distance as a
signed value in ``[-2**23, 2**23)`` so ``psn_add(a, psn_diff(b, a)) == b`` always holds.
"""

from __future__ import annotations

import numpy as np

PSN_BITS = 24
PSN_MODULUS = 1 << PSN_BITS
PSN_MASK = PSN_MODULUS - 1
PSN_HALF = 1 << (PSN_BITS - 1)


def psn_add(psn: int, n: int) -> int:
    """``psn + n`` modulo 2**24 (``n`` may be negative)."""
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """Signed distance ``a - b`` in ``[-2**23, 2**23)``: positive when ``a`` is after ``b``."""
    return ((a - b + PSN_HALF) & PSN_MASK) - PSN_HALF


def psn_lt(a: int, b: int) -> bool:
    """``a`` is strictly before ``b`` in serial order."""
    return psn_diff(a, b) < 0


def psn_le(a: int, b: int) -> bool:
    """``a`` is before or equal to ``b`` in serial order."""
    return psn_diff(a, b) <= 0


def psn_gt(a: int, b: int) -> bool:
    """``a`` is strictly after ``b`` in serial order."""
    return psn_diff(a, b) > 0


def psn_ge(a: int, b: int) -> bool:
    """``a`` is after or equal to ``b`` in serial order."""
    return psn_diff(a, b) >= 0


def psn_range(start: int, count: int) -> np.ndarray:
    """The ``count`` consecutive PSNs from ``start`` as a uint32 array, wrapped at 2**24."""
    return (np.arange(start, start + count, dtype=np.uint64) & PSN_MASK).astype(np.uint32)
