"""The compiled drain (``recvmmsg`` + control messages + the receiver's accept in one numba call) is the Python
receive: same bytes on the wire in the same order, same counters and records.

The wire is virtual (no datagram is sent): what a ``recvmmsg`` would leave in the receiver's buffers — the
datagrams, their lengths, their TOS and GRO control messages — is written by hand, then the compiled parse and
scan and :meth:`CompiledDrain.serve` run on it, against ``RankEndpoint.receive`` of each datagram. A real
socket pair checks the system call itself.
"""

from __future__ import annotations

import heapq
import random
import socket
import struct
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import assert_same_run, make_schedule, recv, send, transmit_round
from support.endpoint import flows_2_to_3_ranks as _flows

from emulator.drivers.sockets.mmsg import RX_CONTROL_BYTES, cmsg, mmsg_supported
from emulator.drivers.sockets.rx_compiled import CompiledDrain, parse_block, recv_scan, warm
from emulator.drivers.sockets.udp import UDP_GRO, UdpPort
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.rx_table import OUT_HEAD, scan_block

pytestmark = pytest.mark.skipif(not mmsg_supported(), reason="libc has no recvmmsg")


def _fill(drain: CompiledDrain, batch: list[tuple[bytes, int, int]]) -> None:
    """Leave ``batch`` ((data, tos, GRO segment size or 0) each) in ``drain``'s buffers as ``recvmmsg`` would."""
    rx = drain.rx
    w = rx.words
    for i, (data, tos, seg) in enumerate(batch):
        a = i * rx.buffer_bytes
        rx.view[a : a + len(data)] = data
        ctl = cmsg(socket.IPPROTO_IP, socket.IP_TOS, bytes([tos]))
        if seg:
            ctl += cmsg(17, UDP_GRO, struct.pack("=i", seg))
        c = i * RX_CONTROL_BYTES
        rx.control_view[c : c + len(ctl)] = ctl
        w[i * 8 + 5] = len(ctl)
        w[i * 8 + 7] = len(data)


def _deliver(drain: CompiledDrain, batch, now: int) -> None:
    d = drain
    _fill(d, batch)
    parse_block(d.words, d.ctrl, RX_CONTROL_BYTES, len(batch), d.out)
    d.ep.scan_tick(now)
    scan_block(d.data, d.rx.buffer_bytes, 0, len(batch), d.row, d.ack_every, d.qps, d.table, d.op_packets, d.out,
               d.due)
    d.serve(len(batch), lambda: now, 0)


def _run(sched, cfg, seed: int, world: int, compiled: bool, ports):
    """Virtual time as tests/endpoint/test_compiled_core.py runs it (every rank polled every 7 µs, GSO batches
    delivered 2 µs later as GRO batches, the seeded RNG dropping, duplicating or CE-marking segments); each
    rank's datagrams due at a time go to ``receive`` one by one, or (``compiled``) through its compiled drain,
    at most 16 a call. Returns the transmits' bytes in order, records and counters, done, datagrams scanned."""
    rng = random.Random(seed)
    eps = [RankEndpoint(r, sched, cfg) for r in range(world)]
    drains = [CompiledDrain(ports[r], ep) for r, ep in enumerate(eps)] if compiled else []
    for ep in eps:
        ep.start(0)
    wire = []
    inflight, seq, now = [], 0, 0
    while now < 10**9 and not all(ep.done for ep in eps):
        seq = transmit_round(eps, now, rng, wire, inflight, seq)
        now += 7000
        due: list[list] = [[] for _ in eps]
        while inflight and inflight[0][0] <= now:
            _, _, dst, data, tos, ecn, seg = heapq.heappop(inflight)
            due[dst].append((data, (tos & ~3) | ecn, seg if seg < len(data) else 0))
        for dst, batch in enumerate(due):
            if not compiled:
                for data, tos, seg in batch:
                    eps[dst].receive(memoryview(bytearray(data)), tos & 3, now, seg)
                continue
            for i in range(0, len(batch), 16):
                _deliver(drains[dst], batch[i : i + 16], now)
        for ep in eps:
            ep.handle_timer(now)
    scanned = sum(d.scanned_datagrams for d in drains)
    return (wire, [(ep.records.to_arrays(), dict(ep.records.counters)) for ep in eps], all(ep.done for ep in eps),
            scanned)


@pytest.fixture(scope="module")
def ports():
    warm()
    ps = [UdpPort("127.0.0.1", 0) for _ in range(3)]
    yield ps
    for p in ps:
        p.close()


@settings(max_examples=25, deadline=None)
@given(case=_flows(), seed=st.integers(0, 10**6), qps=st.sampled_from([1, 3]),
       psn=st.sampled_from([0, (1 << 24) - 50]), cc=st.sampled_from(["none", "connectx"]),
       msg=st.sampled_from([65_536, (1 << 31) - 1]), ack_every=st.sampled_from([1 << 20, 40]))  # fmt: skip
