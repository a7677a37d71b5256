"""Fixtures shared across test folders: ``emulator report`` on the stored results directory, run once."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from types import SimpleNamespace

import pytest

from emulator.cli import main

STORED_RESULTS = Path(__file__).resolve().parent / "data" / "results_v1"
#: format -> what `emulator report --format FMT -o PATH` writes (a file or a directory)
REPORT_OUTPUTS = {"html": "report.html", "timeline": "timeline.json", "plots": "plots"}


@pytest.fixture(scope="session")
def stored_reports(tmp_path_factory) -> dict[str, SimpleNamespace]:
    """``emulator report tests/data/results_v1 --format FMT -o DIR/NAME`` for html, timeline and plots, each
    into a directory of its own: format -> (code, out, err, dir, path)."""
    runs = {}
    for fmt, name in REPORT_OUTPUTS.items():
        d = tmp_path_factory.mktemp(f"report-{fmt}")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["report", str(STORED_RESULTS), "--format", fmt, "-o", str(d / name)])
        runs[fmt] = SimpleNamespace(code=code, out=out.getvalue(), err=err.getvalue(), dir=d, path=d / name)
    return runs
