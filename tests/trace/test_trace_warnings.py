"""Trace warnings: a dependency policy that ignores the trace's edges, one line per distinct warning
across rank files, the one-rank-trace hint; in inspect, compile and run (console and results.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from emulator.cli import main
from emulator.trace.checks import aggregate_warnings, rank_span, warning_lines
from emulator.trace.io import rank_path, read_trace, write_rank
from emulator.trace.model import CollectiveType, CommInfo, Node, NodeType

RANKS = 4
COMPUTE_US = (300, 200)  # before and after the all-reduce, chained by ctrl_deps only


def _varint_len(data: bytes) -> tuple[int, int]:
    value = shift = i = 0
    while True:
        b = data[i]
        value |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return value, i
        shift += 7


def legacy_ctrl_trace(tmp_path: Path, ranks: int = RANKS) -> Path:
    """Files as legacy ASTRA-sim converters write them: no GlobalMetadata record, ctrl_deps only."""
    prefix = tmp_path / "legacy" / "resnet"
    prefix.parent.mkdir()
    for r in range(ranks):
        nodes = [
            Node(id=1, name="fwd", type=NodeType.COMP_NODE, duration_micros=COMPUTE_US[0]),
            Node(id=2, name="grad_ar", type=NodeType.COMM_COLL_NODE, ctrl_deps=(1,),
                 comm=CommInfo(collective=CollectiveType.ALL_REDUCE, size_bytes=256 * 1024)),
            Node(id=3, name="optimizer", type=NodeType.COMP_NODE, ctrl_deps=(2,), duration_micros=COMPUTE_US[1]),
        ]
        path = rank_path(prefix, r)
        write_rank(path, nodes)
        data = path.read_bytes()
        size, head = _varint_len(data)
        path.write_bytes(data[head + size:])  # drop the GlobalMetadata record
    return prefix


def test_rank_span_and_aggregation() -> None:
    assert rank_span([5, 0, 1, 2, 7, 8]) == "0-2, 5, 7-8"
    entries = [(r, f"p.{r}.et", f"p.{r}.et: rank {r}: no GlobalMetadata record") for r in range(3)]
    entries.append((1, "p.1.et", "p.1.et: rank 1: 3 parent ids missing"))
    entries.append((2, "", "2 CPU-side nodes"))
    assert aggregate_warnings(entries, "p") == [
        "p: 3 rank files (ranks 0-2): no GlobalMetadata record",
        "p.1.et: rank 1: 3 parent ids missing",
        "rank 2: 2 CPU-side nodes",
    ]


def test_legacy_trace_warnings_are_one_line_each(tmp_path: Path) -> None:
    trace = read_trace(legacy_ctrl_trace(tmp_path))
    assert [g.dep_policy for g in trace.ranks.values()] == ["ctrl"] * RANKS  # auto picks ctrl_deps
    lines = warning_lines(trace)
    assert len(lines) == 1, lines
    assert f"{RANKS} rank files (ranks 0-{RANKS - 1}): no GlobalMetadata record (legacy file)" in lines[0]


def test_data_policy_on_a_ctrl_only_trace_warns_loudly(tmp_path: Path) -> None:
    trace = read_trace(legacy_ctrl_trace(tmp_path), dep_policy="data")
    text = "\n".join(trace.warnings)
    assert "dependency policy 'data' uses no edge on 4 rank files (ranks 0-3), which hold 8 ctrl_deps" in text
    assert "every node is a root" in text and "use dep_policy auto" in text
    assert f"rank 0 {max(COMPUTE_US)} us instead of {sum(COMPUTE_US)} us" in text


@pytest.mark.parametrize("policy", ["auto", "ctrl", "union"])
def test_policies_that_keep_the_trace_edges_say_nothing(tmp_path: Path, policy: str) -> None:
    trace = read_trace(legacy_ctrl_trace(tmp_path), dep_policy=policy)
    assert not any("dependency policy" in w for w in trace.warnings)


def test_inspect_and_compile_print_aggregated_warnings(tmp_path: Path, capsys) -> None:
    prefix = legacy_ctrl_trace(tmp_path)
    assert main(["inspect", str(prefix)]) == 0
    out = capsys.readouterr().out
    assert out.count("no GlobalMetadata record") == 1 and "4 rank files (ranks 0-3)" in out
    assert main(["compile", str(prefix), "-o", str(tmp_path / "s.sched"), "--dep-policy", "data"]) == 0
    err = capsys.readouterr().err
    assert err.count("no GlobalMetadata record") == 1
    assert "warning: " in err and "uses no edge on 4 rank files" in err


def test_compile_of_a_one_rank_trace_says_to_replicate(tmp_path: Path, capsys) -> None:
    prefix = legacy_ctrl_trace(tmp_path, ranks=1)
    assert main(["compile", str(prefix), "-o", str(tmp_path / "s.sched")]) == 0
    captured = capsys.readouterr()
    assert "0 flows" in captured.out
    assert "a one-rank trace: its 1 collective(s) have no peer and make no traffic; use --replicate N" in captured.err
    assert main(["compile", str(prefix), "-o", str(tmp_path / "r.sched"), "--replicate", "4"]) == 0
    assert "--replicate N" not in capsys.readouterr().err


def test_compile_takes_legacy_collectives(tmp_path: Path, capsys) -> None:
    prefix = legacy_ctrl_trace(tmp_path)
    assert main(["compile", str(prefix), "-o", str(tmp_path / "s.sched"), "--legacy-collectives", "yes"]) == 0
    assert "legacy pre-0.0.4 collective numbering" in capsys.readouterr().err


def test_run_carries_trace_warnings_into_console_and_results(tmp_path: Path, capsys) -> None:
    prefix = legacy_ctrl_trace(tmp_path)
    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump({
        "fabric": {"kind": "sim", "ports": {"rate": "100Gbps"}}, "iterations": 1, "warmup": 0,
        "workload": {"trace": {"prefix": str(prefix), "dep_policy": "data"}},
    }))
    out = tmp_path / "res"
    assert main(["run", str(profile), "-o", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert err.count("no GlobalMetadata record") == 1 and "uses no edge on 4 rank files" in err
    warnings = json.loads((out / "results.json").read_text())["warnings"]
    assert any("4 rank files (ranks 0-3): no GlobalMetadata record" in w for w in warnings)
    assert any("dependency policy 'data' uses no edge" in w for w in warnings)
    assert any("changes the compute critical path" in w for w in warnings)


def test_shipped_profiles_use_the_auto_dependency_policy() -> None:
    root = Path(__file__).resolve().parents[2] / "profiles"
    for path in sorted(root.rglob("*.yaml")):
        trace = ((yaml.safe_load(path.read_text()) or {}).get("workload") or {}).get("trace") or {}
        assert trace.get("dep_policy", "auto") == "auto", path




def test_skipped_peerless_send_is_a_compile_warning_kept_in_the_schedule(tmp_path: Path, capsys) -> None:
    from emulator.schedule.io import load_schedule

    for r in range(2):
        write_rank(rank_path(tmp_path / "p", r), [
            Node(id=1, type=NodeType.COMM_SEND_NODE, comm=CommInfo(size_bytes=64, src=r)),  # no comm_dst
            Node(id=2, type=NodeType.COMP_NODE, data_deps=(1,), duration_micros=5),
        ])
    out = tmp_path / "s.sched"
    assert main(["compile", str(tmp_path / "p"), "-o", str(out), "--p2p-pairing", "ignore"]) == 0
    assert "2 SEND/RECV nodes without a peer on 2 rank(s) skipped (p2p_pairing=ignore)" in capsys.readouterr().err
    assert load_schedule(out).meta["warnings"] == [
        "2 SEND/RECV nodes without a peer on 2 rank(s) skipped (p2p_pairing=ignore): no traffic"]
