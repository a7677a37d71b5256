"""``perturbations:``: slow compute, waits before collectives, NIC caps and links down, attributed in reports."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.cli import main
from emulator.config import profile_from_dict
from emulator.results.io import read_results
from emulator.run.workload import load_workload
from emulator.schedule.model import OP_DELAY
from emulator.schedule.perturb import DELAY_NODE_BASE, DelaySpec, insert_delays
from emulator.trace.model import CollectiveType

SIM = {"kind": "sim", "ports": {"rate": "25Gbps", "latency": "1us"}}
DP = {"generate": {"kind": "data-parallel", "options": {
    "layers": 2, "params_per_layer": "256KiB", "bucket_size": "512KiB", "fwd": "50us", "bwd": "100us"}}}
AR = {"collectives": [{"name": "ar", "type": "all_reduce", "group": "0-3", "size": "64KiB", "iterations": 2}]}


def _profile(tmp_path: Path, perturbations, *, workload=None, name="p", **top) -> Path:
    data = {"name": name, "seed": 5, "fabric": SIM, "ranks": {"count": 4}, "warmup": 1, "iterations": 3,
            "workload": workload or DP, **top}
    if perturbations is not None:
        data["perturbations"] = perturbations
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _run(tmp_path: Path, path: Path, out: str) -> Path:
    assert main(["run", str(path), "-o", str(tmp_path / out)]) == 0
    return tmp_path / out


def test_a_slow_rank_is_named_by_the_run_summary_and_the_report(tmp_path: Path, capsys) -> None:
    res = _run(tmp_path, _profile(tmp_path, [{"ranks": [2], "compute_scale": 3}]), "slow")
    said = capsys.readouterr().out
    line = next(x for x in said.splitlines() if x.startswith("straggler attribution: rank "))
    assert line.startswith("straggler attribution: rank 2 last to arrive in 100 % of instances")
    assert "injected compute ×3" in line
    doc = json.loads((res / "results.json").read_text())
    assert doc["perturbations"]["entries"] == [{"index": 0, "text": "injected compute ×3", "ranks": [2]}]
    top = doc["summary"]["straggler_attribution"]["ranks"][0]
    assert top["rank"] == 2 and top["last_arrival_fraction"] == 1.0 and top["mean_arrival_lead_ns"] > 100_000
    assert main(["report", str(res)]) == 0
    assert "rank 2 last to arrive in 100 %" in capsys.readouterr().out


def test_lognormal_delays_are_seeded_and_deterministic_on_sim(tmp_path: Path) -> None:
    pert = [{"ranks": "1-2", "delay_before": {"collective": "all_reduce", "median": "40us", "sigma": 0.5}}]
    a = _run(tmp_path, _profile(tmp_path, pert, workload=AR, name="a"), "a")
    b = _run(tmp_path, _profile(tmp_path, pert, workload=AR, name="b"), "b")
    c = _run(tmp_path, _profile(tmp_path, pert, workload=AR, name="c", seed=6), "c")
    da, db, dc = (json.loads((d / "results.json").read_text()) for d in (a, b, c))
    inj = da["perturbations"]["injected_delay"]
    assert set(inj) == {"1", "2"} and inj["1"]["count"] == 2 * 4  # 2 instances × (1 warmup + 3 measured)
    assert inj == db["perturbations"]["injected_delay"] and inj != dc["perturbations"]["injected_delay"]
    assert (a / "flows.csv").read_text() == (b / "flows.csv").read_text()


def test_a_fixed_wait_before_every_all_reduce_delays_each_instance_by_it(tmp_path: Path) -> None:
    base = _run(tmp_path, _profile(tmp_path, None, workload=AR, name="base"), "base")
    late = _run(tmp_path, _profile(tmp_path, [{"ranks": "0-3", "delay_before": {"fixed": "200us"}}],
                                   workload=AR, name="late"), "late")
    jct = [json.loads((d / "results.json").read_text())["summary"]["iteration"]["jct"]["p50"]
           for d in (base, late)]
    assert jct[1] - jct[0] == pytest.approx(2 * 200_000, abs=2_000)  # two instances per iteration


def test_nic_rate_caps_the_ranks_send_rate(tmp_path: Path) -> None:
    a2a = {"collectives": [{"name": "a2a", "type": "all_to_all", "group": "0-3", "size": "3MiB"}]}
    res = _run(tmp_path, _profile(tmp_path, [{"ranks": [0], "nic_rate": "5Gbps"}], workload=a2a), "nic")
    rows = read_results(res).csv("flows")
    rate = {}
    for r in rows:
        if r["warmup"] == "0":
            rate.setdefault(int(r["src"]), []).append(int(r["size_bytes"]) * 8e9 / int(r["fct_actual_ns"]))
    assert max(rate[0]) < 5.3e9 / 3  # rank 0's three flows at once share 5 Gb/s
    assert min(rate[1]) > 6e9


def test_a_link_down_drops_packets_on_that_port_and_the_run_recovers(tmp_path: Path) -> None:
    pert = [{"link": "host1->sw0", "down": {"at": "20us", "for": "30us"}}]
    res = _run(tmp_path, _profile(tmp_path, pert, workload=AR), "down")
    doc = json.loads((res / "results.json").read_text())
    lost = {p["name"]: p["loss_packets"] for p in doc["driver"]["fabric"]["ports"]}
    assert lost["host1->sw0"] > 0 and sum(lost.values()) == lost["host1->sw0"]
    assert doc["complete"] and doc["summary"]["ranks"]["1"]["retransmits"] > 0


def test_a_link_down_on_the_fluid_fabric_loses_on_that_port_and_the_run_recovers(tmp_path: Path) -> None:
    pert = [{"link": "host1->sw0", "down": {"at": "20us", "for": "30us"}}]
    fluid = {**SIM, "kind": "fluid", "transport": {"qps_per_peer": 2}}
    res = _run(tmp_path, _profile(tmp_path, pert, workload=AR, fabric=fluid), "down")
    doc = json.loads((res / "results.json").read_text())
    lost = {p["name"]: p["loss_packets"] for p in doc["driver"]["fabric"]["ports"]}
    assert lost["host1->sw0"] > 0 and sum(lost.values()) == lost["host1->sw0"]
    assert doc["complete"]


@pytest.mark.parametrize(("perturbations", "fabric", "key"), [
    ([{"ranks": [1], "compute_scal": 2}], SIM, "perturbations[0].compute_scal: unknown key"),
    ([{"ranks": [4], "compute_scale": 2}], SIM, "perturbations[0].ranks: rank 4 is outside the world of 4"),
    ([{"ranks": [1]}], SIM, "perturbations[0]: ranks need at least one of"),
    ([{"ranks": [1], "delay_before": {"dist": "lognormal"}}], SIM, "perturbations[0].delay_before.median: required"),
    ([{"ranks": [1], "delay_before": {"collective": "allreduce", "fixed": "1us"}}], SIM,
     "perturbations[0].delay_before.collective"),
    ([{"link": "host9->sw0", "down": {"at": 0, "for": "1us"}}], SIM, "perturbations[0].link: link 'host9->sw0'"),
    ([{"link": "host9->sw0", "down": {"at": 0, "for": "1us"}}], {"kind": "fluid"},
     "perturbations[0].link: link 'host9->sw0'"),
    ([{"ranks": [1], "nic_rate": "1Gbps"}], {"kind": "fluid"}, "perturbations[0].nic_rate"),
    ([{"ranks": [1], "compute_scale": -1}], SIM, "perturbations[0].compute_scale"),
])
def test_bad_perturbations_are_one_error_line_before_the_run(tmp_path: Path, capsys, perturbations, fabric,
                                                             key) -> None:
    path = _profile(tmp_path, perturbations, workload=AR, fabric=fabric)
    assert main(["run", str(path), "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and key in err[0], err
    assert not (tmp_path / "r").exists()


@settings(max_examples=25, deadline=None)
@given(ranks=st.sets(st.integers(0, 3), min_size=1), which=st.sampled_from([None, "all_reduce", "broadcast"]))
def test_inserted_delays_keep_the_schedule_well_formed(ranks, which) -> None:
    p = profile_from_dict({"name": "w", "ranks": {"count": 4}, "workload": {"collectives": [
        {"name": "ar", "type": "all_reduce", "group": "0-3", "size": "8KiB", "algorithm": "ring", "iterations": 2},
        {"name": "bc", "type": "broadcast", "group": [1, 2, 3], "size": "4KiB", "root": 2}]}})
    s = load_workload(p).schedule
    ctype = int(CollectiveType[which.upper()]) if which else None
    t = insert_delays(s, [DelaySpec(ranks=tuple(sorted(ranks)), collective=ctype, fixed_ns=1)])
    members = [(c, int(r)) for c in range(s.n_colls) for r in s.coll_ranks(c)
               if int(r) in ranks and (ctype is None or int(s.coll_type[c]) == ctype)]
    assert t.n_ops == s.n_ops + len(members)
    added = np.flatnonzero(t.op_node == DELAY_NODE_BASE)
    assert len(added) == len(members) and (t.op_kind[added] == OP_DELAY).all()
    child = np.repeat(np.arange(t.n_ops), np.diff(t.dep_ptr))
    parent = t.dep_idx.astype(np.int64)
    assert (parent < child).all() and (t.op_rank[parent] == t.op_rank[child]).all()
    # every op of a delayed instance on a delayed rank now (transitively) waits for its delay
    for c, r in members:
        ops = [o for o in range(t.n_ops) if t.op_rank[o] == r and t.op_flow[o] >= 0 and t.flow_coll[t.op_flow[o]] == c]
        anc: set[int] = set()
        todo = list(ops)
        while todo:
            o = todo.pop()
            for q in t.parents(o).tolist():
                if q not in anc:
                    anc.add(q)
                    todo.append(q)
        assert anc & set(added.tolist())
    assert sorted(t.op_flow[t.op_flow >= 0].tolist()) == sorted(s.op_flow[s.op_flow >= 0].tolist())
