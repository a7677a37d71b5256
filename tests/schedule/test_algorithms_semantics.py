"""Collective algorithms: data tracking proves each decomposition computes its collective.

Each rank holds, for every byte range of the collective's logical buffer (see
``emulator/schedule/algorithms/base.py``), the set of ranks whose contribution it has (a bitmask).
Transfers are applied in list order (a topological order); a transfer carries the sender's state.
``reduce`` adds it (contributions must be disjoint: no double counting), ``copy`` overwrites (at most
once per byte and rank), ``signal`` merges knowledge (barrier; a token carries only what reached its
sender through the ``after`` graph). A sender must hold data for every byte
it sends. Race check: any two accesses of the same byte on the same rank that do not commute (reads
vs writes, copies vs anything) must be ordered by the ``after`` graph, so every causally valid replay
computes the same thing. Finally every rank must hold what the collective promises.
"""

from bisect import bisect_left
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.schedule.algorithms import all_algorithms
from emulator.schedule.algorithms.base import COPY, REDUCE, SIGNAL, piece_range
from emulator.trace.model import CollectiveType as C

ALGOS = all_algorithms()
ALGO_IDS = [a.label for a in ALGOS]
READ = "read"


def spec(ctype, n, size, root):
    """(initial holdings, final requirements) as lists of (rank, lo, hi, mask)."""
    full = (1 << n) - 1
    own = [(r, 0, size, 1 << r) for r in range(n)]
    if ctype == C.ALL_REDUCE:
        return own, [(r, 0, size, full) for r in range(n)]
    if ctype in (C.REDUCE_SCATTER, C.REDUCE_SCATTER_BLOCK):
        return own, [(r, *piece_range(size, n, r), full) for r in range(n)]
    if ctype == C.REDUCE:
        return own, [(root, 0, size, full)]
    shards = [(r, r * size, (r + 1) * size, 1 << r) for r in range(n)]
    if ctype == C.ALL_GATHER:
        return shards, [(r, j * size, (j + 1) * size, 1 << j) for r in range(n) for j in range(n)]
    if ctype == C.GATHER:
        return shards, [(root, j * size, (j + 1) * size, 1 << j) for j in range(n)]
    if ctype == C.BROADCAST:
        return [(root, 0, size, 1 << root)], [(r, 0, size, 1 << root) for r in range(n)]
    if ctype == C.SCATTER:
        return [(root, 0, size, 1 << root)], [(r, *piece_range(size, n, r), 1 << root) for r in range(n)]
    if ctype == C.ALL_TO_ALL:
        blocks = [(r, r * size, (r + 1) * size, 1 << r) for r in range(n)]
        final = []
        for i in range(n):
            for j in range(n):
                lo, hi = piece_range(size, n, j)
                final.append((j, i * size + lo, i * size + hi, 1 << i))
        return blocks, final
    if ctype == C.BARRIER:
        return [(r, 0, 1, 1 << r) for r in range(n)], [(r, 0, 1, full) for r in range(n)]
    raise AssertionError(ctype)


