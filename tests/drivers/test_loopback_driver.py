"""The loopback driver: real UDP over 127.0.0.1 through the software switch process.

Small sizes and low port rates keep every run to a second or two on 2 cores. No timed assertions: only
completion, byte conservation, marks/CNPs seen, and errors naming ranks.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal

import numpy as np
import pytest

from emulator.drivers.loopback import LoopbackConfig, run_loopback
from emulator.endpoint.config import EndpointConfig
from emulator.errors import ConfigError
from emulator.fabric.port import PfcParams, PortConfig
from emulator.pacing.red import RedParams
from emulator.schedule.compiler import compile_trace
from emulator.schedule.model import OP_RECV, OP_SEND
from emulator.trace.generators.common import coll_node, p2p_node
from emulator.trace.model import CollectiveType, NodeType, ProcessGroup, RankGraph, Trace

# real time on a loaded 2-core machine: a retransmit timeout of 1 ms would fire on scheduling hiccups
EP = EndpointConfig(line_rate_bps=2e9, retransmit_timeout_ns=30_000_000)


def mixed_schedule(size_bytes: int):
    """8 ranks: ranks 0-3 All-Reduce on group "1", ranks 4-7 All-to-All on group "2", at the same time."""
    ranks = {}
    for r in range(8):
        coll = CollectiveType.ALL_REDUCE if r < 4 else CollectiveType.ALL_TO_ALL
        ranks[r] = RankGraph(r, [coll_node(0, "c", coll, size_bytes, pg_name="1" if r < 4 else "2")])
    groups = {"1": ProcessGroup("1", (0, 1, 2, 3)), "2": ProcessGroup("2", (4, 5, 6, 7))}
    return compile_trace(Trace(ranks=ranks, groups=groups))


def incast_schedule(senders: int, size_bytes: int):
    """Ranks 1..senders each send ``size_bytes`` to rank 0 at t0."""
    ranks = {0: RankGraph(0, [p2p_node(i, f"r{i}", NodeType.COMM_RECV_NODE, size_bytes, i, 0, 0)
                              for i in range(1, senders + 1)])}
    for i in range(1, senders + 1):
        ranks[i] = RankGraph(i, [p2p_node(0, "s", NodeType.COMM_SEND_NODE, size_bytes, i, 0, 0)])
    return compile_trace(Trace(ranks=ranks))


def _no_children_left() -> bool:
    return not [p for p in mp.active_children() if p.is_alive()]


def test_mixed_allreduce_and_alltoall_complete_with_every_byte_delivered():
    s = mixed_schedule(192 * 1024)
    cfg = LoopbackConfig(port=PortConfig(rate_bps=1e9, buffer_bytes=1 << 20, red=RedParams()), ranks_per_worker=4)
    res = run_loopback(s, cfg, EP, seed=3, timeout_s=30)
    assert res.errors == [] and res.complete, (res.errors, res.health.get("warnings"))
    assert sorted(res.records) == list(range(8))
    scheduled = int(s.flow_size_bytes.sum())
    assert res.bytes_counter("bytes_received") == scheduled
    for r, rec in res.records.items():
        assert (rec.end_ns >= 0).all(), f"rank {r} has unfinished ops"
        assert (rec.end_ns >= rec.ready_ns).all()
    # one time base across processes: every flow is received after its send started
    for op in np.flatnonzero(s.op_kind == OP_SEND):
        f = s.op_flow[op]
        rop = int(np.flatnonzero((s.op_flow == f) & (s.op_kind == OP_RECV))[0])
        src, dst = int(s.op_rank[op]), int(s.op_rank[rop])
        send_start = res.records[src].start_ns[op - s.rank_op_ptr[src]]
        assert res.records[dst].end_ns[rop - s.rank_op_ptr[dst]] >= send_start
    # every packet crossed the switch: what the ports sent out is what the ranks received
    ports = res.fabric.ports
    assert len(ports) == 8 and sum(p.dequeued_packets for p in ports) > 0
    assert res.health["switch_forwarded_packets"] == sum(p.dequeued_packets for p in ports)
    for key in ("switch_lag_ns", "switch_late_packets", "switch_socket_drops", "endpoint_timer_lag_ns",
                "endpoint_socket_drops", "warnings"):
        assert key in res.health
    assert res.wall_ns > 0 and _no_children_left()


def test_incast_marks_ce_in_the_ip_header_and_cnps_flow_back():
    s = incast_schedule(4, 384 * 1024)
    red = RedParams(kmin_bytes=8_000, kmax_bytes=60_000, pmax=0.5)
    # queue depth sampled every 100 µs (not the default 1 ms): once in CI this ~40 ms run, sampled every ms,
    # kept no sample (only non-empty ports are sampled, and DCQCN keeps this queue short)
    cfg = LoopbackConfig(port=PortConfig(rate_bps=300e6, buffer_bytes=2 << 20, red=red), ranks_per_worker=3,
                         queue_sample_interval_ns=100_000)
    res = run_loopback(s, cfg, EndpointConfig(line_rate_bps=2e9, retransmit_timeout_ns=50_000_000, cc="paper"),
                       seed=1, timeout_s=40)
    assert res.complete, res.errors
    assert res.bytes_counter("bytes_received") == int(s.flow_size_bytes.sum())
    port0 = res.fabric.ports[0]
    assert port0.peak_queue_bytes > red.kmin_bytes
    assert port0.marked_packets > 0 and port0.name == "sw0->host0"
    # the receiver read CE from the real IP TOS byte (IP_RECVTOS) and its NP sent CNPs ...
    rx = res.records[0]
    assert int(rx.ce_marks.sum()) > 0 and rx.counters["cnps_sent"] > 0
    # ... which reached the senders' rate controllers
    assert sum(res.records[r].counters["cnps_received"] for r in range(1, 5)) > 0
    q = res.fabric.queue_samples
    assert len(q.t_ns) == len(q.port) == len(q.queue_bytes) > 0
    assert max(q.of_port(0)[1]) > red.kmin_bytes


def _signal_worker(name: str, sig: int, after_s: float):
    """A progress callback that sends ``sig`` once to the worker called ``name`` after ``after_s`` of the
    run, and the dict in which it notes that worker's pid and ranks."""
    hit: dict = {}

    def progress(info):
        if not hit and info["elapsed_s"] > after_s:
            _, pid, ranks = next(p for p in info["processes"] if p[0] == name)
            hit.update(pid=pid, ranks=ranks)
            os.kill(pid, sig)

    return hit, progress


