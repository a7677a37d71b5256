"""A message's FIRST and LAST batches on the burst poll come from the reused arena (``MiddleArena.write_last``
and a separate FIRST packet) instead of a fresh ``struct`` pack of the whole batch: the same bytes, GSO sends
and records as the general poll, including LAST packets of 1–7 bytes (no stamp) and every pad count."""

from __future__ import annotations

import ctypes
import random
from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.endpoint import (
    assert_same_run,
    flows_2_to_3_ranks,
    make_schedule,
    poll_endpoints,
    recv,
    run_endpoints,
    send,
    socket_mode_config,
)

from emulator.endpoint.compiled_arena import CompiledArena
from emulator.endpoint.middles import BatchWriter, MiddleArena, MiddleWriter, share_arena
from emulator.wire import max_batch_packets
from emulator.wire.kernels import warm

_ARENAS = [MiddleArena, CompiledArena]


@pytest.mark.parametrize("arena_cls", _ARENAS)
@settings(max_examples=60, deadline=None)
@given(mtu=st.sampled_from([256, 1024, 4096]),
       runs=st.lists(st.tuples(st.booleans(), st.integers(0, (1 << 24) - 1), st.integers(0, (1 << 26)),
                               st.integers(2, 70), st.integers(-1, 10**12), st.integers(1, 4096), st.booleans(),
                               st.booleans()),
                     min_size=1, max_size=14))  # fmt: skip
def test_a_run_ending_with_a_last_packet_has_the_batch_writers_bytes(arena_cls, mtu, runs):
    """Runs of MIDDLE rows and runs ending with a LAST packet (any payload, AckReq or not) in any order, resets
    between them: each has the bytes BatchWriter / MiddleWriter give for the same packets, one GSO send of
    row-sized segments; a row that held a LAST packet is a MIDDLE row again in a later run; the rows handed
    out since a reset stay untouched, and are listed in ``handed`` in order with their buffer addresses."""
    warm()
    arena = arena_cls(mtu + 16, chunk_rows=32)
    batches = BatchWriter(mtu).write
    middles = MiddleWriter(mtu + 16).write
    live = []
    for last, dqpn, psn, n, stamp, tail, ack, reset in runs:
        n = min(n, max_batch_packets(mtu))
        tail = 1 + (tail - 1) % mtu
        if reset:
            arena.reset()
            live.clear()
        if last:
            index = 3  # packets 3 .. 3 + n − 1 of the message: MIDDLE .. LAST
            size = (index + n - 1) * mtu + tail
            want, sends = batches(dqpn, psn, size, index, n, 77, True, stamp)
            assert sends == ((0, len(want), mtu + 16),)
            got = arena.write_last(dqpn, psn, n, stamp, True, tail)
        else:
            want = middles(dqpn, psn, n, ack, stamp)
            got = arena.write(dqpn, psn, n, stamp, 0, (n - 1,) if ack else ())
        assert bytes(got) == want
        live.append((got, want))
        for view, data in live:
            assert bytes(view) == data
        assert arena.handed_n == len(live)
        assert all(h is view for h, (view, _) in zip(arena.handed, live, strict=False))
        assert arena.handed_addrs[: len(live)] == [ctypes.addressof(ctypes.c_char.from_buffer(v)) for v, _ in live]


def test_a_last_packets_row_taken_by_a_middle_run_is_a_middle_row_again():
    """The row a 5-byte LAST packet took (its opcode word changed, its stamp zeroed) is a plain MIDDLE row
    after a reset, in both arenas."""
    warm()
    for cls in _ARENAS:
        arena = cls(4112, chunk_rows=8)
        arena.write_last(9, 100, 3, 5_000, True, 5)
        arena.reset()
        got = arena.write(9, 200, 3, 7_000, 0, ())
        assert bytes(got) == MiddleWriter(4112).write(9, 200, 3, False, 7_000)


_SIZES = [4097, 8195, 20_000, 61_445, 65_543, 122_892, 300_001, 1 << 20]  # tails of 1, 3, 5, 7, 12, ... bytes


@settings(max_examples=30, deadline=None)
@example(case=(2, [(0, 1, 8195, 1), (0, 1, 8195, 1)], {0: [send(0), send(1)], 1: [recv(0), recv(1)]}), seed=0, psn=0,
         poll=7_000, window=20_000, qps=1, share=False)  # a FIRST and one MIDDLE: one GSO send of the FIRST's size
@given(case=flows_2_to_3_ranks(_SIZES), seed=st.integers(0, 10**6), psn=st.sampled_from([0, (1 << 24) - 50]),
       poll=st.sampled_from([7_000, 40_000]), window=st.sampled_from([0, 20_000]), qps=st.sampled_from([1, 3]),
       share=st.booleans())  # fmt: skip
def test_first_and_last_batches_from_the_arena_put_the_general_polls_bytes_on_the_wire(case, seed, psn, poll, window,
                                                                                       qps, share):
    """Messages whose LAST packets carry 1–7 bytes (no stamp), every pad count, two-packet messages, on the
    seeded lossy wire (go-back-N re-sends FIRST and LAST batches), with an arena per rank or one shared by
    all: the burst poll's wire and every rank's records equal the general poll's."""
    world, flows, ops = case
    sched = make_schedule(world, flows, ops)
    cfg = socket_mode_config(qps_per_peer=qps, initial_psn=psn, retransmit_timeout_ns=400_000, ack_every_packets=40,
               max_outstanding_bytes=window)
    got = []
    for general in (True, False):
        eps = poll_endpoints(sched, cfg, world, general)
        if share:
            share_arena(eps)
        got.append(run_endpoints(eps, random.Random(seed), poll))
    (wire_g, rec_g, done_g), (wire_b, rec_b, done_b) = got
    assert done_g and done_b
    assert_same_run(wire_b, rec_b, wire_g, rec_g, flows)


def test_the_burst_poll_packs_no_batch_of_several_packets():
    """One 1 MiB + 5 B and one 20,000 B message (FIRST batches, a LAST batch of a MIDDLE and a 5-byte LAST, a
    FIRST…LAST batch): the burst poll asks BatchWriter only for single packets; the general poll packs whole
    batches (the test's reference), and both put the same bytes on the wire."""
    warm()
    flows = [(0, 1, (1 << 20) + 5, 1), (0, 1, 20_000, 1)]
    sched = make_schedule(2, flows, {0: [send(0), send(1)], 1: [recv(0), recv(1)]})
    cfg = replace(socket_mode_config(), ack_every_packets=40)
    wires, counts = [], []
    for general in (True, False):
        eps = poll_endpoints(sched, cfg, 2, general)
        sizes: list[int] = []
        for ep in eps:
            write = ep._tx.batches

            def counted(dq, psn, size, j, k, *rest, _write=write, _sizes=sizes):
                _sizes.append(k)
                return _write(dq, psn, size, j, k, *rest)

            ep._tx.batches = counted
        wire, _, done = run_endpoints(eps, random.Random(1), 40_000)
        assert done
        wires.append(wire)
        counts.append(sizes)
    assert wires[0] == wires[1]
    assert max(counts[0]) > 1  # the general poll packs whole FIRST / LAST batches
    assert counts[1] and max(counts[1]) == 1
