"""The switch's batch port agrees packet for packet with the fabric's per-packet EgressPort."""

from __future__ import annotations

import heapq
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.fabric.batch_port import BatchPort
from emulator.fabric.port import EgressPort, PortConfig
from emulator.pacing.red import RedParams

OVER = 66


class _P:
    __slots__ = ("size_bytes", "ect", "priority", "payload")

    def __init__(self, size_bytes, ect, priority, payload):
        self.size_bytes, self.ect, self.priority, self.payload = size_bytes, ect, priority, payload


arrival = st.tuples(
    st.integers(0, 60_000),                 # gap since the previous arrival (ns)
    st.integers(1, 16),                     # packets in the batch
    st.sampled_from([256, 1024, 4096]),     # payload size of the full packets
    st.integers(12, 4096),                  # payload size of the last packet (capped at the full size)
    st.sampled_from([0x68 | 2, 0x68, 0xC0]),  # ECT(0) data, not-ECT data, CNP/ACK DSCP 48
)


def _run_reference(cfg, arrivals, seed):
    port = EgressPort(cfg, random.Random(seed), 0)
    out, t = [], 0

    def drain(until):
        while port.next_departure_ns() is not None and port.next_departure_ns() <= until:
            d = port.next_departure_ns()
            pkt, ce = port.dequeue(d)
            out.append((d, pkt.payload, ce))

    for k, (gap, n, seg, last, tos) in enumerate(arrivals):
        t += gap
        drain(t)
        last = min(last, seg)
        for j in range(n):
            size = (last if j == n - 1 else seg) + OVER
            port.enqueue(_P(size, (tos & 3) != 0, 6 if tos >> 2 == 48 else 0, (k, j)), t)
    drain(10**15)
    return out, port.counters(t)


