"""The fluid driver adds the store-and-forward time of a flow's last packet, as the packet sim has it."""

from __future__ import annotations

import numpy as np
import pytest
from support.sim import collective_schedule

from emulator.drivers.fluid import run_fluid, store_and_forward_ns
from emulator.drivers.sim import SimConfig, run_sim
from emulator.endpoint import EndpointConfig
from emulator.fabric.topology import TopologyConfig
from emulator.trace.model import CollectiveType


@pytest.mark.parametrize(("n", "hosts_per_leaf", "spines", "bound"), [
    (2, 1, 2, 0.07),  # 12.5 Gb/s uplinks: the flow queues there, only the two hops after it add
    (8, 4, 1, 0.03),  # 100 Gb/s uplink: no queue, all three switch hops add
])  # fmt: skip
def test_an_uncongested_ring_on_a_leaf_spine_ends_with_the_packet_sim(n, hosts_per_leaf, spines, bound) -> None:
    topo = TopologyConfig(kind="leaf_spine", leaves=2, spines=spines, hosts_per_leaf=hosts_per_leaf)
    s = collective_schedule(n, CollectiveType.ALL_REDUCE, n * 32 * 1024, "ring")
    cfg, e = SimConfig(topology=topo, red=None), EndpointConfig(cc="none")
    f, p = run_fluid(s, cfg, e), run_sim(s, cfg, e, seed=1)
    assert abs(f.health["end_ns"] / p.health["end_ns"] - 1) <= bound


def test_store_and_forward_is_one_last_packet_per_switch_hop() -> None:
    path = np.array([[0, 5, -1, 7], [1, -1, -1, 6]])
    rate = np.full(8, 25e9)
    ser = store_and_forward_ns(path, rate, np.array([8192 + 100, 0]), 4096, 66)
    assert ser[0].tolist() == pytest.approx([0.0, 166 * 8 / 25, 0.0, 166 * 8 / 25])
    assert ser[1].tolist() == pytest.approx([0.0, 0.0, 0.0, 66 * 8 / 25])
