"""workload.jobs with every kind of job workload (trace, generate, collectives), and bad input inside a job:
one ``error:`` line naming ``workload.jobs[i]...``, exit 2, before anything runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.cli import main
from emulator.config import load_profile, profile_from_dict
from emulator.config.loader import package_dir
from emulator.errors import ConfigError
from emulator.run.workload import load_workload

REPO = Path(__file__).resolve().parents[2]
RING = package_dir() / "data" / "traces" / "custom_ring_allreduce_8npus_1MB" / "custom_allreduce"
SHARED = REPO.parent / "shared" / "traces"
PYTORCH_RANK0 = SHARED / "chakra" / "tests" / "data" / "chakra"
A2A_4 = SHARED / "astra-sim" / "examples" / "workload" / "microbenchmarks" / "all_to_all" / "4npus_1MB" / "all_to_all"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="shared/traces not beside the repo")

STUDY = {"kind": "sim", "topology": {"kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 4,
                                     "oversubscription": 2, "ecmp": "udp_sport"},
         "ports": {"rate": "25Gbps", "latency": "1us"}}
GEN = {"name": "dp", "ranks": 4, "placement": "round_robin", "workload": {"generate": {
    "kind": "data-parallel", "options": {"layers": 2, "params-per-layer": "256KiB", "bucket-size": "256KiB"}}}}
INLINE = {"name": "ar", "placement": "round_robin", "workload": {"collectives": [
    {"type": "all_reduce", "size": "64KiB", "group": "0-3", "algorithm": "ring"}]}}


def _data(*jobs: dict) -> dict:
    return {"name": "tj", "seed": 3, "warmup": 0, "iterations": 1, "fabric": STUDY, "workload": {"jobs": list(jobs)}}


def _trace_job(prefix: Path | str, **extra) -> dict:
    return {"name": "tr", "placement": "round_robin", **extra, "workload": {"trace": {"prefix": str(prefix)}}}


def test_the_profile_runs_a_trace_job_next_to_a_generated_job(tmp_path: Path) -> None:
    from emulator.run.pipeline import run_profile

    p = load_profile(REPO / "profiles" / "jobs_trace_and_generator.yaml", ["iterations=1", "warmup=0"])
    ring, dp = p.workload.jobs
    assert ring.workload.kind == "trace" and dp.workload.kind == "generate"
    assert ring.ranks == 8 and ring.hosts == (0, 4, 1, 5, 2, 6, 3, 7) and dp.hosts == (0, 4, 1, 5)
    rep = run_profile(p, out_dir=tmp_path / "r", quiet=True)
    s = rep.doc["summary"]
    assert rep.exit_code == 0
    assert s["totals"]["bytes_delivered"] == s["totals"]["bytes_scheduled"] > 0
    jobs = s["jobs"]
    assert jobs["ring"]["bytes_scheduled"] == 8 * 14 * 131_072  # the trace: 14 sends of 128 KiB per rank
    assert jobs["ring"]["flows_unfinished"] == jobs["dp"]["flows_unfinished"] == 0
    assert jobs["ring"]["bytes_scheduled"] + jobs["dp"]["bytes_scheduled"] == s["totals"]["bytes_scheduled"]
    assert rep.doc["workload"]["description"].startswith("jobs: ring (trace ")


def test_a_trace_job_compiles_like_the_trace_alone_placed_on_its_hosts() -> None:
    alone = load_workload(profile_from_dict({"name": "x", "workload": {"trace": {"prefix": str(RING)}}})).schedule
    p = profile_from_dict(_data(_trace_job(RING), {**INLINE, "share": True}))
    s = load_workload(p).schedule
    info = {j["name"]: j for j in s.meta["jobs"]}
    lo, hi = info["tr"]["flows"]
    hosts = np.asarray(p.workload.jobs[0].hosts)
    assert hi - lo == alone.n_flows
    assert (s.flow_size_bytes[lo:hi] == alone.flow_size_bytes).all()
    assert (s.flow_src[lo:hi] == hosts[alone.flow_src]).all() and (s.flow_dst[lo:hi] == hosts[alone.flow_dst]).all()
    assert set(s.group_names) >= {"ar/all_reduce#0"}


def test_a_relative_job_trace_prefix_resolves_against_the_profile_file(tmp_path: Path) -> None:
    d = tmp_path / "traces"
    d.mkdir()
    for f in RING.parent.glob("custom_allreduce.*.et"):
        shutil.copy(f, d / f.name)
    f = tmp_path / "p.yaml"
    data = _data(_trace_job("traces/custom_allreduce"))
    f.write_text(yaml.safe_dump(data))
    p = load_profile(f)
    assert p.workload.jobs[0].workload.trace.prefix == str(d / "custom_allreduce") and p.workload.jobs[0].ranks == 8


@needs_shared
def test_a_replicated_one_rank_trace_job_with_its_options() -> None:
    job = {"name": "pt", "placement": "round_robin", "workload": {
        "trace": {"prefix": str(PYTORCH_RANK0), "replicate": 4, "dep_policy": "data"},
        "compile": {"compute_scale": 0.5}}}
    p = profile_from_dict(_data(job, {**INLINE, "placement": "contiguous"}))
    pt, ar = p.workload.jobs
    assert pt.ranks == 4 and pt.hosts == (0, 4, 1, 5) and ar.hosts == (2, 3, 6, 7)
    w = load_workload(p)
    single = load_workload(profile_from_dict({"name": "x", "workload": {
        "trace": {"prefix": str(PYTORCH_RANK0), "replicate": 4, "dep_policy": "data"},
        "compile": {"compute_scale": 0.5}}}))
    lo, hi = w.schedule.meta["jobs"][0]["flows"]
    assert hi - lo == single.schedule.n_flows > 0
    assert int(w.schedule.flow_size_bytes[lo:hi].sum()) == int(single.schedule.flow_size_bytes.sum())
    assert w.trace_hash.split(",")[0] == single.trace_hash
    assert any(x.startswith("job pt: ") for x in w.warnings)  # the reader's warnings say which job


@needs_shared
def test_a_shared_trace_job_and_a_generator_job_run_side_by_side(tmp_path: Path) -> None:
    from emulator.run.pipeline import run_profile

    p = profile_from_dict(_data(_trace_job(A2A_4), GEN))
    assert p.workload.jobs[0].hosts == (0, 4, 1, 5) and p.workload.jobs[1].hosts == (2, 6, 3, 7)
    rep = run_profile(p, out_dir=tmp_path / "r", quiet=True)
    s = rep.doc["summary"]
    assert s["totals"]["bytes_delivered"] == s["totals"]["bytes_scheduled"]
    assert s["jobs"]["tr"]["bytes_scheduled"] == 4 * 3 * 262_144  # A2A, 4 ranks: 3 × S/4 per rank
    assert s["jobs"]["tr"]["count"] == 1 and s["jobs"]["dp"]["count"] == 1


def _bad(tmp_path: Path) -> list[tuple[str, dict, str, str]]:
    junk = tmp_path / "junk"
    (tmp_path / "junk.0.et").write_bytes(b"\x6a\x00\x00")
    bad_gen = {**GEN, "workload": {"generate": {"kind": "data-parallel", "options": {"layers": 0}}}}
    return [
        ("unknown key", _data({**_trace_job(RING), "workload": {"trace": {"prefix": str(RING), "bogus": 1}}}),
         "workload.jobs[0].workload.trace.bogus", "unknown key"),
        ("bad trace path", _data(_trace_job(tmp_path / "nothing")), "workload.jobs[0].workload.trace.prefix",
         "no trace files"),
        ("unreadable trace", _data(INLINE, {**_trace_job(junk), "ranks": 1, "share": True,
                                            "workload": {"trace": {"prefix": str(junk), "replicate": 1}}}),
         "workload.jobs[1].workload.trace", "junk.0.et"),
        ("generator option", _data(INLINE, bad_gen), "workload.jobs[1].workload.generate.options", "layers"),
        ("trace ranks", _data({**_trace_job(RING), "ranks": 4}), "workload.jobs[0].ranks", "the trace has 8 ranks"),
        ("placement outside", _data({**INLINE, "placement": [0, 1, 2, 9]}), "workload.jobs[0].placement[3]",
         "host 9 outside the fabric's 8 hosts"),
        ("placement length", _data({**_trace_job(RING), "placement": [0, 1, 2, 3]}), "workload.jobs[0].placement",
         "lists 4 hosts for the job's 8 ranks"),
        ("does not fit", _data(_trace_job(RING), GEN), "workload.jobs[1].placement", "not fit"),
        ("shared rank", _data({**INLINE, "placement": [0, 1, 2, 3]}, {**GEN, "placement": [3, 4, 5, 6]}),
         "workload.jobs[1].placement", "set share: true"),
        ("ranks outside the world", _data({**INLINE, "ranks": 2}), "workload.jobs[0].workload.collectives[0].group",
         "rank 2 is outside the job's 2 ranks"),
        ("too many ranks", _data({**GEN, "ranks": 9}), "workload.jobs[0].placement", "9 ranks do not fit"),
        ("one-rank collective", _data({**INLINE, "ranks": 1, "workload": {"collectives": [
            {"type": "all_reduce", "size": "8KiB"}]}}), "workload.jobs[0].workload.collectives[0].group",
         "at least 2 ranks"),
    ]


@pytest.mark.parametrize("case", range(12))
def test_bad_input_inside_a_job_is_one_error_line_naming_the_key(tmp_path: Path, capsys, case: int) -> None:
    what, data, key, words = _bad(tmp_path)[case]
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(data))
    out = tmp_path / "r"
    assert main(["run", str(f), "-o", str(out)]) == 2, what
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), (what, err)
    assert f"{key}:" in err[0] or f"{key} " in err[0], (what, err[0])
    assert words in err[0], (what, err[0])
    assert not out.exists() or not any(out.iterdir())


def test_results_name_each_job_kind(tmp_path: Path) -> None:
    from emulator.run.pipeline import run_profile

    p = profile_from_dict(_data({**_trace_job(RING)}, {**GEN, "share": True}, {**INLINE, "share": True}))
    rep = run_profile(p, out_dir=tmp_path / "r", quiet=True)
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    assert set(doc["summary"]["jobs"]) == {"tr", "dp", "ar"} and rep.exit_code == 0
    assert doc["summary"]["totals"]["bytes_delivered"] == doc["summary"]["totals"]["bytes_scheduled"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.sampled_from(["contiguous", "round_robin", "list"]), st.booleans()),
                min_size=1, max_size=4), st.randoms(use_true_random=False))
def test_placed_jobs_fit_the_fabric_and_share_hosts_only_when_allowed(jobs, rnd) -> None:
    from emulator.config.jobs import place_jobs
    from emulator.config.model import Topology

    spec = []
    for i, (n, kind, share) in enumerate(jobs):
        placement = tuple(rnd.sample(range(10), n)) if kind == "list" else kind
        spec.append({**INLINE, "name": f"j{i}", "ranks": n, "placement": list(placement) if kind == "list" else kind,
                     "share": share, "workload": {"collectives": [{"type": "all_reduce", "size": "8KiB"}]}})
    try:
        p = profile_from_dict(_data(*spec))
    except ConfigError as exc:
        assert "workload.jobs[" in str(exc) and "\n" not in str(exc)
        return
    topo = Topology(kind="leaf_spine", leaves=2, hosts_per_leaf=4)
    assert place_jobs(p.workload.jobs, topo, 8) == p.workload.jobs  # placing again changes nothing
    owner: dict[int, int] = {}
    for i, job in enumerate(p.workload.jobs):
        assert len(job.hosts) == job.ranks == jobs[i][0] and len(set(job.hosts)) == job.ranks
        assert all(0 <= h < 8 for h in job.hosts)
        for h in job.hosts:
            if h in owner:
                assert job.share or p.workload.jobs[owner[h]].share
            owner.setdefault(h, i)
