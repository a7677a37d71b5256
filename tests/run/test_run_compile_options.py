"""workload.compile.{keep_idle, roots, p2p_pairing}: validated by the profile, honoured by `emulator run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from emulator.cli import main
from emulator.config import profile_from_dict
from emulator.config.model import P2P_PAIRINGS as PROFILE_P2P_PAIRINGS
from emulator.errors import ConfigError
from emulator.results import read_results
from emulator.run.workload import compile_options, load_workload
from emulator.schedule.compiler import P2P_PAIRINGS
from emulator.stats.summary_types import RunSummary
from emulator.trace.io import write_trace
from emulator.trace.model import CollectiveType, CommInfo, Node, NodeType, RankGraph, Trace

RING = "pkg:data/traces/custom_ring_allreduce_8npus_1MB/custom_allreduce"
SIM = {"kind": "sim", "ports": {"rate": "25Gbps", "latency": "1us"}}


def _write(tmp_path: Path, name: str, per_rank: dict[int, list[Node]], groups: dict | None = None) -> Path:
    prefix = tmp_path / name / "t"
    prefix.parent.mkdir()
    write_trace(Trace(ranks={r: RankGraph(r, nodes) for r, nodes in per_rank.items()}), prefix)
    if groups is not None:
        (prefix.parent / "groups.json").write_text(json.dumps(groups))
    return prefix


def _run(tmp_path: Path, prefix: Path, compile_: dict, *, groups: bool = False, name: str = "p") -> RunSummary:
    trace = {"prefix": str(prefix)}
    if groups:
        trace["groups"] = str(prefix.parent / "groups.json")
    profile = tmp_path / f"{name}.yaml"
    profile.write_text(yaml.safe_dump({"name": name, "fabric": SIM, "warmup": 0, "iterations": 2,
                                       "workload": {"trace": trace, "compile": compile_}}))
    out = tmp_path / f"{name}_res"
    assert main(["run", str(profile), "-o", str(out), "--quiet"]) == 0
    return read_results(out).summary


def test_the_profile_and_compiler_know_the_same_pairings() -> None:
    assert set(PROFILE_P2P_PAIRINGS) == set(P2P_PAIRINGS)


def test_p2p_pairing_reaches_the_run(tmp_path: Path, capsys) -> None:
    # PyTorch-style point-to-point: no peer on the nodes, only a 2-rank process group
    def lonely(is_send: bool, rank: int) -> Node:
        comm = CommInfo(size_bytes=64 << 10, src=rank if is_send else None, dst=None if is_send else rank, pg_name="pp")
        return Node(id=1, name="p2p", type=NodeType.COMM_SEND_NODE if is_send else NodeType.COMM_RECV_NODE, comm=comm)

    prefix = _write(tmp_path, "pt", {0: [lonely(True, 0)], 1: [lonely(False, 1)]}, {"pp": [0, 1]})
    s = _run(tmp_path, prefix, {"p2p_pairing": "group"}, groups=True, name="group")
    assert s.p2p.flows == 2 and s.p2p.bytes_delivered == 2 * (64 << 10)  # one per iteration
    assert s.iteration.count == 2 and s.iteration.jct.min > 0
    s = _run(tmp_path, prefix, {"p2p_pairing": "ignore"}, groups=True, name="ignore")
    assert s.p2p.flows == 0 and s.totals.flows == 0
    profile = tmp_path / "strict.yaml"
    profile.write_text(yaml.safe_dump({"name": "strict", "fabric": SIM, "workload": {"trace": {
        "prefix": str(prefix), "groups": str(prefix.parent / "groups.json")}}}))
    assert main(["run", str(profile), "-o", str(tmp_path / "strict_res"), "--quiet"]) == 2
    assert "SEND has no peer" in capsys.readouterr().err


def test_keep_idle_keeps_the_recorded_gaps(tmp_path: Path) -> None:
    # two compute steps recorded 200 µs apart on one rank, a transfer after them: the gap is 190 µs idle
    nodes = {0: [Node(id=1, type=NodeType.COMP_NODE, duration_micros=10, start_time_micros=100),
                 Node(id=2, type=NodeType.COMP_NODE, data_deps=(1,), duration_micros=10, start_time_micros=300),
                 Node(id=3, type=NodeType.COMM_SEND_NODE, data_deps=(2,), start_time_micros=310,
                      comm=CommInfo(size_bytes=4096, src=0, dst=1))],
             1: [Node(id=1, type=NodeType.COMM_RECV_NODE, comm=CommInfo(size_bytes=4096, src=0, dst=1))]}
    prefix = _write(tmp_path, "idle", nodes)
    plain = _run(tmp_path, prefix, {}, name="plain").iteration.jct
    idle = _run(tmp_path, prefix, {"keep_idle": True}, name="idle").iteration.jct
    assert idle.min - plain.min == idle.max - plain.max == 190_000


def _broadcast_trace(tmp_path: Path) -> Path:
    bc = CommInfo(collective=CollectiveType.BROADCAST, size_bytes=64 << 10)
    return _write(tmp_path, "bc", {r: [Node(id=1, type=NodeType.COMM_COLL_NODE, comm=bc)] for r in range(4)})


def test_roots_reach_the_run(tmp_path: Path) -> None:
    prefix = _broadcast_trace(tmp_path)
    out = tmp_path / "bc_res"
    profile = tmp_path / "bc.yaml"
    profile.write_text(yaml.safe_dump({"name": "bc", "fabric": SIM, "warmup": 0, "iterations": 1, "workload": {
        "trace": {"prefix": str(prefix)}, "compile": {"roots": {"broadcast": 2}}}}))
    assert main(["run", str(profile), "-o", str(out), "--quiet"]) == 0
    res = read_results(out)
    s = res.schedule()
    assert 2 in set(s.flow_src.tolist()) and set(s.flow_dst.tolist()) == {0, 1, 3}  # the root receives nothing
    assert res.summary.collectives["broadcast"].count == 1
    assert s.meta["options"]["roots"] == {"broadcast": 2}


def test_a_root_position_outside_the_group_names_the_profile_key(tmp_path: Path) -> None:
    p = profile_from_dict({"name": "bc", "workload": {"trace": {"prefix": str(_broadcast_trace(tmp_path))},
                                                      "compile": {"roots": {"broadcast": 4}}}})
    with pytest.raises(ConfigError, match=r"^<dict>: workload\.compile\.roots\.broadcast: .*root position 4 of BROADCAST"):
        load_workload(p)


def test_an_inline_collective_takes_the_root_position_unless_it_has_its_own() -> None:
    def roots(coll: dict, compile_: dict) -> set[int]:
        """The ranks that receive nothing: the broadcast's root."""
        p = profile_from_dict({"name": "r", "ranks": {"count": 6}, "workload": {
            "collectives": [{"type": "broadcast", "size": "64KiB", **coll}], "compile": compile_}})
        return {2, 4, 5} - set(load_workload(p).schedule.flow_dst.tolist())

    assert roots({"group": [5, 2, 4]}, {"roots": {"broadcast": 1}}) == {4}  # sorted [2, 4, 5][1]
    assert roots({"group": [5, 2, 4]}, {}) == {5}  # the group's first rank
    assert roots({"group": [5, 2, 4], "root": 2}, {"roots": {"broadcast": 1}}) == {2}
    with pytest.raises(ConfigError, match=r"workload\.compile\.roots\.broadcast: group position 3 is outside "
                                          r"workload\.collectives\[0\]\.group of 3 ranks"):
        roots({"group": [5, 2, 4]}, {"roots": {"broadcast": 3}})


