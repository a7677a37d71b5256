"""The fluid fabric's routing tables against the packet sim's forwarding, and its calm regime (closed-form
finish times while nothing queues) against stepping the same run in slices."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import make_schedule, recv, send
from support.sim import collective_schedule

from emulator.drivers import fluid as fluid_driver
from emulator.drivers.fluid import run_fluid
from emulator.drivers.sim_types import SimConfig
from emulator.endpoint import EndpointConfig
from emulator.fabric.fluid import LEVELS, FluidConfig
from emulator.fabric.fluid_calm import Calm
from emulator.fabric.fluid_paths import ecmp_indices, qp_paths, udp_source_ports
from emulator.fabric.topology import TopologyConfig, build_topology, ecmp_index
from emulator.pacing.red import RedParams
from emulator.trace.model import CollectiveType
from emulator.wire.marking import udp_source_port

RED = RedParams(kmin_bytes=5_000, kmax_bytes=200_000, pmax=0.01)


def _walk(topo, s: int, d: int, sport: int) -> list[int]:
    """The path a packet takes in the packet sim: egress port after egress port until a host."""
    path = [s, -1, -1, -1]
    node = topo.ports[s].peer
    while not topo.is_host(node):
        port = topo.egress(node, s, d, sport)
        path[LEVELS.index(topo.ports[port].kind)] = port
        node = topo.ports[port].peer
    return path


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(["single_switch", "leaf_spine"]), leaves=st.integers(1, 5), spines=st.integers(1, 4),
       placement=st.sampled_from(["round_robin", "block"]), ecmp=st.sampled_from(["udp_sport", "none"]),
       seed=st.integers(0, 2**16))  # fmt: skip
def test_paths_are_the_packet_sims(kind, leaves, spines, placement, ecmp, seed):
    n = 12
    cfg = TopologyConfig(kind=kind, leaves=leaves, spines=spines, placement=placement, ecmp=ecmp) \
        if kind == "leaf_spine" else TopologyConfig()  # fmt: skip
    topo = build_topology(cfg, n, 25e9, 1000)
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, 200)
    dst = (src + rng.integers(1, n, 200)) % n
    sport = udp_source_ports(rng.integers(0, 5000, 200))
    got = qp_paths(topo, src, dst, sport)
    want = [_walk(topo, s, d, p) for s, d, p in zip(src.tolist(), dst.tolist(), sport.tolist(), strict=True)]
    assert got.tolist() == want


def test_udp_source_ports_match_the_wire_rule():
    qp = np.array([0, 1, 2, 7, 1000, 123_456, 4_000_000])
    assert udp_source_ports(qp).tolist() == [udp_source_port(2 * q + 3, 2 * q + 2) for q in qp.tolist()]


def _run(schedule, calm: bool, monkeypatch, cfg: SimConfig | None = None, round_robin: bool = True):
    with monkeypatch.context() as m:
        if not calm:
            m.setattr(Calm, "try_enter", lambda *a, **k: False)
        if not round_robin:  # processor sharing at the NIC: no batch goes first, which the calm regime drops
            m.setattr(fluid_driver, "FluidConfig", lambda: FluidConfig(nic_round_robin=False))
        return run_fluid(schedule, cfg or SimConfig(red=RED), EndpointConfig(cc="connectx"), seed=1)


def _ends(res) -> np.ndarray:
    return np.concatenate([res.records[r].end_ns for r in sorted(res.records)])


def _shared_nic():
    """Rank 0 sends 1, 2 and 3 MB to ranks 1, 2, 3 at once (the NIC shared three ways, then two, then one);
    rank 1 answers with 500 kB to rank 0 once its flow arrived."""
    flows = [(0, 1, 1_000_000, 0), (0, 2, 2_000_000, 1), (0, 3, 3_000_000, 2), (1, 0, 500_000, 3)]
    ops = {0: [send(0), send(1), send(2), recv(3)], 1: [recv(0), send(3, deps=(0,))], 2: [recv(1)], 3: [recv(2)]}
    return make_schedule(4, flows, ops)


@pytest.mark.parametrize("schedule", [
    pytest.param(lambda: _shared_nic(), id="shared-nic"),
    pytest.param(lambda: collective_schedule(8, CollectiveType.ALL_REDUCE, 4 << 20, algorithm="ring"), id="ring-ar"),
])  # fmt: skip
@pytest.mark.parametrize("round_robin", [False, True])
def test_calm_regime_gives_the_stepped_times(schedule, round_robin, monkeypatch):
    """The same times with or without the calm regime; with the NIC's round robin only where no NIC is shared
    while its batch goes first (the ring; the shared NIC: test_shared_nic_closed_form)."""
    s = schedule()
    if round_robin and s.n_flows == 4:
        pytest.skip("a shared NIC's batch goes first only when stepped")
    stepped = _run(s, False, monkeypatch, round_robin=round_robin)
    calm = _run(s, True, monkeypatch, round_robin=round_robin)
    assert stepped.complete and calm.complete
    assert calm.health["steps"] < stepped.health["steps"] / 2  # the closed form replaced most slices
    np.testing.assert_allclose(_ends(calm), _ends(stepped), rtol=0, atol=2)
    tx = [p.dequeued_bytes for p in calm.fabric.ports]
    assert tx == pytest.approx([p.dequeued_bytes for p in stepped.fabric.ports], abs=2)


@pytest.mark.parametrize("calm", [True, False])
def test_shared_nic_closed_form(calm, monkeypatch):
    """Three flows share the NIC (each a third of 25 Gb/s) until the 1 MB one is done, then halves. Stepped,
    the NIC's batch (one GSO batch, the first flow's: posted first) leaves at line rate before them; the calm
    regime, entered at the start, sends it as the rest."""
    res = _run(_shared_nic(), calm, monkeypatch)
    wire = [b + -(-b // 4096) * 66 for b in (1_000_000, 2_000_000, 3_000_000)]
    head = 0 if calm else EndpointConfig(cc="connectx").batch_packets * (4096 + 66)
    t1 = (head + (wire[0] - head) * 3) * 8e9 / 25e9
    t2 = t1 + (wire[1] - wire[0] + head) * 2 * 8e9 / 25e9
    t3 = t2 + (wire[2] - wire[1]) * 8e9 / 25e9
    ends = [int(res.records[r].end_ns[0]) for r in (1, 2, 3)]  # RECV of each flow: + 2 hops of 1 µs latency
    sf = [((b - (-(-b // 4096) - 1) * 4096) + 66) * 8e9 / 25e9 for b in (1_000_000, 2_000_000, 3_000_000)]
    assert ends == pytest.approx([t1 + 2000 + sf[0], t2 + 2000 + sf[1], t3 + 2000 + sf[2]], abs=2)  # + the
    # switch's store and forward of the last packet


def test_calm_regime_ends_when_a_port_overloads(monkeypatch):
    """Two flows into one receiver, the second starting while the first runs alone: the same run as stepped."""
    flows = [(0, 2, 4_000_000, 0), (1, 2, 4_000_000, 1)]
    ops = {0: [send(0)], 1: [send(1, nb=200_000)], 2: [recv(0), recv(1)]}
    s = make_schedule(3, flows, ops)
    stepped = _run(s, False, monkeypatch)
    calm = _run(s, True, monkeypatch)
    assert calm.complete
    np.testing.assert_allclose(_ends(calm), _ends(stepped), rtol=1e-6)
    assert sum(p.marked_packets for p in calm.fabric.ports) > 0


@settings(max_examples=50, deadline=None)
@given(src=st.integers(0, 2**32 - 1), dst=st.integers(0, 2**32 - 1), sport=st.integers(0, 2**16 - 1),
       n=st.integers(1, 64))  # fmt: skip
def test_ecmp_indices_are_the_packet_sims(src, dst, sport, n):
    got = ecmp_indices(np.array([src], np.int64), np.array([dst], np.int64), np.array([sport], np.int64), n)
    assert got.tolist() == [ecmp_index(src, dst, sport, n)]


def test_paths_cost_no_python_per_flow(monkeypatch):
    """A million flows' paths are numpy passes: no per-flow call of the topology's forwarding."""
    topo = build_topology(TopologyConfig(kind="leaf_spine", leaves=4, spines=4), 64, 25e9, 1000)
    calls = {"n": 0}
    for name in ("spine_of", "egress"):
        real = getattr(topo, name)

        def counted(*a, _real=real):
            calls["n"] += 1
            return _real(*a)

        monkeypatch.setattr(topo, name, counted)
    src, dst = np.divmod(np.arange(64 * 64), 64)
    keep = src != dst
    qp_paths(topo, src[keep], dst[keep], udp_source_ports(np.flatnonzero(keep)))
    assert calls["n"] <= 64  # one egress lookup per rank (its switch's port to it)
