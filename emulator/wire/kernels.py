"""Compiled per-batch kernels of the direct data path: a GRO batch's MIDDLE run read, MIDDLE rows written.

Each kernel does in one call what the Python core does with ``struct``/numpy steps per batch, with the
same result (tests pin kernel == Python on random batches):

* :func:`gro_run`: the leading run of a GRO batch's segments that the receiver may accept as one block
  (:meth:`emulator.endpoint.receiver.ReceiverSide.on_batch`; the Python reference is
  :func:`emulator.endpoint.receiver.gro_run_py`);
* :func:`write_middle_rows`: the destination QP, PSN/AckReq and send-time stamp columns of ``n`` full-MTU
  MIDDLE rows in a reused buffer (the Python reference is
  :meth:`emulator.endpoint.middles.MiddleArena.write`).

Compiled by numba once and cached on disk (``cache=True``); :func:`warm` compiles (or loads) every kernel,
so a run calls it before its clock starts. Sans-IO: the kernels read and write the buffers they are given.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_MIDDLE = 0x07
_PSN_MASK = 0xFFFFFF
_ACKREQ = 0x80000000


@njit(cache=True, inline="always")
def _be32(data, a):  # pragma: no cover - compiled
    return (np.int64(data[a]) << 24) | (np.int64(data[a + 1]) << 16) | (np.int64(data[a + 2]) << 8) | np.int64(data[a + 3])


@njit(cache=True, inline="always")
def _put32(buf, a, v):  # pragma: no cover - compiled
    buf[a] = (v >> 24) & 0xFF
    buf[a + 1] = (v >> 16) & 0xFF
    buf[a + 2] = (v >> 8) & 0xFF
    buf[a + 3] = v & 0xFF


@njit(cache=True)
def gro_run(data, seg):  # pragma: no cover - compiled
    """``(rows, first PSN, AckReq, DestQP)`` of the leading run of full-size MIDDLE segments of the GRO batch
    ``data`` (segments of ``seg`` bytes): every segment, or every one but the last when only that one
    differs, each with the first's BTH words 0-1 (MIDDLE, no pad, an even DestQP) and PSNs consecutive mod
    2^24 (AckReq anywhere: the flag is any row's); ``rows`` is 0 when there is no run of at least 2."""
    n_full = len(data) // seg
    if n_full < 2:
        return 0, 0, False, 0
    w0 = _be32(data, 0)
    w1 = _be32(data, 4)
    if w0 >> 24 != _MIDDLE or w0 & 0x300000 or w1 & 1:
        return 0, 0, False, 0
    n = n_full
    for i in range(1, n_full):
        a = i * seg
        if _be32(data, a) != w0 or _be32(data, a + 4) != w1:
            if i < n_full - 1:
                return 0, 0, False, 0
            n = n_full - 1
            break
    if n < 2:
        return 0, 0, False, 0
    p = _be32(data, 8)
    ack = p >= _ACKREQ
    p0 = p & _PSN_MASK
    for i in range(1, n):
        p = _be32(data, i * seg + 8)
        if p & _PSN_MASK != (p0 + i) & _PSN_MASK:
            return 0, 0, False, 0
        if p >= _ACKREQ:
            ack = True
    return n, p0, ack, w1 & _PSN_MASK


@njit(cache=True)
def write_middle_rows(buf, first_row, n, row_bytes, dest_qp, psn, stamp_ns, step_ns, ack_rows, n_acks):  # pragma: no cover - compiled
    """Rows ``first_row .. first_row + n − 1`` of ``buf`` (``row_bytes`` each): DestQP ``dest_qp`` (unless
    negative: the rows hold it), PSN ``psn + j`` mod 2^24 with AckReq on the rows ``ack_rows[:n_acks]``
    (indices in the run), and stamp ``stamp_ns + 1 + j·step_ns`` (big-endian, 8 bytes after the BTH)."""
    base = first_row * row_bytes
    for j in range(n):
        a = base + j * row_bytes
        if dest_qp >= 0:
            _put32(buf, a + 4, dest_qp)
        _put32(buf, a + 8, (psn + j) & _PSN_MASK)
        s = stamp_ns + 1 + j * step_ns
        _put32(buf, a + 12, (s >> 32) & 0xFFFFFFFF)
        _put32(buf, a + 16, s & 0xFFFFFFFF)
    for i in range(n_acks):
        buf[base + ack_rows[i] * row_bytes + 8] |= 0x80


def warm() -> None:
    """Compile (or load from numba's cache) every kernel for the buffer types the direct path passes: a
    writable memoryview of a bytearray (what the sockets hand over and the arena writes into)."""
    buf = bytearray(2 * 4112)
    mv = memoryview(buf)
    gro_run(mv, 4112)
    write_middle_rows(mv, 0, 2, 4112, 2, 0, 0, 0, np.zeros(1, dtype=np.int64), 0)
