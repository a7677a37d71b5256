"""The report files a run writes into its results directory, by the profile's ``output.formats``.

``emulator run`` writes results.json and the CSV files itself; :func:`write_run_outputs` adds what the
profile asks for on top: ``html`` → ``report.html`` (one self-contained file), ``timeline`` →
``timeline.json`` (Chrome trace for Perfetto), ``plots`` → ``plots/*.png``. ``text``, ``json`` and
``csv`` need no extra file (the summary is printed, results.json and the CSV files are always written).
Re-rendering later is ``emulator report RESULTS_DIR --format ...`` with the same functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from emulator.errors import ResultsError


def write_run_outputs(results: Any, formats: Iterable[str]) -> list[Path]:
    """Write the extra report files for ``formats`` into the results directory; returns their paths."""
    wanted = set(formats)
    paths: list[Path] = []
    try:
        drawn: list[tuple[str, str, bytes]] = []
        if wanted & {"html", "plots"}:
            from emulator.report.figures import figures

            drawn = figures(results)  # once for both
        if "html" in wanted:
            from emulator.report.build import build_document
            from emulator.report.html import render_html

            p = results.path / "report.html"
            p.write_text(render_html(build_document(results, with_figures=True, drawn=drawn)), encoding="utf-8")
            paths.append(p)
        if "timeline" in wanted:
            from emulator.report.figures import write_timeline

            paths.append(write_timeline(results, results.path / "timeline.json"))
        if "plots" in wanted:
            from emulator.report.figures import write_pngs

            paths.extend(write_pngs([(stem, png) for stem, _, png in drawn], results.path / "plots"))
    except OSError as exc:
        raise ResultsError(f"{results.path}: cannot write report files: {exc.strerror or exc}") from None
    return paths
