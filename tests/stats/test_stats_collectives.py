import math

import numpy as np
import pytest

from emulator.stats.collectives import (
    CollectiveRecords,
    cct_distributions,
    cct_report,
    instance_bandwidths_gbps,
    instance_times,
    rank_completion_distributions,
)
from emulator.stats.stragglers import analyze_stragglers
from emulator.trace.model import CollectiveType as C


def two_instances() -> CollectiveRecords:
    # Instance 7: ranks 0..3; instance 9: ranks 3, 0, 1 (rows deliberately interleaved and unsorted).
    inst = np.array([9, 7, 7, 9, 7, 9, 7])
    rank = np.array([3, 0, 1, 0, 2, 1, 3])
    start = np.array([200, 0, 0, 200, 10, 200, 0])
    end = np.array([260, 100, 120, 230, 150, 500, 150])
    return CollectiveRecords.from_instance_ids(inst, rank, start, end)


def test_grouping_and_cct():
    rec = two_instances()
    assert rec.instance_id.tolist() == [7, 9]
    assert rec.member_ptr.tolist() == [0, 4, 7]
    assert rec.rank.tolist() == [0, 1, 2, 3, 3, 0, 1]  # stable inside an instance
    t = instance_times(rec)
    assert t.cct_ns.tolist() == [150, 300]
    assert t.first_start_ns.tolist() == [0, 200] and t.last_end_ns.tolist() == [150, 500]
    assert t.completion_ns.tolist() == [100, 120, 140, 150, 60, 30, 300]
    assert t.n_members.tolist() == [4, 3]
    assert t.cct_distribution().max == 300


def test_straggler_figures_by_hand():
    a = analyze_stragglers(two_instances())
    i = a.instances
    assert i.slowest_rank.tolist() == [3, 1]
    assert i.median_end_ns.tolist() == [120, 260]  # nearest-rank p50 (lower middle for 4 members)
    assert i.skew_ns.tolist() == [30, 240]
    assert i.skew_fraction.tolist() == pytest.approx([0.2, 0.8])
    assert i.end_spread_ns.tolist() == [50, 270]
    assert i.straggler_delay.tolist() == pytest.approx([1 / 3, 0.9])
    assert i.straggler_slowdown.tolist() == pytest.approx([1.5, 10.0])
    assert i.n_last.tolist() == [2, 1]  # ranks 2 and 3 tie at 150
    assert i.n_slow.tolist() == [0, 1]  # 300 > 1.5 × 60
    m = a.members
    assert m.lateness_ns.tolist() == [-20, 0, 30, 30, 0, -30, 240]
    assert m.lateness_vs_first_ns.tolist() == [0, 20, 50, 50, 30, 0, 270]
    assert m.is_last.tolist() == [False, False, True, True, False, False, True]

    r = a.ranks
    assert r.rank.tolist() == [0, 1, 2, 3]
    assert r.instances.tolist() == [2, 2, 1, 2]
    assert r.last_count.tolist() == [0, 1, 1, 1]
    assert r.slow_count.tolist() == [0, 1, 0, 0]
    assert r.mean_lateness_ns.tolist() == pytest.approx([-25, 120, 30, 15])
    assert r.mean_lateness_vs_first_ns.tolist() == pytest.approx([0, 145, 50, 40])
    assert r.max_lateness_ns.tolist() == [-20, 240, 30, 30]
    assert r.expected_last_count.tolist() == pytest.approx([0.5 + 1 / 3, 0.5 + 1 / 3, 0.5, 0.5 + 1 / 3])
    assert r.last_ratio[2] == pytest.approx(2.0)
    assert r.to_rows()[1]["last_count"] == 1

    s = a.summary
    assert (s.instances, s.ranks) == (2, 4)
    assert s.median_skew_ns == 30 and s.p99_skew_ns == 240
    assert s.last_finisher_histogram == {0: 1, 1: 3}
    assert s.most_often_last_rank == 1 and s.most_often_last_count == 1
    assert s.instances_with_slow_rank == 1
    assert s.straggler_slowdown.max == pytest.approx(10.0)
    assert s.to_dict()["last_finisher_histogram"] == {"0": 1, "1": 3}


def test_slow_factor_is_configurable():
    a = analyze_stragglers(two_instances(), slow_factor=1.1)
    assert a.instances.n_slow.tolist() == [2, 1]  # 140, 150 > 132
    assert a.ranks.slow_count.tolist() == [0, 1, 1, 1]
    with pytest.raises(ValueError):
        analyze_stragglers(two_instances(), slow_factor=0)


def test_degenerate_instances():
    # one member; all equal; all zero-length
    rec = CollectiveRecords.from_csr(
        np.array([0, 1, 4, 6]),
        np.array([5, 0, 1, 2, 0, 1]),
        np.array([10, 0, 0, 0, 7, 7]),
        np.array([25, 50, 50, 50, 7, 7]),
    )
    a = analyze_stragglers(rec)
    assert a.times.cct_ns.tolist() == [15, 50, 0]
    assert a.instances.skew_ns.tolist() == [0, 0, 0]
    assert a.instances.straggler_delay.tolist() == [0.0, 0.0, 0.0]
    assert a.instances.straggler_slowdown.tolist() == [1.0, 1.0, 1.0]
    assert a.instances.n_last.tolist() == [1, 3, 2]  # ties: every tied rank is last
    assert math.isnan(a.instances.skew_fraction[2])
    assert a.summary.skew_fraction.count == 2  # the NaN one is not silently counted as 0
    assert a.instances.slowest_rank.tolist() == [5, 0, 0]


