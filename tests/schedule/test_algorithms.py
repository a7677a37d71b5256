"""Collective algorithms: registry, golden decompositions, volumes, chunking and the dependency graph."""

from collections import Counter, deque
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.errors import ScheduleError
from emulator.schedule.algorithms import (
    DEFAULT_ALGORITHMS,
    all_algorithms,
    available_algorithms,
    get_algorithm,
)
from emulator.trace.model import CollectiveType as C

ALGOS = all_algorithms()
ALGO_IDS = [a.label for a in ALGOS]
NS = list(range(2, 18))
# The volume grid's rank counts: the smallest, primes, odd composites, powers of two and even non-powers
# (the cases the algorithms branch on: n & (n - 1), parity, size % n); test_random_instances_match_formulas
# draws any n up to 40.
NS_VOLUMES = [2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17]
MiB = 1 << 20


def sizes_for(n):
    return [0, 1, n - 1, 7 * n + 3, 12345, MiB]


def roots_for(alg, n):
    return [0, n - 1, n // 2] if alg.uses_root else [0]


def windows_for(alg, n):
    return [None, 1, 2, 3] if alg.uses_window else [None]


def sent_received(transfers, n):
    sent, received = [0] * n, [0] * n
    for t in transfers:
        sent[t.src] += t.size_bytes
        received[t.dst] += t.size_bytes
    return sent, received


def ceil_log2(n):
    return (n - 1).bit_length()


def check_graph(transfers, n):
    """Structural checks, acyclicity (Kahn) and a unit-latency replay; returns the critical path."""
    count = len(transfers)
    children = [[] for _ in range(count)]
    for i, t in enumerate(transfers):
        assert 0 <= t.src < n and 0 <= t.dst < n and t.src != t.dst, t
        assert t.size_bytes >= 0 and t.step >= 0 and t.chunk >= 0
        assert len(set(t.after)) == len(t.after)
        for d in t.after:
            assert 0 <= d < count and d != i
            parent = transfers[d]
            assert t.src in (parent.src, parent.dst), f"transfer {i} waits for {d}, which does not involve {t.src}"
            assert parent.chunk == t.chunk, f"chunk {t.chunk} of transfer {i} waits for chunk {parent.chunk}"
            assert parent.step < t.step
            children[d].append(i)
    # acyclic, without relying on index order
    indeg = [len(t.after) for t in transfers]
    queue = deque(i for i in range(count) if indeg[i] == 0)
    seen = 0
    while queue:
        i = queue.popleft()
        seen += 1
        for j in children[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                queue.append(j)
    assert seen == count, "dependency graph has a cycle"
    # unit latency replay, each rank sending its transfers one at a time in list order (FIFO per rank):
    # every transfer must become runnable (no deadlock)
    queues = [deque() for _ in range(n)]
    for i, t in enumerate(transfers):
        queues[t.src].append(i)
    done = [False] * count
    time = 0
    remaining = count
    while remaining:
        started = [q.popleft() for q in queues if q and all(done[d] for d in transfers[q[0]].after)]
        assert started, f"replay deadlocked with {remaining} transfers left"
        for i in started:
            done[i] = True
        remaining -= len(started)
        time += 1
    # critical path (unlimited parallelism)
    depth = [0] * count
    for i, t in enumerate(transfers):
        depth[i] = 1 + max((depth[d] for d in t.after), default=0)
    return max(depth, default=0)


# -- registry -----------------------------------------------------------------------------------------


def test_registry_contents():
    assert available_algorithms(C.ALL_REDUCE) == ["direct", "double_binary_tree", "halving_doubling", "ring"]
    assert available_algorithms(C.ALL_GATHER) == ["direct", "ring"]
    assert available_algorithms(C.REDUCE_SCATTER) == ["direct", "ring"]
    assert available_algorithms(C.ALL_TO_ALL) == ["direct", "pairwise"]
    assert available_algorithms(C.BROADCAST) == ["binomial_tree", "ring"]
    assert available_algorithms(C.REDUCE) == ["binomial_tree", "ring"]
    assert available_algorithms(C.GATHER) == ["direct"]
    assert available_algorithms(C.SCATTER) == ["direct"]
    assert available_algorithms(C.BARRIER) == ["dissemination"]
    for ctype in C:
        default = get_algorithm(ctype)
        assert default.name == DEFAULT_ALGORITHMS[ctype] and default.collective == ctype
        for name in available_algorithms(ctype):
            alg = get_algorithm(ctype, name)
            assert alg.name == name and alg.collective == ctype
            assert get_algorithm(ctype, name) is alg


def test_unknown_algorithm_lists_valid_names():
    with pytest.raises(ScheduleError) as info:
        get_algorithm(C.ALL_REDUCE, "butterfly")
    message = str(info.value)
    assert "\n" not in message and "butterfly" in message
    for name in ("direct", "double_binary_tree", "halving_doubling", "ring"):
        assert name in message
    with pytest.raises(ScheduleError, match="direct, pairwise"):
        get_algorithm(C.ALL_TO_ALL, "ring")
    assert get_algorithm(C.ALL_REDUCE, "halving-doubling").name == "halving_doubling"
    with pytest.raises(ScheduleError, match="unknown collective type 42"):
        get_algorithm(42)
    with pytest.raises(ScheduleError, match="unknown collective type"):
        available_algorithms(42)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n": 0, "size_bytes": 8},
        {"n": 4, "size_bytes": -1},
        {"n": 4, "size_bytes": 8, "chunks": 0},
        {"n": 4, "size_bytes": 8, "window": 0},
    ],
)
def test_bad_arguments_raise_schedule_error(kwargs):
    args = dict(kwargs)
    n, size = args.pop("n"), args.pop("size_bytes")
    with pytest.raises(ScheduleError):
        get_algorithm(C.ALL_TO_ALL).transfers(n, size, **args)


