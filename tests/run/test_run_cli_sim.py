"""`emulator run` end to end on the sim fabric through the CLI: files, fields, row counts, conservation."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from emulator.cli import main
from emulator.config import profile_from_dict
from emulator.results import RESULTS_VERSION, read_results, recompute
from emulator.schedule.io import load_schedule

REQUIRED_KEYS = ("results_version", "tool", "host", "started_utc", "profile", "trace_hash", "schedule_hash",
                 "fabric_kind", "complete", "errors", "summary", "iterations", "analysis", "driver", "files")


def _strict(text: str) -> dict:
    def no_constant(name: str) -> None:
        raise AssertionError(f"results.json holds {name}")

    return json.loads(text, parse_constant=no_constant)


def test_sim_run_writes_a_complete_results_directory(tiny_profile, tmp_path: Path, capsys) -> None:
    out = tmp_path / "res"
    rc = main(["run", str(tiny_profile()), "-o", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0
    for name in ("results.json", "flows.csv", "collectives.csv", "ranks.csv", "records.npz", "schedule.bin",
                 "timeseries.npz"):
        assert (out / name).is_file(), name
    doc = _strict((out / "results.json").read_text())
    for key in REQUIRED_KEYS:
        assert key in doc, key
    assert doc["results_version"] == RESULTS_VERSION
    assert doc["fabric_kind"] == "sim" and doc["complete"] is True and doc["errors"] == []
    assert {"hostname", "kernel", "cpu_count", "python"} <= set(doc["host"])
    assert doc["profile"]["name"] == "tiny"
    s = doc["summary"]
    for t in ("all_reduce", "all_to_all"):
        assert s[t]["count"] == 4 and s[t]["warmup"] == 2  # 2 per run iteration; 1 warmup + 2 measured
        assert 0 < s[t]["cct"]["p50"] <= s[t]["cct"]["p99"] <= s[t]["cct"]["max"]
        assert s[t]["busbw_gbps"] > 0
    assert s["totals"]["bytes_delivered"] == s["totals"]["bytes_scheduled"] > 0
    assert s["totals"]["flows_incomplete"] == 0
    assert set(s["ranks"]) == {"0", "1", "2", "3"}
    assert "all_reduce" in printed and "results:" in printed

    schedule = load_schedule(out / "schedule.bin")
    with open(out / "flows.csv") as fh:
        flows = list(csv.DictReader(fh))
    with open(out / "collectives.csv") as fh:
        members = list(csv.DictReader(fh))
    assert len(flows) == schedule.n_flows == s["totals"]["flows"]
    assert len(members) == int(schedule.coll_rank_ptr[-1]) == schedule.n_colls * 4
    assert sum(int(r["size_bytes"]) for r in flows if int(r["end_ns"]) >= 0) == s["totals"]["bytes_scheduled"]
    assert sum(int(r["warmup"]) for r in members) == 4 * 4  # 4 warmup instances × 4 members
    for r in flows:
        assert int(r["end_ns"]) >= int(r["actual_start_ns"]) >= int(r["scheduled_start_ns"]) >= 0
        assert float(r["slowdown"]) >= 1
    with open(out / "ranks.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 4
    bytes_sent = sum(v["bytes_sent"] for v in s["ranks"].values())
    assert bytes_sent >= s["totals"]["bytes_scheduled"]  # retransmits can only add


def test_reading_back_and_recomputing_give_the_written_summary(tiny_profile, tmp_path: Path) -> None:
    out = tmp_path / "res"
    assert main(["run", str(tiny_profile()), "-o", str(out), "--quiet"]) == 0
    res = read_results(out)
    assert res.doc == json.loads((out / "results.json").read_text())
    assert recompute(res) == res.summary
    ts = res.timeseries()
    assert ts["port_t_ns"].shape == ts["port_queue_bytes"].shape
    # another straggler factor changes only what depends on it
    other = recompute(res, slow_factor=1.01)
    assert other.stragglers.slow_factor == 1.01
    assert other.collectives["all_reduce"].cct == res.summary.collectives["all_reduce"].cct


def test_same_seed_same_summary_and_the_seed_reaches_the_sim(tiny_profile, tmp_path: Path) -> None:
    p = tiny_profile(fabric={"kind": "sim", "ports": {"rate": "25Gbps", "latency": "1us"}, "loss": "2%"})  # with loss the seed decides which packets go
    runs = {}
    for name, extra in (("a", []), ("b", []), ("c", ["--set", "seed=4"])):
        assert main(["run", str(p), "-o", str(tmp_path / name), "--quiet", *extra]) == 0
        runs[name] = read_results(tmp_path / name)
    a, b, c = runs["a"], runs["b"], runs["c"]

    def no_driver(x):  # the driver's health holds the wall time and speed of the simulator
        return replace(x.summary, generator=replace(x.summary.generator, driver={}))

    assert no_driver(a) == no_driver(b)
    ra, rb = a.records(), b.records()
    assert all(np.array_equal(ra[r].end_ns, rb[r].end_ns) for r in ra)
    retransmits = [sum(v.retransmits for v in x.summary.ranks.values()) for x in (a, c)]
    assert min(retransmits) > 0 and a.summary.totals == c.summary.totals  # every byte still delivered
    assert a.summary.ranks != c.summary.ranks and a.doc["seed"] == 3 and c.doc["seed"] == 4


def test_groups_run_concurrently_on_the_sim_fabric(tiny_profile, tmp_path: Path) -> None:
    out = tmp_path / "res"
    assert main(["run", str(tiny_profile()), "-o", str(out), "--quiet"]) == 0
    spans: dict[str, list[tuple[int, int]]] = {}
    inst: dict[tuple[str, str], list[int]] = {}
    for r in read_results(out).csv("collectives"):
        key = (r["group"], r["instance"])
        inst.setdefault(key, []).extend([int(r["start_ns"]), int(r["end_ns"])])
    for (group, _), times in inst.items():
        spans.setdefault(group, []).append((min(times), max(times)))
    assert set(spans) == {"ar", "a2a"}
    overlaps = sum(1 for a in spans["ar"] for b in spans["a2a"] if a[0] < b[1] and b[0] < a[1])
    assert overlaps > 0
    # the first instance of each group starts at t = 0, together
    assert min(s for s, _ in spans["ar"]) == min(s for s, _ in spans["a2a"]) == 0


def test_fabric_flag_and_set_override_the_profile(tiny_profile, tmp_path: Path) -> None:
    p = tiny_profile(fabric={"kind": "loopback", "ports": {"rate": "25Gbps"}})
    out = tmp_path / "res"
    assert main(["run", str(p), "--fabric", "sim", "--set", "iterations=1", "--set", "warmup=0",
                 "-o", str(out), "--quiet"]) == 0
    doc = read_results(out).doc
    assert doc["fabric_kind"] == "sim" and doc["profile"]["fabric"]["kind"] == "sim"
    assert doc["iterations"] == {"warmup": 0, "measured": 1, "colls_per_iteration": 4,
                                 "flows_per_iteration": doc["iterations"]["flows_per_iteration"]}
    assert doc["summary"]["all_reduce"]["count"] == 2


def test_compile_then_run_schedule(tiny_profile, tmp_path: Path) -> None:
    prefix = tmp_path / "trace"
    assert main(["generate", "collective", "--ranks", "4", "--size", "32KiB", "--iterations", "2",
                 "-o", str(prefix)]) == 0
    sched = tmp_path / "one.sched"
    assert main(["compile", str(prefix), "-o", str(sched)]) == 0
    out = tmp_path / "res"
    assert main(["run", str(tiny_profile()), "--schedule", str(sched), "-o", str(out), "--quiet"]) == 0
    doc = read_results(out).doc
    assert doc["workload"]["source"] == "schedule"
    assert doc["profile"]["workload"] == {"schedule": str(sched.resolve())}  # what ran, not the profile's collectives
    assert profile_from_dict(doc["profile"]).workload.schedule == str(sched.resolve())
    assert doc["summary"]["all_reduce"]["count"] == 2 * 2  # 2 measured iterations × 2 per schedule
    assert "all_to_all" not in doc["summary"]
    assert not math.isnan(doc["summary"]["all_reduce"]["busbw_gbps"])
    # an expanded (run) schedule is refused: it would double the warmup
    assert main(["run", str(tiny_profile()), "--schedule", str(out / "schedule.bin"), "-o",
                 str(tmp_path / "again"), "--quiet"]) == 2


def test_bad_input_is_exit_2_with_one_line(tmp_path: Path, capsys) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("workload: {collectives: [{type: all_reduce, size: 1MiB}]}\nranks: {count: 4}\nfabric: {kind: warp}\n")
    assert main(["run", str(p), "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "fabric.kind" in err[0]
    assert not (tmp_path / "x").exists()
