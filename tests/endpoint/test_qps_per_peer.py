"""transport.qps_per_peer: every flow split evenly over Q wire queue pairs (own QPNs, UDP source port, DCQCN),
FCT per logical flow, Q = 1 identical to the schedule's numbering, Q < 1 refused naming the key."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from support.endpoint import Wire, make_schedule, recv, send
from support.sim import assert_conserved, collective_schedule

from emulator.cli import main
from emulator.drivers.sim import SimConfig, run_sim
from emulator.endpoint import EndpointConfig, RankEndpoint
from emulator.endpoint.qpn import part_sizes, qp_endpoints, qp_of, rank_for_qpn, receiver_qpn, sender_qpn
from emulator.errors import ConfigError
from emulator.fabric.topology import TopologyConfig
from emulator.trace.model import CollectiveType
from emulator.wire import parse_header, udp_source_port


@given(st.integers(min_value=0, max_value=1 << 40), st.integers(min_value=1, max_value=64))
def test_parts_cover_the_flow_evenly(size_bytes, q):
    parts = part_sizes(size_bytes, q)
    sizes = [n for _, n in parts]
    assert sum(sizes) == size_bytes
    assert len({k for k, _ in parts}) == len(parts) and all(0 <= k < q for k, _ in parts)
    assert max(sizes) - min(sizes) <= 1
    assert len(parts) == max(1, min(q, size_bytes))


def test_wire_qps_route_to_their_schedule_qps_ranks():
    qp_src, qp_dst = qp_endpoints(np.array([0, 1]), np.array([0, 2]), np.array([1, 0]), qps_per_peer=4)
    for k in range(4):
        assert rank_for_qpn(receiver_qpn(4 + k), qp_src, qp_dst) == 0
        assert rank_for_qpn(sender_qpn(4 + k), qp_src, qp_dst) == 2
    assert rank_for_qpn(receiver_qpn(8), qp_src, qp_dst) == -1


def _pair_schedule(size_bytes: int):
    """Ranks 0 and 1 send each other two flows on one schedule qp per direction."""
    flows = [(0, 1, size_bytes, 0), (0, 1, size_bytes // 3, 0), (1, 0, size_bytes, 1)]
    return make_schedule(2, flows, {0: [send(0), send(1, [0]), recv(2)], 1: [recv(0), recv(1), send(2)]})


def test_q4_uses_four_source_ports_per_rank_pair_and_ends_a_flow_with_its_last_part():
    s = _pair_schedule(1_000_003)
    cfg = EndpointConfig(cc="paper", qps_per_peer=4)
    eps = [RankEndpoint(r, s, cfg) for r in range(2)]
    wire = Wire(eps)
    wire.run(until_ns=10**10)
    assert all(ep.done for ep in eps)
    sports: dict[tuple[int, int], set[int]] = {}
    for _, src, dst, pkt in wire.log:
        opcode, dqpn, *_ = parse_header(pkt)
        if 0x06 <= opcode <= 0x0B:
            q, _ = qp_of(dqpn)
            sports.setdefault((src, dst), set()).add(udp_source_port(sender_qpn(q), receiver_qpn(q)))
    assert {pair: len(ports) for pair, ports in sports.items()} == {(0, 1): 4, (1, 0): 4}
    r0, r1 = eps[0].records, eps[1].records
    assert r1.counters["bytes_received"] == 1_000_003 + 1_000_003 // 3
    assert r0.counters["bytes_received"] == 1_000_003
    # one SEND/RECV per logical flow: the RECV ends when the last part is held, the SEND when it is acked
    assert r0.end_ns[0] > r1.end_ns[0] >= r1.start_ns[0] >= 0
    assert r0.start_ns[1] >= r0.end_ns[0]  # send(1) waits for the whole of send(0)


def test_q4_on_the_sim_delivers_every_byte_with_fct_per_flow():
    s = collective_schedule(8, CollectiveType.ALL_TO_ALL, (1 << 20) + 5)
    res = run_sim(s, SimConfig(), EndpointConfig(cc="paper", qps_per_peer=4), seed=1)
    assert res.complete
    assert_conserved(s, res)  # one RECV op per logical flow, every byte once
    for r, rec in res.records.items():
        peers = np.unique(s.flow_dst[s.flow_src == r]).size
        assert len(set(rec.rate_qp)) == 4 * peers  # one DCQCN state per wire qp
        assert np.all(rec.end_ns >= rec.start_ns)


def test_one_flow_across_leaves_takes_one_uplink_with_q1_and_several_with_q8():
    s = make_schedule(2, [(0, 1, 1 << 20, 0)], {0: [send(0)], 1: [recv(0)]})
    topo = TopologyConfig(kind="leaf_spine", leaves=2, spines=4)  # rank 0 on leaf 0, rank 1 on leaf 1
    uplinks = {}
    for q in (1, 8):
        res = run_sim(s, SimConfig(topology=topo), EndpointConfig(cc="paper", qps_per_peer=q), seed=1)
        assert res.complete and res.records[1].counters["bytes_received"] == 1 << 20
        uplinks[q] = sum(p.kind == "up" and p.dequeued_bytes > 1 << 16 for p in res.fabric.ports)
    assert uplinks[1] == 1 and uplinks[8] > 1


#: sha256 of the fingerprint below for main's code before qps_per_peer existed (same schedule, seed, fabric);
#: a deliberate change of the sim's or the endpoint's behaviour must recompute it
_MAIN_FINGERPRINT = "11adc7e54a948773efddb7773261b4069692bd92056b439a7177fa5c64a1f5e8"


def test_q1_is_byte_identical_to_the_code_before_it_for_a_seeded_lossy_leaf_spine_run():
    s = collective_schedule(4, CollectiveType.ALL_TO_ALL, 1 << 19)
    cfg = SimConfig(loss=0.02, topology=TopologyConfig(kind="leaf_spine", leaves=2, spines=2))
    res = run_sim(s, cfg, EndpointConfig(cc="paper", retransmit_timeout_ns=100_000, qps_per_peer=1), seed=11)
    fp = ({r: ({k: v.tolist() for k, v in rec.to_arrays().items()}, dict(rec.counters))
           for r, rec in res.records.items()}, [p.to_dict() for p in res.fabric.ports], res.health["end_ns"])
    assert hashlib.sha256(json.dumps(fp, sort_keys=True, default=str).encode()).hexdigest() == _MAIN_FINGERPRINT


@pytest.mark.parametrize("q", [0, -1, 1.5, True])
def test_endpoint_refuses_fewer_than_one_qp(q):
    with pytest.raises(ConfigError, match="qps_per_peer"):
        EndpointConfig(qps_per_peer=q)


def test_profile_q0_is_one_error_line_naming_the_key_before_anything_runs(tmp_path: Path, capsys):
    profile = {"name": "t", "ranks": {"count": 2}, "fabric": {"transport": {"qps_per_peer": 0}},
               "workload": {"collectives": [{"type": "all_reduce", "group": "0-1", "size": "64KiB"}]}}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(profile))
    assert main(["run", str(path), "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "fabric.transport.qps_per_peer" in err[0]
    assert not (tmp_path / "r").exists()


def test_fluid_takes_more_than_one_qp(tmp_path: Path):
    from emulator.config import load_profile

    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "ranks": {"count": 2}, "workload": {
        "collectives": [{"type": "all_reduce", "group": "0-1", "size": "64KiB"}]}}))
    p = load_profile(path, overrides=("fabric.kind=fluid", "fabric.transport.qps_per_peer=4"), env={})
    assert p.fabric.transport.qps_per_peer == 4


@pytest.mark.parametrize("q", [1, 4])
def test_flows_csv_has_one_row_per_logical_flow_with_its_wire_qps_and_source_ports(tmp_path: Path, q):
    import csv

    profile = {"name": "t", "ranks": {"count": 4}, "fabric": {"transport": {"qps_per_peer": q}},
               "workload": {"collectives": [{"type": "all_to_all", "group": "0-3", "size": "256KiB"}]}}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(profile))
    assert main(["run", str(path), "-o", str(tmp_path / "r")]) == 0
    with open(tmp_path / "r" / "flows.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    # one row per logical flow: 4 ranks x 3 peers per iteration
    assert len(rows) % 12 == 0 and len({row["flow"] for row in rows}) == len(rows)
    for row in rows:
        ports = row["udp_sports"].split()
        assert int(row["qps"]) == len(set(ports)) == q
        assert int(row["end_ns"]) >= int(row["actual_start_ns"]) >= 0 and float(row["fct_actual_ns"]) > 0
