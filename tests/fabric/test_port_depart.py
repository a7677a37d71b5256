"""``EgressPort.depart`` (the sim's dequeue: called exactly at the departure, a CE mark set on the packet) against
``dequeue`` on the same offers: the same packets in the same order, the same marks and random draws, the same
counters and PFC transitions."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from support.bytecodes import opcodes

from emulator.fabric.port import EgressPort, PfcParams, PortConfig
from emulator.pacing.red import RedParams


class _P:
    """A packet with a mutable ECN, as the sim's."""

    __slots__ = ("size_bytes", "ect", "priority", "ecn", "i")

    def __init__(self, size_bytes: int, ect: bool, priority: int, i: int) -> None:
        self.size_bytes, self.ect, self.priority, self.ecn, self.i = size_bytes, ect, priority, 2 if ect else 0, i


def _config(red: bool, pfc: bool, buffer_bytes: int) -> PortConfig:
    return PortConfig(rate_bps=25e9, buffer_bytes=buffer_bytes,
                      red=RedParams(kmin_bytes=4_000, kmax_bytes=40_000, pmax=0.3) if red else None,
                      pfc=PfcParams(30_000, 10_000) if pfc else None)  # fmt: skip


def _drive(port: EgressPort, arrivals: list, use_depart: bool, pauses: list[tuple[int, int]]) -> list:
    """Offer every (time, size, ect, priority) in time order, taking departures (and the pauses' on/off) as their
    times come; the log of what left, when, marked or not."""
    log = []
    events = sorted([(t, 0, i) for i, t in enumerate(a[0] for a in arrivals)]
                    + [(lo, 1, j) for j, (lo, _) in enumerate(pauses)] + [(hi, 2, j) for j, (_, hi) in enumerate(pauses)])

    def leave_until(t: int) -> None:
        while port.departure_ns is not None and port.departure_ns <= t:
            d = port.departure_ns
            if use_depart:
                pkt = port.depart(d)
                ce = pkt.ecn == 3
            else:
                pkt, ce = port.dequeue(d)
            log.append(("out", d, pkt.i, ce, port.departure_ns, port.queue_bytes))
            log.extend(("pfc", e.t_ns, e.pause) for e in port.drain_events())

    for t, kind, i in events:
        leave_until(t)
        if kind == 0:
            _, size, ect, prio = arrivals[i]
            log.append(("in", t, i, port.offer(_P(size, ect, prio, i), t)))
            log.extend(("pfc", e.t_ns, e.pause) for e in port.drain_events())
        elif kind == 1:
            port.pause(t)
        else:
            port.resume(t)
    leave_until(1 << 40)
    return log


@settings(max_examples=60, deadline=None)
@given(gaps=st.lists(st.tuples(st.integers(0, 3_000), st.integers(64, 4_200), st.booleans(), st.integers(0, 7)),
                     max_size=120),
       red=st.booleans(), pfc=st.booleans(), buffer_bytes=st.integers(8_000, 200_000),
       pauses=st.lists(st.tuples(st.integers(0, 200_000), st.integers(1, 20_000)), max_size=3), seed=st.integers(0, 99))
def test_depart_is_dequeue_at_the_departure_with_the_mark_on_the_packet(gaps, red, pfc, buffer_bytes, pauses, seed):
    t, arrivals = 0, []
    for dt, size, ect, prio in gaps:
        t += dt
        arrivals.append((t, size, ect, prio))
    pauses = [(lo, lo + d) for lo, d in pauses]
    ports, logs = [], []
    for use_depart in (False, True):
        rng = random.Random(seed)
        port = EgressPort(_config(red, pfc, buffer_bytes), rng)
        logs.append(_drive(port, arrivals, use_depart, pauses))
        ports.append((port, rng))
    assert logs[0] == logs[1]
    (a, rng_a), (b, rng_b) = ports
    assert a.counters(1 << 40) == b.counters(1 << 40)
    assert rng_a.getstate() == rng_b.getstate()


def test_a_departure_through_depart_costs_fewer_bytecodes_than_dequeue():
    port = EgressPort(_config(True, False, 1 << 20), random.Random(1))
    for i in range(3):
        port.offer(_P(4162, True, 0, i), 0)
    n_dequeue = opcodes(lambda: port.dequeue(port.departure_ns))
    n_depart = opcodes(lambda: port.depart(port.departure_ns))
    assert n_depart < n_dequeue  # no check of the time, no (packet, mark) tuple