def test_the_compiled_drain_puts_the_same_bytes_on_the_wire_and_keeps_the_same_records(ports, case, seed, qps,
                                                                                      psn, cc, msg, ack_every):
    world, flows, ops = case
    sched = make_schedule(world, flows, ops)
    cfg = EndpointConfig(mtu_bytes=4096, cc=cc, line_rate_bps=100e9, qps_per_peer=qps, initial_psn=psn,
                         retransmit_timeout_ns=200_000, pace_full_batches=True, defer_acks=True,
                         socket_sends=True, compiled_core=True, max_message_bytes=msg,
                         ack_every_packets=ack_every)  # fmt: skip
    wire_p, rec_p, done_p, _ = _run(sched, cfg, seed, world, False, ports)
    wire_c, rec_c, done_c, _ = _run(sched, cfg, seed, world, True, ports)
    assert done_p and done_c
    assert_same_run(wire_c, rec_c, wire_p, rec_p, flows)


def test_the_comparison_is_not_vacuous(ports):
    """A 1 MiB flow through the compiled drain: most GRO batches never reach ``receive``."""
    sched = make_schedule(2, [(0, 1, 1 << 20, 0)], {0: [send(0)], 1: [recv(0)]})
    cfg = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, pace_full_batches=True, defer_acks=True,
                         socket_sends=True, compiled_core=True)  # fmt: skip
    wire, rec, done, scanned = _run(sched, cfg, 1, 2, True, ports)
    assert done and rec[1][1]["bytes_received"] == 1 << 20
    batches = sum(1 for w in wire if w[1] == 0 and w[4])
    assert scanned >= batches - 4 > 10


def test_a_socket_pair_drains_through_the_system_call(ports):
    """Real datagrams on 127.0.0.1: GSO batches arrive as GRO batches, the compiled drain takes them in one
    ``recvmmsg`` and the receiver holds the flow; the counters are the Python drain's."""
    sched = make_schedule(2, [(0, 1, 1 << 20, 0)], {0: [send(0)], 1: [recv(0)]})
    cfg = replace(EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, pace_full_batches=True,
                                 defer_acks=True, socket_sends=True, compiled_core=True))
    a, b = RankEndpoint(0, sched, cfg), RankEndpoint(1, sched, cfg)
    tx_port, rx_port = UdpPort("127.0.0.1", 0), UdpPort("127.0.0.1", 0)
    try:
        drain = CompiledDrain(rx_port, b)
        a.start(0)
        b.start(0)
        dest = (tx_port.address, rx_port.address)
        now = 0
        for _ in range(2000):
            if b.done:
                break
            now += 5_000
            tx_port.send_transmits(a.poll_transmit(now), dest)
            drain.drain(lambda n=now: n, 0, 16)
            for tx in b.poll_transmit(now):
                a.receive(memoryview(bytearray(tx.data)), tx.tos & 3, now, 0)
            a.handle_timer(now)
        assert b.done
        c = b.records.counters
        assert c["bytes_received"] == 1 << 20 and c["dup_packets"] == 0 and c["out_of_order"] == 0
        st_ = rx_port.stats()
        assert st_["recv_bytes"] == tx_port.stats()["sent_bytes"]
        assert st_["recv_calls"] >= 2 and drain.scanned_datagrams >= st_["recv_calls"] - 4
        assert st_["socket_drops"] == 0
    finally:
        tx_port.close()
        rx_port.close()


def test_parse_block_reads_what_the_python_parser_reads(ports):
    """TOS, GRO segment size (0 for a plain datagram or a one-segment batch) and the drop count."""
    port = ports[0]
    ep = RankEndpoint(1, make_schedule(2, [(0, 1, 4096, 0)], {0: [send(0)], 1: [recv(0)]}),
                      EndpointConfig(compiled_core=True))
    d = CompiledDrain(port, ep)
    batch = [(bytes(100), 0x02, 0), (bytes(8224), 0xB7, 4112), (bytes(4112), 0x03, 4112), (bytes(50), 0, 0)]
    _fill(d, batch)
    d.rx.words[3 * 8 + 5] = 0  # no control message at all
    d.rx.control_view[RX_CONTROL_BYTES: RX_CONTROL_BYTES + 24] = cmsg(1, 40, struct.pack("=I", 7))[:24]
    parse_block(d.words, d.ctrl, RX_CONTROL_BYTES, 4, d.out)
    o = d.out
    got = [tuple(o[OUT_HEAD + 3 * i : OUT_HEAD + 3 * i + 3]) for i in range(4)]
    assert got == [(100, 2, 0), (8224, 0, 4112), (4112, 3, 0), (50, 0, 0)]
    assert o[3] == 100 + 8224 + 4112 + 50 and o[4] == 7
    assert [d.rx.words[i * 8 + 5] for i in range(3)] == [RX_CONTROL_BYTES] * 3


