"""Profile workloads → schedules: inline collectives, traces, generators, repetition and merging."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.config import ALGORITHMS, load_profile, profile_from_dict
from emulator.drivers.ideal import run_ideal
from emulator.errors import ScheduleError
from emulator.run.workload import inline_trace, load_workload, run_schedule
from emulator.schedule.compose import merge_schedules, repeat_schedule
from emulator.schedule.io import load_schedule, save_schedule
from emulator.schedule.model import OP_DELAY

PROFILES = Path(__file__).resolve().parents[2] / "profiles"


def _profile(**workload_changes):
    data = {
        "name": "w", "ranks": {"count": 4}, "warmup": 1, "iterations": 2,
        "workload": {"collectives": [
            {"name": "ar", "type": "all_reduce", "group": [0, 1, 2, 3], "size": "16KiB", "algorithm": "ring",
             "iterations": 3, "start_offset": "5us", "gap": "2us"},
            {"name": "a2a", "type": "all_to_all", "group": [0, 1], "size": "8KiB", "iterations": 1},
            {"name": "bc", "type": "broadcast", "group": [1, 2, 3], "size": "4KiB", "root": 2},
        ]},
    }
    data["workload"].update(workload_changes)
    return profile_from_dict(data)


def _check_shape(s) -> None:
    assert s.dep_ptr.shape[0] == s.n_ops + 1
    child = np.repeat(np.arange(s.n_ops), np.diff(s.dep_ptr))
    parent = s.dep_idx.astype(np.int64)
    assert (parent < child).all()  # topological order inside a rank
    assert (s.op_rank[parent] == s.op_rank[child]).all()
    kinds = s.op_kind[s.op_flow >= 0]
    assert sorted(s.op_flow[s.op_flow >= 0].tolist()) == sorted(list(range(s.n_flows)) * 2)
    assert len(kinds) == 2 * s.n_flows


def test_inline_trace_chains_offset_collectives_and_gaps() -> None:
    p = _profile()
    t = inline_trace(p, 0)
    assert sorted(t.ranks) == [0, 1, 2, 3] and list(t.groups) == ["ar"]
    names = [n.name for n in t.ranks[0].nodes]
    assert names == ["ar:start_offset", "ar#0", "ar:gap", "ar#1", "ar:gap", "ar#2"]
    assert t.ranks[0].nodes[0].duration_micros == 5 and t.ranks[0].nodes[2].duration_micros == 2
    for a, b in zip(t.ranks[0].nodes, t.ranks[0].nodes[1:], strict=False):
        assert b.data_deps == (a.id,)


def test_inline_collectives_compile_side_by_side() -> None:
    p = _profile()
    w = load_workload(p)
    s = w.schedule
    assert w.source == "collectives" and w.trace_hash == ""
    assert s.group_names[:3] == ("ar", "a2a", "bc") or set(s.group_names) >= {"ar", "a2a", "bc"}
    per_group = {s.group_names[g]: int(np.count_nonzero(s.coll_group == g)) for g in np.unique(s.coll_group)}
    assert per_group == {"ar": 3, "a2a": 1, "bc": 1}
    # queue pairs are never shared between groups
    qps = {}
    for f in range(s.n_flows):
        g = s.group_names[s.coll_group[s.flow_coll[f]]]
        qps.setdefault(int(s.flow_qp[f]), set()).add(g)
    assert all(len(g) == 1 for g in qps.values())
    # the offset is the first op of rank 0 (5 µs), and nothing links different groups
    first = int(s.rank_op_ptr[0])
    assert s.op_kind[first] == OP_DELAY and s.op_duration_ns[first] == 5000
    _check_shape(s)
    # the broadcast root is rank 2: it only sends
    bc = int(np.flatnonzero(s.coll_group == s.group_names.index("bc"))[0])
    flows = np.flatnonzero(s.flow_coll == bc)
    assert set(s.flow_src[flows].tolist()) >= {2} and 2 not in set(s.flow_dst[flows].tolist())
    assert run_ideal(s).complete


def test_repeat_marks_iterations_and_chains_ranks() -> None:
    p = _profile()
    w = load_workload(p)
    s = run_schedule(w, p)
    base = w.schedule
    assert s.n_flows == 3 * base.n_flows and s.n_colls == 3 * base.n_colls and s.n_ops == 3 * base.n_ops
    assert s.meta["run"] == {"iterations": 2, "warmup": 1, "colls_per_iteration": base.n_colls,
                             "flows_per_iteration": base.n_flows,
                             "ops_per_iteration": np.diff(base.rank_op_ptr).tolist(), "open_loop_period_ns": 0}
    _check_shape(s)
    ar = s.group_names.index("ar")
    assert sorted(s.coll_seq[s.coll_group == ar].tolist()) == list(range(9))
    assert (s.flow_qp[: base.n_flows] == s.flow_qp[base.n_flows: 2 * base.n_flows]).all()
    res = run_ideal(s)
    assert res.complete
    # iteration k+1 of a rank starts only after that rank finished iteration k
    for r, rec in res.records.items():
        n = int(np.diff(base.rank_op_ptr)[r])
        for k in range(2):
            assert rec.ready_ns[(k + 1) * n: (k + 2) * n].min() >= rec.end_ns[k * n: (k + 1) * n].max()
    path = Path(__import__("tempfile").mkdtemp()) / "s.bin"
    save_schedule(s, path)
    again = load_schedule(path)
    assert again.meta["run"]["warmup"] == 1 and (again.dep_idx == s.dep_idx).all()


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 3), st.integers(0, 2), st.integers(2, 5), st.integers(1, 3))
def test_repeat_property(iterations: int, warmup: int, ranks: int, chunks: int) -> None:
    p = profile_from_dict({"name": "h", "ranks": {"count": ranks}, "warmup": warmup, "iterations": iterations,
                           "workload": {"collectives": [
                               {"type": "all_reduce", "size": "8KiB", "chunks": chunks},
                               {"type": "all_to_all", "size": "4KiB", "group": [0, ranks - 1]}]}})
    s = run_schedule(load_workload(p), p)
    _check_shape(s)
    n = warmup + iterations
    assert s.n_colls == 2 * n
    res = run_ideal(s)
    assert res.complete
    assert sum(r.counters["bytes_received"] for r in res.records.values()) == int(s.flow_size_bytes.sum())


def test_merge_and_repeat_reject_nonsense() -> None:
    with pytest.raises(ScheduleError):
        merge_schedules([])
    s = load_workload(_profile()).schedule
    with pytest.raises(ScheduleError):
        repeat_schedule(s, 0)
    assert merge_schedules([s]) is s


def test_trace_and_generator_workloads_from_shipped_profiles() -> None:
    p = load_profile(PROFILES / "sim_trace_custom_ring.yaml", env={})
    w = load_workload(p)
    assert w.source == "trace" and len(w.trace_hash) == 64 and w.schedule.n_flows > 0
    assert run_ideal(run_schedule(w, p)).complete
    g = load_profile(PROFILES / "sim_moe_generated.yaml", env={})
    wg = load_workload(g)
    assert wg.source == "generate" and len(wg.trace_hash) == 64 and wg.schedule.n_colls > 0
    assert load_workload(g).schedule.n_flows == wg.schedule.n_flows  # deterministic


@pytest.mark.parametrize(("kind", "options", "expected"), [
    ("moe", {"tp": "two"}, "w: workload.generate.options.tp: moe generator: invalid int value: 'two'"),
    ("moe", {"tp": 3, "ep": 4}, "w: workload.generate.options: moe generator: ranks.count 4 does not factor as tp"),
    ("collective", {"collective": "allreduce", "size": "1MiB"},
     "w: workload.generate.options.collective: collective generator: unknown collective 'allreduce'"),
    ("collective", {"collective": "all_reduce", "size": "lots"},
     "w: workload.generate.options.size: collective generator: cannot read 'lots' as a size"),
])
def test_generator_rejecting_its_options_is_one_line_naming_the_key(kind, options, expected, capsys) -> None:
    from emulator.errors import ConfigError

    p = profile_from_dict({"name": "w", "ranks": {"count": 4}, "workload": {"generate": {"kind": kind,
                                                                                          "options": options}}},
                          source="w")
    with pytest.raises(ConfigError) as info:
        load_workload(p)
    assert str(info.value).startswith(expected) and "\n" not in str(info.value)
    assert capsys.readouterr().err == ""  # argparse's own complaint is not printed as well


def test_a_profile_root_is_a_rank_not_a_group_position() -> None:
    """``root: 4`` in group [2, 3, 4] is rank 4 (group position 2): the compiler gets the position."""
    for algorithm in ALGORITHMS["broadcast"]:
        for group, root in (([2, 3, 4], 4), ([5, 1, 3], 3), ([0, 1, 2, 3], 1)):
            p = profile_from_dict({"name": "r", "ranks": {"count": 6}, "workload": {"collectives": [
                {"type": "broadcast", "group": group, "root": root, "size": "64KiB", "algorithm": algorithm}]}})
            s = load_workload(p).schedule
            # a broadcast's root receives nothing, and every other member receives
            assert root in set(s.flow_src.tolist()), (algorithm, group, root)
            assert set(s.flow_dst.tolist()) == set(group) - {root}, (algorithm, group, root)


def test_chunks_and_algorithm_per_collective_reach_the_compiler() -> None:
    def flows(coll: dict, compile_: dict | None = None) -> tuple[int, set[int], tuple[str, ...]]:
        p = profile_from_dict({"name": "c", "ranks": {"count": 4},
                               "workload": {"collectives": [coll], "compile": compile_ or {}}})
        s = load_workload(p).schedule
        return s.n_flows, set(s.flow_chunk.tolist()), s.algorithm_names

    ring = {"type": "all_reduce", "size": "64KiB", "algorithm": "ring"}
    one, chunks, algos = flows(ring)
    assert chunks == {0} and algos == ("ring",)
    assert flows({**ring, "chunks": 4})[:2] == (4 * one, {0, 1, 2, 3})
    assert flows(ring, {"chunks": 3})[:2] == (3 * one, {0, 1, 2})  # workload.compile.chunks is the default
    assert flows({**ring, "chunks": 2}, {"chunks": 3})[0] == 2 * one  # the collective's own wins
    other = next(a for a in ALGORITHMS["all_reduce"] if a != "ring")
    assert flows({**ring, "algorithm": other})[2] == (other,)
    assert flows({"type": "all_reduce", "size": "64KiB"}, {"algorithms": {"all_reduce": other}})[2] == (other,)


def test_trace_workload_replicate_dep_policy_and_groups_reach_reader_and_compiler(tmp_path: Path, monkeypatch) -> None:
    import shutil

    import emulator.trace.io as trace_io
    from emulator.cli import main

    assert main(["generate", "collective", "--ranks", "4", "--size", "64KiB", "-o", str(tmp_path / "full" / "t")]) == 0
    (tmp_path / "one").mkdir()
    shutil.copy(tmp_path / "full" / "t.0.et", tmp_path / "one" / "t.0.et")
    groups = tmp_path / "groups.json"
    groups.write_text('{"0": [0, 1, 2, 3]}')
    full = load_workload(profile_from_dict({"name": "f", "workload": {"trace": {"prefix": str(tmp_path / "full" / "t")}}}))
    seen = []
    real = trace_io.read_trace
    monkeypatch.setattr(trace_io, "read_trace", lambda *a, **kw: seen.append(kw) or real(*a, **kw))
    p = profile_from_dict({"name": "r", "workload": {"trace": {
        "prefix": str(tmp_path / "one" / "t"), "replicate": 4, "dep_policy": "data", "groups": str(groups),
        "legacy_collectives": "no"}}})
    assert p.ranks.count == 4
    rep = load_workload(p)
    assert seen == [{"dep_policy": "data", "groups_file": str(groups), "legacy_collectives": False}]
    assert rep.schedule.world_size == 4 and rep.schedule.n_flows == full.schedule.n_flows
    assert (rep.schedule.flow_size_bytes.sum() == full.schedule.flow_size_bytes.sum())
