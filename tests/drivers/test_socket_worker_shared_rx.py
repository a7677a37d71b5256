"""The ranks of a socket worker receive into one set of ``recvmmsg`` slots (``workers.share_receivers``): the same
bytes on the wire and the same records as ``RankEndpoint.receive`` of each datagram, because a worker serves every
datagram of one socket's call before it reads the next socket into the same slots.

Unlike tests/drivers/test_socket_rx_compiled.py's virtual wire, every datagram here goes through a real loopback
socket (its TOS and GSO segment size as control messages), and each rank's socket is drained by the system call
into the shared slots after every socket has been sent to."""

from __future__ import annotations

import heapq
import os
import random
import socket
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import assert_same_run, make_schedule, recv, run_endpoints, send, transmit_round
from support.endpoint import flows_2_to_3_ranks as _flows

from emulator.drivers.direct import DirectConfig, run_direct
from emulator.drivers.sockets.mmsg import MmsgReceiver, mmsg_supported
from emulator.drivers.sockets.rx_compiled import CompiledDrain, warm
from emulator.drivers.sockets.udp import RECV_BUFFER_BYTES, UDP_SEGMENT, UdpPort
from emulator.drivers.sockets.workers import share_receivers
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint

pytestmark = pytest.mark.skipif(not mmsg_supported(), reason="libc has no recvmmsg")
MIB = 1 << 20


def _cfg(**kw) -> EndpointConfig:
    base = dict(mtu_bytes=4096, cc="none", line_rate_bps=100e9, retransmit_timeout_ns=200_000, pace_full_batches=True,
                defer_acks=True, socket_sends=True, compiled_core=True)
    base.update(kw)
    return EndpointConfig(**base)


def _run_sockets(sched, cfg, seed: int, world: int, shared: bool):
    """tests/support's harness (every rank polled every 7 µs, the seeded wire dropping, duplicating and CE-marking),
    but each due datagram is sent to its rank's socket and every rank's socket then drained by its
    :class:`CompiledDrain` (real ``recvmmsg``), into one set of slots when ``shared``."""
    rng = random.Random(seed)
    eps = [RankEndpoint(r, sched, cfg) for r in range(world)]
    ports = [UdpPort("127.0.0.1", 0) for _ in range(world)]
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        if shared:
            assert share_receivers(ports, 16) == world
        drains = [CompiledDrain(p, ep) for p, ep in zip(ports, eps, strict=True)]
        assert len({id(d.rx.data) for d in drains}) == (1 if shared else world)
        for ep in eps:
            ep.start(0)
        wire: list = []
        inflight: list = []
        seq = now = 0
        while now < 10**9 and not all(ep.done for ep in eps):
            seq = transmit_round(eps, now, rng, wire, inflight, seq)
            now += 7000
            sent = [0] * world
            while inflight and inflight[0][0] <= now:
                _, _, dst, data, tos, ecn, seg = heapq.heappop(inflight)
                anc = [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("=i", (tos & ~3) | ecn))]
                anc.append((socket.SOL_UDP, UDP_SEGMENT, struct.pack("=H", seg if 0 < seg < len(data) else 0)))
                tx.sendmsg([data], anc, 0, ("127.0.0.1", ports[dst].sock.getsockname()[1]))
                sent[dst] += 1
            for dst, d in enumerate(drains):
                got = 0
                while got < sent[dst]:
                    got += d.drain(lambda now=now: now, 0, 16)
            for ep in eps:
                ep.handle_timer(now)
        return wire, [(ep.records.to_arrays(), dict(ep.records.counters)) for ep in eps], all(ep.done for ep in eps)
    finally:
        tx.close()
        for p in ports:
            p.close()


def _alltoall(world: int):
    """Every rank sends 1 MiB to every other at once: the flows and their schedule."""
    flows = [(s, d, MIB, s * world + d) for s in range(world) for d in range(world) if s != d]
    ops = {r: [] for r in range(world)}
    for f, (s, d, _n, _t) in enumerate(flows):
        ops[s].append(send(f))
        ops[d].append(recv(f))
    return flows, make_schedule(world, flows, ops)


@pytest.fixture(scope="module", autouse=True)
def _warm():
    warm()


@settings(max_examples=15, deadline=None)
@given(case=_flows(), seed=st.integers(0, 10**6), qps=st.sampled_from([1, 3]), cc=st.sampled_from(["none", "connectx"]),
       psn=st.sampled_from([0, (1 << 24) - 50]))
