"""EgressPort against a plain reference model: departures, order, drops and RED draws, packet by packet."""

from __future__ import annotations

import random
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.fabric import EgressPort, PortConfig, SimPacket
from emulator.fabric.port import serialization_ns
from emulator.pacing import RedParams
from emulator.pacing.red import RedMarker

RED = RedParams(kmin_bytes=2_000, kmax_bytes=12_000, pmax=0.5)
RATE = 10e9
BUFFER = 16_000


def _reference(arrivals: list[tuple[int, int, int, bool]], seed: int) -> list[tuple]:
    """Strict priority, FIFO within one, tail drop, RED on the queue left behind: (t, id, ce) or drops."""
    marker = RedMarker(RED, random.Random(seed))
    queues: list[deque] = [deque() for _ in range(8)]
    out: list[tuple] = []
    held = 0
    cur = None  # (id, size, done_ns)
    i = 0
    while i < len(arrivals) or cur is not None:
        if cur is not None and (i == len(arrivals) or cur[2] <= arrivals[i][0]):
            pid, size, done = cur
            held -= size
            out.append((done, pid, marker.should_mark(held)))
            cur = None
            for q in reversed(queues):
                if q:
                    nid, nsize, arr = q.popleft()
                    cur = (nid, nsize, max(done, arr) + serialization_ns(nsize, int(RATE)))
                    break
            continue
        t, size, prio, _ = arrivals[i]
        if held + size > BUFFER:
            out.append(("drop", i))
        else:
            held += size
            queues[prio].append((i, size, t))
            if cur is None:
                nid, nsize, arr = queues[prio].popleft()
                cur = (nid, nsize, arr + serialization_ns(nsize, int(RATE)))
        i += 1
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3_000), st.integers(64, 4_200), st.integers(0, 7)), min_size=1, max_size=60),
       st.integers(0, 2**16))
def test_port_matches_the_reference_model(steps, seed):
    t = 0
    arrivals = []
    for gap, size, prio in steps:
        t += gap
        arrivals.append((t, size, prio, True))
    port = EgressPort(PortConfig(rate_bps=RATE, buffer_bytes=BUFFER, red=RED), random.Random(seed))
    got: list[tuple] = []
    i = 0
    while i < len(arrivals) or port.departure_ns is not None:
        assert port.departure_ns == port.next_departure_ns()
        d = port.departure_ns
        if d is not None and (i == len(arrivals) or d <= arrivals[i][0]):
            pkt, ce = port.dequeue(d)
            got.append((d, pkt.seq, ce))
            continue
        at, size, prio, _ = arrivals[i]
        if not port.enqueue(SimPacket(size, seq=i, priority=prio), at):
            got.append(("drop", i))
        i += 1
    assert got == _reference(arrivals, seed)
    assert port.queue_bytes == 0