def test_killed_worker_is_reported_by_rank_and_partial_records_come_back():
    s = mixed_schedule(4 << 20)
    cfg = LoopbackConfig(port=PortConfig(rate_bps=40e6, buffer_bytes=1 << 20, red=RedParams()), ranks_per_worker=4)
    killed, progress = _signal_worker("worker 1", signal.SIGKILL, 0.3)
    res = run_loopback(s, cfg, EP, seed=1, timeout_s=30, progress=progress)
    assert killed and not res.complete
    for r in killed["ranks"]:
        assert any(e.startswith(f"rank {r} (worker 1 pid {killed['pid']}) died: exit code -9") for e in res.errors), \
            res.errors
    assert sorted(res.records) == list(range(8))  # the killed ranks from their last snapshot
    # the switch outlived the worker: its counters and every queue sample its messages delivered came back
    q = res.fabric.queue_samples
    assert len(q.t_ns) == len(q.port) == len(q.queue_bytes) > 0 and len(res.fabric.ports) == 8
    assert res.wall_ns < 30e9 and _no_children_left()


def test_stopped_worker_is_reported_as_hung():
    s = mixed_schedule(4 << 20)
    cfg = LoopbackConfig(port=PortConfig(rate_bps=40e6, buffer_bytes=1 << 20), ranks_per_worker=4,
                         hang_timeout_s=1.0)
    stopped, progress = _signal_worker("worker 0", signal.SIGSTOP, 0.2)
    res = run_loopback(s, cfg, EP, seed=1, timeout_s=30, progress=progress)
    assert stopped and not res.complete
    assert any(e.startswith("rank 0 hung: no heartbeat") for e in res.errors), res.errors
    assert _no_children_left()


def test_ctrl_c_stops_every_process_and_returns_what_was_measured():
    s = mixed_schedule(4 << 20)
    cfg = LoopbackConfig(port=PortConfig(rate_bps=40e6, buffer_bytes=1 << 20), ranks_per_worker=4)

    def progress(info):
        if info["elapsed_s"] > 0.3:
            raise KeyboardInterrupt

    res = run_loopback(s, cfg, EP, seed=1, timeout_s=30, progress=progress)
    assert not res.complete and res.interrupted and any("interrupted" in e for e in res.errors)
    assert sorted(res.records) == list(range(8))
    assert sum(int(np.sum(rec.packets)) for rec in res.records.values()) > 0
    assert res.fabric.ports and _no_children_left()


