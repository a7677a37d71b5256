"""The virtual-time driver end to end: conservation, determinism, loss, collectives, stopping, PFC."""

from __future__ import annotations

import numpy as np
import pytest
from support.sim import assert_conserved, collective_schedule, delay, incast, make_schedule, recv, send

from emulator.drivers.sim import SimConfig, run_sim
from emulator.endpoint import EndpointConfig
from emulator.errors import ConfigError
from emulator.fabric.port import PfcParams
from emulator.trace.model import CollectiveType

AR, A2A = CollectiveType.ALL_REDUCE, CollectiveType.ALL_TO_ALL
EP = EndpointConfig(cc="paper")


@pytest.mark.parametrize(("coll", "algo"), [(AR, "ring"), (A2A, None)])
def test_8_rank_collectives_compile_and_complete_with_bytes_conserved(coll, algo):
    s = collective_schedule(8, coll, 1 << 20, algo)
    res = run_sim(s, SimConfig(), EP, seed=1)
    assert res.complete and res.health["stop_reason"] == "complete" and res.incomplete_ranks() == ()
    assert_conserved(s, res)
    assert res.health["end_ns"] == max(int(r.end_ns.max()) for r in res.records.values())
    # physical sanity: no rank can receive faster than its link
    for rec in res.records.values():
        assert rec.counters["bytes_received"] * 8e9 / 25e9 <= res.health["end_ns"]
    hosts = [p for p in res.fabric.ports if p.kind == "host"]
    assert all(0 < p.utilisation <= 1.0 for p in hosts)


def test_one_percent_loss_completes_with_retransmits():
    s = collective_schedule(8, AR, 1 << 20, "ring")
    res = run_sim(s, SimConfig(loss=0.01), EndpointConfig(cc="paper", retransmit_timeout_ns=200_000), seed=7)
    assert res.complete
    assert_conserved(s, res)
    lost = sum(p.loss_packets for p in res.fabric.ports)
    retx = sum(r.counters["retransmits"] for r in res.records.values())
    assert lost > 0 and retx > 0
    assert retx == sum(int(r.retx_packets.sum()) for r in res.records.values())
    naks = sum(r.counters["naks_received"] for r in res.records.values())
    timeouts = sum(r.counters["timeouts"] for r in res.records.values())
    assert naks + timeouts > 0


def _fingerprint(res):
    recs = {r: ({k: v.tolist() for k, v in rec.to_arrays().items()}, dict(rec.counters))
            for r, rec in res.records.items()}  # fmt: skip
    return recs, [p.to_dict() for p in res.fabric.ports], res.health["end_ns"]


def test_deterministic_for_a_seed_and_seed_matters_with_loss():
    s = collective_schedule(4, A2A, 1 << 19)
    cfg = SimConfig(loss=0.02)
    ep = EndpointConfig(cc="paper", retransmit_timeout_ns=100_000)
    a = run_sim(s, cfg, ep, seed=11)
    b = run_sim(s, cfg, ep, seed=11)
    c = run_sim(s, cfg, ep, seed=12)
    assert _fingerprint(a) == _fingerprint(b)
    assert _fingerprint(a) != _fingerprint(c)
    assert a.complete and c.complete


def test_deadlock_stops_with_partial_records():
    # each rank waits to receive before it sends: nobody ever sends
    s = make_schedule(2, [(0, 1, 4096, 0), (1, 0, 4096, 1)],
                      {0: [delay(2_000), recv(1, [0]), send(0, [1])], 1: [recv(0), send(1, [0])]})  # fmt: skip
    res = run_sim(s, SimConfig(), EP, seed=1)
    assert not res.complete and res.health["stop_reason"] == "deadlock"
    assert res.incomplete_ranks() == (0, 1)
    assert res.records[0].end_ns[0] == 2_000 and res.records[0].end_ns[1] == -1