def test_compile_options_pass_through() -> None:
    p = profile_from_dict({"name": "o", "workload": {"trace": {"prefix": RING}, "compile": {
        "keep_idle": True, "roots": {"reduce": 1, "scatter": 0}, "p2p_pairing": "ignore"}}})
    o = compile_options(p)
    assert o.keep_idle and o.p2p_pairing == "ignore"
    assert o.roots == {CollectiveType.REDUCE: 1, CollectiveType.SCATTER: 0}
    assert profile_from_dict(p.to_dict()) == p  # the canonical form loads back


@pytest.mark.parametrize("compile_, expected", [
    ({"p2p_pairing": "fuzzy"}, r"workload\.compile\.p2p_pairing: .*strict"),
    ({"keep_idle": "often"}, r"workload\.compile\.keep_idle"),
    ({"roots": {"all_reduce": 0}}, r"workload\.compile\.roots\.all_reduce: all_reduce has no root"),
    ({"roots": {"broadcst": 0}}, r"workload\.compile\.roots\.broadcst: unknown collective type"),
    ({"roots": {"broadcast": -1}}, r"workload\.compile\.roots\.broadcast: expected a group position"),
    ({"roots": [0]}, r"workload\.compile\.roots: expected a mapping"),
])
def test_bad_compile_options_name_their_key(compile_: dict, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        profile_from_dict({"name": "b", "workload": {"trace": {"prefix": RING}, "compile": compile_}})


def test_a_root_from_the_trace_outside_the_group_is_not_blamed_on_the_roots_key(tmp_path: Path) -> None:
    """Only a root the roots option set names workload.compile.roots; the trace's own stays a schedule error."""
    import dataclasses

    from emulator.errors import ScheduleError
    from emulator.schedule.compiler import RootOutsideGroupError
    from emulator.trace.io import read_trace, write_trace

    trace = read_trace(str(_broadcast_trace(tmp_path)))
    for g in trace.ranks.values():
        g.nodes = [n._replace(comm=dataclasses.replace(n.comm, root=9)) if n.comm else n for n in g.nodes]
    write_trace(trace, tmp_path / "bad" / "t")
    p = profile_from_dict({"name": "bc", "workload": {"trace": {"prefix": str(tmp_path / "bad" / "t")}}})
    with pytest.raises(RootOutsideGroupError) as info:
        load_workload(p)
    assert isinstance(info.value, ScheduleError) and not isinstance(info.value, ConfigError)
    assert info.value.origin == "node's root attribute"
