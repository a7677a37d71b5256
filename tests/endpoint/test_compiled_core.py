"""The compiled per-batch core (``EndpointConfig.compiled_core``) gives exactly what the Python core gives.

* :func:`~emulator.wire.kernels.gro_run` == :func:`~emulator.endpoint.receiver.gro_run_py` on random GRO
  batches: real MIDDLE runs, cut, with a different last row, pads, odd QPs, other opcodes, PSN gaps and wraps,
  AckReq and reserved bits anywhere;
* :class:`~emulator.endpoint.compiled_arena.CompiledArena` writes the bytes
  :class:`~emulator.endpoint.middles.MiddleArena` writes, run after run in reused chunks;
* end to end in the socket drivers' modes, through losses, duplicates and CE marks: the same bytes on the
  wire, in the same order, and the same counters and records with the compiled core as without.
"""

from __future__ import annotations

import random
import struct
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import assert_same_run, make_schedule, recv, run_endpoints, send
from support.endpoint import flows_2_to_3_ranks as _flows

from emulator.endpoint.compiled_arena import CompiledArena
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.middles import MiddleArena
from emulator.endpoint.receiver import gro_run_py
from emulator.wire.kernels import gro_run, warm
from emulator.wire.psn import PSN_MASK

_ROW = 4096 + 16


@st.composite
def _gro_batch(draw):
    """A GRO batch of MIDDLE-shaped rows with random damage (the segment size stays the row size)."""
    mtu = draw(st.sampled_from([256, 4096]))
    seg = mtu + 16
    n = draw(st.integers(1, 16))
    tail = draw(st.sampled_from([0, 0, 0, 5, seg - 4]))  # a shorter last segment
    buf = bytearray(n * seg + tail)
    w0 = (0x07 << 24) | 0xFFFF
    dq = draw(st.integers(0, (1 << 24) - 1)) & ~1
    p0 = draw(st.sampled_from([0, 5, PSN_MASK - 3, PSN_MASK, draw(st.integers(0, PSN_MASK))]))
    for i in range(n):
        struct.pack_into("!III", buf, i * seg, w0, dq, (p0 + i) & PSN_MASK)
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, n - 1))
        a = i * seg
        kind = draw(st.sampled_from(["ack", "reserved", "psn", "opcode", "pad", "odd", "qp", "last", "ack_last"]))
        if kind == "ack":
            buf[a + 8] |= 0x80
        elif kind == "reserved":
            buf[a + 8] |= draw(st.integers(1, 0x7F))
        elif kind == "psn":
            struct.pack_into("!I", buf, a + 8, draw(st.integers(0, (1 << 32) - 1)))
        elif kind == "opcode":
            buf[a] = draw(st.sampled_from([0x06, 0x08, 0x0A, 0x11, 0x81, 0x27]))
        elif kind == "pad":
            buf[a + 1] |= draw(st.sampled_from([0x10, 0x20, 0x30]))
        elif kind == "odd":
            buf[a + 7] |= 1
        elif kind == "qp":
            buf[a + 5] ^= 0x40
        elif kind == "last":
            i = n - 1
            buf[i * seg] = 0x08
        else:
            buf[(n - 1) * seg + 8] |= 0x80
    return bytes(buf), seg


@settings(max_examples=400, deadline=None)
@given(batch=_gro_batch(), writable=st.booleans())
def test_the_compiled_gro_run_is_the_python_one(batch, writable):
    data, seg = batch
    mv = memoryview(bytearray(data)) if writable else memoryview(data)
    assert tuple(gro_run(mv, seg)) == gro_run_py(mv, seg, {})


