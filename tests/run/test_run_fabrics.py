"""The profile → driver translation on the socket fabrics (real UDP on 127.0.0.0/8, a few hundred KiB)."""

from __future__ import annotations

from pathlib import Path

from emulator.cli import main
from emulator.config import profile_from_dict
from emulator.results import read_results
from emulator.run.pipeline import analysis_options
from emulator.run.runner import direct_config, endpoint_config, loopback_config, sim_config

SMALL = {
    "name": "small", "ranks": {"count": 4}, "warmup": 0, "iterations": 1, "timeout": "30s",
    "workload": {"collectives": [
        {"name": "ar", "type": "all_reduce", "group": "0-3", "size": "32KiB", "algorithm": "ring"},
        {"name": "a2a", "type": "all_to_all", "group": "0-3", "size": "32KiB"},
    ]},
}


def test_configs_follow_the_profile() -> None:
    p = profile_from_dict({**SMALL, "fabric": {
        "kind": "sim", "ports": {"rate": "40Gbps", "buffer": "2MiB", "latency": "2us"}, "mtu": 2048,
        "ecn": {"kmin": "10KB", "kmax": "100KB", "pmax": 0.1}, "pfc": {"enabled": True},
        "topology": {"kind": "leaf_spine", "leaves": 2, "oversubscription": 2}},
        "congestion_control": {"preset": "paper"}})
    e = endpoint_config(p)
    assert (e.mtu_bytes, e.cc, e.line_rate_bps) == (2048, "paper", 40e9)
    s = sim_config(p)
    assert (s.port_rate_bps, s.buffer_bytes, s.latency_ns) == (40e9, 2 << 20, 2000)
    assert (s.red.kmin_bytes, s.red.kmax_bytes, s.red.pmax) == (10_000, 100_000, 0.1)
    assert s.pfc is not None and s.pfc.xoff_bytes == p.fabric.pfc.xoff_bytes
    assert s.topology.kind == "leaf_spine" and s.topology.uplink_rate_bps == p.fabric.topology.uplink_rate_bps
    off = profile_from_dict({**SMALL, "fabric": {"kind": "loopback", "ecn": {"enabled": False}}})
    assert loopback_config(off).port.red is None
    d = direct_config(profile_from_dict({**SMALL, "fabric": {"kind": "direct", "udp_port": 4800}}), 4)
    assert d.addresses == ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5") and set(d.ports) == {4800}


def _run(tmp_path: Path, kind: str) -> dict:
    import yaml

    p = tmp_path / f"{kind}.yaml"
    p.write_text(yaml.safe_dump({**SMALL, "fabric": {"kind": kind, "ports": {"rate": "1Gbps"}}}))
    out = tmp_path / kind
    assert main(["run", str(p), "-o", str(out), "--quiet"]) == 0
    return read_results(out).doc


def test_loopback_run_delivers_every_byte(tmp_path: Path) -> None:
    doc = _run(tmp_path, "loopback")
    s = doc["summary"]
    assert doc["complete"] and s["totals"]["bytes_delivered"] == s["totals"]["bytes_scheduled"]
    assert s["fabric"]["ports"] and s["all_reduce"]["count"] == 1 and s["all_to_all"]["count"] == 1


def test_direct_run_delivers_every_byte(tmp_path: Path) -> None:
    doc = _run(tmp_path, "direct")
    s = doc["summary"]
    assert doc["complete"] and s["totals"]["bytes_delivered"] == s["totals"]["bytes_scheduled"]
    assert s["fabric"]["ports"] == [] and s["fabric"]["ecn_marks"] is None


def test_placement_puts_each_rank_on_the_same_leaf_in_the_profile_and_the_sim() -> None:
    from emulator.fabric.topology import build_topology

    for placement in ("round_robin", "block", [7, 0, 6, 1, 5, 2, 4, 3]):
        p = profile_from_dict({**SMALL, "ranks": {"count": 8, "placement": placement}, "fabric": {
            "kind": "sim", "topology": {"kind": "leaf_spine", "leaves": 2, "spines": 2}}})
        topo = build_topology(sim_config(p).topology, 8, 25e9, 1000)
        leaves = [p.leaf_of(r) for r in range(8)]
        assert list(topo.rank_leaf) == leaves, placement
        assert analysis_options(p, 8).rank_leaf == tuple(leaves)
    assert leaves == [1, 0, 1, 0, 1, 0, 1, 0]
