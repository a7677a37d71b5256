"""Rooted collectives: Broadcast and Reduce (chain ``ring``, ``binomial_tree``), Gather and Scatter (``direct``).

Theory of operation
-------------------
Positions are renumbered relative to the root: ``v = (position - root) % n`` (the root is ``v = 0``).

* Broadcast ``ring`` (a pipelined chain from the root): hop ``h`` (step ``h``) sends the buffer from
  ``v = h`` to ``v = h+1`` (``copy``), chunk ``c`` after chunk ``c`` arrived. Every position but the
  last sends ``S``.
* Reduce ``ring`` (a pipelined chain to the root): ``v = 1 → 2 → … → n-1 → 0`` (``reduce``); every
  non-root position sends ``S``.
* Broadcast ``binomial_tree``: ``K = ceil(log2 n)`` rounds; in round ``k`` every ``v < 2^k`` that has
  the data sends it to ``v + 2^k`` (when ``< n``), after its receive and its own previous send. ``v``
  sends ``S`` times ``#{k : v.bit_length() <= k < K, v + 2^k < n}`` (for the root: all ``k``).
* Reduce ``binomial_tree``: in round ``k`` every ``v`` whose lowest set bit is ``2^k`` sends its
  partial sum to ``v - 2^k``, after receiving from its children ``v + 2^j`` (``j < k``); every non-root
  position sends ``S``.
* Gather ``direct`` (``s`` = per-rank shard): every non-root sends its shard to the root (``s``).
* Scatter ``direct`` (``S`` = root buffer): the root sends piece ``piece_range(S, n, j)`` to each
  ``j`` (``S - piece(root)`` in total); peers in the order ``root+1, root+2, …``.
"""

from __future__ import annotations

from emulator.schedule.algorithms.base import (
    COPY,
    REDUCE,
    BaseAlgorithm,
    Plan,
    ceil_log2,
    piece_bytes,
    piece_range,
)
from emulator.trace.model import CollectiveType


class _Rooted(BaseAlgorithm):
    uses_root = True


class ChainBroadcast(_Rooted):
    name = "ring"
    collective = CollectiveType.BROADCAST

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        whole = ((0, size_bytes),)
        prev: int | None = None
        for h in range(n - 1):
            prev = plan.message((root + h) % n, (root + h + 1) % n, h, whole, COPY, (prev,))

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        return size_bytes if (position - root) % n < n - 1 else 0


class ChainReduce(_Rooted):
    name = "ring"
    collective = CollectiveType.REDUCE

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        whole = ((0, size_bytes),)
        prev: int | None = None
        for h in range(n - 1):
            prev = plan.message((root + h + 1) % n, (root + h + 2) % n, h, whole, REDUCE, (prev,))

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        return 0 if position == root else size_bytes


def _binomial_bcast_sends(n: int, v: int) -> list[int]:
    """Rounds in which relative rank ``v`` sends in the binomial broadcast."""
    return [k for k in range(v.bit_length(), ceil_log2(n)) if v + (1 << k) < n]


class BinomialBroadcast(_Rooted):
    name = "binomial_tree"
    collective = CollectiveType.BROADCAST

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        whole = ((0, size_bytes),)
        last: list[int | None] = [None] * n  # per relative rank: its last receive or send
        for k in range(ceil_log2(n)):
            for v in range(min(1 << k, n)):
                w = v + (1 << k)
                if w < n:
                    m = plan.message((root + v) % n, (root + w) % n, k, whole, COPY, (last[v],))
                    last[v] = m
                    last[w] = m

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        return size_bytes * len(_binomial_bcast_sends(n, (position - root) % n))


class BinomialReduce(_Rooted):
    name = "binomial_tree"
    collective = CollectiveType.REDUCE

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        whole = ((0, size_bytes),)
        received: list[list[int]] = [[] for _ in range(n)]
        for k in range(ceil_log2(n)):
            for v in range(1 << k, n, 1 << (k + 1)):
                parent = v - (1 << k)
                m = plan.message((root + v) % n, (root + parent) % n, k, whole, REDUCE, received[v])
                received[parent].append(m)

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        return 0 if position == root else size_bytes


class DirectGather(_Rooted):
    name = "direct"
    collective = CollectiveType.GATHER

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        for k in range(1, n):
            j = (root + k) % n
            plan.message(j, root, 0, ((j * size_bytes, (j + 1) * size_bytes),), COPY)

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        return 0 if position == root else size_bytes


class DirectScatter(_Rooted):
    name = "direct"
    collective = CollectiveType.SCATTER

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        for k in range(1, n):
            j = (root + k) % n
            plan.message(root, j, 0, (piece_range(size_bytes, n, j),), COPY)

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        return size_bytes - piece_bytes(size_bytes, n, root) if position == root else 0
