"""What a user reads after a run (issue 9, items 8, 9, 11, 13, 14): busbw per size and byte-weighted per type
with % of line rate, tied last finishers, aligned columns and auto-scaled times, one stream per line, how to
get the HTML report, and the fabric's configuration in the reports."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

import emulator.run.pipeline as pipeline
from emulator.cli import main
from emulator.drivers.ideal import run_ideal
from emulator.report.build import build_document
from emulator.report.console import most_often_last as _most_often_last
from emulator.report.console import render_run_summary
from emulator.report.html import render_html
from emulator.report.text import render_text
from emulator.results import read_results
from emulator.schema import build
from emulator.stats.summary_types import RunSummary, StragglerFigures
from emulator.units import format_bytes

STORED = Path(__file__).resolve().parents[1] / "data" / "results_v1"


def render_summary(doc: dict) -> str:
    """The run's console summary of a results.json dict, its summary read typed."""
    return render_run_summary(doc, RunSummary.from_dict(doc["summary"]))


def most_often_last(st: dict, unit: str = "") -> str:
    return _most_often_last(build(StragglerFigures, st), unit)
TWO_SIZES = [{"name": "small", "type": "all_reduce", "group": "0-3", "size": 424, "algorithm": "ring", "iterations": 2},
             {"name": "big", "type": "all_reduce", "group": "0-3", "size": "1MiB", "algorithm": "ring", "iterations": 2}]


@pytest.fixture
def two_sizes(tiny_profile, tmp_path: Path, capsys):
    """An All-Reduce of two sizes (a 424-byte and a 1 MiB bucket) run on the sim: (results, stdout)."""
    p = tiny_profile(workload={"collectives": TWO_SIZES},
                     congestion_control={"preset": "connectx", "overrides": {"rpg_ai_rate": 10}})
    assert main(["run", str(p), "-o", str(tmp_path / "r")]) == 0
    return read_results(tmp_path / "r"), capsys.readouterr().out


def test_busbw_per_size_and_byte_weighted_per_type_with_share_of_line_rate(two_sizes) -> None:
    res, out = two_sizes
    e = res.doc["summary"]["all_reduce"]
    rows = {r.size_bytes: r for r in res.summary.nccl_table}
    small, big = rows[424].busbw_gbps, rows[1 << 20].busbw_gbps
    assert small < 0.1 * big
    # the per-type figure: byte-weighted, so the 1 MiB buckets dominate (the median instance could be either)
    assert 0.9 * big < e["busbw_weighted_gbps"] < 1.1 * big and e["algbw_weighted_gbps"] < e["busbw_weighted_gbps"]
    assert out.splitlines()[0].startswith("run tiny: sim fabric, 25.00 Gbps ports, 4 ranks")
    lines = out.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith(" all_reduce"))
    share = 100 * e["busbw_weighted_gbps"] * 8 / 25
    assert "all sizes" in lines[i] and f"{e['busbw_weighted_gbps']:.3g} GB/s ({share:.1f} %)" in lines[i]
    assert "424 B" in lines[i + 1] and f"{small:.3g} GB/s" in lines[i + 1]
    assert "1.00 MiB" in lines[i + 2] and f"{big:.3g} GB/s ({100 * big * 8 / 25:.1f} %)" in lines[i + 2]
    assert "byte-weighted" in out and "nccl-tests" in out
    html = render_html(build_document(res))
    assert "busbw@p50" not in html and "byte-weighted" in html and "% line" in html  # one busbw, defined once


def test_fabric_configuration_is_in_the_reports_and_the_run_says_how_to_get_them(two_sizes) -> None:
    res, out = two_sizes
    assert f"report: emulator report {res.path} --format html" in out and "--format plots" in out
    text = render_text(build_document(res))
    section = text.split("Fabric configuration")[1].split("\n\n")[0]
    for fact in ("port rate                       : 25.00 Gbps", "buffer per port                 : 1MiB",
                 "ECN                             : on: Kmin 5KB, Kmax 200KB, Pmax", "PFC                             : off",
                 "congestion control              : connectx", "knobs differing from the preset : rpg_ai_rate = 10"):
        assert fact in section, fact
    assert "Fabric configuration" in render_html(build_document(res))


@pytest.mark.parametrize(("counts", "expected"), [
    ({"0": 54, "1": 54, "2": 54}, "all ranks tied (54× each)"),
    ({"0": 3, "1": 1, "2": 3}, "ranks 0, 2 tied (3× each)"),
    ({"0": 1, "1": 5, "2": 3}, "rank 1 (5×)"),
])
def test_most_often_last_says_when_ranks_tie(counts: dict[str, int], expected: str) -> None:
    top = max(counts.values())
    rank = min(int(r) for r, c in counts.items() if c == top)
    st = {"most_often_last_rank": rank, "most_often_last_count": top, "last_finisher_counts": counts}
    assert most_often_last(st) == expected
    none = {"most_often_last_rank": 0, "most_often_last_count": 0, "basis": "ideal", "last_finisher_counts": {"0": 0}}
    assert most_often_last(none).startswith("none")


def test_summary_columns_never_run_together() -> None:
    doc = read_results(STORED).doc
    s = dict(doc["summary"])
    s["all_reduce"] = dict(s["all_reduce"], busbw_gbps=0.000962, busbw_weighted_gbps=0.000962,
                           cct=dict(s["all_reduce"]["cct"], p50=511_330, p99=511_330, max=511_330))
    text = render_summary(dict(doc, summary=s))
    assert "511.33 us" in text and "0.000962 GB/s" in text  # was "511.33 us0.000962 GB/s"
    assert not re.search(r"\S0\.000962 GB/s", text)