def test_recv_scan_on_an_empty_socket_returns_nothing(ports):
    d = CompiledDrain(ports[1], RankEndpoint(1, make_schedule(2, [(0, 1, 4096, 0)], {0: [send(0)], 1: [recv(0)]}),
                                             EndpointConfig(compiled_core=True)))
    r = recv_scan(d.rx.fd, d.rx._hdr_addr, 16, d.words, d.ctrl, RX_CONTROL_BYTES, d.data, d.rx.buffer_bytes,
                  d.row, d.ack_every, d.qps, d.table, d.op_packets, d.out, d.due)
    assert r <= 0


def test_a_run_the_drain_accepts_after_a_gap_rearms_the_nak(ports):
    """The FIRST packet and batches 1, 2; batch 3 lost, batch 4 NAKed; batches 3, 4, 5 accepted by the scan; batch 6
    lost: batch 7 is NAKed again, as ``receive`` NAKs it (the scan clears the NAK flag of the runs it accepts)."""
    sched = make_schedule(2, [(0, 1, 1 << 20, 0)], {0: [send(0)], 1: [recv(0)]})
    cfg = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, pace_full_batches=True, defer_acks=True,
                         socket_sends=True, compiled_core=True, ack_every_packets=1 << 20)  # fmt: skip
    a = RankEndpoint(0, sched, cfg)
    a.start(0)
    batches, now = [], 0
    while len(batches) < 9:
        now += 50_000
        batches += [(bytes(t.data), t.tos, t.segment_size if t.segment_size < len(t.data) else 0)
                    for t in a.poll_transmit(now)]
    assert batches[0][2] == 0 and batches[1][2]  # the FIRST alone, then GSO batches
    order = [0, 1, 2, 4, 3, 4, 5, 7, 8]
    out = {}
    for compiled in (False, True):
        b = RankEndpoint(1, sched, cfg)
        d = CompiledDrain(ports[2], b) if compiled else None
        b.start(0)
        sent = []
        for i, k in enumerate(order):
            data, tos, seg = batches[k]
            if compiled:
                _deliver(d, [(data, tos, seg)], 1000 + i)
            else:
                b.receive(memoryview(bytearray(data)), tos & 3, 1000 + i, seg)
            sent += [bytes(t.data) for t in b.poll_transmit(1000 + i, 0)]
        out[compiled] = (sent, dict(b.records.counters))
        if compiled:
            assert d.scanned_datagrams >= 3
    assert out[True] == out[False]
    assert out[True][1]["naks_sent"] == 2


def test_the_table_has_a_row_per_queue_pair_the_rank_receives_on():
    """Queue-pair ids run up to about world² (src·world + dst): the table holds only this rank's, sorted."""
    world = 16
    flows = [(s, d, 4096, s * world + d) for s in range(world) for d in range(world) if s != d]
    ops = {r: [] for r in range(world)}
    for f, (s, d, _, _) in enumerate(flows):
        ops[s].append(send(f))
        ops[d].append(recv(f))
    ep = RankEndpoint(5, make_schedule(world, flows, ops), EndpointConfig(compiled_core=True))
    qps, table, *_ = ep.scan_state()
    assert table.shape[0] == world - 1 and qps.tolist() == sorted(s * world + 5 for s in range(world) if s != 5)
    assert ep.scan_state()[1] is table  # made once


def test_the_table_receiver_reaches_its_row_through_few_property_calls(ports):
    """A 3-rank All-to-All of 1 MiB a pair through the compiled drain on the seeded lossy wire (what the scan
    stops at goes to the Python core: a message's FIRST and LAST packets, packets after a gap, duplicates, CE):
    the core reads and writes a table queue pair's fields (ACK flush, data packets, queue-pair setup) through
    ``TableRxQp``'s properties at most 12 times per GSO batch sent (measured 10.6; 14.8 before they were read
    once and written once per packet, and the ACK flush and setup wrote the row directly)."""
    import sys

    flows = [(s, d, 1 << 20, s * 3 + d) for s in range(3) for d in range(3) if s != d]
    ops = {r: [send(f) for f, fl in enumerate(flows) if fl[0] == r] + [recv(f) for f, fl in enumerate(flows)
                                                                          if fl[1] == r] for r in range(3)}
    sched = make_schedule(3, flows, ops)
    cfg = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, pace_full_batches=True, defer_acks=True,
                         socket_sends=True, compiled_core=True, ack_every_packets=40)  # fmt: skip
    calls = [0]

    def hook(frame, event, _arg):
        if event == "call" and frame.f_code.co_name in ("get", "put") and frame.f_code.co_filename.endswith(
                "rx_table.py"):
            calls[0] += 1

    sys.setprofile(hook)
    try:
        wire, rec, done, _ = _run(sched, cfg, 1, 3, True, ports)
    finally:
        sys.setprofile(None)
    assert done
    batches = sum(c["bytes_sent"] for _, c in rec) / 61_440
    assert calls[0] <= 12 * batches, calls[0] / batches