def test_shared_receive_slots_keep_the_wire_and_every_ranks_records(case, seed, qps, cc, psn):
    world, flows, ops = case
    sched = make_schedule(world, flows, ops)
    cfg = _cfg(cc=cc, qps_per_peer=qps, initial_psn=psn)
    wire_g, rec_g, done_g = run_endpoints([RankEndpoint(r, sched, cfg) for r in range(world)], random.Random(seed), 7000)
    wire_s, rec_s, done_s = _run_sockets(sched, cfg, seed, world, True)
    assert done_g and done_s
    assert_same_run(wire_s, rec_s, wire_g, rec_g, flows)


def test_the_comparison_is_not_vacuous():
    """Three ranks sending to each other at once, 1 MiB a pair, lossy: every socket's batches pass through the one
    set of slots, and the run equals both the general receive and one set of slots per socket."""
    world = 3
    flows, sched = _alltoall(world)
    cfg = _cfg()
    wire_g, rec_g, _ = run_endpoints([RankEndpoint(r, sched, cfg) for r in range(world)], random.Random(3), 7000)
    wire_s, rec_s, done = _run_sockets(sched, cfg, 3, world, True)
    wire_o, rec_o, _ = _run_sockets(sched, cfg, 3, world, False)
    assert done and all(c["bytes_received"] == 2 * MIB for _a, c in rec_s)
    assert_same_run(wire_s, rec_s, wire_g, rec_g, flows)
    assert_same_run(wire_o, rec_o, wire_g, rec_g, flows)


def test_a_shared_receiver_has_its_own_socket_and_count_and_the_lenders_slots():
    a, b = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
    try:
        first = MmsgReceiver(a.fileno(), 16, RECV_BUFFER_BYTES)
        second = MmsgReceiver(b.fileno(), 4, 4096, share=first)
        assert (second.fd, second.syscalls) == (b.fileno(), 0)
        assert (second.slots, second.buffer_bytes) == (16, RECV_BUFFER_BYTES)
        assert second.data is first.data and second._hdr_addr == first._hdr_addr
        assert second.control is first.control and second.words is first.words
        second.receive(1)
        assert (first.syscalls, second.syscalls) == (0, 1)
    finally:
        a.close()
        b.close()


def test_a_direct_worker_of_four_ranks_receives_into_one_set_of_slots_and_loses_nothing():
    """One worker, four ranks, an All-to-All of 1 MiB a pair: 16 slots of 64 KiB for the worker, not per rank."""
    world = 4
    flows, sched = _alltoall(world)
    port = random.Random(os.getpid() + 11).randrange(30000, 40000)
    cfg = DirectConfig(addresses=tuple(f"127.0.0.{81 + r}" for r in range(world)), udp_port=port,
                       ranks_per_worker=world, linger_s=0.1)
    res = run_direct(sched, cfg, EndpointConfig(line_rate_bps=10e9, cc="none", retransmit_timeout_ns=500_000_000),
                     timeout_s=60)
    assert res.errors == [] and res.complete, res.errors
    sockets = res.health["sockets"]
    assert {s["worker_rx_buffer_bytes"] for s in sockets.values()} == {16 * RECV_BUFFER_BYTES}
    assert 1 <= max(s["worker_rx_slots_high"] for s in sockets.values()) <= 16
    for s in sockets.values():  # the loop's getrusage split (bench/collectives.py prints it per worker)
        assert 0 < s["worker_user_s"] + s["worker_sys_s"] <= s["worker_cpu_s"] + 0.05
        assert min(s["worker_minflt"], s["worker_nvcsw"], s["worker_nivcsw"]) >= 0
    for r, rec in res.records.items():
        assert rec.counters.get("retx_bytes", 0) == 0, r
        assert rec.counters.get("bytes_received", 0) == (world - 1) * MIB, r


def test_a_datagram_without_control_messages_leaves_the_shared_slot_its_full_control_block() -> None:
    """A socket that asks for no control messages (no TOS, no GRO) receives into slot 0 first; the next socket's
    datagram in that slot still gets its TOS (ECT(0)): the control block's length is set back after every
    datagram, not only after one that had control messages (the kernel leaves it 0 otherwise)."""
    bare = UdpPort("127.0.0.1", 0, recv_tos=False, gro=False)
    tos = UdpPort("127.0.0.1", 0)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 2)
    try:
        assert share_receivers([bare, tos], 16) == 2
        got = []

        def keep(view, ecn, _now, _seg):
            got.append((bytes(view), ecn))

        for port, data in ((bare, b"first"), (tos, b"second")):
            tx.sendto(data, port.sock.getsockname())
            for _ in range(200):
                if port.drain_into(bytearray(0), keep, lambda: 0, 0, 16):
                    break
                os.sched_yield()
        assert [d for d, _ in got] == [b"first", b"second"] and got[1] == (b"second", 2), got
    finally:
        tx.close()
        bare.close()
        tos.close()
