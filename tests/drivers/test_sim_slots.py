"""The sim's run state, a rank's endpoint and its two halves keep every attribute of theirs in a slot: after a
sim run their instance dicts are empty (over 29 attributes in a dict of its own made every per-packet method call on them a
generic lookup on CPython 3.11), and a method set on one instance (a test's spy) still takes effect."""

from __future__ import annotations

from emulator.drivers.sim import SimConfig, _Sim
from emulator.endpoint.config import EndpointConfig
from emulator.schedule.compiler import compile_trace
from emulator.trace.generators.collective import CollectiveOptions, collective_trace
from emulator.trace.model import CollectiveType, RankGraph, Trace


def _schedule(ranks: int, size_bytes: int):
    gen = collective_trace(CollectiveOptions(ranks=ranks, collectives=(CollectiveType.ALL_TO_ALL,),
                                             size_bytes=size_bytes, iterations=1))
    return compile_trace(Trace(ranks={r: RankGraph(r, list(gen.nodes(r))) for r in range(ranks)},
                               groups=dict(gen.groups)))


def test_after_a_run_the_endpoint_and_its_halves_have_nothing_in_an_instance_dict():
    sim = _Sim(_schedule(4, 256 * 1024), SimConfig(), EndpointConfig(mtu_bytes=4096, cc="connectx"), 1)
    assert sim.run(10_000_000_000, None)[0] == "complete"
    for ep in sim.eps:
        assert (vars(ep), vars(ep._tx), vars(ep._rx)) == ({}, {}, {})
    assert vars(sim) == {}


def test_a_method_set_on_one_sender_is_the_one_its_own_calls_take():
    sim = _Sim(_schedule(4, 256 * 1024), SimConfig(), EndpointConfig(mtu_bytes=4096, cc="connectx"), 1)
    polls = []
    tx = sim.eps[0]._tx
    real = tx.poll

    def spy(*args):
        polls.append(args[0])
        return real(*args)

    tx.poll = spy
    assert sim.run(10_000_000_000, None)[0] == "complete"
    assert polls and vars(sim.eps[1]._tx) == {}
