"""The job view of a run (``iteration.*``) and point-to-point flows (``p2p.*``) in the results summary.

Exact figures on hand-made records of a real compiled schedule (the bundled MSCCL custom ring, SEND/RECV
only), then the same on a sim run through the CLI, where collectives report nothing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from emulator.cli import main
from emulator.config import load_profile
from emulator.endpoint.records import RankRecords
from emulator.report.compare import compare_summaries, metric_unit
from emulator.report.console import render_run_summary
from emulator.results import read_results
from emulator.run.workload import load_workload
from emulator.schedule.compose import repeat_schedule
from emulator.stats import check_slo, lookup_metric
from emulator.stats.analysis_options import AnalysisOptions
from emulator.stats.run_summary import compute_summary
from emulator.stats.tables import iteration_table, op_iterations, op_table

ROOT = Path(__file__).resolve().parents[2]
RING = ROOT / "profiles" / "sim_trace_custom_ring.yaml"


def _ring_schedule(iterations: int = 3, warmup: int = 1):
    one = load_workload(load_profile(str(RING))).schedule
    return one, repeat_schedule(one, iterations, warmup)


def _records(schedule, ready_end) -> dict[int, RankRecords]:
    """Every op of rank r in run iteration k: ready/end from ``ready_end(r, k)``; flows started at ready."""
    it = op_iterations(schedule)
    out = {}
    for r in range(schedule.world_size):
        a, b = int(schedule.rank_op_ptr[r]), int(schedule.rank_op_ptr[r + 1])
        rec = RankRecords(r, b - a)
        for i in range(b - a):
            ready, end = ready_end(r, int(it[a + i]))
            rec.ready_ns[i], rec.start_ns[i], rec.end_ns[i] = ready, ready, end
        out[r] = rec
    return out


def test_ops_map_to_their_run_iteration() -> None:
    one, s = _ring_schedule(3, 1)
    it = op_iterations(s)
    for r in range(s.world_size):
        a, b = int(s.rank_op_ptr[r]), int(s.rank_op_ptr[r + 1])
        per = int(one.rank_op_ptr[r + 1] - one.rank_op_ptr[r])
        assert it[a:b].tolist() == [k for k in range(4) for _ in range(per)]
    t = iteration_table(s, op_table(s, {}))
    assert t["rank"].shape[0] == 4 * s.world_size and (t["start_ns"] == -1).all()


def test_iteration_figures_are_exact_on_known_records() -> None:
    _, s = _ring_schedule(3, 1)
    # rank r, iteration k: first op ready at 1000k + r, last op done at 1000k + 500 + 10r
    summary = compute_summary(s, _records(s, lambda r, k: (1000 * k + r, 1000 * k + 500 + 10 * r)),
                              options=AnalysisOptions(slow_factor=1.1))
    it = summary.iteration
    assert (it.count, it.incomplete, it.warmup) == (3, 0, 1)
    assert it.jct.count == 3 and it.jct.min == it.jct.max == 570  # (500 + 70) − 0
    assert it.completion.count == 24 and it.completion.min == 500 and it.completion.max == 563
    assert it.completion.p50 == 500 + 9 * 3  # nearest rank of T_r = 500 + 9r, r = 0..7
    assert [p.iteration for p in it.per_iteration] == [1, 2, 3]  # run iteration index, warmup is 0
    p = it.per_iteration[0]
    assert (p.jct_ns, p.first_start_ns, p.last_end_ns, p.slowest_rank) == (570, 1000, 1570, 7)
    assert p.skew_ns == 70 - 30  # max end − lower-median end (rank 3)
    assert abs(p.straggler_delay - 63 / 563) < 1e-12
    st = it.stragglers
    assert st.most_often_last_rank == 7 and st.last_finisher_counts["7"] == 3
    assert st.slow_ranks == ()  # 563 < 1.1 × 527
    assert it.ranks["7"].last_count == 3 and it.ranks["0"].last_count == 0
    assert it.ranks["5"].completion.p99 == 545 and it.ranks["5"].iterations == 3
    # the same numbers through the metric paths SLOs and compare use
    assert lookup_metric(summary, "iteration.jct.p99") == 570
    assert check_slo(summary, "iteration.jct.p99", "<", 1000).ok
    assert not check_slo(summary, "iteration.completion.max", "<", 563).ok
    # no collective instances at all: every flow is point-to-point
    assert summary.totals.instances_measured == 0
    assert summary.p2p.flows == summary.flows.flows == 3 * s.n_flows // 4
    assert summary.p2p.bytes == int(s.flow_size_bytes.sum()) * 3 // 4


def test_an_unfinished_op_makes_its_iteration_incomplete() -> None:
    _, s = _ring_schedule(3, 1)
    recs = _records(s, lambda r, k: (1000 * k, 1000 * k + 400))
    last = recs[2].n_ops - 1  # the last op of rank 2 is in the last iteration
    recs[2].end_ns[last] = -1
    it = compute_summary(s, recs).iteration
    assert (it.count, it.incomplete) == (2, 1)
    assert [p.iteration for p in it.per_iteration] == [1, 2]


def test_a_p2p_only_sim_run_reports_its_job_completion(tmp_path: Path, capsys) -> None:
    out = tmp_path / "ring"
    assert main(["run", str(RING), "-o", str(out), "--set", "iterations=2"]) == 0
    printed = capsys.readouterr().out
    s = read_results(out).summary
    it, p2p = s.iteration, s.p2p
    assert it.count == 2 and len(it.per_iteration) == 2
    for p in it.per_iteration:
        assert p.jct_ns == p.last_end_ns - p.first_start_ns > 0
    assert it.jct.max == max(p.jct_ns for p in it.per_iteration)
    assert 0 < it.completion.p50 <= it.jct.max
    assert p2p.flows == p2p.finished == s.flows.flows > 0
    assert p2p.bytes_delivered == p2p.bytes > 0
    assert p2p.fct_scheduled_ns.p99 >= p2p.fct_scheduled_ns.p50 > 0 and p2p.slowdown.min >= 1
    assert "iterations: JCT p50" in printed and "p2p: " in printed
    comp = compare_summaries([("a", s), ("b", s)])
    row = comp.row("iteration.jct.p99")
    assert row.values[0] == it.jct.p99 and row.ratios[1] == 1.0 and row.unit == "ns"
    assert comp.row("p2p.fct_scheduled_ns.p99").values[0] == p2p.fct_scheduled_ns.p99
    assert metric_unit("iteration.completion.p99") == "ns"


TWO_GROUPS = {
    "name": "two_groups", "seed": 3, "warmup": 1, "iterations": 2,
    "fabric": {"kind": "sim", "ports": {"rate": "25Gbps", "latency": "1us"}},
    "ranks": {"count": 4},
    "workload": {"collectives": [
        {"name": "ar", "type": "all_reduce", "group": "0-3", "size": "64KiB", "algorithm": "ring", "iterations": 2},
        {"name": "a2a", "type": "all_to_all", "group": "0-3", "size": "64KiB", "iterations": 2},
    ]},
}


def test_a_collective_run_counts_no_p2p_flows(tmp_path: Path) -> None:
    profile = tmp_path / "two_groups.yaml"
    profile.write_text(yaml.safe_dump(TWO_GROUPS))
    out = tmp_path / "res"
    assert main(["run", str(profile), "-o", str(out), "--quiet"]) == 0
    s = read_results(out).summary
    assert s.p2p.flows == 0 and s.p2p.fct_scheduled_ns.p99 is None
    assert s.iteration.count == 2
    # an iteration spans both groups' collectives: its JCT is at least every instance's CCT
    assert s.iteration.jct.min >= max(s.collectives["all_reduce"].cct.max, s.collectives["all_to_all"].cct.max)
    assert "iterations: JCT" in render_run_summary(read_results(out).doc, read_results(out).summary)
    assert np.isfinite(s.iteration.stragglers.straggler_delay.max)


def test_a_generated_pipeline_run_has_a_job_view(tmp_path: Path) -> None:
    profile = tmp_path / "pp.yaml"
    profile.write_text(yaml.safe_dump({
        "name": "pp", "extends": str(ROOT / "profiles" / "base" / "sim_25g.yaml"), "ranks": {"count": 4},
        "warmup": 1, "iterations": 2,
        "workload": {"generate": {"kind": "pipeline", "options": {"microbatches": 2, "activation_size": "256KiB"}}},
    }))
    out = tmp_path / "res"
    assert main(["run", str(profile), "-o", str(out), "--quiet"]) == 0
    s = read_results(out).summary
    assert s.p2p.flows > 0 and s.p2p.unfinished == 0
    assert s.iteration.count == 2 and s.iteration.jct.p99 > s.p2p.fct_scheduled_ns.max
    assert set(s.iteration.ranks) == {"0", "1", "2", "3"}
