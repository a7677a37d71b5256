"""Egress-port and switch model: timing, tail drop, marking at dequeue, priorities, PFC, counters."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.errors import ConfigError
from emulator.fabric import EgressPort, PfcEvent, PfcParams, PortConfig, SimPacket, Switch
from emulator.pacing import RedParams

RATE_1B_PER_NS = 8e9


def _port(**kw) -> EgressPort:
    cfg = PortConfig(rate_bps=kw.pop("rate_bps", RATE_1B_PER_NS), buffer_bytes=kw.pop("buffer_bytes", 100_000), **kw)
    return EgressPort(cfg, random.Random(1))


def _drain(port: EgressPort) -> list[tuple[int, SimPacket, bool]]:
    out = []
    while (t := port.next_departure_ns()) is not None:
        pkt, ce = port.dequeue(t)
        out.append((t, pkt, ce))
    return out


def test_back_to_back_serialization_at_port_rate():
    p = _port()
    for i in range(3):
        assert p.enqueue(SimPacket(1000, seq=i), 0)
    assert p.queue_bytes == 3000
    assert [(t, pkt.seq) for t, pkt, _ in _drain(p)] == [(1000, 0), (2000, 1), (3000, 2)]
    assert p.next_departure_ns() is None and p.queue_bytes == 0
    p.enqueue(SimPacket(500), 5000)                          # idle port starts at the arrival
    assert p.next_departure_ns() == 5500
    assert p.serialization_ns(4096) == 4096
    assert _port(rate_bps=25e9).serialization_ns(4096) == 1311   # ⌈4096·8/25⌉ ns


def test_tail_drop_at_buffer_limit():
    p = _port(buffer_bytes=2500)
    assert p.enqueue(SimPacket(1000), 0) and p.enqueue(SimPacket(1000), 0)
    assert not p.enqueue(SimPacket(1000), 0)
    assert p.enqueue(SimPacket(500), 0)                      # exactly full is allowed
    c = p.counters(0)
    assert (c.dropped_packets, c.dropped_bytes, c.enqueued_bytes, c.peak_queue_bytes) == (1, 1000, 2500, 2500)


def test_marking_decided_at_dequeue_on_the_queue_left_behind():
    p = _port(red=RedParams(kmin_bytes=1500, kmax_bytes=1500, pmax=1.0))    # step: mark if q > 1500
    for i in range(3):
        p.enqueue(SimPacket(1000, seq=i), 0)
    p.enqueue(SimPacket(1000, seq=3, ect=False), 0)
    marks = [(pkt.seq, ce) for _, pkt, ce in _drain(p)]
    assert marks == [(0, True), (1, True), (2, False), (3, False)]   # q after: 3000, 2000, 1000, 0
    assert p.counters(10_000).marked_packets == 2
    not_ect = _port(red=RedParams(0, 0, 1.0))
    for _ in range(3):
        not_ect.enqueue(SimPacket(1000, ect=False), 0)
    assert not any(ce for _, _, ce in _drain(not_ect))


def test_strict_priority_is_non_preemptive():
    p = _port()
    p.enqueue(SimPacket(1000, seq=0, priority=3), 0)        # starts at once
    p.enqueue(SimPacket(1000, seq=1, priority=3), 0)
    p.enqueue(SimPacket(100, seq=2, priority=6), 10)        # CNP class
    assert [(t, pkt.seq) for t, pkt, _ in _drain(p)] == [(1000, 0), (1100, 2), (2100, 1)]


def test_pfc_xoff_xon_events_and_pause_time():
    p = _port(pfc=PfcParams(xoff_bytes=3000, xon_bytes=1000))
    for _ in range(3):
        p.enqueue(SimPacket(1000), 0)
    assert p.drain_events() == [PfcEvent(0, 0, True)] and p.xoff_asserted
    p.dequeue(1000)
    assert p.drain_events() == []
    p.dequeue(2000)
    assert p.drain_events() == [PfcEvent(0, 2000, False)]
    c = p.counters(3000)
    assert c.xoff_time_ns == 2000 and c.xoff_count == 1


def test_pause_from_downstream_stops_the_next_start():
    p = _port()
    p.enqueue(SimPacket(1000, seq=0), 0)
    p.enqueue(SimPacket(1000, seq=1), 0)
    p.pause(500)                                             # the packet on the wire finishes
    pkt, _ = p.dequeue(1000)
    assert pkt.seq == 0 and p.next_departure_ns() is None
    p.resume(5000)
    assert p.next_departure_ns() == 6000
    assert p.counters(6000).paused_time_ns == 4500


def test_mean_queue_is_time_weighted():
    p = _port()
    p.enqueue(SimPacket(1000), 0)
    p.dequeue(1000)
    c = p.counters(2000)
    assert c.mean_queue_bytes == pytest.approx(500.0) and c.elapsed_ns == 2000


def test_dequeue_before_departure_is_an_error():
    p = _port()
    p.enqueue(SimPacket(1000), 0)
    with pytest.raises(RuntimeError):
        p.dequeue(999)


@pytest.mark.parametrize("kwargs", [{"rate_bps": 0, "buffer_bytes": 1}, {"rate_bps": 1e9, "buffer_bytes": 0},
                                    {"rate_bps": 1e9, "buffer_bytes": 10, "latency_ns": -1}])
def test_port_config_validation(kwargs):
    with pytest.raises(ConfigError):
        PortConfig(**kwargs)
    with pytest.raises(ConfigError, match="xon_bytes"):
        PfcParams(xoff_bytes=10, xon_bytes=20)


@settings(max_examples=60, deadline=None)
@given(arrivals=st.lists(st.tuples(st.integers(0, 3000), st.integers(64, 4096), st.integers(0, 7),
                                   st.booleans()), max_size=120),
       buffer=st.integers(4096, 40_000))
def test_port_conserves_bytes_and_respects_the_buffer(arrivals, buffer):
    p = _port(buffer_bytes=buffer, red=RedParams(1000, 20_000, 0.5), pfc=PfcParams(buffer // 2, buffer // 4))
    offered = 0
    out: list[tuple[int, SimPacket]] = []
    t = 0
    for i, (dt, size, prio, ect) in enumerate(arrivals):
        t += dt
        while (d := p.next_departure_ns()) is not None and d <= t:
            pkt, ce = p.dequeue(d)
            assert not ce or pkt.ect
            out.append((d, pkt))
        offered += size
        p.enqueue(SimPacket(size, seq=i, priority=prio, ect=ect), t)
        assert p.queue_bytes <= buffer
    for d, pkt, _ in _drain(p):
        out.append((d, pkt))
    c = p.counters(out[-1][0] if out else t)
    assert offered == c.enqueued_bytes + c.dropped_bytes
    assert c.enqueued_bytes == c.dequeued_bytes + c.queue_bytes and c.queue_bytes == 0
    assert c.peak_queue_bytes <= buffer
    for (t1, _), (t2, p2) in zip(out, out[1:], strict=False):
        assert t2 - t1 >= p.serialization_ns(p2.size_bytes)     # never faster than the port rate
    by_prio: dict[int, list[int]] = {}
    for _, pkt in out:
        by_prio.setdefault(pkt.priority, []).append(pkt.seq)
    assert all(seqs == sorted(seqs) for seqs in by_prio.values())   # FIFO within a priority
    events = p.drain_events()
    assert all(a.pause != b.pause for a, b in zip(events, events[1:], strict=False))  # XOFF/XON alternate


# ------------------------------------------------------------------------------------------------- switch
def test_switch_forwards_and_reports_departures_with_link_latency():
    ports = [PortConfig(RATE_1B_PER_NS, 10_000, latency_ns=100), PortConfig(RATE_1B_PER_NS / 2, 10_000, latency_ns=7)]
    sw = Switch(ports, lambda pkt: pkt.dst, random.Random(0))
    assert sw.receive(SimPacket(1000, dst=0, seq=1), 0)
    assert sw.receive(SimPacket(1000, dst=1, seq=2), 0)
    assert sw.receive(SimPacket(1000, dst=0, seq=3), 0)
    assert not sw.receive(SimPacket(1000, dst=5), 0)
    assert sw.unroutable_packets == 1
    assert sw.next_departure_ns() == 1000 and sw.next_departure_ns(1) == 2000
    deps = sw.pop_departures(2000)
    assert [(d.port, d.pkt.seq, d.departed_ns, d.arrival_ns) for d in deps] == [
        (0, 1, 1000, 1100), (0, 3, 2000, 2100), (1, 2, 2000, 2007)]
    assert sw.next_departure_ns() is None and sw.pop_departures(10**9) == []
    assert [c.dequeued_packets for c in sw.counters(3000)] == [2, 1]


def test_switch_pause_resume_and_pfc_events():
    ports = [PortConfig(RATE_1B_PER_NS, 10_000, pfc=PfcParams(2000, 1000))]
    sw = Switch(ports, lambda pkt: 0, random.Random(0))
    sw.enqueue(0, SimPacket(1000, seq=0), 0)
    sw.pause(0, 10)
    sw.enqueue(0, SimPacket(1000, seq=1), 20)
    assert [e.pause for e in sw.drain_pfc_events()] == [True]
    assert [d.pkt.seq for d in sw.pop_departures(10_000)] == [0]
    sw.resume(0, 10_000)
    assert sw.next_departure_ns() == 11_000
    assert [d.pkt.seq for d in sw.pop_departures(11_000)] == [1]
    assert [e.pause for e in sw.drain_pfc_events()] == [False]
