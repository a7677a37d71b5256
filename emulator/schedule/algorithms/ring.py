"""Ring algorithms for All-Reduce, Reduce-Scatter and All-Gather.

Theory of operation
-------------------
Position ``r`` always sends to ``(r+1) % n`` and receives from ``(r-1) % n``. Every step ``s > 0`` on
``r`` waits for the receive of step ``s-1`` on ``r`` (chunk by chunk): what a rank forwards or reduces
at step ``s`` is exactly what it received at step ``s-1``.

* Reduce-scatter (``n-1`` steps, ``reduce``): at step ``s`` position ``r`` sends piece ``(r-s-1) % n``
  of the buffer (its partial sum, own contribution added). After the last step position ``r`` holds the
  fully reduced piece ``r``. Bytes sent: ``S - piece(r)``  (= ``(n-1)/n·S`` when ``n`` divides ``S``).
* All-gather (``n-1`` steps, ``copy``): at step ``s`` position ``r`` sends shard ``(r-s) % n``.
  Bytes sent: ``(n-1)·s``.
* All-reduce = reduce-scatter then the all-gather of the reduced pieces (steps ``n-1 .. 2n-3``, piece
  ``(r-s) % n`` at all-gather step ``s``): ``2(n-1)`` messages per rank, bytes
  ``2S - piece(r) - piece((r+1) % n)`` (= ``2(n-1)/n·S`` when ``n`` divides ``S``).
"""

from __future__ import annotations

import numpy as np

from emulator.schedule.algorithms.base import COPY, REDUCE, BaseAlgorithm, Plan, piece_bytes, piece_range
from emulator.schedule.algorithms.table import TransferTable, expand_messages, piece_lengths
from emulator.trace.model import CollectiveType


def _reduce_scatter(plan: Plan, n: int, size_bytes: int) -> list[int | None]:
    """Ring reduce-scatter steps 0..n-2; returns, per position, the message it received last."""
    received: list[int | None] = [None] * n
    for s in range(n - 1):
        now: list[int | None] = [None] * n
        for r in range(n):
            dst = (r + 1) % n
            piece = piece_range(size_bytes, n, (r - s - 1) % n)
            now[dst] = plan.message(r, dst, s, (piece,), REDUCE, (received[r],))
        received = now
    return received


def _all_gather(
    plan: Plan, n: int, pieces: list[tuple[int, int]], first_step: int, received: list[int | None]
) -> None:
    """Ring all-gather of ``pieces[j]`` (initially held by position j) in steps first_step.. ."""
    for s in range(n - 1):
        now: list[int | None] = [None] * n
        for r in range(n):
            dst = (r + 1) % n
            now[dst] = plan.message(r, dst, first_step + s, (pieces[(r - s) % n],), COPY, (received[r],))
        received = now


def _ring_table(n: int, steps: tuple[int, int], pieces: tuple[int, int], length, chunks: int) -> TransferTable:
    """The messages of :func:`_reduce_scatter` (``steps[0]`` steps) then :func:`_all_gather` (``steps[1]``) as
    a table; the piece a message carries is ``(r - s + pieces[phase]) % n`` at step ``s`` of a phase, and its
    bytes ``length(piece)``."""
    r = np.arange(n, dtype=np.int64)
    src, dst, step, piece, dep = [], [], [], [], []
    msg = 0
    for phase, count in enumerate(steps):
        for s in range(count):
            src.append(r)
            dst.append((r + 1) % n)
            step.append(np.full(n, (steps[0] if phase else 0) + s, dtype=np.int64))
            piece.append((r - s + pieces[phase]) % n)
            # what r received at the previous step (of either phase): sent by r - 1 one step earlier
            dep.append((msg - n + (r - 1) % n) if msg else np.full(n, -1, dtype=np.int64))
            msg += n
    cat = np.concatenate
    return expand_messages(cat(src), cat(dst), cat(step), length(cat(piece)), cat(dep), chunks)


class RingAllReduce(BaseAlgorithm):
    name = "ring"
    collective = CollectiveType.ALL_REDUCE

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        received = _reduce_scatter(plan, n, size_bytes)
        _all_gather(plan, n, [piece_range(size_bytes, n, j) for j in range(n)], n - 1, received)

    def _table(self, n: int, size_bytes: int, root: int, chunks: int, window: int | None) -> TransferTable:
        return _ring_table(n, (n - 1, n - 1), (-1, 0), lambda i: piece_lengths(size_bytes, n, i), chunks)

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        return 2 * size_bytes - piece_bytes(size_bytes, n, position) - piece_bytes(size_bytes, n, (position + 1) % n)


class RingReduceScatter(BaseAlgorithm):
    name = "ring"
    collective = CollectiveType.REDUCE_SCATTER

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        _reduce_scatter(plan, n, size_bytes)

    def _table(self, n: int, size_bytes: int, root: int, chunks: int, window: int | None) -> TransferTable:
        return _ring_table(n, (n - 1, 0), (-1, 0), lambda i: piece_lengths(size_bytes, n, i), chunks)

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        return size_bytes - piece_bytes(size_bytes, n, position)


class RingReduceScatterBlock(RingReduceScatter):
    collective = CollectiveType.REDUCE_SCATTER_BLOCK


class RingAllGather(BaseAlgorithm):
    name = "ring"
    collective = CollectiveType.ALL_GATHER

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        shards = [(j * size_bytes, (j + 1) * size_bytes) for j in range(n)]
        _all_gather(plan, n, shards, 0, [None] * n)

    def _table(self, n: int, size_bytes: int, root: int, chunks: int, window: int | None) -> TransferTable:
        return _ring_table(n, (0, n - 1), (0, 0), lambda i: np.full(i.shape, size_bytes, dtype=np.int64), chunks)

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        return (n - 1) * size_bytes
