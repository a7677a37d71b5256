"""`emulator compare A B --flows`: rank correlation, a hand-built pair, two sim runs of one ring, bad input."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from emulator.cli import main
from emulator.errors import ResultsError
from emulator.report.flowcompare import (
    FlowRun,
    average_ranks,
    compare_flows,
    rank_correlation,
    render_flow_comparison,
)
from emulator.results import read_results
from emulator.schedule.model import OP_RECV
from emulator.stats.summary_types import PortSummary

STORED = Path(__file__).resolve().parents[1] / "data" / "results_v1"


# ------------------------------------------------------------------------------------ rank correlation


def _brute_ranks(x: list[int]) -> list[float]:
    return [sum(v < xi for v in x) + (sum(v == xi for v in x) + 1) / 2 for xi in x]


@given(st.lists(st.integers(-5, 5), max_size=40))
def test_average_ranks_match_the_definition(x: list[int]) -> None:
    assert average_ranks(np.asarray(x)).tolist() == _brute_ranks(x)


@given(st.lists(st.integers(0, 10**9), min_size=2, max_size=60, unique=True))
def test_spearman_is_one_for_any_increasing_map_and_minus_one_reversed(x: list[int]) -> None:
    a = np.asarray(x, dtype=np.float64)
    assert rank_correlation(a, 3 * a + 7) == pytest.approx(1.0)
    assert rank_correlation(a, np.sqrt(a)) == pytest.approx(1.0)
    assert rank_correlation(a, -a) == pytest.approx(-1.0)


def test_spearman_with_ties_by_hand() -> None:
    # ranks a = 1, 2.5, 2.5, 4; b = 1, 2, 3, 4 → ρ = Pearson of the ranks = 0.9486...
    rho = rank_correlation(np.asarray([1, 5, 5, 9]), np.asarray([10, 20, 30, 40]))
    assert rho == pytest.approx(4.5 / np.sqrt(4.5 * 5.0))
    assert rank_correlation(np.asarray([3, 3, 3]), np.asarray([1, 2, 3])) is None  # no order in a
    assert rank_correlation(np.asarray([1]), np.asarray([2])) is None


# ------------------------------------------------------------------------------------ a hand-built pair


def _flow(flow: int, fct: int, it: int = 1, warmup: int = 0, src: int = 0, dst: int = 1, end: int = 0) -> dict:
    return {"flow": flow, "src": src, "dst": dst, "size_bytes": 1000, "iteration": it, "warmup": bool(warmup),
            "fct_scheduled_ns": fct, "end_ns": end if end else fct}


def _inst(instance: int, cct: int | None, it: int = 1) -> dict:
    return {"instance": instance, "type": "all_reduce", "group": "ar", "iteration": it, "warmup": False,
            "cct_ns": math.nan if cct is None else float(cct)}


def _run(flows: list[dict], insts: tuple | list[dict] = (), ports: dict | None = None) -> FlowRun:
    """A FlowRun of hand-built rows: the rows become typed columns, ``ports`` PortSummary entries."""
    def cols(rows: list[dict], keys: tuple[str, ...]) -> dict[str, np.ndarray]:
        return {k: np.asarray([r[k] for r in rows]) for k in keys}

    return FlowRun(cols(flows, tuple(_flow(0, 0))), cols(list(insts), tuple(_inst(0, 0))),
                   tuple(PortSummary(**p) for p in (ports or {}).get("ports", [])))


def test_hand_built_pair() -> None:
    fa = [_flow(0, 999, it=0, warmup=1), _flow(1, 100), _flow(2, 200), _flow(3, 300), _flow(4, 400), _flow(5, 500)]
    fb = [_flow(0, 5, it=0, warmup=1), _flow(1, 100), _flow(2, 400), _flow(3, 150), _flow(4, 400), _flow(5, -1, end=-1)]
    ca = [_inst(7, 1000), _inst(7, 1000), _inst(8, 2000)]
    cb = [_inst(7, 3000), _inst(7, 3000), _inst(8, None)]
    pa = {"ports": [{"name": "sw0->host0", "marked_packets": 3, "dropped_packets": 0}]}
    pb = {"ports": [{"name": "sw0->host0", "marked_packets": 30, "dropped_packets": 2},
                    {"name": "sw0->host1", "marked_packets": 1, "dropped_packets": 0}]}
    c = compare_flows(("A", "B"), "h", (_run(fa, ca, pa), _run(fb, cb, pb)), top=2)
    assert (c.flows, c.compared, c.unfinished_a, c.unfinished_b) == (5, 4, 0, 1)  # the warmup flow is left out
    # ratios 1, 2, 0.5, 1 → nearest-rank p50 = 1, p90 = p99 = 2
    assert (c.fct_ratio["p50"], c.fct_ratio["p90"], c.fct_ratio["p99"]) == (1.0, 2.0, 2.0)
    assert (c.fct_ratio["min"], c.fct_ratio["max"]) == (0.5, 2.0)
    # FCT ranks over the 4 flows finished in both: a 1,2,3,4; b 1,3.5,2,3.5
    assert c.spearman == pytest.approx(rank_correlation(np.asarray([1, 2, 3, 4]), np.asarray([1, 3.5, 2, 3.5])))
    # |log 2| == |log 0.5|: the tie goes to the lower flow id
    assert [(f.flow, f.fct_a_ns, f.fct_b_ns, f.ratio) for f in c.top] == [(2, 200, 400, 2.0), (3, 300, 150, 0.5)]
    assert [(p.name, p.marks_a, p.marks_b, p.drops_a, p.drops_b) for p in c.ports] == [
        ("sw0->host0", 3, 30, 0, 2), ("sw0->host1", None, 1, None, 0)]
    assert [(i.instance, i.cct_a_ns, i.cct_b_ns, i.ratio) for i in c.instances] == [(7, 1000, 3000, 3.0),
                                                                                  (8, 2000, None, None)]
    assert c.cct_ratio["p50"] == 3.0
    d = c.to_dict()
    assert d["unfinished"] == {"A": 0, "B": 1} and d["top"][0]["src"] == 0 and json.dumps(d)
    assert c.spearman_note == "" and "spearman_note" not in d
    same = compare_flows(("A", "B"), "h", (_run([_flow(1, 50), _flow(2, 50)]), _run([_flow(1, 60), _flow(2, 70)])))
    assert same.spearman is None and same.spearman_note == "every FCT equal in A"
    assert "n/a (every FCT equal in A)" in "\n".join(render_flow_comparison(same))


def test_flows_that_do_not_match_are_refused() -> None:
    with pytest.raises(ResultsError, match="flow 2 differs"):
        compare_flows(("A", "B"), "h", (_run([_flow(2, 10)]), _run([_flow(2, 10, dst=3)])))
    with pytest.raises(ResultsError, match="flow 3 .iteration 1. is measured in only one"):
        compare_flows(("A", "B"), "h", (_run([_flow(2, 10), _flow(3, 5)]), _run([_flow(2, 10)])))


# ------------------------------------------------------------------------------------ through the CLI


def _copy(tmp_path: Path, name: str, scale: dict[int, int] | None = None, schedule_hash: str | None = None) -> Path:
    d = tmp_path / name
    shutil.copytree(STORED, d)
    doc = json.loads((d / "results.json").read_text())
    doc["name"] = name
    if schedule_hash is not None:
        doc["schedule_hash"] = schedule_hash
    (d / "results.json").write_text(json.dumps(doc))
    if scale:  # the FCT of flow f times k: its RECV op (last byte held) ends later in records.npz
        res = read_results(d)
        s, ft = res.schedule(), res.flow_columns()
        with np.load(d / "records.npz", allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        for f, k in scale.items():
            op = int(np.flatnonzero((s.op_flow == f) & (s.op_kind == OP_RECV))[0])
            r = int(s.op_rank[op])
            arrays[f"rank{r}.end_ns"][op - int(s.rank_op_ptr[r])] = (
                ft["scheduled_start_ns"][f] + ft["fct_scheduled_ns"][f] * k)
        with open(d / "records.npz", "wb") as fh:
            np.savez_compressed(fh, **arrays)
    return d


def test_cli_json_and_text_on_an_edited_copy(tmp_path: Path, capsys) -> None:
    measured = [int(r["flow"]) for r in csv.DictReader(open(STORED / "flows.csv")) if r["warmup"] == "0"]
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b", scale={measured[3]: 5})
    assert main(["compare", str(a), str(b), "--flows", "--json", "--top", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["flows"] == len(measured) and out["fct_ratio"]["p50"] == 1.0 and out["fct_ratio"]["max"] == 5.0
    assert [f["flow"] for f in out["top"]] == [measured[3]] and out["top"][0]["ratio"] == 5.0
    assert [r["label"] for r in out["runs"]] == ["a", "b"]
    assert len(out["ports"]) == 8 and out["instances"]
    assert main(["compare", str(a), str(b), "--flows", "--labels", "sim,lb"]) == 0
    text = capsys.readouterr().out
    assert "FCT ratio lb ÷ sim" in text and "5.000x" in text and "ECN marks and drops per port" in text
    assert "CCT per measured collective instance" in text


def test_cli_reads_no_csv_file(tmp_path: Path, capsys) -> None:
    measured = [int(r["flow"]) for r in csv.DictReader(open(STORED / "flows.csv")) if r["warmup"] == "0"]
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b", scale={measured[0]: 3})
    outputs = []
    for _ in range(2):
        for extra in (["--json"], []):
            assert main(["compare", str(a), str(b), "--flows", *extra]) == 0
            outputs.append(capsys.readouterr().out)
        for f in (*a.glob("*.csv"), *b.glob("*.csv")):
            f.unlink()  # the second round runs without flows.csv, collectives.csv, ranks.csv
    assert not list(a.glob("*.csv")) and outputs[:2] == outputs[2:]
    out = json.loads(outputs[2])
    assert out["fct_ratio"]["max"] == 3.0 and out["top"][0]["flow"] == measured[0]
    assert all(i["cct_ns"][0] for i in out["instances"])  # CCT from the records, not the pre-CCT stored CSV


def test_missing_records_or_columns_exit_2_naming_them(tmp_path: Path, capsys) -> None:
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    (b / "records.npz").unlink()
    assert main(["compare", str(a), str(b), "--flows"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and str(b / "records.npz") in err
    run = _run([_flow(1, 10)], [_inst(7, 100)])
    cut = FlowRun(run.flows, {k: v for k, v in run.instances.items() if k != "cct_ns"})
    with pytest.raises(ResultsError, match="B collectives.npz: no column 'cct_ns'"):
        compare_flows(("A", "B"), "h", (run, cut))


def test_different_schedules_exit_2_naming_both_hashes(tmp_path: Path, capsys) -> None:
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b", schedule_hash="f" * 64)
    ha = json.loads((a / "results.json").read_text())["schedule_hash"]
    assert main(["compare", str(a), str(b), "--flows"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and ha in err and "f" * 64 in err
    assert main(["compare", str(a), str(b), str(a), "--flows"]) == 2
    assert "exactly two" in capsys.readouterr().err
    assert main(["compare", str(a), str(a), "--flows", "-m", "fabric.drops"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


# ------------------------------------------------------------------------------------ two sim runs of a ring

RING = {
    "name": "ring", "seed": 3, "fabric": {"kind": "sim", "ports": {"rate": "25Gbps", "latency": "1us"}},
    "ranks": {"count": 4}, "warmup": 1, "iterations": 2,
    "workload": {"collectives": [
        {"name": "big", "type": "all_reduce", "group": "0-3", "size": "256KiB", "algorithm": "ring"},
        {"name": "small", "type": "all_reduce", "group": "0-3", "size": "64KiB", "algorithm": "ring",
         "start_offset": "2ms"},
    ]},
}


def test_two_sim_runs_of_one_ring_at_different_port_rates(tmp_path: Path, capsys) -> None:
    profile = tmp_path / "ring.yaml"
    profile.write_text(yaml.safe_dump(RING, sort_keys=False))
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    assert main(["run", str(profile), "-o", str(fast), "--quiet"]) == 0
    assert main(["run", str(profile), "-o", str(slow), "--quiet", "--set", "fabric.ports.rate=10Gbps"]) == 0
    capsys.readouterr()
    assert main(["compare", str(fast), str(slow), "--flows", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["flows"] == out["compared"] > 0
    # serialisation scales by 25/10, the fixed latency does not: every flow is between 2× and 2.5× slower
    assert 2.0 < out["fct_ratio"]["min"] <= out["fct_ratio"]["p50"] <= out["fct_ratio"]["max"] <= 2.5
    assert out["spearman"] == pytest.approx(1.0)  # a contention-free ring keeps its order
    assert 2.0 < out["cct_ratio"]["min"] <= out["cct_ratio"]["max"] <= 2.5
    assert len(out["instances"]) == 4 and all(i["ratio"] for i in out["instances"])
    assert all(p["ecn_marks"] == [0, 0] and p["drops"] == [0, 0] for p in out["ports"]) and out["ports"]
    # the same pair the other way round: ratios invert
    assert main(["compare", str(slow), str(fast), "--flows", "--json"]) == 0
    back = json.loads(capsys.readouterr().out)
    assert back["fct_ratio"]["max"] == pytest.approx(1 / out["fct_ratio"]["min"])
