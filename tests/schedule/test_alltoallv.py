"""Uneven All-to-All (all-to-all-v): split sizes from the MoE generator's routing and from trace attributes."""

from __future__ import annotations

import filecmp
from pathlib import Path

import numpy as np
import pytest

from emulator.cli import main
from emulator.errors import ScheduleError
from emulator.schedule.compiler import CompileOptions, compile_trace
from emulator.trace.generators.moe import MoeOptions, parse_routing, routing_matrix
from emulator.trace.io import read_trace
from emulator.trace.model import CollectiveType, CommInfo, Node, NodeType, ProcessGroup, RankGraph, Trace

A2A = CollectiveType.ALL_TO_ALL
TOKENS, HIDDEN = 256, 64


def _generate(tmp_path: Path, routing: str, *extra: str, name: str = "t") -> Path:
    prefix = tmp_path / name
    assert main(["generate", "moe", "--ep", "4", "--layers", "2", "--iterations", "2", "--routing", routing,
                 "--tokens", str(TOKENS), "--hidden", str(HIDDEN), "-o", str(prefix), *extra]) == 0
    return prefix


def _instances(schedule) -> dict[tuple[int, int], np.ndarray]:
    """(group index, seq) → the instance's matrix of flow bytes (positions = sorted member ranks)."""
    out = {}
    for c in np.flatnonzero(schedule.coll_type == int(A2A)).tolist():
        members = [int(r) for r in schedule.coll_ranks(c)]
        m = np.zeros((len(members), len(members)), dtype=np.int64)
        for f in np.flatnonzero(schedule.flow_coll == c).tolist():
            m[members.index(int(schedule.flow_src[f])), members.index(int(schedule.flow_dst[f]))] += \
                int(schedule.flow_size_bytes[f])
        out[(int(schedule.coll_group[c]), int(schedule.coll_seq[c]))] = m
    return out


@pytest.mark.parametrize("chunks", [1, 3])
def test_routed_moe_compiles_to_the_drawn_matrices(tmp_path: Path, chunks: int) -> None:
    prefix = _generate(tmp_path, "zipf:1.2")
    s = compile_trace(read_trace(str(prefix)), CompileOptions(chunks=chunks))
    o = MoeOptions(ep=4, layers=2, iterations=2, routing="zipf:1.2", tokens=TOKENS, hidden=HIDDEN)
    r = parse_routing(o.routing, o.ep)
    got = _instances(s)
    assert len(got) == 2 * 2 * 4  # iterations × layers × (dispatch, combine fwd and bwd)
    # per layer and iteration: dispatch fwd = M, combine fwd = Mᵀ, combine bwd = M, dispatch bwd = Mᵀ
    seq_of = {}
    for it in range(2):
        base = it * 8
        for layer in range(2):
            m = routing_matrix(o, r, it, layer, 1)
            off = m - np.diag(np.diag(m))  # a rank's block for itself stays local
            seq_of[base + 2 * layer] = off
            seq_of[base + 2 * layer + 1] = off.T
            seq_of[base + 4 + 2 * (1 - layer)] = off
            seq_of[base + 4 + 2 * (1 - layer) + 1] = off.T
    for (_g, seq), m in got.items():
        assert (m == seq_of[seq]).all(), seq
    per_rank = TOKENS * HIDDEN * 2
    assert set(s.coll_size_bytes[s.coll_type == int(A2A)].tolist()) == {per_rank}  # S of the nccl-tests busbw


def test_routing_is_seeded_and_changes_per_iteration(tmp_path: Path) -> None:
    a = _generate(tmp_path, "uniform", name="a")
    b = _generate(tmp_path, "uniform", name="b")
    c = _generate(tmp_path, "uniform", "--seed", "2", name="c")
    assert filecmp.cmp(f"{a}.1.et", f"{b}.1.et", shallow=False)
    assert not filecmp.cmp(f"{a}.1.et", f"{c}.1.et", shallow=False)
    o = MoeOptions(ep=4, routing="uniform", tokens=TOKENS, hidden=HIDDEN)
    r = parse_routing("uniform", 4)
    assert not (routing_matrix(o, r, 0, 0, 1) == routing_matrix(o, r, 1, 0, 1)).all()


