"""The endpoints' ``events_dropped`` counter per rank: summary ranks section, ranks.csv and the report."""

from __future__ import annotations

import json
from pathlib import Path

from emulator.report.build import build_document
from emulator.results import read_results
from emulator.results.csvfiles import read_csv, write_ranks_csv
from emulator.schema import dump
from emulator.stats.run_summary import compute_summary

STORED = Path(__file__).resolve().parents[1] / "data" / "results_v1"


def _per_rank_table(d: Path) -> dict[str, str]:
    doc = build_document(read_results(d))
    table = next(t for sec in doc.sections for t in sec.tables if t.title == "Per rank")
    col = table.columns.index("events dropped")
    return {row[0]: row[col] for row in table.rows}


def test_events_dropped_per_rank(tmp_path: Path, stored_copy: Path) -> None:
    res = read_results(STORED)
    recs = res.records()
    for r, rec in recs.items():
        rec.counters["events_dropped"] = 5 * r
    driver = res.doc.get("driver", {})
    s = compute_summary(res.schedule(), recs, driver.get("fabric", {}), driver.get("health", {}), res.analysis)
    assert [s.ranks[str(r)].events_dropped for r in sorted(recs)] == [0, 5, 10, 15]
    write_ranks_csv(tmp_path / "ranks.csv", s)
    assert [row["events_dropped"] for row in read_csv(tmp_path / "ranks.csv")] == ["0", "5", "10", "15"]
    d = stored_copy
    doc = json.loads((d / "results.json").read_text())
    doc["summary"] = dump(s)
    (d / "results.json").write_text(json.dumps(doc))
    assert _per_rank_table(d) == {"0": "0", "1": "5", "2": "10", "3": "15"}


def test_records_without_an_event_log_leave_it_unknown(tmp_path: Path) -> None:
    res = read_results(STORED)
    assert all("events_dropped" not in rec.counters for rec in res.records().values())
    assert all(r.events_dropped is None for r in res.summary.ranks.values())
    assert all("events_dropped" not in r for r in res.doc["summary"]["ranks"].values())
    write_ranks_csv(tmp_path / "ranks.csv", res.summary)
    assert [row["events_dropped"] for row in read_csv(tmp_path / "ranks.csv")] == ["", "", "", ""]
    assert set(_per_rank_table(STORED).values()) == {"-"}
