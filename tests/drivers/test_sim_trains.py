"""Packet trains on the sim (``SimConfig.train_ns``): a queue pair sends a batch per service, each packet
joins its NIC port at its own paced time; bytes, completion and the paced arrival process are kept."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from support.sim import (
    assert_conserved,
    collective_schedule,
    count_services,
    incast,
    make_schedule,
    recv,
    send,
)

from emulator.drivers.sim import SimConfig, _Sim, run_sim
from emulator.endpoint import EndpointConfig
from emulator.errors import ConfigError
from emulator.trace.model import CollectiveType

AR, A2A = CollectiveType.ALL_REDUCE, CollectiveType.ALL_TO_ALL
EP = EndpointConfig(cc="connectx", mtu_bytes=4096)


def _services(schedule, cfg, ep=EP):
    sim = _Sim(schedule, cfg, replace(ep, pace_full_batches=True, stamp_spread_ns=cfg.train_ns) if cfg.train_ns
               else ep, 1)  # what run_sim hands the endpoints in trains
    calls = count_services(sim)
    reason, now = sim.run(10_000_000_000, None)
    assert reason == "complete"
    return calls[0], max(int(rec.records.end_ns.max()) for rec in sim.recorders)


def test_a_ring_in_trains_ends_with_the_per_packet_run_with_far_fewer_services():
    s = collective_schedule(8, AR, 4 << 20, "ring")
    per_packet, end0 = _services(s, SimConfig())
    trains, end1 = _services(s, SimConfig(train_ns=10_000))
    assert trains < 0.4 * per_packet
    assert abs(end1 - end0) <= 0.001 * end0  # a lone line-rate queue pair per NIC: the same arrival process


@pytest.mark.parametrize(("make", "cfg"), [
    (lambda: collective_schedule(8, A2A, 1 << 20), SimConfig(train_ns=10_000)),
    (lambda: incast(7, 1 << 20), SimConfig(train_ns=5_000)),
    (lambda: collective_schedule(8, AR, 1 << 20, "ring"), SimConfig(train_ns=20_000, loss=0.01)),
])
def test_trains_deliver_every_byte(make, cfg):
    s = make()
    res = run_sim(s, cfg, EndpointConfig(cc="connectx", mtu_bytes=4096, retransmit_timeout_ns=200_000), seed=3)
    assert res.complete
    assert_conserved(s, res)


def test_a_paced_flow_in_trains_reaches_its_nic_packet_by_packet():
    """A 5 Gb/s flow on a 25 Gb/s NIC: its train's packets join the NIC port one 5 Gb/s packet time apart,
    so the NIC never holds more than the packet on the wire (a train queued at once would hold a batch)."""
    s = make_schedule(2, [(0, 1, 1 << 20, 0)], {0: [send(0)], 1: [recv(0)]})
    ep = EndpointConfig(cc="fixed", cc_overrides=(("rate_bps", 5e9),), mtu_bytes=4096)
    res = run_sim(s, SimConfig(train_ns=20_000), ep, seed=1)
    assert res.complete
    nic = next(p for p in res.fabric.ports if p.kind == "host" and p.port == 0)
    assert nic.peak_queue_bytes <= 4096 + 100
    assert res.health["end_ns"] == pytest.approx((1 << 20) * 8 / 5e9 * 1e9, rel=0.03)


def test_train_ns_is_checked_and_set_from_a_profile():
    with pytest.raises(ConfigError, match="train_ns"):
        SimConfig(train_ns=-1)
    from emulator.config.loader import load_profile
    from emulator.run.runner import sim_config

    profile = load_profile(Path(__file__).parents[2] / "profiles" / "sim_ring_allreduce_8.yaml",
                           ["fabric.sim_train=10us"])
    assert sim_config(profile).train_ns == 10_000