def test_zero_min_completion_gives_inf_slowdown():
    rec = CollectiveRecords.from_csr(np.array([0, 2]), np.array([0, 1]), np.array([0, 0]), np.array([0, 10]))
    a = analyze_stragglers(rec)
    assert a.instances.straggler_slowdown[0] == math.inf
    assert a.instances.straggler_delay[0] == 1.0


def test_empty_records():
    rec = CollectiveRecords.from_instance_ids(np.array([], int), np.array([], int), np.array([], int), np.array([], int))
    a = analyze_stragglers(rec)
    assert a.summary.instances == 0 and a.summary.skew_ns.count == 0 and a.summary.most_often_last_rank is None


@pytest.mark.parametrize(
    "ptr,rank,start,end,msg",
    [
        ([0, 2], [0, 0], [0, 0], [1, 1], "twice"),
        ([0, 1, 4], [0, 1, 2, 1], [0] * 4, [1] * 4, "rank 1 appears twice in collective instance 1"),
        ([0, 3, 6], [0, 1, 2, 2, 0, 2], [0] * 6, [1] * 6, "rank 2 appears twice in collective instance 1"),
        ([0, 0, 1], [0], [0], [1], "no members"),
        ([0, 1], [0], [5], [1], "before it starts"),
        ([0, 3], [0, 1], [0, 0], [1, 1], "member rows"),
        ([0, 1], [-1], [0], [1], "negative rank"),
    ],
)
def test_bad_records_rejected(ptr, rank, start, end, msg):
    with pytest.raises(ValueError, match=msg):
        CollectiveRecords.from_csr(np.array(ptr), np.array(rank), np.array(start), np.array(end))


def naive(rec: CollectiveRecords, k: float):
    out = []
    for i in range(rec.n_instances):
        sl = slice(rec.member_ptr[i], rec.member_ptr[i + 1])
        r, s, e = rec.rank[sl].tolist(), rec.start_ns[sl].tolist(), rec.end_ns[sl].tolist()
        t = [b - a for a, b in zip(s, e, strict=True)]
        med = lambda xs: sorted(xs)[math.ceil(len(xs) / 2) - 1]  # noqa: E731
        slowest = min(rr for rr, tt in zip(r, t, strict=True) if tt == max(t))
        out.append((max(e) - min(s), max(e) - med(e), slowest, sum(x == max(e) for x in e),
                    sum(tt > k * med(t) for tt in t)))
    return out


@pytest.mark.parametrize("fixed_size", [None, 1, 2, 5, 8])
def test_vectorised_matches_naive_on_random_instances(fixed_size):
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 9, size=300) if fixed_size is None else np.full(300, fixed_size)
    ptr = np.concatenate(([0], np.cumsum(sizes)))
    rank = np.concatenate([rng.permutation(16)[:m] for m in sizes])
    start = rng.integers(0, 50, size=ptr[-1])
    end = start + rng.integers(0, 40, size=ptr[-1])  # small range: many ties
    rec = CollectiveRecords.from_csr(ptr, rank, start, end)
    a = analyze_stragglers(rec, slow_factor=1.2)
    got = list(zip(a.times.cct_ns.tolist(), a.instances.skew_ns.tolist(), a.instances.slowest_rank.tolist(),
                   a.instances.n_last.tolist(), a.instances.n_slow.tolist(), strict=True))
    assert got == naive(rec, 1.2)
    assert a.ranks.last_count.sum() == a.instances.n_last.sum()


def test_breakdowns_and_bandwidth():
    rec = two_instances()
    t = instance_times(rec)
    coll = [C.ALL_REDUCE, C.ALL_GATHER]
    size = np.array([1 << 20, 1 << 20])
    alg, bus = instance_bandwidths_gbps(coll, size, t.n_members, t.cct_ns)
    assert alg.tolist() == pytest.approx([(1 << 20) / 150, 3 * (1 << 20) / 300])
    assert bus.tolist() == pytest.approx([(1 << 20) / 150 * 1.5, (1 << 20) / 100 * 2 / 3])

    rows = cct_report(t, coll, size, group=np.array([1, 0]))
    assert [(r.collective, r.group, r.n_ranks) for r in rows] == [("all_gather", 0, 3), ("all_reduce", 1, 4)]
    assert rows[1].cct_ns.p50 == 150 and rows[1].busbw_at_median_gbps == pytest.approx((1 << 20) / 150 * 1.5)
    assert rows[0].to_dict()["cct_ns"]["max"] == 300

    by = cct_distributions(t, [np.array([0, 0])])
    assert by[(0,)].count == 2 and by[(0,)].p50 == 150
    per_rank = rank_completion_distributions(rec, t)
    assert per_rank[1].min == 120 and per_rank[1].max == 300 and per_rank[2].count == 1
