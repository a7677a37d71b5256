"""The per-iteration table says how many iterations it shows of how many, when results.json caps them."""

from emulator.report.build import _iteration_section
from emulator.report.document import Document
from emulator.stats.summary_types import RunSummary


def _row(i: int) -> dict:
    return {"iteration": i, "jct_ns": 1000 + i, "first_start_ns": 0, "last_end_ns": 1000 + i, "ranks": 4,
            "slowest_rank": 0, "skew_ns": 1, "straggler_delay": 0.01}


def _note(per: list, total: int | None, max_rows: int = 100) -> str:
    it = {"count": total or len(per), "per_iteration": per}
    if total is not None:
        it["per_iteration_total"] = total
    doc = Document(title="t")
    _iteration_section(doc, RunSummary.from_dict({"iteration": it}), max_rows=max_rows)
    (table,) = [t for s in doc.sections for t in s.tables if t.title.startswith("Per measured iteration")]
    return table.note


def test_capped_list_names_shown_and_total() -> None:
    note = _note([_row(i) for i in range(6)], total=50)
    assert "6 of 50 iterations shown" in note


def test_table_rows_cut_below_the_stored_list() -> None:
    note = _note([_row(i) for i in range(6)], total=None, max_rows=4)
    assert "4 of 6 iterations shown" in note


def test_no_note_when_everything_is_shown() -> None:
    assert "shown" not in _note([_row(i) for i in range(3)], total=3)
