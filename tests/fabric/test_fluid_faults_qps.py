"""Links that go down and queue pairs per rank pair on the fluid fabric, against the packet sim."""

from __future__ import annotations

import numpy as np
import pytest
from support.sim import collective_schedule

from emulator.drivers.fluid import run_fluid
from emulator.drivers.sim import SimConfig, run_sim
from emulator.endpoint import EndpointConfig
from emulator.fabric.fluid_parts import flow_parts
from emulator.fabric.topology import TopologyConfig
from emulator.pacing.red import RedParams
from emulator.trace.model import CollectiveType

CX = EndpointConfig(cc="connectx")
A2A = collective_schedule(4, CollectiveType.ALL_TO_ALL, 3 * 1_000_000)


def _end_ratio(schedule, cfg, ecfg):
    f, p = run_fluid(schedule, cfg, ecfg, seed=1), run_sim(schedule, cfg, ecfg, seed=1)
    assert f.complete and p.complete
    return f, p, f.health["end_ns"] / p.health["end_ns"]


@pytest.mark.parametrize("down", [
    ("host1->sw0", 50_000, 250_000),  # the sender keeps sending: a NAK after the link is back
    ("sw0->host2", 100_000, 1_500_000),  # longer than the flows: retransmit timeouts, one lost again
])  # fmt: skip
def test_a_link_down_stalls_its_flows_as_on_the_packet_sim(down) -> None:
    cfg = SimConfig(link_down=(down,), red=RedParams())
    f, p, ratio = _end_ratio(A2A, cfg, CX)
    base = run_fluid(A2A, SimConfig(red=RedParams()), CX, seed=1).health["end_ns"]
    assert f.health["end_ns"] > base + 0.5 * (down[2] - down[1])  # the outage costs (most of) its length
    assert abs(ratio - 1) <= 0.10
    lost = {x.name: x.loss_packets for x in f.fabric.ports if x.loss_packets}
    sim_lost = {x.name: x.loss_packets for x in p.fabric.ports if x.loss_packets}
    assert set(lost) == set(sim_lost) == {down[0]}
    assert 0.5 <= lost[down[0]] / sim_lost[down[0]] <= 2.0
    assert sum(r.counters["bytes_received"] for r in f.records.values()) == int(A2A.flow_size_bytes.sum())


@pytest.mark.parametrize("down", [("leaf0->spine0", 100_000, 300_000), ("spine1->leaf1", 100_000, 300_000)])
def test_a_fabric_link_down_on_a_leaf_spine_agrees_with_the_packet_sim(down) -> None:
    topo = TopologyConfig(kind="leaf_spine", leaves=2, spines=2, hosts_per_leaf=2)
    f, p, ratio = _end_ratio(A2A, SimConfig(topology=topo, link_down=(down,), red=RedParams()), CX)
    assert abs(ratio - 1) <= 0.10
    assert f.health["end_ns"] > run_fluid(A2A, SimConfig(topology=topo, red=RedParams()), CX, seed=1).health["end_ns"]
    assert [x.name for x in f.fabric.ports if x.loss_packets] == [down[0]]


def test_a_link_down_after_the_run_changes_nothing() -> None:
    plain = run_fluid(A2A, SimConfig(red=RedParams()), CX, seed=1)
    late = run_fluid(A2A, SimConfig(red=RedParams(), link_down=(("host1->sw0", 10**9, 10**9 + 1),)), CX, seed=1)
    assert late.health["end_ns"] == plain.health["end_ns"]


@pytest.mark.parametrize("size", [0, 1, 7, 4096, 1_000_003])
def test_parts_split_each_flow_as_the_endpoints_do(size) -> None:
    from emulator.endpoint.qpn import part_sizes

    s = collective_schedule(2, CollectiveType.ALL_TO_ALL, 2 * max(size, 1))
    s.flow_size_bytes[:] = size
    parts = flow_parts(s, 4)
    for f in range(s.n_flows):
        sl = slice(parts.ptr[f], parts.ptr[f + 1])
        want = part_sizes(size, 4)
        assert parts.size_bytes[sl].tolist() == [b for _, b in want]
        assert parts.qp[sl].tolist() == [int(s.flow_qp[f]) * 4 + k for k, _ in want]
        assert (parts.flow[sl] == f).all()


def test_four_qps_per_peer_spread_ecmp_and_agree_with_the_packet_sim() -> None:
    s = collective_schedule(8, CollectiveType.ALL_TO_ALL, 7 * 500_000)
    topo = TopologyConfig(kind="leaf_spine", leaves=2, spines=2, hosts_per_leaf=4, oversubscription=2.0)
    cfg = SimConfig(topology=topo, red=RedParams(kmin_bytes=50_000, kmax_bytes=200_000, pmax=0.2))
    q4 = EndpointConfig(cc="connectx", qps_per_peer=4)
    f, p, ratio = _end_ratio(s, cfg, q4)
    assert abs(ratio - 1) <= 0.10

    def up(r):
        return np.array(sorted(x.dequeued_bytes for x in r.fabric.ports if x.kind == "up"), float)

    one = run_fluid(s, cfg, CX, seed=1)
    assert up(f).max() / up(f).min() < up(one).max() / up(one).min()  # more entropy, less imbalance
    assert np.allclose(up(f), up(p), rtol=0.1)  # the same ECMP choices as the packet sim
    for r, rec in f.records.items():  # flows stay logical transfers: one SEND / RECV per flow, all bytes
        assert rec.counters["bytes_received"] == int(s.flow_size_bytes[s.flow_dst == r].sum())
        assert (rec.end_ns >= 0).all()
