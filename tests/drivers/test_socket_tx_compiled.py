"""The compiled send (a poll's transmits by ``sendmmsg`` from numba) and the sender's runs of batches as one
transmit (``EndpointConfig.run_transmits``) put the same bytes on the wire, in the same order, with the same
records as the per-batch Python path."""

from __future__ import annotations

import random
import select

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import assert_same_run, make_schedule, recv, run_endpoints, send
from support.endpoint import flows_2_to_3_ranks as _flows

from emulator.drivers.sockets.mmsg import mmsg_supported
from emulator.drivers.sockets.tx_compiled import CompiledSend, warm
from emulator.drivers.sockets.udp import UdpPort
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.events import Transmit, TransmitRun, expand_runs

pytestmark = pytest.mark.skipif(not mmsg_supported(), reason="libc has no sendmmsg")


def _cfg(runs: bool, **kw) -> EndpointConfig:
    base = dict(mtu_bytes=4096, cc="none", line_rate_bps=100e9, pace_full_batches=True, defer_acks=True,
                socket_sends=True, compiled_core=True, line_rate_burst_batches=8, run_transmits=runs)
    base.update(kw)
    return EndpointConfig(**base)


def _run(sched, cfg, seed: int, world: int, poll_ns: int = 40_000):
    """Every rank polled every ``poll_ns`` (a socket worker's coarse loop: several batches a visit), GSO batches
    delivered 2 µs later, the seeded RNG dropping, duplicating or CE-marking segments (tests/support)."""
    rng = random.Random(seed)
    eps = [RankEndpoint(r, sched, cfg) for r in range(world)]
    runs: list[int] = []
    return *run_endpoints(eps, rng, poll_ns, runs), runs


@settings(max_examples=20, deadline=None)
@given(case=_flows(), seed=st.integers(0, 10**6), qps=st.sampled_from([1, 3]),
       psn=st.sampled_from([0, (1 << 24) - 50]), cc=st.sampled_from(["none", "connectx"]),
       poll=st.sampled_from([7_000, 40_000]), ack_every=st.sampled_from([1 << 20, 40]))  # fmt: skip
def test_runs_as_one_transmit_put_the_same_bytes_on_the_wire_and_keep_the_same_records(case, seed, qps, psn, cc,
                                                                                       poll, ack_every):
    world, flows, ops = case
    sched = make_schedule(world, flows, ops)
    kw = dict(cc=cc, qps_per_peer=qps, initial_psn=psn, retransmit_timeout_ns=400_000, ack_every_packets=ack_every)
    wire_b, rec_b, done_b, runs_b = _run(sched, _cfg(False, **kw), seed, world, poll)
    wire_r, rec_r, done_r, _ = _run(sched, _cfg(True, **kw), seed, world, poll)
    assert done_b and done_r and not runs_b
    assert_same_run(wire_r, rec_r, wire_b, rec_b, flows)


def test_the_comparison_is_not_vacuous():
    """A 4 MiB flow: most of its batches go out in runs of several, and the wire is the per-batch one."""
    sched = make_schedule(2, [(0, 1, 4 << 20, 0)], {0: [send(0)], 1: [recv(0)]})
    wire_b, rec_b, _, _ = _run(sched, _cfg(False), 3, 2)
    wire_r, rec_r, done, runs = _run(sched, _cfg(True), 3, 2)
    assert done and runs and max(runs) >= 4
    assert sum(runs) >= len([w for w in wire_r if w[1] == 0 and w[4]]) // 2
    assert_same_run(wire_r, rec_r, wire_b, rec_b, [(0, 1, 4 << 20, 0)])


def test_run_parts_and_datagrams():
    data = bytes(range(256)) * 48  # 3 sends of 4 segments of 1,024 bytes
    run = TransmitRun(1, data, 1024, 2, 100, 5, 3)
    parts = run.parts()
    assert [bytes(p.data) for p in parts] == [data[i * 4096 : (i + 1) * 4096] for i in range(3)]
    assert [p.t_ns for p in parts] == [100, 120, 140] and {p.segment_size for p in parts} == {1024}
    assert [bytes(d) for d in run.datagrams()] == [data[i : i + 1024] for i in range(0, len(data), 1024)]
    single = [Transmit(1, b"x", 0, 0)]
    assert expand_runs(single) is single
    assert [bytes(t.data) for t in expand_runs([*single, run, *single])] == [b"x", *(data[i * 4096 : (i + 1) * 4096]
                                                                                   for i in range(3)), b"x"]


def _drain(port: UdpPort, out: list) -> None:
    while select.select([port.fileno], [], [], 0.005)[0]:
        data, tos, seg = port.recv()
        if data is None:
            break
        out.append((data, tos))


def _sockets(compiled: bool):
    warm()
    tx = UdpPort("127.0.0.1", 0, send_mmsg=compiled, send_compiled=compiled, sndbuf_bytes=16 << 20)
    rx = UdpPort("127.0.0.1", 0, gro=False, rcvbuf_bytes=32 << 20)
    return tx, rx


def _two_mib_flow(compiled: bool) -> tuple[RankEndpoint, UdpPort, UdpPort, tuple]:
    """Rank 0 of a 2 MiB flow to rank 1, started, with its socket and rank 1's, and the destinations."""
    ep = RankEndpoint(0, make_schedule(2, [(0, 1, 2 << 20, 0)], {0: [send(0)], 1: [recv(0)]}), _cfg(compiled))
    ep.start(0)
    tx, rx = _sockets(compiled)
    return ep, tx, rx, (tx.address, rx.address)


