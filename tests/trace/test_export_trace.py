"""``emulator export-trace``: a run's workload written back as Chakra ET with measured COMM durations.

Round trip: run on the sim, export, inspect, compile the exported trace → the same flows (src, dst,
size, step, chunk per collective type) and bytes as one iteration of the schedule that ran.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

from emulator.cli import main
from emulator.results.io import read_results
from emulator.schedule.compiler import CompileOptions, compile_trace
from emulator.trace.io import read_trace
from emulator.trace.model import CollectiveType, NodeType

BASE = {"seed": 1, "fabric": {"kind": "sim", "ports": {"rate": "25Gbps", "latency": "1us"}},
        "warmup": 1, "iterations": 3}
WORKLOADS = {
    "moe": ({"count": 8}, {"generate": {"kind": "moe", "options": {
        "tp": 2, "ep": 4, "layers": 1, "a2a_size": "64KiB", "tp_size": "32KiB",
        "dense_grad_size": "64KiB", "expert_grad_size": "128KiB"}}}),
    "moe-routed": ({"count": 4}, {"generate": {"kind": "moe", "options": {
        "ep": 4, "layers": 1, "routing": "zipf:1.2", "tokens": 64, "hidden": 256,
        "dense_grad_size": "64KiB", "expert_grad_size": "64KiB"}}}),
    "pipeline": ({"count": 3}, {"generate": {"kind": "pipeline", "options": {
        "microbatches": 2, "activation_size": "32KiB", "fwd": "20us", "bwd": "40us"}}}),
    "inline": ({"count": 4}, {"collectives": [
        {"name": "ar", "type": "all_reduce", "group": "0-3", "size": "64KiB", "algorithm": "ring", "iterations": 2},
        {"name": "bc", "type": "broadcast", "group": [1, 2, 3], "size": "16KiB", "root": 2},
        {"name": "a2a", "type": "all_to_all", "group": "0-3", "size": "64KiB"}]}),
}


def _run(tmp_path: Path, case: str) -> Path:
    ranks, workload = WORKLOADS[case]
    profile = tmp_path / f"{case}.yaml"
    profile.write_text(yaml.safe_dump({"name": case, **BASE, "ranks": ranks, "workload": workload}))
    out = tmp_path / f"res-{case}"
    assert main(["run", str(profile), "-o", str(out)]) == 0
    return out


def _flows(s, lo: int, hi: int) -> Counter:
    ctype = np.append(s.coll_type.astype(np.int64), -1)  # flow_coll -1 (point-to-point) → type -1
    types = ctype[s.flow_coll[lo:hi]]
    return Counter(zip(types.tolist(), s.flow_src[lo:hi].tolist(), s.flow_dst[lo:hi].tolist(),
                       s.flow_size_bytes[lo:hi].tolist(), s.flow_step[lo:hi].tolist(),
                       s.flow_chunk[lo:hi].tolist(), strict=True))


@pytest.mark.parametrize("case", sorted(WORKLOADS))
def test_export_inspect_compile_gives_the_same_flows_and_bytes(tmp_path: Path, case: str, capsys) -> None:
    res_dir = _run(tmp_path, case)
    prefix = tmp_path / "exp" / case
    capsys.readouterr()
    assert main(["export-trace", str(res_dir), "-o", str(prefix)]) == 0
    assert "median of 3 measured iterations" in capsys.readouterr().out
    assert main(["inspect", str(prefix), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    original = read_results(res_dir).schedule()
    fpi = original.meta["run"]["flows_per_iteration"]
    assert summary["world_size"] == original.world_size

    trace = read_trace(str(prefix))
    md = trace.ranks[0].metadata
    algorithms = json.loads(dict(md.attrs)["emulator_algorithms"][1])
    options = CompileOptions(algorithms={CollectiveType[t.upper()]: a for t, a in algorithms.items()},
                             chunks=int(dict(md.attrs)["emulator_chunks"][1]))
    again = compile_trace(trace, options)
    assert _flows(again, 0, again.n_flows) == _flows(original, 0, fpi)
    assert int(again.flow_size_bytes.sum()) == int(original.flow_size_bytes[:fpi].sum())
    # every collective and SEND node carries a measured duration (a RECV whose data came before it was
    # ready took no time)
    comm = [n for g in trace.ranks.values() for n in g.nodes if n.is_traffic and n.type != NodeType.COMM_RECV_NODE]
    assert comm and all(n.duration_micros > 0 for n in comm)


def test_coll_durations_are_the_median_of_each_ranks_measured_times(tmp_path: Path) -> None:
    res_dir = _run(tmp_path, "inline")
    prefix = tmp_path / "exp" / "t"
    assert main(["export-trace", str(res_dir), "-o", str(prefix)]) == 0
    with open(res_dir / "collectives.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh)]
    first = {(r["group"], r["seq"]): int(r["instance"]) for r in rows if r["iteration"] == "0"}
    cpi = read_results(res_dir).schedule().meta["run"]["colls_per_iteration"]
    times: dict[tuple[int, int], list[int]] = {}
    for r in rows:
        if r["warmup"] == "0":
            times.setdefault((int(r["instance"]) % cpi, int(r["rank"])), []).append(
                int(r["end_ns"]) - int(r["start_ns"]))
    trace = read_trace(str(prefix))
    checked = 0
    for rank, g in trace.ranks.items():
        for n in g.nodes:
            if n.type != NodeType.COMM_COLL_NODE:
                continue
            seq = n.name.rsplit("_", 1)[1]
            inst = first[(n.comm.pg_name, seq)]
            assert n.duration_micros == round(float(np.median(times[(inst, rank)])) / 1000)
            checked += 1
    assert checked == sum(len(v) for v in [[1] * 4 * 2, [1] * 3, [1] * 4])  # ar ×2, bc, a2a


def test_one_iteration_and_bad_input(tmp_path: Path, capsys) -> None:
    res_dir = _run(tmp_path, "pipeline")
    prefix = tmp_path / "exp" / "p"
    assert main(["export-trace", str(res_dir), "-o", str(prefix), "--iteration", "2"]) == 0
    assert "measured iteration 2" in capsys.readouterr().out
    assert main(["export-trace", str(res_dir), "-o", str(prefix), "--iteration", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "--iteration 3" in err[0]
    assert main(["export-trace", str(tmp_path), "-o", str(prefix)]) == 2
    assert "not a results directory" in capsys.readouterr().err
    (tmp_path / "a_file").write_text("")  # -o under a file: one error line, not an internal error (exit 4)
    assert main(["export-trace", str(res_dir), "-o", str(tmp_path / "a_file" / "p")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "a_file" in err[0]


def test_a_perturbed_run_exports_its_injected_waits_as_comp_nodes(tmp_path: Path) -> None:
    _ranks, workload = WORKLOADS["inline"]
    profile = tmp_path / "pert.yaml"
    profile.write_text(yaml.safe_dump({"name": "pert", **BASE, "ranks": {"count": 4}, "workload": workload,
                                       "perturbations": [{"ranks": [1], "delay_before": {
                                           "collective": "all_reduce", "fixed": "200us"}}]}))
    out = tmp_path / "res"
    assert main(["run", str(profile), "-o", str(out)]) == 0
    prefix = tmp_path / "exp" / "pert"
    assert main(["export-trace", str(out), "-o", str(prefix)]) == 0
    trace = read_trace(str(prefix))
    waits = {r: [n.duration_micros for n in g.nodes if n.name.startswith("injected_delay_op")]
             for r, g in trace.ranks.items()}
    assert waits == {0: [], 1: [200, 200], 2: [], 3: []}  # two all-reduce instances per iteration
    original = read_results(out).schedule()
    again = compile_trace(trace, CompileOptions(algorithms={CollectiveType.ALL_REDUCE: "ring"}))
    assert _flows(again, 0, again.n_flows) == _flows(original, 0, original.meta["run"]["flows_per_iteration"])


def test_an_incomplete_run_says_how_many_nodes_have_measured_durations(tmp_path: Path, capsys) -> None:
    """A run stopped before any node completed exported "16 comm nodes with measured durations" next to a
    warning that 16 never completed: the count is of the nodes measured, and the statistic says it is over
    the iterations each node completed in."""
    ranks, workload = WORKLOADS["inline"]
    profile = tmp_path / "cut.yaml"
    profile.write_text(yaml.safe_dump({"name": "cut", **BASE, "ranks": ranks, "workload": workload, "timeout": "5us"}))
    out = tmp_path / "res-cut"
    assert main(["run", str(profile), "-o", str(out), "--quiet"]) == 3
    capsys.readouterr()
    assert main(["export-trace", str(out), "-o", str(tmp_path / "exp" / "p")]) == 0
    cap = capsys.readouterr()
    n = int(cap.err.split("warning: ")[1].split()[0])
    assert f" 0 of {n} comm nodes with measured durations" in cap.out and "the run is incomplete" in cap.out