def test_a_batch_that_ends_a_message_leaves_only_its_last_packet_to_receive(ports, monkeypatch):
    """On a clean wire, every GSO batch through the compiled drain is scanned but a message's FIRST packet (a
    datagram of its own) and LAST packet: the batch that ends a message has its MIDDLE rows accepted by the
    scan, and ``receive`` gets the LAST packet alone (the records and wire: the property above)."""
    import support.endpoint

    monkeypatch.setattr(support.endpoint, "perturb", lambda rng, data, seg, tos: (data, tos & 3, 1))
    got: list = []
    real = RankEndpoint.receive

    def receive(self, data, ecn, now_ns, segment_size=0):
        got.append((self.rank, len(data), segment_size))
        return real(self, data, ecn, now_ns, segment_size)

    monkeypatch.setattr(RankEndpoint, "receive", receive)
    # messages of 64 packets (the last batch 3 MIDDLE rows and the LAST), of 23 (7 and the LAST) and of 512 (one
    # MIDDLE row and the LAST: the 8-rank All-to-All's 2 MiB messages)
    sizes = (3 * 65_536 * 4 + 90_500, 2 << 20)
    flows = [(0, 1, size, f) for f, size in enumerate(sizes)]
    sched = make_schedule(2, flows, {0: [send(0), send(1)], 1: [recv(0), recv(1)]})
    cfg = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, pace_full_batches=True, defer_acks=True,
                         socket_sends=True, compiled_core=True, max_message_bytes=65_536 * 4)  # fmt: skip
    _, rec, done, scanned = _run(sched, cfg, 1, 2, True, ports)
    _, rec2, done2, _ = _run(make_schedule(2, [(0, 1, 2 << 20, 0)], {0: [send(0)], 1: [recv(0)]}),
                             replace(cfg, max_message_bytes=2 << 20), 1, 2, True, ports)
    assert done and done2 and rec[1][1]["bytes_received"] == sum(sizes) and rec2[1][1]["bytes_received"] == 2 << 20
    data_in = [(n, seg) for r, n, seg in got if r == 1]
    messages = 4 + 8 + 1
    assert len(data_in) == 2 * messages  # a FIRST and a LAST packet per message, nothing else
    assert all(seg == 0 and n <= 4096 + 32 for n, seg in data_in)
    assert scanned > 10


@settings(max_examples=60, deadline=None)
@given(dqpn=st.integers(0, (1 << 24) - 1), psn=st.integers(0, (1 << 24) - 1), ack=st.booleans(),
       stamp=st.integers(-1, 10**12), kind=st.sampled_from(["middle", "first", "last", "pad"]))  # fmt: skip
def test_one_middle_row_is_read_as_gro_run_reads_each_row(dqpn, psn, ack, stamp, kind):
    """``middle_row`` (the scan's one-row run before a message's LAST packet): an even-DestQP MIDDLE packet
    without pad gives its PSN, AckReq bit and DestQP, as ``gro_run`` gives them for a run of two such rows;
    anything else (FIRST, LAST, a pad count, an odd DestQP) gives no row."""
    import numpy as np

    from emulator.endpoint.middles import BatchWriter, MiddleWriter
    from emulator.endpoint.rx_table import middle_row
    from emulator.wire.kernels import gro_run

    if kind == "middle":
        pkt = MiddleWriter(4112).write(dqpn, psn, 1, ack, stamp)
        two = np.frombuffer(MiddleWriter(4112).write(dqpn, psn, 2, ack, stamp), dtype=np.uint8)
        runs, p0, ack2, q2 = gro_run(two, 4112)
        want = (1, psn, ack, dqpn) if dqpn % 2 == 0 else (0, 0, False, 0)
        assert runs in (0, 2) and (runs == 0 or (p0, ack2, q2) == want[1:])
    else:
        index, size = {"first": (0, 3 * 4096), "last": (2, 3 * 4096), "pad": (2, 2 * 4096 + 4093)}[kind]
        pkt, _ = BatchWriter(4096).write(dqpn, psn, size, index, 1, 0, ack, stamp)
        want = (0, 0, False, 0)
    got = middle_row(np.frombuffer(bytes(8) + pkt, dtype=np.uint8), 8)
    assert (got[0], got[1], bool(got[2]), got[3]) == want
