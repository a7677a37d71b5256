"""The sim's shortcuts change nothing: skipping the service of a rank after a quiet data packet (or a message's
first packet, its event recorded) gives the same records, fabric counters, queue samples and event count as
servicing it, on ECN, loss and PFC runs."""

from __future__ import annotations

import sys

import pytest
from support.sim import collective_schedule, count_services

from emulator.drivers.sim import SimConfig, _Sim
from emulator.endpoint import EndpointConfig
from emulator.fabric.port import PfcParams
from emulator.trace.model import CollectiveType

AR, A2A = CollectiveType.ALL_REDUCE, CollectiveType.ALL_TO_ALL


def _run(schedule, cfg, ep, seed, skip_quiet):
    sim = _Sim(schedule, cfg, ep, seed)
    sim.skip_quiet = skip_quiet
    calls = count_services(sim)
    reason, now = sim.run(10_000_000_000, None)
    recs = [({k: v.tolist() for k, v in rec.records.to_arrays().items()}, dict(rec.records.counters))
            for rec in sim.recorders]
    fab = sim.fabric(now)
    q = fab.queue_samples
    return ((reason, now, sim.events, sim.packets, sim.hops, recs, [p.to_dict() for p in fab.ports],
             q.t_ns.tolist(), q.queue_bytes.tolist()), calls[0])


@pytest.mark.parametrize(("coll", "algo", "cfg", "ep", "seed"), [
    (AR, "ring", SimConfig(), EndpointConfig(cc="connectx", mtu_bytes=4096), 1),
    (A2A, None, SimConfig(loss=0.01), EndpointConfig(cc="paper", retransmit_timeout_ns=100_000), 7),
    (A2A, None, SimConfig(pfc=PfcParams(100_000, 50_000), buffer_bytes=300_000), EndpointConfig(cc="paper"), 2),
])
def test_skipping_quiet_services_changes_nothing(coll, algo, cfg, ep, seed):
    s = collective_schedule(8, coll, 1 << 19, algo)
    fast, fast_calls = _run(s, cfg, ep, seed, True)
    slow, slow_calls = _run(s, cfg, ep, seed, False)
    assert fast[0] == "complete"
    assert fast == slow
    assert fast_calls < 0.8 * slow_calls  # the shortcut is taken, often


def test_a_service_feeds_the_recorder_without_copying_the_events(monkeypatch):
    """The sim consumes each endpoint's pending events in place: ``events()`` (a copy) only once per rank
    at the end, not once per service; the records are the same as a copy's."""
    from emulator.endpoint.endpoint import RankEndpoint

    copies = []
    original = RankEndpoint.events

    def counted(self):
        copies.append(self.rank)
        return original(self)

    monkeypatch.setattr(RankEndpoint, "events", counted)
    s = collective_schedule(8, A2A, 1 << 16, None)
    sim = _Sim(s, SimConfig(), EndpointConfig(cc="connectx", mtu_bytes=4096), 1)
    assert sim.run(10_000_000_000, None)[0] == "complete"
    assert sorted(copies) == list(range(8))
    assert all((rec.records.end_ns >= 0).all() and (rec.records.start_ns >= 0).all() for rec in sim.recorders)


def test_a_run_collects_young_garbage_rarely_and_restores_the_gc_thresholds():
    """Packets, heap entries and events die young (reference counts free them): the cyclic GC's youngest
    generation is collected every 10,000 allocations while a run is built and runs, not every 700, and the process's
    thresholds are back afterwards, also when the run fails."""
    import gc

    from emulator.drivers.sim import run_sim

    s = collective_schedule(32, A2A, 1 << 18, None)
    cfg, ep = SimConfig(), EndpointConfig(cc="connectx", mtu_bytes=4096)
    before = gc.get_threshold()
    seen = []

    def count(phase, info):
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(count)
    try:
        res = run_sim(s, cfg, ep, seed=1)
    finally:
        gc.callbacks.remove(count)
    assert res.complete and gc.get_threshold() == before
    assert res.health["packets"] > 2000 and len(seen) <= 8  # at 700: 33 collections here

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    import emulator.drivers.sim as sim_module

    original = sim_module._Sim.run
    sim_module._Sim.run = boom
    try:
        with pytest.raises(RuntimeError):
            run_sim(s, cfg, ep, seed=1)
    finally:
        sim_module._Sim.run = original
    assert gc.get_threshold() == before


def test_a_messages_first_packet_is_recorded_without_a_service():
    """A message's FIRST packet hands out nothing but its RECV's start event: the sim records the event and skips
    the service (as after a quiet MIDDLE). On an 8-rank All-to-All of 4-packet messages without marks or losses the
    services after receives are two a flow (the LAST's ACK at the receiver, the ACK at the sender), not three; the
    results equal those of a run that services every receive."""
    s = collective_schedule(8, A2A, 8 * 4 * 4096)
    cfg, ep = SimConfig(red=None), EndpointConfig(cc="connectx", mtu_bytes=4096)
    fast, _ = _run(s, cfg, ep, 1, True)
    assert fast == _run(s, cfg, ep, 1, False)[0]
    sim = _Sim(s, cfg, ep, 1)
    after_receive = [0]
    poll_transmit = sim.poll_transmit

    def counted(ep, t, max_batches):
        after_receive[0] += sys._getframe(1).f_code.co_name == "run"
        return poll_transmit(ep, t, max_batches)

    sim.bind = lambda: None  # keep the counting poll_transmit (run binds the class's functions)
    sim.poll_transmit = counted
    assert sim.run(10_000_000_000, None)[0] == "complete"
    assert s.n_flows == 56 and after_receive[0] == 2 * 56
