"""The results directory: stored v1 data, version refusal and upgrades, strict JSON, exact summaries."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import emulator.results.io as rio
from emulator.config import profile_from_dict
from emulator.drivers.ideal import run_ideal
from emulator.errors import ResultsError
from emulator.results import RESULTS_VERSION, read_results, recompute
from emulator.results.csvfiles import COLLECTIVE_COLUMNS, INSTANCE_COLUMNS, read_csv, write_collectives_csv
from emulator.run.workload import load_workload, run_schedule
from emulator.schema import dump
from emulator.stats import lookup_metric
from emulator.stats.analysis_options import AnalysisOptions
from emulator.stats.jsonsafe import jsonable
from emulator.stats.run_summary import compute_summary
from emulator.stats.tables import op_table

STORED = Path(__file__).resolve().parents[1] / "data" / "results_v1"


def test_stored_v1_reads_and_recomputes_exactly(stored_part) -> None:
    res = read_results(STORED)
    assert res.version == 1 == RESULTS_VERSION
    s = res.summary
    for path in ("all_reduce.cct.p99", "all_to_all.cct.p99", "gather.cct.p50", "stragglers.max_skew",
                 "flows.fct_scheduled_ns.p99", "fabric.ecn_marks", "generator.lag_ns.p99", "totals.bytes_delivered",
                 "ranks.3.cnps_received"):
        assert lookup_metric(s, path) is not None, path
    assert s.fabric.ecn_marks > 0 and s.ranks["1"].cnps_received > 0
    again = recompute(res)
    # the stored cache predates the job view (iteration.*, p2p.*): every stored key recomputes exactly
    assert s.iteration is None and s.p2p is None
    stored = res.doc["summary"]
    assert stored_part(dump(again), stored) == stored  # keys added since (per-type weighted busbw, ...) left out
    assert again.iteration.count == 3 and again.p2p.flows == 0
    assert len(res.csv("flows")) == res.schedule().n_flows == s.totals.flows
    assert len(res.csv("collectives")) == int(res.schedule().coll_rank_ptr[-1])
    assert len(res.csv("ranks")) == 4
    ts = res.timeseries()
    assert ts["qp_t_ns"].size > 0 and ts["port_t_ns"].size == ts["port_queue_bytes"].size > 0
    assert [x["ok"] for x in res.doc["slo"]] == [True, False]


def _set_version(d: Path, version) -> None:
    doc = json.loads((d / "results.json").read_text())
    doc["results_version"] = version
    (d / "results.json").write_text(json.dumps(doc))


def test_flow_columns_are_the_flows_csv_columns() -> None:
    res = read_results(STORED)
    cols, rows = res.flow_columns(), res.csv("flows")
    assert set(rows[0]) == set(cols) and len(rows) == res.schedule().n_flows
    for c in rows[0]:
        stored = np.asarray([float(r[c]) if r[c] else np.nan for r in rows])
        assert np.array_equal(cols[c].astype(np.float64), stored, equal_nan=True), c


def test_newer_version_is_refused_with_one_line(stored_copy: Path) -> None:
    d = stored_copy
    _set_version(d, RESULTS_VERSION + 1)
    with pytest.raises(ResultsError) as exc:
        read_results(d)
    msg = str(exc.value)
    assert "\n" not in msg and "newer" in msg and str(d / "results.json") in msg


@pytest.mark.parametrize("bad", [None, "1", 0, True])
def test_missing_or_bad_version_is_refused(bad, stored_copy: Path) -> None:
    d = stored_copy
    _set_version(d, bad)
    with pytest.raises(ResultsError, match="results_version"):
        read_results(d)


def test_damaged_or_missing_directory(tmp_path: Path, stored_copy: Path) -> None:
    with pytest.raises(ResultsError, match="not a results directory"):
        read_results(tmp_path)
    d = stored_copy
    (d / "results.json").write_text("{not json")
    with pytest.raises(ResultsError, match="not valid JSON"):
        read_results(d)
    d2 = tmp_path / "r2"
    d2.mkdir()
    for f in STORED.iterdir():
        if f.name != "records.npz":
            (d2 / f.name).write_bytes(f.read_bytes())
    res = read_results(d2 / "results.json")  # the file path works too
    with pytest.raises(ResultsError, match="raw records"):
        res.records()


@pytest.mark.parametrize(("name", "read", "message"), [
    ("records.npz", lambda r: r.records(), "cannot read raw records"),
    ("timeseries.npz", lambda r: r.timeseries(), "cannot read time series"),
    ("collectives.npz", lambda r: r.collective_arrays(), "cannot read collective arrays"),
])
def test_truncated_npz_is_a_results_error(stored_copy: Path, name: str, read, message: str) -> None:
    """A cut .npz raised zipfile.BadZipFile: 'emulator report --format html' exited 4 (internal error)."""
    (stored_copy / name).write_bytes(b"PK\x03\x04" + bytes(96))
    with pytest.raises(ResultsError, match=message):
        read(read_results(stored_copy))


def test_older_versions_are_upgraded_step_by_step(monkeypatch, stored_copy: Path) -> None:
    d = stored_copy

    def one_to_two(doc: dict) -> dict:
        return {**doc, "results_version": 2, "upgraded": True}

    monkeypatch.setattr(rio, "RESULTS_VERSION", 2)
    monkeypatch.setattr(rio, "UPGRADES", {1: one_to_two})
    res = read_results(d)
    assert res.version == 2 and res.doc["upgraded"] is True
    monkeypatch.setattr(rio, "UPGRADES", {})
    with pytest.raises(ResultsError, match="no upgrade from results version 1"):
        read_results(d)


def test_jsonable_maps_non_finite_to_null() -> None:
    data = {"a": float("nan"), "b": [np.float64("inf"), -math.inf, np.int64(3), np.bool_(True)], 4: (1.5,)}
    out = jsonable(data)
    assert out == {"a": None, "b": [None, None, 3, True], "4": [1.5]}
    json.dumps(out, allow_nan=False)


def _two_rank_run(**changes):
    data = {"name": "two", "ranks": {"count": 2}, "warmup": 1, "iterations": 3,
            "workload": {"collectives": [{"type": "all_to_all", "size": "8KiB", "group": [0, 1]}]}}
    data.update(changes)
    p = profile_from_dict(data)
    s = run_schedule(load_workload(p), p)
    # 8 Gbit/s: a 4096-byte flow takes 4096 ns on the wire, plus 1000 ns latency each way
    return s, run_ideal(s, rate_bps=8e9, latency_ns=1000)


def test_summary_values_are_exact_on_the_ideal_fabric() -> None:
    s, res = _two_rank_run()
    assert s.n_flows == 2 * 4 and set(s.flow_size_bytes.tolist()) == {4096}
    out = compute_summary(s, res.records, options=AnalysisOptions(rate_bps=8e9, latency_ns=1000))
    a2a = out.collectives["all_to_all"]
    # each instance: data lands at 5096 ns, the ack is back at 6096 ns: CCT = 6096 ns, 3 measured, 1 warmup
    assert a2a.count == 3 and a2a.warmup == 1 and a2a.incomplete == 0
    assert a2a.cct.min == a2a.cct.max == 6096
    assert a2a.algbw_gbps == pytest.approx(8192 / 6096)
    assert a2a.busbw_gbps == pytest.approx(8192 / 6096 / 2)
    assert out.flows.fct_scheduled_ns.p50 == 5096 and out.flows.flows == 6
    # ideal FCT = 4 × 1000 ns RTT + (4096 + 62 + 16) B × 8 / 8 Gbit/s ⇒ slowdown floored at 1
    assert out.flows.slowdown.max == 1.0
    assert out.totals.bytes_delivered == out.totals.bytes_scheduled == 8 * 4096
    assert out.stragglers.max_skew == 0.0 and out.stragglers.slow_ranks == ()
    assert out.ranks["0"].bytes_sent == 4 * 4096
    assert out.groups["all_to_all#0"].count == 3
    json.dumps(dump(out), allow_nan=False)


def test_an_unfinished_member_makes_its_instance_incomplete() -> None:
    s, res = _two_rank_run()
    rec = res.records[1]
    n = len(rec.end_ns) // 4
    rec.end_ns[2 * n + n - 1] = -1  # rank 1's last op of run iteration 2 never finished
    out = compute_summary(s, res.records)
    a2a = out.collectives["all_to_all"]
    assert a2a.count == 2 and a2a.incomplete == 1
    assert out.totals.instances_incomplete == 1 and out.totals.ops_incomplete == 1


def test_a_straggler_is_flagged(tmp_path: Path) -> None:
    s, res = _two_rank_run(warmup=0, iterations=1)
    ready = res.records[1].ready_ns
    res.records[1].end_ns[:] = np.where(ready >= 0, ready + 50_000, -1)  # rank 1 finishes 50 µs late
    out = compute_summary(s, res.records, options=AnalysisOptions(slow_factor=1.5))
    st = out.stragglers
    # two members: the median end is rank 0's, so the skew is rank 1's lateness
    assert st.max_skew_ns == st.median_skew_ns > 40_000
    assert st.slow_ranks == (1,) and st.last_finisher_counts == {"0": 0, "1": 1}
    assert 0 < st.max_skew < 1


def test_collectives_csv_carries_per_instance_straggler_figures(tmp_path: Path) -> None:
    s, res = _two_rank_run(warmup=0, iterations=2)
    rec1 = res.records[1]
    n = len(rec1.end_ns) // 2
    rec1.end_ns[:n] = np.where(rec1.ready_ns[:n] >= 0, rec1.ready_ns[:n] + 50_000, -1)  # late in instance 0
    rec1.end_ns[2 * n - 1] = -1  # instance 1 never completes on rank 1
    path = tmp_path / "collectives.csv"
    write_collectives_csv(path, s, op_table(s, res.records), slow_factor=1.5)
    rows = read_csv(path)
    assert tuple(rows[0]) == COLLECTIVE_COLUMNS
    first = [r for r in rows if r["instance"] == "0"]
    assert [r["rank"] for r in first] == ["0", "1"]
    t = [int(r["completion_ns"]) for r in first]
    end = [int(r["end_ns"]) for r in first]
    start = min(int(r["start_ns"]) for r in first)
    assert t[1] > 1.5 * t[0]
    for r in first:  # per-instance figures, worked out by hand for two members (median = the lower one)
        assert int(r["cct_ns"]) == end[1] - start
        assert r["slowest_rank"] == "1"
        assert int(r["skew_ns"]) == end[1] - end[0]
        assert float(r["straggler_delay"]) == pytest.approx((t[1] - t[0]) / t[1])
        assert float(r["straggler_slowdown"]) == pytest.approx(t[1] / t[0])
    assert [int(r["lateness_ns"]) for r in first] == [0, end[1] - end[0]]
    assert [r["is_slow"] for r in first] == ["0", "1"]
    assert [r["is_last"] for r in first] == ["0", "1"]
    for r in rows:  # the incomplete instance has no straggler figures, never a made-up zero
        if r["instance"] == "1":
            assert all(r[c] == "" for c in ("lateness_ns", "is_slow", *INSTANCE_COLUMNS))