def test_the_compiled_send_puts_the_datagrams_of_send_each_on_a_socket():
    """A 2 MiB flow's transmits (runs, FIRST and LAST batches) through a real socket pair: the compiled send
    delivers the datagrams ``send_each`` delivers, in order, with the same counters."""
    got, counters, runs = {}, {}, 0
    for compiled in (False, True):
        ep, tx, rx, dest = _two_mib_flow(compiled)
        out: list = []
        try:
            for now in range(0, 2_000_000, 40_000):
                txs = ep.poll_transmit(now)
                runs += sum(1 for t in txs if type(t) is TransmitRun)
                tx.send_transmits(txs, dest)
                _drain(rx, out)
            assert isinstance(tx._tx_compiled, CompiledSend) == compiled
            if compiled:  # a run's sends, and a poll's transmits, share system calls
                assert tx._mm_tx.syscalls <= tx.sent_calls // 3
            got[compiled] = out
            counters[compiled] = (tx.sent_calls, tx.sent_bytes, tx.send_errors)
        finally:
            tx.close()
            rx.close()
    assert runs > 3
    assert got[True] == got[False] and len(got[True]) == 512
    assert counters[True] == counters[False]
    assert counters[True][2] == 0


def test_a_refused_send_is_counted_and_the_rest_still_go():
    """A message the kernel refuses (destination port 0) in the middle of a call: counted in ``send_errors``,
    the messages before and after it delivered, as by ``send_each``."""
    warm()
    seg = 1024
    run = TransmitRun(1, bytearray(b"r" * (3 * 2 * seg)), seg, 0, 0, 0, 3)
    for compiled in (False, True):
        tx, rx = _sockets(compiled)
        try:
            dest = (("127.0.0.1", 1), rx.address, ("127.0.0.1", 0))
            tx.send_transmits([Transmit(1, b"a" * 100, 0, 0), Transmit(1, b"b" * (2 * seg), seg, 0)], dest)  # options
            tx.send_transmits([Transmit(1, b"c" * 10, 0, 0), Transmit(2, b"lost", 0, 0), run,
                               Transmit(1, b"d" * 20, 0, 0)], dest)
            out: list = []
            _drain(rx, out)
            assert [d for d, _ in out] == [b"a" * 100, b"b" * seg, b"b" * seg, b"c" * 10, *[b"r" * seg] * 6,
                                           b"d" * 20]
            assert tx.send_errors == 1 and tx.sent_calls == 2 + 1 + 3 + 1
        finally:
            tx.close()
            rx.close()


def test_the_destination_names_are_looked_up_once_per_destination_tuple():
    """The compiled send reads the ``sockaddr_in`` block of the destination tuple it was built for without a
    ``names_for`` call; a new tuple still builds its own (the same datagrams either way: the test above)."""
    ep, tx, rx, dest = _two_mib_flow(True)
    out: list = []
    try:
        tx.send_transmits(ep.poll_transmit(0), dest)  # the first GSO batch: the ctypes path sets the options
        _drain(rx, out)
        mm = tx._mm_tx
        real = mm.names_for
        calls = []
        mm.names_for = lambda d: calls.append(d) or real(d)
        sends = 0
        for now in range(40_000, 2_000_000, 40_000):
            txs = ep.poll_transmit(now)
            sends += len(txs) > 1 or any(type(t) is TransmitRun for t in txs)
            tx.send_transmits(txs, dest)
            _drain(rx, out)
        assert sends > 3 and calls == []
        other = dest[:1] + dest[1:]  # an equal tuple that is another object: its names built again
        tx.send_transmits([Transmit(1, b"x" * 100, 0, 0), Transmit(1, b"y", 0, 0)], other)
        assert calls == [other]
    finally:
        tx.close()
        rx.close()


def test_the_arenas_rows_go_with_the_address_it_recorded_and_no_ctypes_call(monkeypatch):
    """With the port's ``tx_arena`` set (a worker's shared arena), every row the arena handed out (runs, a
    message's MIDDLE and LAST rows) is described by the address the arena recorded: no ctypes call, and the
    datagrams are ``send_each``'s. A writable view the arena did not hand out still goes by ctypes."""
    import emulator.drivers.sockets.tx_compiled as txc

    ep_ref, tx_ref, rx_ref, dest_ref = _two_mib_flow(False)
    ep, tx, rx, dest = _two_mib_flow(True)
    tx.tx_arena = ep._tx.arena
    asked: list = []
    real = txc._addressof
    monkeypatch.setattr(txc, "_addressof", lambda c: asked.append(c) or real(c))
    want: list = []
    got: list = []
    views = 0
    try:
        for now in range(0, 2_000_000, 40_000):
            tx_ref.send_transmits(ep_ref.poll_transmit(now), dest_ref)
            _drain(rx_ref, want)
            txs = ep.poll_transmit(now)
            if now == 0:  # the first GSO batch (the ctypes path sets the options)
                tx.send_transmits(txs, dest)
                asked.clear()
            else:
                views += sum(type(t.data) is memoryview for t in txs)
                tx.send_transmits(txs, dest)
            _drain(rx, got)
        assert views > 3 and asked == []
        assert got == want and len(got) == 512
        other = bytearray(b"z" * 3000)  # a writable buffer of its own: its address from ctypes
        tx.send_transmits([Transmit(1, memoryview(other)[1000:], 0, 0), Transmit(1, b"y", 0, 0)], dest)
        out: list = []
        _drain(rx, out)
        assert len(asked) == 1 and out == [(b"z" * 2000, 0), (b"y", 0)]
    finally:
        for p in (tx, rx, tx_ref, rx_ref):
            p.close()