def test_bad_root_and_position():
    with pytest.raises(ScheduleError, match="root"):
        get_algorithm(C.BROADCAST, "binomial_tree").transfers(4, 100, root=4)
    with pytest.raises(ScheduleError, match="position"):
        get_algorithm(C.ALL_REDUCE).expected_bytes_sent(4, 100, 4)


@pytest.mark.parametrize("alg", ALGOS, ids=ALGO_IDS)
def test_single_rank_has_no_transfers(alg):
    assert alg.transfers(1, MiB, chunks=3) == []
    assert alg.expected_bytes_sent(1, MiB, 0) == 0


# -- golden decompositions ----------------------------------------------------------------------------


def test_golden_ring_all_reduce_8_ranks_1mib():
    transfers = get_algorithm(C.ALL_REDUCE, "ring").transfers(8, MiB)
    assert len(transfers) == 8 * 14
    for r in range(8):
        mine = [t for t in transfers if t.src == r]
        assert Counter((t.dst, t.size_bytes) for t in mine) == {((r + 1) % 8, 131072): 14}
        assert Counter((t.src, t.size_bytes) for t in transfers if t.dst == r) == {((r - 1) % 8, 131072): 14}
        assert sum(t.size_bytes for t in mine) == 1_835_008
        assert sorted(t.step for t in mine) == list(range(14))


