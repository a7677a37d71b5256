"""Exit codes of `emulator run`: SLOs (1), incomplete runs (3), Ctrl-C (130) — files written every time."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import emulator.run.pipeline as pipeline
from emulator.cli import main
from emulator.drivers.ideal import run_ideal
from emulator.results import read_results, recompute


def test_slo_broken_exits_1_and_names_it(tiny_profile, tmp_path: Path, capsys) -> None:
    p = tiny_profile(slo=["all_reduce.cct.p99 < 1us", "all_to_all.cct.p99 < 10s", "stragglers.max_skew < 100%"])
    rc = main(["run", str(p), "-o", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert rc == 1
    broken = [line for line in out.splitlines() if line.startswith("SLO broken")]
    assert len(broken) == 1
    assert broken[0].startswith("SLO broken: all_reduce.cct.p99 = ") and broken[0].endswith("limit < 1.00 us")
    slo = read_results(tmp_path / "r").doc["slo"]
    assert [s["ok"] for s in slo] == [False, True, True]
    assert slo[0]["value"] == read_results(tmp_path / "r").summary.collectives["all_reduce"].cct.p99


def test_all_slos_hold_exits_0(tiny_profile, tmp_path: Path, capsys) -> None:
    p = tiny_profile(slo=["all_reduce.cct.p99 < 10s", "all_to_all.busbw_gbps > 0.001", "stragglers.max_skew <= 100%",
                          "totals.flows_incomplete == 0"])
    assert main(["run", str(p), "-o", str(tmp_path / "r")]) == 0
    assert "SLO broken" not in capsys.readouterr().out


def test_slo_on_a_metric_the_workload_lacks_is_bad_input_before_the_run(tiny_profile, tmp_path: Path,
                                                                        monkeypatch, capsys) -> None:
    _with_driver(monkeypatch, lambda schedule, progress: pytest.fail("the run must not start"))
    p = tiny_profile(slo=["all_reduce.cct.p99 < 1s", "all_gather.cct.p99 < 5ms"])
    assert main(["run", str(p), "-o", str(tmp_path / "r")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("error: ") and "slo[1] 'all_gather.cct.p99 < 5ms'" in captured.err
    assert "runs no all_gather (its collectives: all_reduce, all_to_all)" in captured.err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("slo", "needle"), [
    ("all_reduce.cct.p99x < 5ms", "did you mean 'all_reduce.cct.p99'?"),
    ("allreduce.cct.p99 < 5ms", "did you mean 'all_reduce.cct.p99'?"),
    ("stragglers.max_skw < 20%", "did you mean 'stragglers.max_skew'?"),
    ("ranks.9.retransmits == 0", "keys there: 0, 1, 2, 3"),
    ("all_reduce.cct.p99.ns < 5ms", "'all_reduce.cct.p99' is a value"),
])
def test_slo_typos_name_the_metric_and_the_right_one(tiny_profile, tmp_path: Path, monkeypatch, capsys,
                                                     slo: str, needle: str) -> None:
    _with_driver(monkeypatch, lambda schedule, progress: pytest.fail("the run must not start"))
    assert main(["run", str(tiny_profile(slo=[slo])), "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and repr(slo.split()[0]) in err and needle in err, err


@pytest.mark.parametrize(("slo", "needle"), [
    ("all_reduce.cct.p99 < 1GB", "the threshold is a size but 'all_reduce.cct.p99' is a duration"),
    ("all_reduce.busbw_gbps > 10Gbps", "is a rate in GB/s (plain number)"),
    ("fabric.max_peak_queue_bytes < 5ms", "the threshold is a duration but"),
    ("stragglers.max_skew < 1ms", "is a fraction (%)"),
])
def test_slo_threshold_in_another_unit_than_the_metric_is_bad_input(tiny_profile, tmp_path: Path, monkeypatch,
                                                                   capsys, slo: str, needle: str) -> None:
    """A time compared with bytes was accepted and reported as 'SLO ok: ... = 144.93 MiB'."""
    _with_driver(monkeypatch, lambda schedule, progress: pytest.fail("the run must not start"))
    assert main(["run", str(tiny_profile(slo=[slo])), "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "slo[0]" in err and needle in err, err


def test_slo_paths_of_the_workload_pass_the_check(tiny_profile, tmp_path: Path, monkeypatch, capsys) -> None:
    """Paths into lists and measurement-dependent keys cannot be checked before the run: they are let through."""
    _with_driver(monkeypatch, lambda schedule, progress: run_ideal(schedule))
    p = tiny_profile(slo=["groups.ar.cct.p99 < 10s", "iteration.jct.p99 < 10s", "ranks.3.retransmits == 0",
                          "p2p.flows == 0", "fabric.ports.0.drops == 0", "stragglers.last_finisher_histogram.9 > 0"])
    assert main(["run", str(p), "-o", str(tmp_path / "r"), "--quiet"]) == 1
    slo = read_results(tmp_path / "r").doc["slo"]
    assert [s["ok"] for s in slo] == [True, True, True, True, False, False]


def _with_driver(monkeypatch, run) -> None:
    driver = SimpleNamespace(name="ideal", run=run)
    monkeypatch.setattr(pipeline, "make_driver", lambda profile, kind=None: driver)


def test_dead_rank_exits_3_and_keeps_partial_records(tiny_profile, tmp_path: Path, monkeypatch, capsys) -> None:
    _with_driver(monkeypatch, lambda schedule, progress: run_ideal(schedule, dead_ranks=[2]))
    out = tmp_path / "r"
    assert main(["run", str(tiny_profile()), "-o", str(out)]) == 3
    err = capsys.readouterr().err
    assert "rank 2 died" in err
    res = read_results(out)
    assert res.doc["complete"] is False and any("rank 2" in e for e in res.doc["errors"])
    s = res.summary
    assert s.totals.flows_incomplete > 0
    assert s.totals.bytes_delivered < s.totals.bytes_scheduled
    assert s.ranks["2"].reported is False and s.ranks["0"].ops_done > 0
    assert any("rank(s) 2" in w for w in s.warnings)
    recs = res.records()
    assert sorted(recs) == [0, 1, 3]
    assert (recs[0].end_ns >= 0).any() and (recs[0].end_ns < 0).any()
    assert len(res.csv("flows")) == res.schedule().n_flows
    assert recompute(res) == s


def test_timeout_exits_3(tiny_profile, tmp_path: Path, monkeypatch) -> None:
    _with_driver(monkeypatch, lambda schedule, progress: run_ideal(schedule, stop_ns=30_000))
    assert main(["run", str(tiny_profile()), "-o", str(tmp_path / "r"), "--quiet"]) == 3
    doc = read_results(tmp_path / "r").doc
    assert any("timeout" in e for e in doc["errors"])


def test_sim_time_limit_is_an_incomplete_run(tiny_profile, tmp_path: Path) -> None:
    assert main(["run", str(tiny_profile()), "--set", "timeout=20us", "-o", str(tmp_path / "r"), "--quiet"]) == 3
    doc = read_results(tmp_path / "r").doc
    assert doc["complete"] is False and "virtual-time limit" in doc["errors"][0]
    assert doc["summary"]["totals"]["flows_incomplete"] > 0


@pytest.mark.parametrize("partial", [False, True])
def test_ctrl_c_exits_130_after_writing(tiny_profile, tmp_path: Path, monkeypatch, partial: bool) -> None:
    def interrupted(schedule, progress):
        if not partial:
            raise KeyboardInterrupt
        res = run_ideal(schedule, stop_ns=50_000)  # a socket driver returns what it had, marked interrupted
        return replace(res, interrupted=True)

    _with_driver(monkeypatch, interrupted)
    out = tmp_path / "r"
    assert main(["run", str(tiny_profile()), "-o", str(out), "--quiet"]) == 130
    res = read_results(out)
    assert res.doc["interrupted"] is True and res.doc["complete"] is False
    recs = res.records()
    if partial:
        assert any(bool((r.end_ns >= 0).any()) for r in recs.values())
    else:
        assert recs == {}
        assert res.summary.totals.flows_incomplete == res.schedule().n_flows


def test_warmup_instances_are_written_but_not_counted(tiny_profile, tmp_path: Path, monkeypatch) -> None:
    _with_driver(monkeypatch, lambda schedule, progress: run_ideal(schedule))
    out = tmp_path / "r"
    assert main(["run", str(tiny_profile(warmup=2, iterations=1)), "-o", str(out), "--quiet"]) == 0
    res = read_results(out)
    rows = res.csv("collectives")
    warm = {int(r["instance"]) for r in rows if r["warmup"] == "1"}
    measured = {int(r["instance"]) for r in rows if r["warmup"] == "0"}
    assert len(warm) == 8 and len(measured) == 4 and max(warm) < min(measured)
    assert res.summary.collectives["all_reduce"].count == 2 and res.summary.collectives["all_reduce"].warmup == 4
    seq = res.schedule().coll_seq
    assert sorted(np.asarray(seq).tolist()) == sorted([0, 1, 2, 3, 4, 5] * 2)


@pytest.mark.parametrize("profile_file", ["quickstart.yaml", "sim_moe_generated.yaml", "sim_trace_microbenchmarks.yaml"])
def test_slo_check_summary_has_the_paths_of_a_real_summary(profile_file: str) -> None:
    """The SLO check computes a summary from records in which every op ended; its paths must be those of
    a run (here the ideal driver's) of the same workload."""
    from emulator.config import load_profiles
    from emulator.run.preflight import finished_records
    from emulator.run.workload import load_workload
    from emulator.schedule.compose import repeat_schedule
    from emulator.schema import dump
    from emulator.stats.run_summary import compute_summary
    from emulator.stats.slo import metric_paths

    profile = load_profiles(str(Path(__file__).resolve().parents[2] / "profiles" / profile_file))[0]
    schedule = repeat_schedule(load_workload(profile).schedule, 1, 0)
    opts = pipeline.analysis_options(profile, schedule.world_size)
    ideal = run_ideal(schedule)
    real = compute_summary(schedule, ideal.records, ideal.fabric, ideal.health, opts)
    checked = compute_summary(schedule, finished_records(schedule), {}, {"world_size": schedule.world_size}, opts)
    assert set(metric_paths(dump(checked))) == set(metric_paths(dump(real)))
