"""Topologies: ports and routes of single switch and leaf–spine; ECMP spreads QPs over spines (unit and
in the sim); oversubscription congests uplinks."""

from __future__ import annotations

import pytest
from support.sim import assert_conserved, make_schedule, recv, send

from emulator.drivers.sim import SimConfig, run_sim
from emulator.endpoint import EndpointConfig
from emulator.endpoint.qpn import receiver_qpn, sender_qpn
from emulator.errors import ConfigError
from emulator.fabric.topology import TopologyConfig, build_topology, ecmp_index
from emulator.wire import udp_source_port

RATE = 25e9


def sport(q):
    return udp_source_port(sender_qpn(q), receiver_qpn(q))


def walk(topo, src, dst, sp):
    """Follow the forwarding from src's NIC to dst; returns the port names."""
    port = topo.host_port[src]
    names = [topo.ports[port].name]
    for _ in range(6):
        node = topo.ports[port].peer
        if topo.is_host(node):
            assert node == dst
            return names
        port = topo.egress(node, src, dst, sp)
        names.append(topo.ports[port].name)
    raise AssertionError("routing loop")


def test_single_switch_ports_and_routes():
    t = build_topology(TopologyConfig(), 4, RATE, 500)
    assert len(t.ports) == 8 and t.host_port == (0, 1, 2, 3)
    assert walk(t, 0, 3, 0xC000) == ["host0->sw0", "sw0->host3"]
    assert all(p.rate_bps == RATE and p.latency_ns == 500 for p in t.ports)
    assert set(t.ingress_ports(t.switch_node(0))) == {0, 1, 2, 3}


def test_leaf_spine_routes_and_uplink_rate():
    cfg = TopologyConfig(kind="leaf_spine", leaves=2, spines=2, placement="block", oversubscription=2.0)
    t = build_topology(cfg, 8, RATE, 1000)
    assert t.rank_leaf == (0, 0, 0, 0, 1, 1, 1, 1)
    assert walk(t, 0, 1, sport(0)) == ["host0->leaf0", "leaf0->host1"]
    path = walk(t, 0, 5, sport(3))
    assert path[0] == "host0->leaf0" and path[1].startswith("leaf0->spine") and path[-1] == "leaf1->host5"
    ups = [p for p in t.ports if p.kind == "up"]
    assert len(ups) == 4 and all(p.rate_bps == 4 * RATE / (2 * 2.0) for p in ups)
    rr = build_topology(TopologyConfig(kind="leaf_spine", leaves=2), 4, RATE, 0)
    assert rr.rank_leaf == (0, 1, 0, 1)


def test_ecmp_spreads_qps_over_spines():
    cfg = TopologyConfig(kind="leaf_spine", leaves=2, spines=4, placement="block")
    t = build_topology(cfg, 8, RATE, 0)
    spines = [t.spine_of(q % 4, 4 + q % 4, sport(q)) for q in range(64)]
    counts = [spines.count(j) for j in range(4)]
    assert min(counts) >= 6  # 64 QPs, 4 spines: every spine carries a fair part
    assert t.spine_of(0, 1, sport(0)) is None
    # the hash is a function of the flow alone: the same QP always takes the same spine
    assert ecmp_index(1, 5, sport(9), 4) == ecmp_index(1, 5, sport(9), 4)
    pinned = build_topology(TopologyConfig(kind="leaf_spine", leaves=2, spines=4, placement="block", ecmp="none"),
                            8, RATE, 0)  # fmt: skip
    assert {pinned.spine_of(0, 4, sport(q)) for q in range(16)} == {0}


def test_topology_config_errors():
    with pytest.raises(ConfigError, match="kind"):
        TopologyConfig(kind="torus")
    with pytest.raises(ConfigError, match="oversubscription"):
        TopologyConfig(oversubscription=0.5)
    with pytest.raises(ConfigError, match="placement"):
        build_topology(TopologyConfig(kind="leaf_spine", placement=(0, 0)), 2, RATE, 0)
    with pytest.raises(ConfigError, match="hosts_per_leaf"):
        build_topology(TopologyConfig(kind="leaf_spine", hosts_per_leaf=1, placement="block"), 4, RATE, 0)


def _cross_leaf(n_qps_per_pair: int, size: int):
    """Ranks 0..3 on leaf 0 each send ``n_qps_per_pair`` flows on distinct QPs to rank i+4 on leaf 1."""
    flows, ops = [], {r: [] for r in range(8)}
    q = 0
    for i in range(4):
        for _ in range(n_qps_per_pair):
            f = len(flows)
            flows.append((i, i + 4, size, q))
            ops[i].append(send(f))
            ops[i + 4].append(recv(f))
            q += 1
    return make_schedule(8, flows, ops)


def test_sim_ecmp_uses_every_spine():
    s = _cross_leaf(8, 200_000)
    topo = TopologyConfig(kind="leaf_spine", leaves=2, spines=4, placement="block")
    res = run_sim(s, SimConfig(topology=topo), EndpointConfig(cc="paper"), seed=1)
    assert res.complete
    assert_conserved(s, res)
    up = [res.fabric.port_named(f"leaf0->spine{j}").dequeued_bytes for j in range(4)]
    assert all(b > 0 for b in up) and max(up) <= 0.5 * sum(up)
    assert sum(res.fabric.port_named(f"leaf1->spine{j}").dequeued_bytes for j in range(4)) < 0.05 * sum(up)  # only ACKs/CNPs back


def test_oversubscription_congests_uplinks():
    s = _cross_leaf(1, 2_000_000)
    base = TopologyConfig(kind="leaf_spine", leaves=2, spines=1, placement="block")
    over = TopologyConfig(kind="leaf_spine", leaves=2, spines=1, placement="block", oversubscription=4.0)
    ep = EndpointConfig(cc="paper")
    fast = run_sim(s, SimConfig(topology=base), ep, seed=1)
    slow = run_sim(s, SimConfig(topology=over), ep, seed=1)
    assert fast.complete and slow.complete
    assert_conserved(s, slow)
    up_fast, up_slow = fast.fabric.port_named("leaf0->spine0"), slow.fabric.port_named("leaf0->spine0")
    assert up_slow.rate_bps == RATE  # 4 hosts × 25G / 4
    assert up_slow.marked_packets > 0 and up_slow.peak_queue_bytes > 5 * up_fast.peak_queue_bytes
    assert up_slow.utilisation > 0.3  # paper DCQCN leaves headroom after its cuts
    assert slow.health["end_ns"] > 2.5 * fast.health["end_ns"]
    # the hosts' own down links are not the bottleneck
    assert all(slow.fabric.port_named(f"leaf1->host{r}").peak_queue_bytes < up_slow.peak_queue_bytes for r in range(4, 8))
