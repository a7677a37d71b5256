import math

import numpy as np
import pytest

from emulator.stats.flows import flow_stats, ideal_fct_ns, slowdown_by_size
from emulator.stats.generator import generator_health, lag_ns


def test_ideal_fct_counts_headers_per_packet():
    # 4096 B in one 4096 B packet: 4096 + 62 + 16 (RETH) = 4174 B on the wire at 100 Gb/s = 333.92 ns.
    assert ideal_fct_ns(4096, 2000, 100e9).item() == pytest.approx(2333.92)
    # 10000 B -> 3 packets: 10000 + 3*62 + 16 = 10202 B -> 816.16 ns.
    assert ideal_fct_ns(10_000, 0, 100e9).item() == pytest.approx(816.16)
    # zero-byte flow still sends one packet
    assert ideal_fct_ns(0, 0, 8e9).item() == pytest.approx(78.0)
    # overheads are parameters (e.g. + 20 B preamble/IFG, no RETH)
    assert ideal_fct_ns(1000, 0, 8e9, mtu_payload_bytes=1000, per_packet_overhead_bytes=82,
                        first_packet_extra_bytes=0).item() == pytest.approx(1082.0)
    v = ideal_fct_ns(np.array([1024, 2048]), np.array([100, 200]), 8e9, mtu_payload_bytes=1024)
    assert v.tolist() == pytest.approx([100 + 1024 + 78, 200 + 2048 + 2 * 62 + 16])
    with pytest.raises(ValueError):
        ideal_fct_ns(10, 0, 0)
    with pytest.raises(ValueError):
        ideal_fct_ns(-1, 0, 1e9)


def sample():
    return flow_stats(
        size_bytes=np.array([4096, 4096, 10_000, 100]),
        scheduled_start_ns=np.array([0, 0, 100, 50]),
        actual_start_ns=np.array([0, 500, 100, -1]),
        end_ns=np.array([3000, 4000, 2000, -1]),
        base_rtt_ns=2000,
        bottleneck_bps=100e9,
    )


def test_fct_from_both_starts_and_slowdown_floor():
    f = sample()
    assert f.finished.tolist() == [True, True, True, False]
    assert f.fct_scheduled_ns.tolist() == [3000, 4000, 1900, -1]
    assert f.fct_actual_ns.tolist() == [3000, 3500, 1900, -1]  # the lagging start hides 500 ns
    assert f.ideal_fct_ns[:3].tolist() == pytest.approx([2333.92, 2333.92, 2816.16])
    assert f.slowdown[0] == pytest.approx(3000 / 2333.92)
    assert f.slowdown[1] == pytest.approx(4000 / 2333.92)  # from the scheduled start
    assert f.slowdown[2] == 1.0  # faster than "ideal": floored at 1
    assert math.isnan(f.slowdown[3])
    assert f.achieved_rate_bps[:3].tolist() == pytest.approx([4096 * 8e9 / 3000, 4096 * 8e9 / 3500, 10_000 * 8e9 / 1900])
    assert math.isnan(f.achieved_rate_bps[3])
    s = f.summary()
    assert (s.flows, s.finished, s.unfinished) == (4, 3, 1)
    assert s.fct_scheduled_ns.max == 4000 and s.fct_actual_ns.max == 3500
    assert s.slowdown.min == 1.0
    assert s.to_dict()["fct_scheduled_ns"]["p50"] == 3000


def test_flow_input_validation():
    with pytest.raises(ValueError, match="before its scheduled start"):
        flow_stats(np.array([1]), np.array([10]), np.array([0]), np.array([5]), 0, 1e9)
    with pytest.raises(ValueError, match="no actual start"):
        flow_stats(np.array([1]), np.array([0]), np.array([-1]), np.array([5]), 0, 1e9)
    with pytest.raises(ValueError, match="equal length"):
        flow_stats(np.array([1, 2]), np.array([0]), np.array([0]), np.array([5]), 0, 1e9)
    empty = flow_stats(*(np.array([], dtype=np.int64),) * 4, 0, 1e9)
    assert empty.summary().flows == 0 and empty.summary().slowdown.count == 0
    assert slowdown_by_size(empty) == []