def test_skewed_routing_loads_the_hot_expert() -> None:
    o = MoeOptions(ep=8, tokens=4096, hidden=1)
    share = {}
    for spec in ("uniform", "zipf:1.2", "hot:3:0.6"):
        m = routing_matrix(o, parse_routing(spec, 8), 0, 0, 1)
        share[spec] = m.sum(axis=0) / m.sum()
    assert share["uniform"].max() < 0.15
    assert share["zipf:1.2"].max() > 0.3
    assert share["hot:3:0.6"][3] == pytest.approx(0.6, abs=0.03)


def _trace(rows: dict[int, tuple[int, ...]], size: int, attr: str = "in_split_size") -> Trace:
    ranks = {}
    for r in range(3):
        attrs = ((attr, ("int64_list", rows[r])),) if r in rows else ()
        node = Node(id=1, name="a2a", type=NodeType.COMM_COLL_NODE, attrs=attrs,
                    comm=CommInfo(collective=A2A, size_bytes=size, pg_name="g"))
        ranks[r] = RankGraph(rank=r, nodes=[node])
    return Trace(ranks=ranks, groups={"g": ProcessGroup("g", (0, 1, 2))})


def test_trace_split_sizes_in_elements_are_scaled_to_bytes() -> None:
    rows = {0: (1, 2, 5), 1: (0, 0, 8), 2: (4, 4, 0)}  # element counts; comm_size = 8 elements × 4 bytes
    s = compile_trace(_trace(rows, 32), CompileOptions(algorithms={A2A: "pairwise"}))
    m = next(iter(_instances(s).values()))
    assert m.tolist() == [[0, 8, 20], [0, 0, 32], [16, 16, 0]]
    assert int(s.coll_size_bytes[0]) == 32


@pytest.mark.parametrize(("rows", "size", "message"), [
    ({0: (1, 2), 1: (1, 1), 2: (1, 1)}, 2, "2 split sizes for a process group of 3 ranks"),
    ({0: (1, 2, 5), 1: (1, 1, 1), 2: (1, 1, 1)}, 12, "does not divide comm_size 12"),
    ({0: (1, 1, 1), 1: (1, 1, 1)}, 3, "rank 2 node 1: ALL_TO_ALL without in_split_sizes"),
])
def test_bad_split_sizes_are_one_error_naming_rank_and_node(rows, size, message) -> None:
    with pytest.raises(ScheduleError, match=message):
        compile_trace(_trace(rows, size))


@pytest.mark.parametrize(("args", "message"), [
    (["--routing", "zipf:0"], "--routing: zipf:0: the Zipf exponent must be a number > 0"),
    (["--routing", "zipf:-1.5"], "the Zipf exponent must be a number > 0"),
    (["--routing", "hot:4:0.5"], "expert 4 does not exist"),
    (["--routing", "hot:1:1.5"], "the hot fraction must be in (0, 1]"),
    (["--routing", "skewed"], "expected uniform, zipf:EXPONENT or hot:EXPERT:FRACTION"),
    (["--routing", "uniform", "--hidden", "8"], "--routing needs --tokens"),
    (["--tokens", "8"], "--tokens needs --routing"),
])
def test_bad_routing_options_are_one_error_line(tmp_path: Path, capsys, args, message) -> None:
    tokens = [] if "--tokens" in args or "--hidden" in args else ["--tokens", "8", "--hidden", "8"]
    assert main(["generate", "moe", "--ep", "4", "-o", str(tmp_path / "x"), *args, *tokens]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_a_profile_with_a_bad_zipf_exponent_names_its_key() -> None:
    from emulator.config import profile_from_dict
    from emulator.errors import ConfigError
    from emulator.run.workload import load_workload

    p = profile_from_dict({"name": "z", "ranks": {"count": 4}, "workload": {"generate": {"kind": "moe", "options": {
        "ep": 4, "layers": 1, "routing": "zipf:0", "tokens": 8, "hidden": 8}}}})
    with pytest.raises(ConfigError, match=r"workload\.generate\.options\.routing: .*Zipf exponent must be a number > 0"):
        load_workload(p)
