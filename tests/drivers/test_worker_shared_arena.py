"""The ranks of a socket worker share one MIDDLE arena (``middles.share_arena``): the same bytes on the wire and
the same records as one arena per rank, because a worker sends a rank's transmits before any rank polls again."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import assert_same_run, make_schedule, recv, run_endpoints, send

from emulator.drivers.direct import DirectConfig, run_direct
from emulator.drivers.sockets.mmsg import mmsg_supported
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.middles import arena_bytes, share_arena

MIB = 1 << 20


def _cfg(**kw) -> EndpointConfig:
    base = dict(mtu_bytes=4096, cc="none", line_rate_bps=100e9, pace_full_batches=True, defer_acks=True,
                socket_sends=True, compiled_core=True, line_rate_burst_batches=8, run_transmits=True)
    base.update(kw)
    return EndpointConfig(**base)


def _all_to_all(world: int, size: int):
    flows, ops, f = [], {r: [] for r in range(world)}, 0
    for s in range(world):
        for d in range(world):
            if s != d:
                flows.append((s, d, size, s * world + d))  # a queue pair per (source, destination)
                ops[s].append(send(f))
                ops[d].append(recv(f))
                f += 1
    return flows, make_schedule(world, flows, ops)


def _run(sched, cfg, seed: int, world: int, shared: bool, poll_ns: int = 40_000):
    """Every rank polled in turn every ``poll_ns``, each rank's transmits copied before the next rank polls (a
    worker's order), the seeded RNG dropping, duplicating or CE-marking segments (tests/support)."""
    rng = random.Random(seed)
    eps = [RankEndpoint(r, sched, cfg) for r in range(world)]
    if shared:
        assert share_arena(eps) == 1
    return *run_endpoints(eps, rng, poll_ns), eps


@settings(max_examples=12, deadline=None)
@given(world=st.integers(2, 4), size=st.sampled_from([100_000, MIB + 4000]), seed=st.integers(0, 10**6),
       qps=st.sampled_from([1, 2]), cc=st.sampled_from(["none", "connectx"]), poll=st.sampled_from([7_000, 40_000]))
def test_a_shared_arena_puts_the_same_bytes_on_the_wire_and_keeps_the_same_records(world, size, seed, qps, cc, poll):
    flows, sched = _all_to_all(world, size)
    cfg = _cfg(cc=cc, qps_per_peer=qps, retransmit_timeout_ns=400_000)
    wire_own, rec_own, done_own, _ = _run(sched, cfg, seed, world, False, poll)
    wire_sh, rec_sh, done_sh, _ = _run(sched, cfg, seed, world, True, poll)
    assert done_own and done_sh
    assert_same_run(wire_sh, rec_sh, wire_own, rec_own, flows)


def test_the_shared_arena_is_one_window_the_ranks_take_turns_in():
    """4 ranks' All-to-All of 2 MiB per pair: one arena, its rows written by every rank, a quarter of the bytes
    the four arenas of their own hold (what the kernel copies every batch from)."""
    world = 4
    flows, sched = _all_to_all(world, 2 * MIB)
    wire_own, rec_own, _, eps_own = _run(sched, _cfg(), 5, world, False)
    wire_sh, rec_sh, done, eps_sh = _run(sched, _cfg(), 5, world, True)
    assert done
    assert len({id(ep._tx.arena) for ep in eps_sh}) == 1
    assert len({id(ep._tx.arena) for ep in eps_own}) == world
    own, shared = arena_bytes(eps_own), arena_bytes(eps_sh)
    assert 0 < shared and shared * world <= own * 1.01, (shared, own)
    assert len({w[1] for w in wire_sh if len(w[3]) > 60_000}) == world  # every rank sent GSO runs from it
    assert_same_run(wire_sh, rec_sh, wire_own, rec_own, flows)


@pytest.mark.skipif(not mmsg_supported(), reason="libc has no sendmmsg")
def test_a_direct_worker_of_four_ranks_sends_from_one_arena_and_loses_nothing():
    world = 4
    _, sched = _all_to_all(world, MIB)
    port = random.Random(os.getpid() + 7).randrange(30000, 40000)
    cfg = DirectConfig(addresses=tuple(f"127.0.0.{71 + r}" for r in range(world)), udp_port=port,
                       ranks_per_worker=world, linger_s=0.1)
    # a retransmit timeout above a 4-rank worker's timer lag: a timeout would re-send bytes the receiver had
    ep_cfg = EndpointConfig(line_rate_bps=10e9, cc="none", retransmit_timeout_ns=500_000_000)
    res = run_direct(sched, cfg, ep_cfg, timeout_s=60)
    assert res.errors == [] and res.complete, res.errors
    sockets = res.health["sockets"]
    assert sorted(sockets) == list(range(world))
    arena = {st["worker_arena_bytes"] for st in sockets.values()}
    assert len(arena) == 1  # one worker
    (nbytes,) = arena
    # one chunk of 128 rows of a 4 KiB MTU (or a few when a poll wrote more): not one per rank
    assert 0 < nbytes <= 2 * 128 * (4096 + 16), nbytes
    for r, rec in res.records.items():
        assert rec.counters.get("retx_bytes", 0) == 0, r
        assert rec.counters.get("bytes_received", 0) == (world - 1) * MIB, r