def bucket_stats(sizes, slowdowns, finished=None):
    sizes = np.asarray(sizes)
    n = sizes.shape[0]
    fin = np.ones(n, bool) if finished is None else np.asarray(finished)
    end = np.where(fin, 10, -1)
    # Build FlowStats through the public function, then substitute the slowdowns we want to read.
    f = flow_stats(sizes, np.zeros(n, int), np.where(fin, 0, -1), end, 0, 1e12)
    return type(f)(f.size_bytes, f.finished, f.fct_scheduled_ns, f.fct_actual_ns, f.ideal_fct_ns,
                   np.where(fin, np.asarray(slowdowns, float), np.nan), f.achieved_rate_bps)


def test_hpcc_five_percent_buckets():
    sizes = np.arange(100, 0, -1)  # unsorted input
    slow = 1.0 + sizes / 10.0
    buckets = slowdown_by_size(bucket_stats(sizes, slow))
    assert len(buckets) == 20 and all(b.flows == 5 for b in buckets)
    b0 = buckets[0]
    assert (b0.min_size_bytes, b0.max_size_bytes) == (1, 5)
    assert b0.median_slowdown == pytest.approx(1.3)  # nearest rank: 3rd of 5
    assert b0.p95_slowdown == pytest.approx(1.5) and b0.p99_slowdown == pytest.approx(1.5)
    assert buckets[-1].max_size_bytes == 100


def test_buckets_keep_equal_sizes_together_and_count_unfinished():
    sizes = [1] * 10 + [2] * 10
    fin = [True] * 9 + [False] + [True] * 10
    buckets = slowdown_by_size(bucket_stats(sizes, np.arange(1, 21), fin), bucket_fraction=0.25)
    assert [(b.min_size_bytes, b.flows, b.unfinished) for b in buckets] == [(1, 10, 1), (2, 10, 0)]
    assert buckets[0].median_slowdown == 5.0  # 9 finished: rank 5
    all_unfinished = slowdown_by_size(bucket_stats([5, 5], [1, 1], [False, False]))
    assert all_unfinished[0].unfinished == 2 and all_unfinished[0].median_slowdown is None


def test_buckets_with_edges():
    sizes = [1, 5, 10, 20, 49, 50, 1000]
    buckets = slowdown_by_size(bucket_stats(sizes, np.arange(1, 8)), edges=[10, 50])
    assert [(b.min_size_bytes, b.max_size_bytes, b.flows) for b in buckets] == [(1, 5, 2), (10, 49, 3), (50, 1000, 2)]
    with pytest.raises(ValueError):
        slowdown_by_size(bucket_stats(sizes, np.arange(1, 8)), edges=[50, 10])


def test_generator_health():
    sched = np.array([0, 100, 200, 300])
    actual = np.array([5, 100, 20_200, -1])
    assert lag_ns(sched, actual).tolist() == [5, 0, 20_000]
    g = generator_health(sched, actual, late_threshold_ns=10_000, packets_late=7, packets_unsent=2)
    assert (g.flows, g.started, g.not_started, g.flows_late) == (4, 3, 1, 1)
    assert g.late_fraction == pytest.approx(1 / 3)
    assert g.lag_ns.max == 20_000 and g.lag_ns.p50 == 5 and g.lag_ns.min == 0
    assert (g.packets_late, g.packets_skipped, g.packets_unsent) == (7, 0, 2)
    assert g.to_dict()["lag_ns"]["count"] == 3
    early = generator_health(np.array([100]), np.array([90]))
    assert early.lag_ns.min == -10 and early.flows_late == 0  # negative lag kept, not clipped
    none = generator_health(np.array([1]), np.array([-1]))
    assert none.late_fraction is None and none.lag_ns.count == 0
    with pytest.raises(ValueError):
        generator_health(sched, actual[:2])
    with pytest.raises(ValueError):
        generator_health(sched, actual, packets_late=-1)
