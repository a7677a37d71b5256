"""Per-packet work of the sim in bytecodes (deterministic, load-independent): a wake with no endpoint timer
due, and a one-datagram transmit joining its NIC port."""

from __future__ import annotations

from collections import deque

from support.bytecodes import opcodes
from support.sim import collective_schedule

from emulator.drivers.sim import SimConfig, _Sim
from emulator.endpoint import EndpointConfig
from emulator.endpoint import endpoint as endpoint_module
from emulator.endpoint.events import Transmit
from emulator.trace.model import CollectiveType


def _sim() -> _Sim:
    s = collective_schedule(4, CollectiveType.ALL_REDUCE, 1 << 16, "ring")
    sim = _Sim(s, SimConfig(), EndpointConfig(cc="connectx", mtu_bytes=4096), 1)
    for ep in sim.eps:
        ep.start(0)
    return sim


def test_a_wake_with_no_timer_due_makes_no_work_queue(monkeypatch):
    ep = _sim().eps[0]
    assert not ep._timers or ep._timers[0][0] > 0
    made = []
    monkeypatch.setattr(endpoint_module, "deque", lambda *a: made.append(a) or deque(*a))
    ep.handle_timer(0)  # the sim's wake for the pacers alone: no timer loop, no deque
    assert made == []
    ep.push_timer(0, endpoint_module.T_DELAY, 0)  # a timer due: the loop runs (and needs its work queue)
    ep._state[0] = endpoint_module._S_DONE  # its op already done: the timer changes nothing
    ep.handle_timer(0)
    assert len(made) == 1 and not ep._timers


def test_a_one_datagram_transmit_joins_its_nic_port_in_few_bytecodes():
    sim = _sim()
    tx = sim.eps[0].poll_transmit(0, 1)[0]
    assert tx.segment_size == 0
    sim.inject(0, tx, 0)  # the flow's source port and route are looked up once, on its first packet
    one = Transmit(tx.dst_rank, bytes(tx.data), 0, tx.tos, 0, 0)
    before = sim.packets
    n = opcodes(lambda: sim.inject(0, one, 0))
    assert sim.packets == before + 1
    assert sim.ports[0].queue_bytes == 2 * (len(tx.data) + sim.cfg.wire_overhead_bytes)
    # the general loop over a transmit's datagrams took 296 bytecodes here (port.enqueue included)
    assert n <= 275
