import math

import numpy as np
import pytest

from emulator.stats.nccl import (
    algbw_bytes,
    algbw_gbps,
    average_busbw_gbps,
    bus_factor,
    busbw_gbps,
    collective_name,
    element_count,
    nccl_table,
)
from emulator.trace.model import CollectiveType as C


@pytest.mark.parametrize(
    "coll,n,factor",
    [
        (C.ALL_REDUCE, 8, 1.75),
        (C.ALL_REDUCE, 2, 1.0),
        (C.ALL_REDUCE, 1, 0.0),
        (C.REDUCE_SCATTER, 8, 0.875),
        (C.REDUCE_SCATTER_BLOCK, 4, 0.75),
        (C.ALL_GATHER, 8, 0.875),
        (C.ALL_TO_ALL, 16, 15 / 16),
        (C.GATHER, 4, 0.75),
        (C.SCATTER, 4, 0.75),
        (C.BROADCAST, 8, 1.0),
        (C.REDUCE, 8, 1.0),
        (C.BARRIER, 8, 1.0),
        ("send_recv", 2, 1.0),
        ("HyperCube", 8, 1.0),
        ("AlltoAllv", 4, 0.75),
    ],
)
def test_bus_factor_matches_metrics_table(coll, n, factor):
    assert bus_factor(coll, n) == pytest.approx(factor)


def test_collective_names_accept_spellings():
    assert collective_name(C.ALL_REDUCE) == "all_reduce"
    assert collective_name(0) == "all_reduce"
    assert collective_name("AllReduce") == "all_reduce"
    assert collective_name("ALL-GATHER") == "all_gather"
    with pytest.raises(ValueError):
        collective_name("allsum")
    with pytest.raises(ValueError):
        collective_name(99)
    with pytest.raises(ValueError):
        bus_factor(C.ALL_REDUCE, 0)


def test_algbw_bytes_from_comm_size():
    mib = 1 << 20
    assert algbw_bytes(C.ALL_REDUCE, mib, 8) == mib
    assert algbw_bytes(C.REDUCE_SCATTER, mib, 8) == mib
    assert algbw_bytes(C.ALL_TO_ALL, mib, 8) == mib
    assert algbw_bytes(C.ALL_GATHER, mib, 8) == 8 * mib  # comm_size is the per-rank shard
    assert algbw_bytes(C.GATHER, mib, 4) == 4 * mib
    assert algbw_bytes(C.SCATTER, mib, 4) == mib
    assert algbw_bytes(C.BROADCAST, mib, 8) == mib
    assert algbw_bytes("hypercube", mib, 8) == 7 * mib
    assert algbw_bytes(C.BARRIER, mib, 8) == 0


def test_bandwidth_units_are_gb_per_s():
    # 1 GB in 1 s is 1 GB/s; 1 MiB in 100 us is 10.48576 GB/s.
    assert algbw_gbps(10**9, 10**9) == 1.0
    assert algbw_gbps(1 << 20, 100_000) == pytest.approx(10.48576)
    assert busbw_gbps(C.ALL_REDUCE, 8, 1 << 20, 100_000) == pytest.approx(10.48576 * 1.75)
    assert math.isnan(algbw_gbps(100, 0))
    arr = algbw_gbps(np.array([100, 200]), np.array([10, 0]))
    assert arr[0] == 10.0 and math.isnan(arr[1])


def test_element_count_column():
    mib = 1 << 20
    assert element_count(C.ALL_REDUCE, mib, 8) == mib // 4  # total elements
    assert element_count(C.ALL_GATHER, 8 * mib, 8) == mib // 4  # per rank
    assert element_count(C.REDUCE_SCATTER, mib, 8) == mib // 32
    assert element_count(C.ALL_TO_ALL, mib, 8, dtype_size_bytes=2) == mib // 16
    assert element_count(C.BROADCAST, mib, 8) == mib // 4


def test_nccl_table_rows():
    mib = 1 << 20
    coll = [C.ALL_REDUCE] * 3 + [C.ALL_GATHER] * 2 + [C.ALL_REDUCE]
    size = np.array([mib, mib, mib, mib, mib, 2 * mib])
    n = np.array([8] * 6)
    t = np.array([100_000, 200_000, 300_000, 50_000, 50_000, 400_000])
    rows = nccl_table(coll, size, n, t)
    assert [(r.collective, r.comm_size_bytes) for r in rows] == [
        ("all_gather", mib), ("all_reduce", mib), ("all_reduce", 2 * mib),
    ]
    ag, ar, ar2 = rows
    assert ar.instances == 3 and ar.size_bytes == mib and ar.count == mib // 4
    assert ar.time_us == 200.0  # mean
    assert ar.algbw_gbps == pytest.approx(mib / 200_000)
    assert ar.busbw_gbps == pytest.approx(mib / 200_000 * 1.75)
    assert (ar.p50_us, ar.p99_us, ar.max_us) == (200.0, 300.0, 300.0)
    assert ag.size_bytes == 8 * mib and ag.count == mib // 4
    assert ag.algbw_gbps == pytest.approx(8 * mib / 50_000)
    assert ag.busbw_gbps == pytest.approx(8 * mib / 50_000 * 7 / 8)
    assert ar2.instances == 1 and ar2.p99_us == 400.0
    assert average_busbw_gbps(rows) == pytest.approx(sum(r.busbw_gbps for r in rows) / 3)
    assert average_busbw_gbps([]) is None
    assert nccl_table([], np.array([]), np.array([]), np.array([])) == []
    assert rows[0].to_dict()["collective"] == "all_gather"
    with pytest.raises(ValueError):
        nccl_table([C.ALL_REDUCE], size, n, t)


def test_nccl_table_root_column():
    mib = 1 << 20
    coll = [C.BROADCAST] * 3 + [C.ALL_REDUCE]
    size = np.array([mib, mib, 2 * mib, mib])
    n = np.array([8] * 4)
    t = np.array([100_000] * 4)
    rows = {(r.collective, r.comm_size_bytes): r.root for r in nccl_table(coll, size, n, t)}
    assert rows == {("all_reduce", mib): "-", ("broadcast", mib): "-", ("broadcast", 2 * mib): "-"}
    rows = {(r.collective, r.comm_size_bytes): r.root
            for r in nccl_table(coll, size, n, t, root_rank=np.array([3, 5, 3, -1]))}
    assert rows == {("all_reduce", mib): "-", ("broadcast", mib): "mixed", ("broadcast", 2 * mib): "3"}
    rows = [r.root for r in nccl_table(coll[:2], size[:2], n[:2], t[:2], root_rank=np.array([6, 6]))]
    assert rows == ["6"]