def test_time_limit_stops_and_keeps_records():
    s = make_schedule(2, [(0, 1, 4096, 0)], {0: [delay(5_000_000), send(0, [0])], 1: [recv(0)]})
    res = run_sim(s, SimConfig(), EP, seed=1, time_limit_ns=1_000_000)
    assert res.health["stop_reason"] == "time_limit" and not res.complete
    assert res.records[0].ready_ns[0] == 0 and res.records[0].end_ns[0] == -1
    assert res.health["end_ns"] <= 1_000_000


def test_wall_timeout_stops():
    s = collective_schedule(8, A2A, 1 << 20)
    res = run_sim(s, SimConfig(), EP, seed=1, wall_timeout_s=0.0)
    assert res.health["stop_reason"] == "wall_timeout" and not res.complete
    assert "the wall-clock limit (the profile's timeout) ran out; raise timeout" in res.errors[0]
    # the wall clock is looked at when an event whose tie-break number is a multiple of 2048 comes out
    assert 0 < res.health["events"] <= 2048 + 64


def test_pfc_prevents_drops_in_incast_without_cc():
    s = incast(4, 2_000_000)
    pfc = PfcParams(xoff_bytes=300_000, xon_bytes=200_000)
    res = run_sim(s, SimConfig(pfc=pfc, red=None), EndpointConfig(cc="none"), seed=1)
    assert res.complete
    assert_conserved(s, res)
    assert sum(p.dropped_packets for p in res.fabric.ports) == 0
    assert sum(r.counters["retransmits"] for r in res.records.values()) == 0
    bott = res.fabric.port_named("sw0->host4")
    assert bott.xoff_time_ns > 0 and bott.peak_queue_bytes < 1 << 20
    assert all(res.fabric.port_named(f"host{i}->sw0").paused_time_ns > 0 for i in range(4))


def test_queue_samples_bounded():
    s = incast(2, 1_000_000)
    res = run_sim(s, SimConfig(sample_interval_ns=100, max_samples=64), EP, seed=1)
    p = res.fabric.port_named("sw0->host2")
    t, q = res.fabric.queue_samples.of_port(p.port)
    assert 0 < len(t) < 64 and len(t) == len(q)
    assert list(t) == sorted(t)
    assert max(q) <= p.peak_queue_bytes


def test_zero_byte_flows_and_empty_ranks():
    s = make_schedule(3, [(0, 1, 0, 0)], {0: [send(0)], 1: [recv(0)]})
    res = run_sim(s, SimConfig(), EP, seed=1)
    assert res.complete and res.records[2].n_ops == 0


def test_config_errors():
    with pytest.raises(ConfigError, match="loss"):
        SimConfig(loss=1.5)
    with pytest.raises(ConfigError, match="wire_overhead"):
        run_sim(incast(1, 10), SimConfig(wire_overhead_bytes=0), EP, seed=1)
    assert np.isfinite(SimConfig().port_rate_bps)


def test_64_ranks_all_to_all_on_a_leaf_spine_conserves_bytes():
    """CI-sized scale: 64 ranks, 4032 flows across 4 leaves and 2 spines (2:1 oversubscribed)."""
    from emulator.fabric.topology import TopologyConfig

    s = collective_schedule(64, A2A, 64 * 4096)
    topo = TopologyConfig(kind="leaf_spine", leaves=4, spines=2, oversubscription=2.0)
    res = run_sim(s, SimConfig(topology=topo), EndpointConfig(cc="connectx"), seed=1)
    assert res.complete and s.n_flows == 64 * 63
    assert_conserved(s, res)
    ups = [p for p in res.fabric.ports if p.kind == "up"]
    assert len(ups) == 8 and all(p.dequeued_packets > 0 for p in ups)  # ECMP used every leaf→spine link
    # 3/4 of each rank's bytes leave its leaf: the uplinks carry at least that
    assert sum(p.dequeued_bytes for p in ups) >= 64 * 48 * 4096
