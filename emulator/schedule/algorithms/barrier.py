"""Dissemination barrier.

Theory of operation
-------------------
``K = ceil(log2 n)`` rounds; in round ``k`` position ``r`` sends a 0-byte token to ``(r + 2^k) % n``
after its own round ``k-1`` send and the token it received in round ``k-1`` (from ``(r - 2^(k-1)) % n``).
After round ``k`` a rank knows that the ``2^(k+1)`` ranks ending at itself have arrived, so after ``K``
rounds everyone knows everyone arrived. ``n·K`` messages, the minimum for ``K`` rounds; no bytes.
Chunking does not apply (always one chunk).
"""

from __future__ import annotations

from emulator.schedule.algorithms.base import SIGNAL, BaseAlgorithm, Plan, ceil_log2
from emulator.trace.model import CollectiveType


class DisseminationBarrier(BaseAlgorithm):
    name = "dissemination"
    collective = CollectiveType.BARRIER
    chunkable = False

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        sent: list[int | None] = [None] * n
        received: list[int | None] = [None] * n
        for k in range(ceil_log2(n)):
            now_received: list[int | None] = [None] * n
            for r in range(n):
                dst = (r + (1 << k)) % n
                m = plan.message(r, dst, k, (), SIGNAL, (sent[r], received[r]))
                sent[r] = m
                now_received[dst] = m
            received = now_received

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        return 0
