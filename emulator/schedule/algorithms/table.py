"""Transfer tables: an algorithm's transfers as numpy columns, for the compiler.

A :class:`TransferTable` holds the same rows, in the same order, as the algorithm's list of
:class:`~emulator.schedule.algorithms.base.Transfer` (``src``, ``dst``, ``size_bytes``, ``step``,
``chunk``; ``after`` in CSR form ``after_ptr``/``after_idx``), without a Python object per row: a
1,024-rank All-to-All is a million rows. Regular algorithms build it from *messages* with
:func:`expand_messages`; any other list of transfers converts with :func:`table_of_transfers`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_I32 = np.int32
_I64 = np.int64


@dataclass(frozen=True, slots=True)
class TransferTable:
    """Transfers as columns (row ``i`` = transfer ``i``); transfer ``i`` waits for ``after_idx[after_ptr[i]:after_ptr[i+1]]``."""

    src: np.ndarray  # int32 group positions
    dst: np.ndarray  # int32
    size_bytes: np.ndarray  # int64
    step: np.ndarray  # int32
    chunk: np.ndarray  # int32
    after_ptr: np.ndarray  # int64, len + 1
    after_idx: np.ndarray  # int64

    def __len__(self) -> int:
        return int(self.src.shape[0])


def empty_table() -> TransferTable:
    z = np.zeros(0, dtype=_I32)
    return TransferTable(z, z, np.zeros(0, _I64), z, z, np.zeros(1, _I64), np.zeros(0, _I64))


def table_of_transfers(transfers: Sequence) -> TransferTable:
    """The table of a list of transfers (objects with ``src``, ``dst``, ``size_bytes``, ``step``, ``chunk``, ``after``)."""
    m = len(transfers)
    counts = np.fromiter((len(t.after) for t in transfers), dtype=_I64, count=m)
    ptr = np.zeros(m + 1, dtype=_I64)
    np.cumsum(counts, out=ptr[1:])
    return TransferTable(
        src=np.fromiter((t.src for t in transfers), dtype=_I32, count=m),
        dst=np.fromiter((t.dst for t in transfers), dtype=_I32, count=m),
        size_bytes=np.fromiter((t.size_bytes for t in transfers), dtype=_I64, count=m),
        step=np.fromiter((t.step for t in transfers), dtype=_I32, count=m),
        chunk=np.fromiter((t.chunk for t in transfers), dtype=_I32, count=m),
        after_ptr=ptr,
        after_idx=np.fromiter((a for t in transfers for a in t.after), dtype=_I64, count=int(ptr[-1])),
    )


def piece_lengths(total: int | np.ndarray, n: int, i: np.ndarray) -> np.ndarray:
    """Bytes of piece ``i`` (array) of ``total`` split ``n`` ways (the first ``total % n`` get one more)."""
    total = np.asarray(total, dtype=_I64)
    return total // n + (np.asarray(i, dtype=_I64) < total % n)


def expand_messages(src: np.ndarray, dst: np.ndarray, step: np.ndarray, length: np.ndarray, dep: np.ndarray,
                    chunks: int) -> TransferTable:
    """Messages (one piece of ``length`` bytes each, waiting for message ``dep``, -1 = none; ``dep`` smaller
    than the message's own index) → ``chunks`` transfers per message, as :class:`~emulator.schedule.
    algorithms.base.Plan` makes them: chunk ``c`` carries sub-slice ``c`` of the piece and waits for chunk
    ``c`` of ``dep``."""
    k = chunks
    n_msg = src.shape[0]
    c = np.tile(np.arange(k, dtype=_I64), n_msg)
    rep = np.repeat
    length = rep(np.asarray(length, dtype=_I64), k)
    has = rep(np.asarray(dep, dtype=_I64) >= 0, k)
    dep_row = rep(np.asarray(dep, dtype=_I64), k) * k + c
    ptr = np.zeros(n_msg * k + 1, dtype=_I64)
    np.cumsum(has, out=ptr[1:])
    return TransferTable(
        src=rep(np.asarray(src, dtype=_I32), k),
        dst=rep(np.asarray(dst, dtype=_I32), k),
        size_bytes=piece_lengths(length, k, c) if k > 1 else length,
        step=rep(np.asarray(step, dtype=_I32), k),
        chunk=c.astype(_I32),
        after_ptr=ptr,
        after_idx=dep_row[has],
    )