def test_bad_loopback_config_is_one_config_error():
    with pytest.raises(ConfigError, match="127.0.0.0/8"):
        LoopbackConfig(address="10.0.0.1")
    with pytest.raises(ConfigError, match="pfc"):
        LoopbackConfig(port=PortConfig(rate_bps=1e9, buffer_bytes=1 << 20, pfc=PfcParams(1000, 500)))


def test_a_fabric_that_drops_everything_ends_as_a_stall_naming_the_ranks():
    s = incast_schedule(2, 64 * 1024)
    cfg = LoopbackConfig(port=PortConfig(rate_bps=1e9, buffer_bytes=1000), stall_timeout_s=1.0)
    res = run_loopback(s, cfg, EP, seed=1, timeout_s=20)
    assert not res.complete
    assert {e.split(" hung")[0] for e in res.errors} == {"rank 0", "rank 1", "rank 2"}, res.errors
    assert all("no progress for" in e for e in res.errors)
    assert sum(p.dropped_packets for p in res.fabric.ports) > 0
    assert res.wall_ns < 20e9 and _no_children_left()


def test_worker_groups_and_stall_timeout_helpers():
    from emulator.drivers.sockets.supervisor import stall_timeout_for
    from emulator.drivers.sockets.workers import worker_groups

    assert worker_groups(tuple(range(8)), 3) == [(0, 1, 2), (3, 4, 5), (6, 7)]
    assert worker_groups(tuple(range(5)), 2) == [(0, 1), (2, 3), (4,)]
    groups = worker_groups(tuple(range(64)), 0)
    assert sorted(r for g in groups for r in g) == list(range(64)) and len(groups) <= (os.cpu_count() or 1)
    assert worker_groups((), 4) == []
    s = mixed_schedule(1024)
    assert stall_timeout_for(s, 10.0) == 10.0
    long_delay = s.__class__(**{**s.__dict__, "op_duration_ns": np.full_like(s.op_duration_ns, 20 * 10**9)})
    assert stall_timeout_for(long_delay, 10.0) == pytest.approx(31.0)


def test_switch_health_counters_balance():
    s = incast_schedule(3, 256 * 1024)
    # the port model sees what the senders meant to send (their stamps): 10x its rate even when a loaded
    # machine slows the real senders down a lot
    cfg = LoopbackConfig(port=PortConfig(rate_bps=100e6, buffer_bytes=64 * 1024, red=RedParams()), ranks_per_worker=2)
    res = run_loopback(s, cfg, EndpointConfig(line_rate_bps=1e9, retransmit_timeout_ns=30_000_000, cc="none"),
                       seed=2, timeout_s=40)
    assert res.complete, res.errors
    assert res.bytes_counter("bytes_received") == int(s.flow_size_bytes.sum())
    h = res.health
    # the rank workers run at real-time priority like the switch (below it) when permitted
    root = os.geteuid() == 0
    assert {v["worker_scheduling"] for v in h["sockets"].values()} == {"fifo" if root else "normal"}
    if root:
        assert h["switch_scheduling"] == "fifo"
    for key in ("switch_cpu_s", "switch_scheduling", "switch_egress_slack_ns", "switch_received_batches",
                "switch_loops", "switch_port_drops", "switch_queued_packets", "switch_unsent_packets"):
        assert key in h, key
    # every packet the switch read was forwarded, tail-dropped at a port, or is still held
    assert h["switch_received_packets"] == (h["switch_forwarded_packets"] + h["switch_port_drops"]
                                            + h["switch_unroutable_packets"] + h["switch_malformed_packets"]
                                            + h["switch_queued_packets"] + h["switch_unsent_packets"])
    ports = res.fabric.ports
    assert h["switch_port_drops"] == sum(p.dropped_packets for p in ports)
    # 3 senders at 1 Gbps into a 100 Mbps port with a 64 KiB buffer and no congestion control: tail drops,
    # recovered by go-back-N
    assert ports[0].dropped_packets > 0 and sum(res.records[r].counters["retransmits"] for r in (1, 2, 3)) > 0