def check_semantics(alg, n, size, *, root=0, chunks=1, window=None):
    plan = alg.plan(n, size, root=root, chunks=chunks, window=window)
    transfers, payloads = plan.transfers, plan.payloads
    assert len(transfers) == len(payloads)
    init, final = spec(alg.collective, n, size, root)
    bounds = set()
    for _, lo, hi, _ in init + final:
        bounds.update((lo, hi))
    for p in payloads:
        for lo, hi in p.ranges:
            assert lo < hi
            bounds.update((lo, hi))
    bounds = sorted(bounds)

    def segments(lo, hi):
        return range(bisect_left(bounds, lo), bisect_left(bounds, hi))

    nseg = max(len(bounds) - 1, 0)
    state = [[0] * nseg for _ in range(n)]
    copies = [[0] * nseg for _ in range(n)]
    for r, lo, hi, mask in init:
        for g in segments(lo, hi):
            state[r][g] = mask
    initial = [row[:] for row in state]
    signal = {}
    ancestors = []
    events = defaultdict(list)
    for i, (t, p) in enumerate(zip(transfers, payloads, strict=True)):
        anc = 0
        for d in t.after:
            anc |= ancestors[d] | (1 << d)
        ancestors.append(anc)
        if p.mode == SIGNAL:
            assert t.size_bytes == 0
        else:
            assert p.mode in (REDUCE, COPY)
            assert t.size_bytes == sum(hi - lo for lo, hi in p.ranges), f"transfer {i}: size != payload"
        segs = [g for lo, hi in p.ranges for g in segments(lo, hi)]
        if p.mode == SIGNAL:
            # knowledge only grows, so a token carries exactly what reached the sender causally before it
            values = [initial[t.src][g] for g in segs]
            for d in range(i):
                if anc >> d & 1 and transfers[d].dst == t.src:
                    values = [v | signal[d] for v in values]
            signal[i] = values[0] if values else 0
        else:
            values = [state[t.src][g] for g in segs]
        for g, value in zip(segs, values, strict=True):
            assert value, f"transfer {i} {t}: rank {t.src} sends bytes it does not hold"
            mine = state[t.dst][g]
            if p.mode == REDUCE:
                assert mine & value == 0, f"transfer {i} {t}: contributions counted twice on rank {t.dst}"
                state[t.dst][g] = mine | value
            elif p.mode == COPY:
                copies[t.dst][g] += 1
                assert copies[t.dst][g] == 1, f"transfer {i} {t}: rank {t.dst} receives the same bytes twice"
                state[t.dst][g] = value
            else:
                state[t.dst][g] = mine | value
            events[(t.src, g)].append((i, READ))
            events[(t.dst, g)].append((i, p.mode))
    for (rank, g), seq in events.items():
        for x in range(len(seq)):
            i, a = seq[x]
            for y in range(x + 1, len(seq)):
                j, b = seq[y]
                if a == READ and b == READ or SIGNAL in (a, b):
                    continue  # concurrent reads; barrier tokens are tracked causally above
                if a == REDUCE and b == REDUCE:
                    continue  # reductions commute
                assert ancestors[j] >> i & 1, (
                    f"race on rank {rank} bytes from {bounds[g]}: transfer {j} {transfers[j]} ({b}) is not ordered after "
                    f"transfer {i} {transfers[i]} ({a})"
                )
    for r, lo, hi, mask in final:
        for g in segments(lo, hi):
            assert state[r][g] == mask, f"rank {r} bytes [{bounds[g]}, {bounds[g + 1]}): {state[r][g]:b} != {mask:b}"


def cases(alg, n):
    roots = [0, n - 1] if alg.uses_root else [0]
    windows = [None, 1, 3] if alg.uses_window else [None]
    for size in (n - 1, 7 * n + 3):
        for chunks in (1, 3):
            for root in roots:
                for window in windows:
                    yield size, chunks, root, window


@pytest.mark.parametrize("n", range(2, 18))
@pytest.mark.parametrize("alg", ALGOS, ids=ALGO_IDS)
def test_algorithm_computes_its_collective(alg, n):
    for size, chunks, root, window in cases(alg, n):
        check_semantics(alg, n, size, root=root, chunks=chunks, window=window)


@settings(max_examples=60, deadline=None)
@given(
    index=st.integers(0, len(ALGOS) - 1),
    n=st.integers(2, 20),
    size=st.integers(0, 5000),
    chunks=st.integers(1, 4),
    root_seed=st.integers(0, 1000),
    window=st.one_of(st.none(), st.integers(1, 20)),
)
def test_random_instances_compute_their_collective(index, n, size, chunks, root_seed, window):
    check_semantics(ALGOS[index], n, size, root=root_seed % n, chunks=chunks, window=window)


def test_checker_catches_broken_algorithms():
    """The checker must be able to fail: drop a dependency, or double a contribution."""
    from emulator.schedule.algorithms.base import Payload, PlanResult, Transfer

    ring = next(a for a in ALGOS if a.label == "all_reduce/ring")

    class Broken:
        collective = C.ALL_REDUCE
        uses_root = uses_window = False

        def __init__(self, mutate):
            self.mutate = mutate

        def plan(self, n, size, **kwargs):
            good = ring.plan(n, size, **kwargs)
            ts, ps = list(good.transfers), list(good.payloads)
            self.mutate(ts, ps)
            return PlanResult(tuple(ts), tuple(ps))

    def drop_dep(ts, ps):
        i = next(k for k, t in enumerate(ts) if t.after and t.step == 3)
        t = ts[i]
        ts[i] = Transfer(t.src, t.dst, t.size_bytes, t.step, t.chunk, ())

    def resend(ts, ps):  # step-0 transfer repeated: its contribution arrives twice
        ts.append(Transfer(ts[0].src, ts[0].dst, ts[0].size_bytes, 99, 0, ()))
        ps.append(ps[0])

    def copy_instead_of_reduce(ts, ps):
        ps[0] = Payload(COPY, ps[0].ranges)

    for mutate in (drop_dep, resend, copy_instead_of_reduce):
        with pytest.raises(AssertionError):
            check_semantics(Broken(mutate), 6, 600)
    check_semantics(Broken(lambda ts, ps: None), 6, 600)
