"""The direct data path's syscall economy on 127.0.0.x: whole GSO batches, few ACKs, every byte delivered.

The counts come from ``bench/goodput_direct.py``'s :func:`datapath_counts` (what the benches report per
GB), checked against the endpoint configuration: packets per ``sendmsg`` bounded by the GSO batch, and
one ACK per half window (:func:`emulator.drivers.direct.direct_ack_every`).
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from emulator.drivers.direct import DirectConfig, direct_ack_every, run_direct
from emulator.endpoint.config import EndpointConfig

BENCH = Path(__file__).resolve().parents[2] / "bench" / "goodput_direct.py"


@pytest.fixture(scope="module")
def goodput():
    spec = importlib.util.spec_from_file_location("goodput_direct_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


def _one_flow(goodput, size: int, ep: EndpointConfig, addresses: tuple[str, str], port: int, **direct):
    """One ``size``-byte flow from rank 0 to rank 1 (a worker each): its result, checked complete, every byte
    received, nothing re-sent."""
    cfg = DirectConfig(addresses=addresses, udp_port=port, ranks_per_worker=1, **direct)
    res = run_direct(goodput._schedule(size), cfg, ep, timeout_s=60)
    assert res.errors == [] and res.complete, res.errors
    assert res.bytes_counter("bytes_received") == size and res.bytes_counter("retx_bytes") == 0
    return res


def test_one_flow_goes_in_whole_gso_batches_with_an_ack_per_half_window(goodput):
    size = 24 << 20
    ep = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=10e9, retransmit_timeout_ns=200_000_000)
    port = random.Random(os.getpid() + 23).randrange(30000, 40000)
    cfg = DirectConfig(addresses=("127.0.0.41", "127.0.0.42"), udp_port=port, ranks_per_worker=1,
                       rcvbuf_bytes=4 << 20)
    res = run_direct(goodput._schedule(size), cfg, ep, timeout_s=60)
    assert res.errors == [] and res.complete, res.errors
    assert res.bytes_counter("bytes_received") == size and res.bytes_counter("retx_bytes") == 0
    counts = goodput.datapath_counts(res)
    # a GSO send never holds more than one batch, and nearly all of them are full (15 × 4112 B)
    assert 14.0 <= counts["packets_per_send"] <= ep.batch_packets
    window = res.health["receiver_overrun"]["max_outstanding_bytes"]
    spacing = direct_ack_every(replace(ep, max_outstanding_bytes=window), window)
    assert window == 2 << 20 and spacing == 256  # 512 packets: an ACK per half window (was a quarter, 128)
    packets = size // 4096
    acks = res.bytes_counter("acks_sent")
    # every ACK-requesting batch at most (one per `spacing` packets, rounded up to whole batches) + the last
    assert acks <= packets // (spacing - ep.batch_packets + 1) + 2, counts
    assert counts["acks_per_gb"] == pytest.approx(acks / (size / 1e9))


def test_an_all_to_all_conserves_every_byte_in_whole_batches_with_an_ack_per_half_window(goodput):
    """Four ranks, each sending 2 MiB to every other at once (12 flows, 3 into each receive buffer): every
    byte arrives once, nothing is dropped or re-sent, sends hold at most one GSO batch, and the receivers
    ACK once per half of a queue pair's window (+ each message's last packet), no more."""
    from emulator.schedule.compiler import compile_trace
    from emulator.trace.generators.collective import CollectiveOptions, collective_trace
    from emulator.trace.model import CollectiveType, RankGraph, Trace

    n, size = 4, 6 << 20
    gen = collective_trace(CollectiveOptions(ranks=n, collectives=(CollectiveType.ALL_TO_ALL,), size_bytes=size,
                                             iterations=1))
    s = compile_trace(Trace(ranks={r: RankGraph(r, list(gen.nodes(r))) for r in range(n)}, groups=dict(gen.groups)))
    ep = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=25e9, retransmit_timeout_ns=500_000_000)
    port = random.Random(os.getpid() + 37).randrange(30000, 40000)
    cfg = DirectConfig(addresses=tuple(f"127.0.0.{51 + r}" for r in range(n)), udp_port=port, rcvbuf_bytes=4 << 20)
    res = run_direct(s, cfg, ep, timeout_s=60)
    assert res.errors == [] and res.complete, res.errors
    flow_bytes = [int(b) for b in s.flow_size_bytes]
    assert res.bytes_counter("bytes_received") == res.bytes_counter("bytes_sent") == sum(flow_bytes)
    assert res.bytes_counter("retx_bytes") == 0 and res.health["endpoint_socket_drops"] == 0
    counts = goodput.datapath_counts(res)
    assert counts["packets_per_send"] <= ep.batch_packets
    window = res.health["receiver_overrun"]["max_outstanding_bytes"]
    spacing = direct_ack_every(replace(ep, max_outstanding_bytes=window), window)
    assert spacing == window // 4096 // 2
    bound = sum(-(-b // 4096) // (spacing - ep.batch_packets + 1) + 2 for b in flow_bytes)
    assert res.bytes_counter("acks_sent") <= bound, (res.bytes_counter("acks_sent"), bound, spacing)


def test_realtime_workers_run_at_fifo_where_permitted_and_deliver_every_byte(goodput):
    """``DirectConfig.realtime``: the rank workers run at SCHED_FIFO 1 where permitted (root) and report it;
    the flow arrives whole either way, nothing re-sent. Without it they stay at normal scheduling."""
    size = 8 << 20
    ep = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=10e9, retransmit_timeout_ns=200_000_000)
    port = random.Random(os.getpid() + 41).randrange(30000, 40000)
    for realtime in (True, False):
        res = _one_flow(goodput, size, ep, ("127.0.0.43", "127.0.0.44"), port, realtime=realtime)
        want = "fifo" if realtime and os.geteuid() == 0 else "normal"
        assert {s["worker_scheduling"] for s in res.health["sockets"].values()} == {want}


def test_a_fast_flow_receives_several_batches_per_system_call_and_sends_several_with_sendmmsg(goodput):
    """At a 100 Gbit/s NIC a sender visit carries several GSO batches (its NIC burst): with
    ``DirectConfig.sendmmsg`` or ``compiled_send`` they go in one ``sendmmsg`` (else one
    ``sendto`` each), and a receiver that finds several GRO batches waiting takes them in one ``recvmmsg``;
    every byte arrives once, nothing re-sent or dropped."""
    from emulator.drivers.sockets.mmsg import mmsg_supported

    if not mmsg_supported():
        pytest.skip("libc without sendmmsg/recvmmsg")
    size = 48 << 20
    ep = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, retransmit_timeout_ns=200_000_000)
    port = random.Random(os.getpid() + 47).randrange(30000, 40000)
    batches_per_gb = 1e9 / (15 * 4096)
    for sendmmsg, compiled_send in ((False, False), (True, False), (False, True)):
        res = _one_flow(goodput, size, ep, ("127.0.0.45", "127.0.0.46"), port, sendmmsg=sendmmsg,
                        compiled_send=compiled_send)
        assert res.health["endpoint_socket_drops"] == 0
        counts = goodput.datapath_counts(res)
        if sendmmsg or compiled_send:  # the data batches: ≥ 2 per system call on average (a visit holds its NIC burst, 4)
            assert counts["send_syscalls_per_gb"] <= 0.5 * batches_per_gb + counts["acks_per_gb"], counts
        else:
            assert counts["send_syscalls_per_gb"] == pytest.approx(counts["sends_per_gb"]), counts
        assert counts["recv_syscalls_per_gb"] < 0.9 * counts["recvs_per_gb"], counts


def test_the_compiled_core_is_warmed_before_the_run_and_loses_nothing(goodput):
    """``DirectConfig.compiled_core`` (on by default): the kernels are compiled or loaded before the workers
    start (``kernel_warm_s`` in the health, outside the run's clock) and a 100 Gbit/s flow arrives whole with
    nothing re-sent or dropped, as with the Python core."""
    size = 24 << 20
    ep = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, retransmit_timeout_ns=200_000_000)
    port = random.Random(os.getpid() + 53).randrange(30000, 40000)
    assert DirectConfig(addresses=("127.0.0.1",)).compiled_core
    for compiled in (True, False):
        res = _one_flow(goodput, size, ep, ("127.0.0.47", "127.0.0.48"), port, compiled_core=compiled)
        assert res.health["endpoint_socket_drops"] == 0
        assert ("kernel_warm_s" in res.health) is compiled
        if compiled:
            assert 0 <= res.health["kernel_warm_s"] < 60
