"""workload.jobs: several jobs on one fabric, each placed on its own hosts; per-job results."""

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
from emulator.errors import ConfigError
from emulator.run.workload import load_workload, run_schedule
from emulator.schedule.compose import place_ranks
from emulator.stats.jobs import job_op_mask


def _job(name: str, placement="round_robin", group="0-3", **extra) -> dict:
    return {"name": name, "placement": placement, **extra,
            "workload": {"collectives": [{"type": "all_reduce", "size": "64KiB", "group": group,
                                          "algorithm": "ring"}]}}


def _data(*jobs: dict, **top) -> dict:
    return {"name": "jobs", "seed": 1, "warmup": 1, "iterations": 2,
            "fabric": {"kind": "sim", "topology": {"kind": "leaf_spine", "leaves": 2, "hosts_per_leaf": 4}},
            "workload": {"jobs": list(jobs)}, **top}


def test_round_robin_jobs_interleave_on_the_leaves() -> None:
    p = profile_from_dict(_data(_job("a"), _job("b")))
    a, b = p.workload.jobs
    assert a.hosts == (0, 4, 1, 5) and b.hosts == (2, 6, 3, 7)
    assert p.ranks.count == 8 and p.ranks.hosts == tuple(range(8))


def test_contiguous_and_listed_placements() -> None:
    p = profile_from_dict(_data(_job("a", "contiguous"), _job("b", [7, 6, 5, 4])))
    assert p.workload.jobs[0].hosts == (0, 1, 2, 3) and p.workload.jobs[1].hosts == (7, 6, 5, 4)


@pytest.mark.parametrize(("jobs", "key", "words"), [
    ((_job("a", [0, 1, 2, 9]),), "workload.jobs[0].placement[3]", "host 9 outside the fabric's 8 hosts"),
    ((_job("a", "contiguous", group="0-5"), _job("b", "contiguous")), "workload.jobs[1].placement", "do not fit"),
    ((_job("a", [0, 1, 2, 3]), _job("b", [3, 4, 5, 6])), "workload.jobs[1].placement", "set share: true"),
    ((_job("a"), _job("a")), "workload.jobs[1].name", "already names"),
    (({"name": "a", "workload": {"schedule": "x.npz"}},), "workload.jobs[0].workload.schedule", "trace, generate, collectives"),
])
def test_bad_jobs_name_the_key(jobs, key, words) -> None:
    with pytest.raises(ConfigError) as exc:
        profile_from_dict(_data(*jobs))
    assert f"{key}:" in str(exc.value) and words in str(exc.value)


def test_share_lets_two_jobs_use_one_host() -> None:
    p = profile_from_dict(_data(_job("a", [0, 1, 2, 3]), _job("b", [3, 4, 5, 6], share=True)))
    assert p.workload.jobs[1].hosts == (3, 4, 5, 6)