@pytest.mark.parametrize("n", [4, 8, 16])
def test_microbenchmark_volumes_from_shared_readme(n):
    expect_ar = {4: 1_572_864, 8: 1_835_008, 16: 1_966_080}[n]
    expect_rs = {4: 786_432, 8: 917_504, 16: 983_040}[n]
    for r in range(n):
        assert sent_received(get_algorithm(C.ALL_REDUCE, "ring").transfers(n, MiB), n)[0][r] == expect_ar
        assert sent_received(get_algorithm(C.REDUCE_SCATTER, "ring").transfers(n, MiB), n)[0][r] == expect_rs
        assert sent_received(get_algorithm(C.ALL_GATHER, "ring").transfers(n, MiB), n)[0][r] == (n - 1) * MiB
    a2a = get_algorithm(C.ALL_TO_ALL, "direct").transfers(n, MiB)
    for r in range(n):
        mine = [t for t in a2a if t.src == r]
        assert sorted(t.dst for t in mine) == sorted(set(range(n)) - {r})
        assert {t.size_bytes for t in mine} == {MiB // n}


def test_pairwise_and_window_dependencies():
    pair = get_algorithm(C.ALL_TO_ALL, "pairwise").transfers(5, 500)
    for t in pair:
        assert t.dst == (t.src + t.step + 1) % 5
        if t.step:
            peers = sorted((pair[d].src, pair[d].dst) for d in t.after)
            assert peers == sorted([(t.src, (t.src + t.step) % 5), ((t.src - t.step) % 5, t.src)])
    windowed = get_algorithm(C.ALL_TO_ALL, "direct").transfers(8, 800, window=2)
    for r in range(8):
        mine = [t for t in windowed if t.src == r]
        assert [t.dst for t in mine] == [(r + k) % 8 for k in range(1, 8)]
        for k, t in enumerate(mine, start=1):
            assert [windowed[d].dst for d in t.after] == ([] if k <= 2 else [(r + k - 2) % 8])


def test_double_binary_trees_are_valid_and_complementary():
    from emulator.schedule.algorithms.tree import dtree_parents

    for n in range(2, 70):
        trees = dtree_parents(n)
        inner = []
        for parents in trees:
            assert parents.count(-1) == 1
            for r in range(n):  # every node reaches the root
                seen, x = set(), r
                while parents[x] >= 0:
                    assert x not in seen
                    seen.add(x)
                    x = parents[x]
            assert max(parents.count(r) for r in range(n)) <= 2
            inner.append({r for r in range(n) if r in parents})
        if n > 2:  # no rank is an inner node of both trees (NCCL's point: each link used once per direction)
            assert len(inner[0] & inner[1]) <= 1


# -- volumes ------------------------------------------------------------------------------------------


def textbook(alg, n, size, root):
    """(per-rank bytes sent or None when no simple formula applies, total bytes sent) from the literature."""
    ctype, name = alg.collective, alg.name
    ratio = Fraction(n - 1, n)
    if ctype == C.ALL_REDUCE:
        per = 2 * ratio * size if size % n == 0 and (name != "halving_doubling" or n & (n - 1) == 0) else None
        if name == "double_binary_tree":
            per = None
        return per, 2 * (n - 1) * size
    if ctype in (C.REDUCE_SCATTER, C.REDUCE_SCATTER_BLOCK, C.ALL_TO_ALL):
        return (ratio * size if size % n == 0 else None), (n - 1) * size
    if ctype == C.ALL_GATHER:
        return (n - 1) * size, n * (n - 1) * size
    if ctype in (C.BROADCAST, C.REDUCE, C.GATHER):
        return None, (n - 1) * size
    if ctype == C.SCATTER:
        return None, size - (size // n + (1 if root < size % n else 0))
    if ctype == C.BARRIER:
        return 0, 0
    raise AssertionError(ctype)


@pytest.mark.parametrize("n", NS_VOLUMES)
@pytest.mark.parametrize("alg", ALGOS, ids=ALGO_IDS)
def test_volumes_match_closed_formulas(alg, n):
    for size in sizes_for(n):
        for root in roots_for(alg, n):
            expected = [alg.expected_bytes_sent(n, size, r, root=root) for r in range(n)]
            per, total = textbook(alg, n, size, root)
            assert sum(expected) == total
            if per is not None:
                assert all(e == per for e in expected), (size, expected, per)
            if alg.collective == C.REDUCE:
                assert expected == [0 if r == root else size for r in range(n)]
            if alg.collective == C.GATHER:
                assert expected == [0 if r == root else size for r in range(n)]
            base_count = None
            for chunks in (1, 2, 3, 4):
                for window in windows_for(alg, n):
                    transfers = alg.transfers(n, size, root=root, chunks=chunks, window=window)
                    sent, received = sent_received(transfers, n)
                    assert sent == expected, (size, root, chunks, window)
                    assert sum(received) == sum(sent)
                    if chunks == 1 and window is None:
                        base_count = len(transfers)
                    expect_count = base_count if alg.collective == C.BARRIER else base_count * chunks
                    assert len(transfers) == expect_count
                    check_received(alg, n, size, root, received)


def check_received(alg, n, size, root, received):
    piece = [size // n + (1 if j < size % n else 0) for j in range(n)]
    ctype = alg.collective
    if ctype == C.ALL_GATHER:
        assert received == [(n - 1) * size] * n
    elif ctype == C.ALL_TO_ALL:
        assert received == [(n - 1) * piece[r] for r in range(n)]
    elif ctype == C.BROADCAST:
        assert received == [0 if r == root else size for r in range(n)]
    elif ctype == C.SCATTER:
        assert received == [0 if r == root else piece[r] for r in range(n)]
    elif ctype == C.GATHER:
        assert received == [(n - 1) * size if r == root else 0 for r in range(n)]
    elif ctype in (C.REDUCE_SCATTER, C.REDUCE_SCATTER_BLOCK) and alg.name == "direct":
        assert received == [(n - 1) * piece[r] for r in range(n)]


# -- chunks and the dependency graph --------------------------------------------------------------------


def expected_depth(alg, n, window):
    """Critical path (in messages) with one chunk, from each algorithm's definition."""
    key = (alg.collective, alg.name)
    k = ceil_log2(n)
    p = 1 << (n.bit_length() - 1)
    table = {
        (C.ALL_REDUCE, "ring"): 2 * (n - 1),
        (C.ALL_REDUCE, "direct"): 2,
        (C.ALL_REDUCE, "halving_doubling"): 2 * (p.bit_length() - 1) + (2 if p != n else 0),
        (C.ALL_GATHER, "ring"): n - 1,
        (C.ALL_GATHER, "direct"): 1,
        (C.REDUCE_SCATTER, "ring"): n - 1,
        (C.REDUCE_SCATTER, "direct"): 1,
        (C.REDUCE_SCATTER_BLOCK, "ring"): n - 1,
        (C.REDUCE_SCATTER_BLOCK, "direct"): 1,
        (C.ALL_TO_ALL, "direct"): 1 if window is None else -(-(n - 1) // window),
        (C.ALL_TO_ALL, "pairwise"): n - 1,
        (C.BROADCAST, "ring"): n - 1,
        (C.REDUCE, "ring"): n - 1,
        (C.BROADCAST, "binomial_tree"): k,
        (C.REDUCE, "binomial_tree"): max(bin(v).count("1") for v in range(n)),  # receives are not serialised
        (C.GATHER, "direct"): 1,
        (C.SCATTER, "direct"): 1,
        (C.BARRIER, "dissemination"): k,
    }
    return table.get(key)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("alg", ALGOS, ids=ALGO_IDS)
def test_dependency_graph_is_causal_and_chunked(alg, n):
    size = 7 * n + 3
    for root in roots_for(alg, n)[:2]:
        for window in windows_for(alg, n):
            one = alg.transfers(n, size, root=root, window=window)
            depth = check_graph(one, n)
            want = expected_depth(alg, n, window if window is None or window < n - 1 else None)
            if want is not None:
                assert depth == want
            else:  # double binary tree: up and down the deeper tree
                assert depth <= 2 * n
            if alg.collective == C.BARRIER:
                assert len(one) == n * ceil_log2(n)
                assert all(t.size_bytes == 0 for t in one)
            for chunks in (2, 3, 4):
                many = alg.transfers(n, size, root=root, chunks=chunks, window=window)
                assert check_graph(many, n) == depth  # chunks pipeline, they never lengthen the chain
                if alg.collective == C.BARRIER:
                    assert many == one
                    continue
                # the same messages, each cut into chunks 0..k-1 whose sizes add up
                assert _sizes_by_message(many) == _sizes_by_message(one)
                by_chunk = Counter(t.chunk for t in many)
                assert by_chunk == {c: len(one) for c in range(chunks)}


def _sizes_by_message(transfers):
    groups = Counter()
    for t in transfers:
        groups[(t.src, t.dst, t.step)] += t.size_bytes
    return groups


@pytest.mark.parametrize("alg", ALGOS, ids=ALGO_IDS)
def test_deterministic_and_cache_safe(alg):
    first = alg.transfers(9, 1001, root=0, chunks=2)
    first.clear()
    again = alg.transfers(9, 1001, root=0, chunks=2)
    assert again and again == alg.transfers(9, 1001, root=0, chunks=2)


@settings(max_examples=150, deadline=None)
@given(
    index=st.integers(0, len(ALGOS) - 1),
    n=st.integers(2, 40),
    size=st.integers(0, 10**7),
    chunks=st.integers(1, 6),
    root_seed=st.integers(0, 10**6),
    window=st.one_of(st.none(), st.integers(1, 45)),
)
def test_random_instances_match_formulas(index, n, size, chunks, root_seed, window):
    alg = ALGOS[index]
    root = root_seed % n
    transfers = alg.transfers(n, size, root=root, chunks=chunks, window=window)
    sent, received = sent_received(transfers, n)
    assert sent == [alg.expected_bytes_sent(n, size, r, root=root) for r in range(n)]
    assert sum(sent) == textbook(alg, n, size, root)[1]
    check_received(alg, n, size, root, received)
    check_graph(transfers, n)