def test_the_gro_run_comparison_is_not_vacuous():
    """A clean run, a run closed by a full-size LAST and an AckReq on the last row are all taken."""
    seg = _ROW
    buf = bytearray(15 * seg)
    for i in range(15):
        struct.pack_into("!III", buf, i * seg, (0x07 << 24) | 0xFFFF, 6, (100 + i) | (0x80000000 if i == 14 else 0))
    assert tuple(gro_run(memoryview(buf), seg)) == gro_run_py(memoryview(buf), seg, {}) == (15, 100, True, 6)
    buf[14 * seg] = 0x08
    assert tuple(gro_run(memoryview(buf), seg)) == (14, 100, False, 6)


@settings(max_examples=80, deadline=None)
@given(mtu=st.sampled_from([256, 1024, 4096]),
       runs=st.lists(st.tuples(st.integers(0, (1 << 24) - 1), st.integers(0, (1 << 26)), st.integers(1, 70),
                               st.integers(-1, 10**12), st.sampled_from([0, 0, 7, 3300]), st.sets(st.integers(0, 69)),
                               st.booleans()),
                     min_size=1, max_size=12))  # fmt: skip
def test_the_compiled_arena_writes_the_arenas_bytes(mtu, runs):
    ref = MiddleArena(mtu + 16, chunk_rows=32)
    got = CompiledArena(mtu + 16, chunk_rows=32)
    live = []
    for dqpn, psn, n, stamp, step, acks, reset in runs:
        if reset:
            ref.reset()
            got.reset()
            live.clear()
        rows = sorted(r for r in acks if r < n)
        a = ref.write(dqpn, psn, n, stamp, step, rows)
        b = got.write(dqpn, psn, n, stamp, step, rows)
        assert bytes(b) == bytes(a)
        live.append((a, b))
        for x, y in live:  # earlier rows since the reset are untouched by later runs
            assert bytes(x) == bytes(y)


def _run(sched, cfg, seed: int, world: int):
    """Virtual time, socket-driver modes: every rank polled every 7 µs, whole GSO batches delivered 2 µs
    later as GRO batches, the seeded RNG dropping, duplicating or CE-marking segments. Returns every
    transmit's bytes in order, the records and the counters."""
    rng = random.Random(seed)
    eps = [RankEndpoint(r, sched, cfg) for r in range(world)]
    return run_endpoints(eps, rng, 7000)


@settings(max_examples=25, deadline=None)
@given(case=_flows(), seed=st.integers(0, 10**6), qps=st.sampled_from([1, 3]),
       psn=st.sampled_from([0, (1 << 24) - 50]), cc=st.sampled_from(["none", "connectx"]))  # fmt: skip
def test_the_compiled_core_puts_the_same_bytes_on_the_wire_and_keeps_the_same_records(case, seed, qps, psn, cc):
    world, flows, ops = case
    sched = make_schedule(world, flows, ops)
    cfg = EndpointConfig(mtu_bytes=4096, cc=cc, line_rate_bps=100e9, qps_per_peer=qps, initial_psn=psn,
                         retransmit_timeout_ns=200_000, pace_full_batches=True, defer_acks=True,
                         socket_sends=True)  # fmt: skip
    wire_p, rec_p, done_p = _run(sched, cfg, seed, world)
    wire_c, rec_c, done_c = _run(sched, replace(cfg, compiled_core=True), seed, world)
    assert done_p and done_c
    assert_same_run(wire_c, rec_c, wire_p, rec_p, flows)


def test_the_compiled_core_is_in_use_when_asked():
    """The comparison above is not vacuous: the receiver calls the kernel and the sender writes through it."""
    cfg = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, pace_full_batches=True, defer_acks=True,
                         socket_sends=True, compiled_core=True)  # fmt: skip
    sched = make_schedule(2, [(0, 1, 1 << 20, 0)], {0: [send(0)], 1: [recv(0)]})
    a, b = RankEndpoint(0, sched, cfg), RankEndpoint(1, sched, cfg)
    assert a._tx.arena.__class__ is CompiledArena and b._rx.kernel is gro_run
    plain = replace(cfg, compiled_core=False)
    assert RankEndpoint(1, sched, plain)._rx.kernel is None
    warm()  # compiles or loads every kernel; a second call is cheap
