"""Double binary tree All-Reduce (NCCL style).

Theory of operation
-------------------
Tree 0 is the in-order binary tree on positions ``0..n-1``: for ``r > 0`` with lowest set bit ``b``,
the parent is ``(r XOR b) | 2b``, or ``r XOR b`` when that is ``>= n``; position 0 is the root and has
a single child. Tree 1 is its complement: the mirror (``r → n-1-r``) when ``n`` is even, the shift
(``r → r+1 mod n``) when ``n`` is odd, so that most leaves of one tree are inner nodes of the other.
Each tree carries one half of the buffer (``piece_range(S, 2, t)``).

In each tree: reduce up (``reduce``), a node sends its half to its parent after receiving it from all
its children; then broadcast down (``copy``), the root after its children's contributions arrived, any
other node after receiving the result from its parent. Chunks pipeline both phases. Steps: a node at
depth ``d`` of a tree of depth ``D`` sends up at step ``D-d`` and down at step ``D+d``.

Bytes sent by position ``r``: ``Σ_t half_t · ([r is not the root of t] + children_t(r))``; total
``2(n-1)·S``.
"""

from __future__ import annotations

from emulator.schedule.algorithms.base import COPY, REDUCE, BaseAlgorithm, Plan, piece_bytes, piece_range
from emulator.trace.model import CollectiveType


def btree_parents(n: int) -> list[int]:
    """Parent of every position in tree 0 (-1 for the root, position 0)."""
    parents = [-1] * n
    for r in range(1, n):
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        parents[r] = up if up < n else r ^ bit
    return parents


def dtree_parents(n: int) -> tuple[list[int], list[int]]:
    """Parents in the two complementary trees (-1 marks each root)."""
    first = btree_parents(n)
    second = [-1] * n
    for r in range(n):
        if n % 2 == 0:
            up = first[n - 1 - r]
            second[r] = -1 if up < 0 else n - 1 - up
        else:
            up = first[(r - 1) % n]
            second[r] = -1 if up < 0 else (up + 1) % n
    return first, second


def _depths(parents: list[int]) -> list[int]:
    depth = [-1] * len(parents)

    def walk(r: int) -> int:
        if depth[r] < 0:
            depth[r] = 0 if parents[r] < 0 else walk(parents[r]) + 1
        return depth[r]

    for r in range(len(parents)):
        walk(r)
    return depth


class DoubleBinaryTreeAllReduce(BaseAlgorithm):
    name = "double_binary_tree"
    collective = CollectiveType.ALL_REDUCE

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        trees = dtree_parents(n)
        # events (step, tree, phase, node): phase 0 = send up, 1 = send down to the children
        events: list[tuple[int, int, int, int]] = []
        depths = []
        for t, parents in enumerate(trees):
            depth = _depths(parents)
            depths.append(depth)
            top = max(depth)
            for r in range(n):
                if parents[r] >= 0:
                    events.append((top - depth[r], t, 0, r))
                events.append((top + depth[r], t, 1, r))
        events.sort()
        up_received: list[list[list[int]]] = [[[] for _ in range(n)] for _ in trees]
        down_received: list[list[int | None]] = [[None] * n for _ in trees]
        for step, t, phase, r in events:
            parents = trees[t]
            half = (piece_range(size_bytes, 2, t),)
            if phase == 0:
                m = plan.message(r, parents[r], step, half, REDUCE, up_received[t][r])
                up_received[t][parents[r]].append(m)
            else:
                after = up_received[t][r] if parents[r] < 0 else (down_received[t][r],)
                for child in range(n):
                    if parents[child] == r:
                        down_received[t][child] = plan.message(r, child, step, half, COPY, after)

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        total = 0
        for t, parents in enumerate(dtree_parents(n)):
            sends = (1 if parents[position] >= 0 else 0) + parents.count(position)
            total += sends * piece_bytes(size_bytes, 2, t)
        return total
