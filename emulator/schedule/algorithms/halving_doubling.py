"""Recursive halving-doubling All-Reduce (Rabenseifner), with the non-power-of-two fold.

Theory of operation
-------------------
Let ``p`` be the largest power of two ``<= n``, ``rem = n - p`` and ``L = log2 p``. The buffer is cut
into ``p`` pieces (:func:`piece_range` of ``S`` split ``p`` ways).

1. Fold (only when ``rem > 0``, step 0): each even position ``2e < 2·rem`` sends its whole buffer to
   ``2e+1`` (``reduce``) and sits out. The ``p`` remaining positions get *core ranks*: ``2e+1 → e`` for
   ``e < rem``, position ``q >= 2·rem → q - rem``.
2. Reduce-scatter by recursive halving (``L`` steps): at step ``k`` core rank ``i`` exchanges with
   ``i XOR p/2^(k+1)``; both hold the same range of pieces; the rank with that bit clear keeps the lower
   half and sends the upper half (``reduce``), the other the reverse. Afterwards core rank ``i`` holds
   the fully reduced piece ``i``. Bytes: ``S - piece(S, p, i)``.
3. All-gather by recursive doubling (``L`` steps): at step ``k`` core rank ``i`` sends its current
   range (the aligned block of ``2^k`` pieces containing ``i``) to ``i XOR 2^k`` (``copy``).
4. Unfold (when ``rem > 0``): ``2e+1`` sends the whole result back to ``2e`` (``copy``).

Dependencies: every send of a core rank waits for its own previous send and for its previous receive
(so everything it has received so far is in its causal past). Per-rank bytes: even fold positions
``S``; core rank ``i``: ``S - piece(S, p, i) + Σ_k bytes(block of 2^k pieces containing i)``, plus
``S`` for the odd fold partners. Totals ``2(n-1)·S`` for every ``n`` and ``S``; per rank
``2(n-1)/n·S`` when ``n`` is a power of two dividing ``S``.
"""

from __future__ import annotations

from emulator.schedule.algorithms.base import (
    COPY,
    REDUCE,
    BaseAlgorithm,
    Plan,
    piece_bytes,
    piece_range,
    pieces_bytes,
)
from emulator.trace.model import CollectiveType


def _shape(n: int) -> tuple[int, int, int]:
    p = 1 << (n.bit_length() - 1)
    return p, n - p, p.bit_length() - 1


class HalvingDoublingAllReduce(BaseAlgorithm):
    name = "halving_doubling"
    collective = CollectiveType.ALL_REDUCE

    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        p, rem, levels = _shape(n)
        pieces = [piece_range(size_bytes, p, i) for i in range(p)]

        def pos(i: int) -> int:
            return 2 * i + 1 if i < rem else i + rem

        sent: list[int | None] = [None] * p
        received: list[int | None] = [None] * p
        step = 0
        if rem:
            for e in range(rem):
                received[e] = plan.message(2 * e, 2 * e + 1, 0, pieces, REDUCE)
            step = 1
        lo = [0] * p
        hi = [p] * p
        for k in range(levels):
            d = p >> (k + 1)
            new_lo, new_hi, new_received = lo[:], hi[:], received[:]
            for i in range(p):
                mid = (lo[i] + hi[i]) // 2
                if i & d:
                    give, new_lo[i] = (lo[i], mid), mid
                else:
                    give, new_hi[i] = (mid, hi[i]), mid
                m = plan.message(pos(i), pos(i ^ d), step, pieces[give[0] : give[1]], REDUCE, (sent[i], received[i]))
                sent[i] = m
                new_received[i ^ d] = m
            lo, hi, received = new_lo, new_hi, new_received
            step += 1
        for k in range(levels):
            d = 1 << k
            new_lo, new_hi, new_received = lo[:], hi[:], received[:]
            for i in range(p):
                m = plan.message(pos(i), pos(i ^ d), step, pieces[lo[i] : hi[i]], COPY, (sent[i], received[i]))
                sent[i] = m
                new_received[i ^ d] = m
                new_lo[i], new_hi[i] = min(lo[i], lo[i ^ d]), max(hi[i], hi[i ^ d])
            lo, hi, received = new_lo, new_hi, new_received
            step += 1
        for e in range(rem):
            plan.message(2 * e + 1, 2 * e, step, pieces, COPY, (sent[e], received[e]))

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        p, rem, levels = _shape(n)
        if position < 2 * rem and position % 2 == 0:
            return size_bytes
        i = position // 2 if position < 2 * rem else position - rem
        total = size_bytes - piece_bytes(size_bytes, p, i)
        for k in range(levels):
            base = (i >> k) << k
            total += pieces_bytes(size_bytes, p, base, base + (1 << k))
        if position < 2 * rem:
            total += size_bytes
        return total