def test_text_report_scales_times_like_the_summary() -> None:
    res = read_results(STORED)
    s = res.doc["summary"]
    s["all_reduce"] = dict(s["all_reduce"], cct=dict(s["all_reduce"]["cct"], p50=706_614_640, max=2_500_000_000))
    text = render_text(build_document(res))
    line = next(ln for ln in text.splitlines() if ln.startswith(" all_reduce "))
    assert "706.61 ms" in line and "2.500 s" in line and "706614.64" not in text


def test_errors_of_an_incomplete_run_print_once_on_stderr(tiny_profile, tmp_path: Path, monkeypatch,
                                                          capsys) -> None:
    monkeypatch.setattr(pipeline, "make_driver",
                        lambda profile, kind=None: SimpleNamespace(
                            name="ideal", run=lambda schedule, progress: run_ideal(schedule, dead_ranks=[2])))
    assert main(["run", str(tiny_profile()), "-o", str(tmp_path / "r")]) == 3
    cap = capsys.readouterr()
    assert "rank 2 died" not in cap.out
    assert sum("rank 2 died" in ln for ln in cap.err.splitlines()) == 1


def test_report_names_every_written_file_on_stdout(stored_reports) -> None:
    for fmt, what in (("html", "report: "), ("timeline", "timeline: "), ("plots", "plot: ")):
        run = stored_reports[fmt]  # tests/conftest.py: `emulator report` on the stored directory
        assert run.code == 0
        assert run.err == "" and run.out.startswith(what + str(run.path)), fmt


def test_the_two_most_often_last_lines_say_what_they_count() -> None:
    """The iterations line counts iterations, the stragglers line collective instances: rank 6 last in 3 of 3
    iterations and rank 0 last in 5 of 18 instances are not a contradiction once each says what it counts."""
    it = {"instances": 3, "basis": "ideal", "most_often_last_rank": 6, "most_often_last_count": 3,
          "last_finisher_counts": {"0": 0, "6": 3}}
    coll = {"instances": 18, "basis": "ideal", "most_often_last_rank": 0, "most_often_last_count": 5,
            "last_finisher_counts": {"0": 5, "6": 4}}
    s = {"iteration": {"count": 3, "jct": {"count": 3, "p50": 1e6, "p99": 1e6, "max": 1e6}, "completion": {},
                       "stragglers": it},
         "stragglers": coll}
    out = render_summary({"name": "x", "summary": s})
    assert "most often last of an iteration: rank 6 (3 of 3 iterations)" in out
    assert "most often last of a collective: rank 0 (5 of 18 collective instances)" in out
    assert "most often last: " not in out
    assert most_often_last({**coll, "last_finisher_counts": {"0": 5, "6": 5}}, "collective instances") == \
        "all ranks tied (5 of 18 collective instances each)"
    none = {"instances": 3, "basis": "ideal", "most_often_last_rank": 0, "most_often_last_count": 0,
            "last_finisher_counts": {"0": 0}}
    assert most_often_last(none, "iterations") == "none (every iteration finished in the algorithm's order)"


def test_an_iteration_in_which_every_rank_ties_names_no_slowest_rank(two_sizes) -> None:
    res, _ = two_sizes
    per = res.summary.iteration.per_iteration
    assert per and all(r.straggler_delay == 0 for r in per)  # a ring on an empty fabric: every rank ties
    table = render_text(build_document(res)).split("Per measured iteration")[1].split("\n\n")[0]
    rows = [ln for ln in table.splitlines() if ln.startswith(" ")]
    assert len(rows) == len(per) and all("all tied" in ln for ln in rows)


def test_the_slo_table_of_the_reports_shows_values_in_the_unit_of_their_limit() -> None:
    text = render_text(build_document(read_results(STORED)))
    table = text.split("#SLO")[1].split("\n\n")[0]
    assert "983.14 us" in table and "14.67%" in table and "983140" not in table


def test_an_incomplete_run_does_not_show_as_having_delivered_nothing(two_sizes) -> None:
    """Delivered bytes count finished flows; with every flow cut short the receivers' own count is shown too."""
    s = {"totals": {"flows": 896, "flows_incomplete": 896, "bytes_scheduled": 1924145348608, "bytes_delivered": 0,
                    "instances": 8, "instances_measured": 6, "instances_warmup": 2, "instances_incomplete": 8},
         "ranks": {str(r): {"bytes_received": 774983680} for r in range(8)}}
    out = render_summary({"name": "x", "summary": s})
    assert "0 B delivered in finished flows (5.77 GiB received in all) of 1.75 TiB scheduled" in out
    # every instance incomplete, warmup included: not '6 measured instances (8 incomplete)'
    assert "8 collective instances (6 measured, 2 warmup; 8 incomplete)" in out
    res, out = two_sizes  # a complete run: one figure, auto-scaled in the run summary and in the reports alike
    assert "received in all" not in out
    fact = next(ln for ln in render_text(build_document(res)).splitlines() if ln.startswith("totals "))
    tot = res.summary.totals
    assert f"{format_bytes(tot.bytes_delivered)} delivered of {format_bytes(tot.bytes_scheduled)} scheduled" in fact
