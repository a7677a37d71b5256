"""Direct mode over a veth pair: a 1 Gbit/s fixed-rate flow keeps its bursts and its rate under CPU load.

Runs bench/pacing_burst.py's measurement (namespaces it creates and always deletes, an AF_PACKET capture
on the receiving veth) with two busy loops competing for the CPUs, over bounds looser than the bench's
targets so a shared CI machine does not make it flaky. Skipped, with the reason, where ``ip netns`` is not
permitted.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

_path = Path(__file__).resolve().parents[2] / "bench" / "pacing_burst.py"
_spec = importlib.util.spec_from_file_location("_pacing_burst", _path)
pb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pb)


def test_largest_burst_joins_frames_closer_than_one_and_a_half_packet_times():
    line = 10e9                                              # 4162 B take 3330 ns; 1.5 × that is 4995 ns
    t = np.array([0, 3330 + 4000, 20_000, 60_000], np.int64)
    wire = np.array([4162, 4162, 4162, 4162], np.int64)
    pkts = np.ones(4, np.int64)
    assert pb.largest_burst(t, wire, pkts, line) == 2 * 4162
    assert pb.largest_burst(t[:1], wire[:1], pkts[:1], line) == 4162
    # a GSO frame of 15 packets is one frame: the gap counts from the end of its serialisation
    t2 = np.array([0, 15 * 3330 + 1000], np.int64)
    assert pb.largest_burst(t2, np.array([15 * 4162, 4162]), np.array([15, 1]), line) == 16 * 4162


def test_wire_bytes_count_the_packets_of_a_gso_frame():
    pkts, wire = pb.wire_bytes(np.array([15 * 4112, 4128, 100], np.int64))
    assert pkts.tolist() == [15, 1, 1]
    assert wire.tolist() == [15 * 4112 + 15 * 66, 4128 + 66, 166]


@pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 (ip) not installed")
def test_fixed_rate_flow_over_veth_keeps_its_burst_bound_and_rate_under_cpu_load():
    """Two busy loops on a 2-core machine: the burst bound always holds (it does not depend on the CPU);
    the rate (whole flow within 10 %, and most 100 ms windows) is checked on a run whose worker was woken
    with a timer lag p99 under 5 ms (the pacers' 25 ms deficit then covers every late wake-up) — up to
    two runs, skipped with the lag where another tenant starves this one of wake-ups both times."""
    lags = []
    for attempt in range(2):
        try:
            m = pb.measure(500e6, 1.5, load=2, port=4793 + attempt)
        except OSError as exc:
            pytest.skip(str(exc))
        assert m["complete"], m["errors"]
        assert m["largest_burst_bytes"] <= 2 * m["bound_bytes"], m
        lags.append((m["timer_lag_p99_ns"] or 0) / 1e6)
        if lags[-1] < 5:
            break
    else:
        pytest.skip(f"machine too loaded to judge the rate: worker timer lag p99 {lags} ms")
    assert m["windows"] >= 10
    assert m["mean_bps"] == pytest.approx(500e6, rel=0.10), m
    assert m["within_10pct"] >= 0.6 * m["windows"], m


def test_workers_ask_for_a_short_scheduler_slice():
    """child_setup asks EEVDF for a 100 µs slice (sched_runtime), staying SCHED_OTHER (checked in a child)."""
    import ctypes
    import multiprocessing as mp
    import os
    import struct

    from emulator.drivers.sockets import workers

    if os.uname().machine not in workers._SYS_SCHED_SETATTR:
        pytest.skip("sched_setattr number unknown on this architecture")

    def child(conn) -> None:
        workers.child_setup()
        out = ctypes.create_string_buffer(56)
        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.syscall(workers._SYS_SCHED_SETATTR[os.uname().machine] + 1, 0, out, 56, 0) == 0
        conn.send((ok, struct.unpack("=IIQiIQQQII", out.raw), os.sched_getscheduler(0)))

    ctx = mp.get_context("fork")
    a, b = ctx.Pipe()
    p = ctx.Process(target=child, args=(b,))
    p.start()
    assert a.poll(20)
    ok, attr, policy = a.recv()
    p.join(5)
    assert ok
    assert policy == os.SCHED_OTHER and attr[1] == 0 and attr[3] == 0      # normal policy, nice 0
    assert attr[5] == workers.WORKER_SLICE_NS
