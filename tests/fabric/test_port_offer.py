"""``EgressPort.offer`` (the sim's enqueue: the departure to schedule) and the port's queue integral kept as
Σ size × (departure − arrival) rather than one interval per event."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from support.bytecodes import opcodes

from emulator.fabric.port import EgressPort, PortConfig, SimPacket
from emulator.pacing.red import RedParams


def _port(buffer_bytes: int = 1 << 20) -> EgressPort:
    return EgressPort(PortConfig(rate_bps=25e9, buffer_bytes=buffer_bytes, red=RedParams()), random.Random(1))


def test_offer_returns_the_departure_only_when_the_packet_starts_an_idle_wire():
    port = _port(buffer_bytes=10_000)
    d = port.offer(SimPacket(4162), 100)
    assert d == port.departure_ns == 100 + port.serialization_ns(4162)
    assert port.offer(SimPacket(4162), 200) == 0  # queued behind the one on the wire
    assert port.offer(SimPacket(4162), 300) == 0 and port.dropped_packets == 1  # over the buffer
    assert port.enqueue(SimPacket(100), 400) and not port.enqueue(SimPacket(4162), 400)
    port.dequeue(d)
    port.pause(d)
    port.dequeue(port.departure_ns)
    assert port.offer(SimPacket(64), port.departure_ns or d + 10_000) == 0  # paused: nothing starts


def test_a_packet_through_an_idle_port_costs_few_bytecodes():
    port = _port()
    pkt = SimPacket(4162)
    port.offer(pkt, 0)
    port.dequeue(port.departure_ns)
    n = opcodes(lambda: port.offer(pkt, 20_000)) + opcodes(lambda: port.dequeue(port.departure_ns))
    # enqueue + dequeue with an interval of the queue integral per call took 175 bytecodes here
    assert n <= 160


def _advance(port: EgressPort, t: int, area: int, until_ns: int, most: int = 1 << 30) -> tuple[int, int]:
    """Dequeue the departures due by ``until_ns`` (at most ``most``), adding the queue's bytes × time since ``t``
    step by step: (``until_ns``, the area)."""
    while most and port.departure_ns is not None and port.departure_ns <= until_ns:
        d = port.departure_ns
        area += port.queue_bytes * (d - t)
        t = d
        port.dequeue(d)
        most -= 1
    return until_ns, area + port.queue_bytes * (until_ns - t)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3_000), st.integers(64, 9_000), st.booleans()), max_size=40),
       st.integers(0, 5_000))
def test_the_mean_queue_is_the_time_integral_of_the_queue(steps, tail_ns):
    port = _port(buffer_bytes=20_000)
    t = area = 0
    for gap_ns, size, leave in steps:
        t, area = _advance(port, t, area, t + gap_ns)
        q = port.queue_bytes
        if leave:
            port.offer(SimPacket(size), t)
        else:
            admitted = port.enqueue(SimPacket(size), t)
            assert admitted == (port.queue_bytes != q)
    end, area = _advance(port, t, area, t + tail_ns, most=1)  # packets may still be held at the end
    c = port.counters(end)
    assert c.elapsed_ns == end
    assert c.mean_queue_bytes == (area / end if end > 0 else float(port.queue_bytes))
    assert port.queue_area(end) == area


def test_a_queued_packet_finds_its_priority_queue_in_few_bytecodes():
    port = _port()
    pkt = SimPacket(4162, priority=3)
    port.offer(pkt, 0)
    n = opcodes(lambda: port.offer(pkt, 10))
    # the priority's type and range tests before indexing the queues took 102 bytecodes here (enqueue)
    assert n <= 90


def test_priorities_out_of_range_or_not_int_are_clamped_as_before():
    port = _port()
    port.offer(SimPacket(64, priority=0), 0)  # on the wire: the rest queue behind it
    odd = [SimPacket(64, priority=p) for p in (True, 3.0, 2.5, -1, 9, 0)]
    for pkt in odd:
        port.offer(pkt, 0)
    served = []
    while port.departure_ns is not None:
        served.append(port.dequeue(port.departure_ns)[0])
    # 9 → 7 first; then 3.0 → 3; 2.5 → 2; True → 1; -1 → 0 and 0 in arrival order
    assert served[1:] == [odd[4], odd[1], odd[2], odd[0], odd[3], odd[5]]


def test_a_port_keeps_its_attributes_in_slots():
    """No instance dict (CPython 3.11 keeps at most 29 attributes inline; a port has 37): every attribute in a slot,
    each set by ``__init__``."""
    port = _port()
    assert not hasattr(port, "__dict__")
    assert all(hasattr(port, name) for name in EgressPort.__slots__)
    port.offer(SimPacket(4162), 0)
    assert port.depart(port.departure_ns).size_bytes == 4162 and port.departure_ns is None