def test_bad_job_placement_is_one_error_line_exit_2(tmp_path: Path, capsys) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(_data(_job("a", [0, 1, 2, 3]), _job("b", [3, 4, 5, 6]))))
    assert main(["run", str(f), "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "workload.jobs[1].placement" in err[0]
    assert not (tmp_path / "r").exists()


def test_jobs_compile_into_one_schedule_with_job_ops_and_groups() -> None:
    p = profile_from_dict(_data(_job("a"), _job("b", start_offset="10us", iterations=2)))
    w = load_workload(p)
    s = w.schedule
    info = {j["name"]: j for j in s.meta["jobs"]}
    assert set(s.group_names) == {"a/all_reduce#0", "b/all_reduce#0"}
    for name, hosts in (("a", {0, 1, 4, 5}), ("b", {2, 3, 6, 7})):
        lo, hi = info[name]["flows"]
        assert set(s.flow_src[lo:hi].tolist()) == hosts and set(s.flow_dst[lo:hi].tolist()) == hosts
    assert info["b"]["flows"][1] - info["b"]["flows"][0] == 2 * (info["a"]["flows"][1] - info["a"]["flows"][0])
    run = run_schedule(w, p)
    ma, mb = job_op_mask(run, info["a"]), job_op_mask(run, info["b"])
    assert not (ma & mb).any() and (ma | mb).all()
    delays = run.op_duration_ns[mb & (run.op_kind == 2)]
    assert (delays == 10_000).sum() == 4 * 3  # the offset on each of b's 4 ranks, every run iteration


@settings(max_examples=25, deadline=None)
@given(st.permutations(range(6)), st.integers(6, 9))
def test_place_ranks_keeps_every_op_and_dependency(perm, world) -> None:
    p = profile_from_dict({"name": "x", "ranks": {"count": 6}, "workload": {"collectives": [
        {"type": "all_reduce", "size": "8KiB", "algorithm": "ring"}]}})
    s = load_workload(p).schedule
    t = place_ranks(s, perm, world)
    m = np.asarray(perm)
    assert t.world_size == world and t.n_ops == s.n_ops
    assert (t.flow_src == m[s.flow_src]).all() and (t.flow_dst == m[s.flow_dst]).all()
    for r in range(6):
        old, new = s.rank_ops(r), t.rank_ops(int(m[r]))
        assert (t.op_kind[new.start:new.stop] == s.op_kind[old.start:old.stop]).all()
        assert (t.op_flow[new.start:new.stop] == s.op_flow[old.start:old.stop]).all()
        parents_old = [list(s.parents(i) - old.start) for i in old]
        parents_new = [list(t.parents(i) - new.start) for i in new]
        assert parents_old == parents_new
    child = np.repeat(np.arange(t.n_ops), np.diff(t.dep_ptr))
    assert (t.op_rank[t.dep_idx.astype(np.int64)] == t.op_rank[child]).all()


def test_two_jobs_run_on_sim_with_per_job_results(tmp_path: Path, capsys) -> None:
    f = tmp_path / "two.yaml"
    f.write_text(yaml.safe_dump(_data(_job("a"), _job("b", start_offset="20us", iterations=2))))
    assert main(["run", str(f), "-o", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    s = doc["summary"]
    assert s["totals"]["bytes_delivered"] == s["totals"]["bytes_scheduled"] > 0
    a, b = s["jobs"]["a"], s["jobs"]["b"]
    assert a["hosts"] == [0, 4, 1, 5] and b["hosts"] == [2, 6, 3, 7]
    assert a["count"] == b["count"] == 2 and a["incomplete"] == b["incomplete"] == 0
    assert a["instances"] == 2 and b["instances"] == 4
    assert a["flows_unfinished"] == b["flows_unfinished"] == 0 and b["bytes_finished"] == 2 * a["bytes_finished"]
    assert a["bytes_scheduled"] + b["bytes_scheduled"] == s["totals"]["bytes_scheduled"]
    # b runs two All-Reduces behind a 20 µs offset: its step takes over twice a's
    assert b["jct"]["p50"] > 2 * a["jct"]["p50"] + 20_000 * 0.9
    assert a["cct"]["p50"] == pytest.approx(b["cct"]["p50"], rel=0.2)
    assert "#job" in out and "\na     0,4,1,5" in out and "\nb     2,6,3,7" in out
    from emulator.results.io import read_results
    from emulator.results.recompute import recompute

    assert recompute(tmp_path / "r").jobs == read_results(tmp_path / "r").summary.jobs  # the schedule keeps meta.jobs


def test_a_run_without_jobs_has_no_jobs_section(tmp_path: Path) -> None:
    p = profile_from_dict({"name": "x", "ranks": {"count": 4}, "warmup": 0, "iterations": 1, "workload": {
        "collectives": [{"type": "all_reduce", "size": "8KiB"}]}})
    from emulator.run.pipeline import run_profile

    rep = run_profile(p, out_dir=tmp_path / "r", quiet=True)
    assert "jobs" not in rep.doc["summary"]
    assert "jobs" not in json.loads((tmp_path / "r" / "results.json").read_text())["summary"]


def test_report_and_compare_show_jobs_side_by_side(tmp_path: Path, capsys) -> None:
    from emulator.report.compare import default_metrics
    from emulator.results.io import read_results

    for name, jobs in (("alone", (_job("a"),)), ("together", (_job("a"), _job("b")))):
        f = tmp_path / f"{name}.yaml"
        f.write_text(yaml.safe_dump(_data(*jobs, name=name, warmup=0, iterations=1)))
        assert main(["run", str(f), "-o", str(tmp_path / name)]) == 0
    capsys.readouterr()
    assert main(["report", str(tmp_path / "together")]) == 0
    out = capsys.readouterr().out
    assert "Jobs\n----" in out and "\n a    0,4,1,5" in out and "\n b    2,6,3,7" in out
    summaries = [read_results(tmp_path / n).summary for n in ("alone", "together")]
    rows = default_metrics(summaries)
    assert "jobs.a.jct.p50" in rows and "jobs.b.cct.p99" in rows
    assert main(["compare", str(tmp_path / "alone"), str(tmp_path / "together")]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("jobs.a.jct.p50"))
    assert "n/a" not in line


def test_generated_job_next_to_inline_job_and_a_job_slo(tmp_path: Path) -> None:
    from emulator.run.pipeline import run_profile

    gen = {"name": "dp", "ranks": 4, "workload": {"generate": {"kind": "data-parallel", "options": {
        "layers": 2, "params-per-layer": "256KiB", "bucket-size": "256KiB", "fwd": "10us", "bwd": "20us"}}}}
    p = profile_from_dict({"name": "g", "warmup": 0, "iterations": 1, "fabric": {"kind": "sim"},
                           "slo": ["jobs.dp.jct.p99 < 1s"],
                           "workload": {"jobs": [gen, {"name": "a2a", "workload": {"collectives": [
                               {"type": "all_to_all", "size": "64KiB", "group": "0-3"}]}}]}})
    assert p.workload.jobs[1].hosts == (4, 5, 6, 7)
    rep = run_profile(p, out_dir=tmp_path / "r", quiet=True)
    s = rep.doc["summary"]
    assert rep.exit_code == 0 and rep.slo[0]["ok"]
    assert s["totals"]["bytes_delivered"] == s["totals"]["bytes_scheduled"]
    assert s["jobs"]["dp"]["count"] == 1 and s["jobs"]["dp"]["jct"]["p50"] > 60_000  # 2×fwd + 2×bwd at least


def test_a_job_group_outside_its_ranks_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"workload\.jobs\[0\]\.workload\.collectives\[0\]\.group: rank 4"):
        profile_from_dict(_data({**_job("a", group="0-5"), "ranks": 4}))
