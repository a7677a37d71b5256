"""Direct (all peers at once) algorithms: All-Reduce, Reduce-Scatter, All-Gather, All-to-All.

Theory of operation
-------------------
Peers of position ``r`` are visited in the order ``r+1, r+2, …, r+n-1`` (mod ``n``).

* Reduce-scatter direct (step 0, ``reduce``): ``r`` sends piece ``j`` to every ``j != r``; bytes
  ``S - piece(r)``.
* All-gather direct (step 0, ``copy``): ``r`` sends its shard to every peer; bytes ``(n-1)·s``.
* All-reduce direct: the reduce-scatter (step 0), then at step 1 ``r`` sends its reduced piece ``r``
  to every peer, after receiving piece ``r`` from all ``n-1`` peers; bytes ``S + (n-2)·piece(r)``
  (= ``2(n-1)/n·S`` when ``n`` divides ``S``).
* All-to-all direct: ``r`` sends block ``piece(S, n, j)`` to every ``j != r``; bytes ``S - piece(r)``.
  With ``window = w`` at most ``w`` sends of a rank are in flight: the send to the ``k``-th peer
  (``k > w``) waits for the send to the ``(k-w)``-th peer; its step is ``(k-1) // w``.
* All-to-all pairwise: ``n-1`` steps; at step ``k-1`` (shift ``k = 1..n-1``) ``r`` sends to
  ``(r+k) % n`` after its own send of the previous step and the receive from ``(r-k+1) % n`` of the
  previous step (lock-step exchange). Bytes as direct.
"""

from __future__ import annotations

import numpy as np

from emulator.schedule.algorithms.base import (
    COPY,
    REDUCE,
    BaseAlgorithm,
    Plan,
    piece_bytes,
    piece_offset,
    piece_range,
)
from emulator.schedule.algorithms.table import TransferTable, expand_messages, piece_lengths
from emulator.trace.model import CollectiveType


def _reduce_scatter(plan: Plan, n: int, size_bytes: int) -> list[list[int]]:
    """Direct reduce-scatter at step 0; returns, per position, the messages it received."""
    received: list[list[int]] = [[] for _ in range(n)]
    for r in range(n):
        for k in range(1, n):
            j = (r + k) % n
            received[j].append(plan.message(r, j, 0, (piece_range(size_bytes, n, j),), REDUCE))
    return received


class DirectAllReduce(BaseAlgorithm):
    name = "direct"
    collective = CollectiveType.ALL_REDUCE

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        received = _reduce_scatter(plan, n, size_bytes)
        for r in range(n):
            mine = (piece_range(size_bytes, n, r),)
            for k in range(1, n):
                plan.message(r, (r + k) % n, 1, mine, COPY, received[r])

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        return size_bytes + (n - 2) * piece_bytes(size_bytes, n, position)


class DirectReduceScatter(BaseAlgorithm):
    name = "direct"
    collective = CollectiveType.REDUCE_SCATTER

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        _reduce_scatter(plan, n, size_bytes)

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        return size_bytes - piece_bytes(size_bytes, n, position)


class DirectReduceScatterBlock(DirectReduceScatter):
    collective = CollectiveType.REDUCE_SCATTER_BLOCK


class DirectAllGather(BaseAlgorithm):
    name = "direct"
    collective = CollectiveType.ALL_GATHER

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        for r in range(n):
            shard = ((r * size_bytes, (r + 1) * size_bytes),)
            for k in range(1, n):
                plan.message(r, (r + k) % n, 0, shard, COPY)

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        return (n - 1) * size_bytes


def _block(size_bytes: int, n: int, src: int, dst: int) -> tuple[tuple[int, int]]:
    """Logical range of the all-to-all block ``src`` sends to ``dst``."""
    base = src * size_bytes
    return ((base + piece_offset(size_bytes, n, dst), base + piece_offset(size_bytes, n, dst + 1)),)


class DirectAllToAll(BaseAlgorithm):
    name = "direct"
    collective = CollectiveType.ALL_TO_ALL
    uses_window = True

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        for r in range(n):
            sent: list[int] = []
            for k in range(1, n):
                j = (r + k) % n
                if window is None:
                    step, after = 0, ()
                else:
                    step = (k - 1) // window
                    after = (sent[k - 1 - window],) if k > window else ()
                sent.append(plan.message(r, j, step, _block(size_bytes, n, r, j), COPY, after))

    def _table(self, n: int, size_bytes: int, root: int, chunks: int, window: int | None) -> TransferTable:
        src = np.repeat(np.arange(n, dtype=np.int64), n - 1)
        k = np.tile(np.arange(1, n, dtype=np.int64), n)
        dst = (src + k) % n
        if window is None:
            step, dep = np.zeros_like(k), np.full(k.shape, -1, dtype=np.int64)
        else:  # message k waits for message k - window of the same sender
            step = (k - 1) // window
            dep = np.where(k > window, np.arange(k.shape[0], dtype=np.int64) - window, -1)
        return expand_messages(src, dst, step, piece_lengths(size_bytes, n, dst), dep, chunks)

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        return size_bytes - piece_bytes(size_bytes, n, position)


class PairwiseAllToAll(BaseAlgorithm):
    name = "pairwise"
    collective = CollectiveType.ALL_TO_ALL

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        sent: list[int | None] = [None] * n
        received: list[int | None] = [None] * n
        for k in range(1, n):
            now_sent: list[int | None] = [None] * n
            now_received: list[int | None] = [None] * n
            for r in range(n):
                j = (r + k) % n
                m = plan.message(r, j, k - 1, _block(size_bytes, n, r, j), COPY, (sent[r], received[r]))
                now_sent[r] = m
                now_received[j] = m
            sent, received = now_sent, now_received

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        return size_bytes - piece_bytes(size_bytes, n, position)
