"""When a flow delivered in a slice left the fluid fabric (emulator.fabric.fluid_tail), and the driver's
arrival times from it."""

from __future__ import annotations

import numpy as np
import pytest
from support.sim import collective_schedule

from emulator.drivers.fluid import run_fluid
from emulator.drivers.sim_types import SimConfig
from emulator.endpoint import EndpointConfig
from emulator.fabric.fluid import FluidConfig
from emulator.fabric.fluid_tail import still_late, tail_ns
from emulator.fabric.topology import TopologyConfig
from emulator.pacing.red import RedParams
from emulator.trace.model import CollectiveType

INF = np.inf


def test_a_delivered_flow_leaves_at_its_nic_finish_its_fifo_drain_or_once_a_port_served_its_queue() -> None:
    t, dt = 10_000.0, 1_000.0
    # ports: 0-4 NICs; 5 a leaf uplink, 6 a spine downlink, 7 a switch → host port
    path = np.array([[0, 5, 6, 7], [1, 5, 6, 7], [2, 5, 6, 7], [3, -1, -1, 7], [4, -1, -1, 7], [0, -1, -1, 7]])
    drain = np.full((4, 6), INF)
    drain[1, 1] = t + 600.0  # flow 1's last bytes queued at the uplink and leave there at +600
    drain[3, 4] = t + 5_000.0  # flow 4's would leave after the slice: delivered (almost drained) at its end
    q_before = np.zeros(8)
    q_before[7] = 500.0  # the host port held half a slice's bytes at t
    cap = np.full(8, 1_000.0)
    cap[6] = 0.0  # paused: serves nothing in the slice
    a = np.arange(6)
    rows = np.array([0, 1, 3, 4, 5])
    fin = (np.array([0, 3, 5]), np.array([t + 300.0, t + 200.0, t + 800.0]))
    got = tail_ns(path, drain, a, rows, fin, q_before, cap, t, dt)
    # flow 0: NIC at +300, then the paused spine port: the slice's end; flow 1 sent before the slice: its
    # uplink drain (+600), then the paused port; flow 3: NIC at +200, the host port's queue served at +500;
    # flow 4: drain past the slice; flow 5: its NIC finish (+800) after the host port's queue
    assert got.tolist() == [t + dt, t + dt, t + 500.0, t + dt, t + 800.0]
    cap[6] = 1_000.0
    got = tail_ns(path, drain, a, rows, fin, q_before, cap, t, dt)
    assert got.tolist() == [t + 500.0, t + 600.0, t + 500.0, t + dt, t + 800.0]
    assert tail_ns(path, np.full((4, 6), INF), a, np.array([2]), None, np.zeros(8), cap, t, dt).tolist() == [t]


def test_late_flows_still_ahead_of_the_fabric_keep_their_rows() -> None:
    start = np.array([0.0, 50.0, 150.0, 300.0])
    late = dict.fromkeys([3, 1, 2])
    rows, kept = still_late(late, start, np.array([0, 1, 2, 3]), 100.0)
    assert list(kept) == [3, 2] and rows[0].tolist() == [3, 2] and rows[1].tolist() == [300.0, 150.0]
    assert still_late(dict.fromkeys([1]), start, np.array([1]), 100.0)[0] is None


@pytest.mark.parametrize("tail", [False, True])
def test_with_tail_delivery_ring_receives_complete_inside_congested_steps_not_on_their_ends(tail: bool) -> None:
    """A 16-rank ring on a 2:1 leaf-spine is congested throughout: with deliveries at the slice's end (the
    default) most RECVs end a fixed latency after a slice boundary; with ``tail_delivery`` at their flows'
    own times."""
    s = collective_schedule(16, CollectiveType.ALL_REDUCE, 4 << 20)
    cfg = SimConfig(topology=TopologyConfig(kind="leaf_spine", leaves=4, spines=2, hosts_per_leaf=4),
                    port_rate_bps=400e9, buffer_bytes=1 << 20, latency_ns=1000, red=RedParams())  # fmt: skip
    res = run_fluid(s, cfg, EndpointConfig(mtu_bytes=4096, cc="connectx", line_rate_bps=400e9), seed=1,
                    fluid=FluidConfig(tail_delivery=tail))  # fmt: skip
    assert res.complete
    ends = np.concatenate([res.records[r].end_ns[s.op_kind[s.rank_ops(r)] == 1] for r in range(16)])
    # RECVs end at many distinct sub-microsecond phases with tail delivery (316 of 480 RECVs, seed 1), at few
    # on the slices' ends (145); the ring ends at 371,802 ns with it, 385,061 without (packet sim 381,388)
    assert (np.unique(ends % 1000).size > ends.size // 2) == tail