def _run_batch(cfg, arrivals, seed):
    port = BatchPort(cfg, random.Random(seed), 0, wire_overhead_bytes=OVER)
    runs, t = [], 0
    for k, (gap, n, seg, last, tos) in enumerate(arrivals):
        t += gap
        last = min(last, seg)
        port.enqueue((k, seg), n, seg, last, tos, 6 if tos >> 2 == 48 else 0, t, runs)
    port.advance(10**15, runs)
    out = []
    for _pid, (k, seg), off, m, size, out_tos, d0, s in runs:
        for j in range(m):
            out.append((d0 + j * s, (k, off // seg + j), (out_tos & 3) == 3 and size >= 0))
    return out, port.counters(t)


@settings(max_examples=150, deadline=None)
@given(st.lists(arrival, min_size=1, max_size=25), st.integers(0, 3), st.sampled_from([100e6, 1e9, 3e9]),
       st.sampled_from([20_000, 64_000, 1 << 20]))
def test_batch_port_matches_egress_port(arrivals, seed, rate, buffer):
    cfg = PortConfig(rate_bps=rate, buffer_bytes=buffer, red=RedParams(kmin_bytes=8_000, kmax_bytes=40_000, pmax=0.3))
    ref, c_ref = _run_reference(cfg, arrivals, seed)
    got, c_got = _run_batch(cfg, arrivals, seed)
    # CE-marked input (tos & 3 == 3) never appears here, so "CE on output" is exactly "marked by the port"
    assert got == ref
    for f in ("enqueued_packets", "enqueued_bytes", "dequeued_packets", "dequeued_bytes", "marked_packets",
              "dropped_packets", "dropped_bytes", "peak_queue_bytes", "queue_bytes"):
        assert getattr(c_got, f) == getattr(c_ref, f), f
    assert abs(c_got.mean_queue_bytes - c_ref.mean_queue_bytes) <= 1e-6 * max(1.0, c_ref.mean_queue_bytes)


def test_tail_drop_keeps_the_prefix_and_counts_the_rest():
    cfg = PortConfig(rate_bps=1e9, buffer_bytes=5 * (4096 + OVER), red=None)
    port = BatchPort(cfg, random.Random(0), 3, wire_overhead_bytes=OVER)
    out: list = []
    dropped = port.enqueue(b"x" * (8 * 4096), 8, 4096, 4096, 2, 0, 0, out)
    assert dropped == 3 and port.dropped_packets == 3 and port.queue_packets == 5
    port.advance(10**12, out)
    assert sum(r[3] for r in out) == 5 and port.queue_bytes == 0 and port.next_departure_ns is None
    assert [r[0] for r in out] == [3] * len(out)


spread = st.tuples(
    st.integers(0, 60_000),                 # idle time after the previous batch's last arrival (ns)
    st.integers(1, 16),                     # packets in the batch
    st.sampled_from([256, 1024, 4096]),     # payload size of the full packets
    st.integers(12, 4096),                  # payload size of the last packet (capped at the full size)
    st.sampled_from([0, 700, 8_000, 40_000, 80_000]),  # arrival gap between its packets (sender NIC)
)


@settings(max_examples=150, deadline=None)
@given(st.lists(spread, min_size=1, max_size=20), st.integers(0, 3), st.sampled_from([100e6, 1e9]))
def test_spread_out_batches_match_packet_by_packet_arrivals(batches, seed, rate):
    """A batch whose packets arrive ``gap`` apart (one entry in the batch port) gives the departures, ECN
    marks and mean queue of the per-packet EgressPort fed each packet at its arrival time."""
    cfg = PortConfig(rate_bps=rate, buffer_bytes=1 << 22, red=RedParams(kmin_bytes=8_000, kmax_bytes=40_000, pmax=0.3))
    ref_port = EgressPort(cfg, random.Random(seed), 0)
    ref: list = []

    def drain(until):
        while ref_port.next_departure_ns() is not None and ref_port.next_departure_ns() <= until:
            d = ref_port.next_departure_ns()
            pkt, ce = ref_port.dequeue(d)
            ref.append((d, pkt.payload, ce))

    port = BatchPort(cfg, random.Random(seed), 0, wire_overhead_bytes=OVER)
    runs: list = []
    t = end = 0
    for k, (idle, n, seg, last, gap) in enumerate(batches):
        t = end + idle
        last = min(last, seg)
        for j in range(n):
            a = t + j * gap
            drain(a)
            ref_port.enqueue(_P((last if j == n - 1 else seg) + OVER, True, 0, (k, j)), a)
        port.enqueue((k, seg), n, seg, last, 0x68 | 2, 0, t, runs, gap)
        end = t + (n - 1) * gap
    drain(10**15)
    port.advance(10**15, runs)
    got = [(d0 + j * s, (k, off // seg + j), (tos & 3) == 3) for _p, (k, seg), off, m, _sz, tos, d0, s in runs
           for j in range(m)]
    assert got == ref
    c_ref, c_got = ref_port.counters(end), port.counters(end)
    assert c_got.marked_packets == c_ref.marked_packets and c_got.dequeued_bytes == c_ref.dequeued_bytes
    assert c_got.peak_queue_bytes <= c_ref.peak_queue_bytes + 4096 + OVER  # sampled at enqueue and departures
    assert abs(c_got.mean_queue_bytes - c_ref.mean_queue_bytes) <= 1e-6 * max(1.0, c_ref.mean_queue_bytes) + 1


def test_a_batch_spread_at_the_port_rate_builds_no_queue_and_is_not_marked():
    cfg = PortConfig(rate_bps=1e9, buffer_bytes=1 << 20, red=RedParams(kmin_bytes=4_000, kmax_bytes=8_000, pmax=1.0))
    s = -(-(4096 + OVER) * 8 // 1)  # ns per packet at 1 Gbps
    spread_port = BatchPort(cfg, random.Random(0), 0, wire_overhead_bytes=OVER)
    burst_port = BatchPort(cfg, random.Random(0), 0, wire_overhead_bytes=OVER)
    out_spread: list = []
    out_burst: list = []
    spread_port.enqueue(b"x" * 15 * 4096, 15, 4096, 4096, 2, 0, 0, out_spread, s)
    burst_port.enqueue(b"x" * 15 * 4096, 15, 4096, 4096, 2, 0, 0, out_burst)
    spread_port.advance(10**12, out_spread)
    burst_port.advance(10**12, out_burst)
    assert spread_port.marked_packets == 0 and spread_port.peak_queue_bytes <= 2 * (4096 + OVER)
    assert burst_port.marked_packets > 0 and burst_port.peak_queue_bytes == 15 * (4096 + OVER)


overlapping = st.tuples(
    st.integers(0, 200_000),                # time after the previous batch's first arrival (ns): batches overlap
    st.integers(1, 16),                     # packets in the batch
    st.sampled_from([1024, 4096]),          # payload size of the full packets
    st.integers(12, 4096),                  # payload size of the last packet (capped at the full size)
    st.sampled_from([0, 700, 8_000, 40_000, 80_000]),  # arrival gap between its packets (its sender's NIC)
)


def _per_packet_departures(ref_port: EgressPort, packets: list) -> list:
    """The (departure ns, (batch, packet), CE) of ``packets`` (arrival ns, batch, packet, size) offered one by one,
    in arrival order, to the per-packet ``ref_port``, drained to the end."""
    out: list = []
    for a, k, j, size in sorted(packets):
        while ref_port.next_departure_ns() is not None and ref_port.next_departure_ns() <= a:
            d = ref_port.next_departure_ns()
            pkt, ce = ref_port.dequeue(d)
            out.append((d, pkt.payload, ce))
        ref_port.enqueue(_P(size, True, 0, (k, j)), a)
    while ref_port.next_departure_ns() is not None:
        d = ref_port.next_departure_ns()
        pkt, ce = ref_port.dequeue(d)
        out.append((d, pkt.payload, ce))
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(overlapping, min_size=2, max_size=20), st.integers(0, 3), st.sampled_from([100e6, 1e9]))
def test_overlapping_spread_out_batches_leave_in_packet_arrival_order(batches, seed, rate):
    """Batches of several senders whose packets arrive interleaved (an incast: each sender's NIC spreads its
    batch) leave in the order their packets arrived, as from the per-packet EgressPort, not batch after batch:
    a receiver that sees one sender's batch whole marks (and sends CNPs to) that sender alone meanwhile."""
    cfg = PortConfig(rate_bps=rate, buffer_bytes=1 << 22, red=RedParams(kmin_bytes=8_000, kmax_bytes=40_000, pmax=0.3))
    ref_port = EgressPort(cfg, random.Random(seed), 0)
    ref: list = []
    port = BatchPort(cfg, random.Random(seed), 0, wire_overhead_bytes=OVER)
    runs: list = []
    packets = []
    t = 0
    for k, (after, n, seg, last, gap) in enumerate(batches):
        t += after
        last = min(last, seg)
        port.enqueue((k, seg), n, seg, last, 0x68 | 2, 0, t, runs, gap)
        packets += [(t + j * gap, k, j, (last if j == n - 1 else seg) + OVER) for j in range(n)]
    port.advance(10**15, runs)
    ref += _per_packet_departures(ref_port, packets)
    got = [(d0 + j * s, (k, off // seg + j), (tos & 3) == 3) for _p, (k, seg), off, m, _sz, tos, d0, s in runs
           for j in range(m)]
    assert [g[:2] for g in got] == [r[:2] for r in ref]  # the same packets at the same times
    assert got == ref  # and the same marks (the same queue behind each, the same draws)


tail_drop_spread = st.tuples(
    st.integers(0, 3_000),                  # 64-ns steps after the previous batch's first arrival
    st.integers(1, 16),                     # packets in the batch
    st.sampled_from([1024, 4096]),          # payload size of the full packets
    st.integers(12, 4096),                  # payload size of the last packet (capped at the full size)
    st.sampled_from([0, 704, 8_000, 40_000, 80_000]),  # arrival gap between its packets (multiples of 64 ns)
)


@settings(max_examples=200, deadline=None)
@given(st.lists(tail_drop_spread, min_size=2, max_size=20), st.integers(0, 3), st.sampled_from([100e6, 1e9]),
       st.sampled_from([20_000, 64_000]))
def test_spread_out_batches_are_tail_dropped_packet_by_packet_at_their_arrival(batches, seed, rate, buffer):
    """With ``requeue``, a packet of a spread-out batch takes buffer room when it arrives, not when its
    batch's first packet did: an incast's full buffer drops the packets the per-packet EgressPort drops
    (the caller offers the packets not decided yet again at their arrival, in time order)."""
    cfg = PortConfig(rate_bps=rate, buffer_bytes=buffer, red=RedParams(kmin_bytes=8_000, kmax_bytes=16_000, pmax=0.3))
    port = BatchPort(cfg, random.Random(seed), 0, wire_overhead_bytes=OVER)
    runs: list = []
    heap: list = []
    packets = []
    t = 0
    for k, (after, n, seg, last, gap) in enumerate(batches):
        t += 64 * after + 1  # batch k's packets arrive at times ≡ k (mod 64): no two batches' at once
        last = min(last, seg)
        heapq.heappush(heap, (t, len(packets), (k, seg), n, seg, last, 0x68 | 2, 0, gap, 0))
        packets += [(t + j * gap, k, j, (last if j == n - 1 else seg) + OVER) for j in range(n)]
    again: list = []
    while heap:
        a, _, *rest = heapq.heappop(heap)
        buf, n, seg, last, tos, prio, gap, off = rest
        port.enqueue(buf, n, seg, last, tos, prio, a, runs, gap, again, off)
        for item in again:
            heapq.heappush(heap, (item[0], len(packets) + len(heap) + 10**6, *item[1:]))
        again.clear()
    port.advance(10**15, runs)
    ref_port = EgressPort(cfg, random.Random(seed), 0)
    ref: list = []
    ref += _per_packet_departures(ref_port, packets)
    end = sorted(packets)[-1][0]
    got = [(d0 + j * s, (k, off // seg + j), (tos & 3) == 3) for _p, (k, seg), off, m, _sz, tos, d0, s in runs
           for j in range(m)]
    assert [g[:2] for g in got] == [r[:2] for r in ref]
    assert got == ref
    c_ref, c_got = ref_port.counters(end), port.counters(end)
    for f in ("enqueued_packets", "enqueued_bytes", "dropped_packets", "dropped_bytes", "marked_packets"):
        assert getattr(c_got, f) == getattr(c_ref, f), f
    assert abs(c_got.mean_queue_bytes - c_ref.mean_queue_bytes) <= 1e-6 * max(1.0, c_ref.mean_queue_bytes) + 1
