"""``emulator report RESULTS_DIR``: re-render any results directory (text, json, csv, html, timeline, plots).

Reading goes through :func:`emulator.results.read_results`, so a directory written by a newer emulator
is refused with one line, and an older one is upgraded. ``text`` (default), ``json`` and ``csv`` go to
standard output unless ``-o`` names a file; ``html`` and ``timeline`` are written to ``-o`` or, by
default, to ``report.html`` / ``timeline.json`` inside the results directory; ``plots`` writes one PNG
per figure into ``-o`` (a directory, default ``RESULTS_DIR/plots``). Each written file is named on one
line of standard output (``report: PATH``, ``timeline: PATH``, ``plot: PATH``); errors go to standard error.

``csv`` is the summary flattened into ``metric,value`` lines with the dotted metric paths that SLOs and
``emulator compare --metric`` use (lists are indexed: ``nccl_table.0.busbw_gbps``); ``json`` is
``results.json`` as read (upgraded to the current results version).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from emulator.errors import ResultsError
from emulator.schema import dump

FORMATS = ("text", "json", "csv", "html", "timeline", "plots")


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    p = subparsers.add_parser(name, help=help_text, description=(
        "Re-render a results directory written by 'emulator run' (any older results version) as text, json, "
        "csv (metric,value), html (one self-contained file), a Chrome trace for Perfetto, or PNG plots. "
        "A results directory of a newer results version is refused."))
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="a directory written by 'emulator run'")
    p.add_argument("--format", "-f", choices=FORMATS, default="text",
                   help="text (default), json, csv (metric,value), html (one self-contained file), "
                        "timeline (Chrome trace for Perfetto), plots (PNG files)")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="output file (directory for plots); default: stdout for text/json/csv, "
                        "RESULTS_DIR/report.html, RESULTS_DIR/timeline.json, RESULTS_DIR/plots/")
    p.add_argument("--job", metavar="NAME",
                   help="text and html: only the job NAME of a workload.jobs run (its summary and its flows)")
    p.set_defaults(func=run)


def flatten(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, scalar) of every leaf of a JSON-like tree."""
    if isinstance(node, Mapping):
        if not node and prefix:
            yield prefix, ""
        for k, v in node.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(node, (list, tuple)):
        if not node and prefix:
            yield prefix, ""
        for i, v in enumerate(node):
            yield from flatten(v, f"{prefix}.{i}" if prefix else str(i))
    else:
        yield prefix, node


def render_csv(summary: Mapping[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(("metric", "value"))
    for path, v in flatten(summary):
        w.writerow((path, "" if v is None else ("1" if v is True else "0" if v is False else v)))
    return buf.getvalue()


def _emit(text: str, out: str | None) -> None:
    if out:
        try:
            Path(out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ResultsError(f"{out}: cannot write: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(text)


def run(args: argparse.Namespace) -> int:
    from emulator.report.build import build_document
    from emulator.results import read_results

    res = read_results(args.results_dir)
    fmt = args.format
    if args.job is not None:
        from emulator.report.build import job_names

        if fmt not in ("text", "html"):
            raise ResultsError(f"--job: applies to --format text and html, not {fmt}")
        job_names(res, args.job)
    if fmt == "text":
        from emulator.report.text import render_text

        _emit(render_text(build_document(res, job=args.job)), args.output)
    elif fmt == "json":
        _emit(json.dumps(res.doc, indent=1, allow_nan=False) + "\n", args.output)
    elif fmt == "csv":
        _emit(render_csv(dump(res.summary)), args.output)
    elif fmt == "html":
        from emulator.report.html import render_html

        out = args.output or str(res.path / "report.html")
        _emit(render_html(build_document(res, with_figures=args.job is None, job=args.job)), out)
        print(f"report: {out}")
    elif fmt == "timeline":
        from emulator.report.figures import write_timeline

        out = args.output or str(res.path / "timeline.json")
        try:
            write_timeline(res, out)
        except OSError as exc:
            raise ResultsError(f"{out}: cannot write: {exc.strerror or exc}") from None
        print(f"timeline: {out} (open in https://ui.perfetto.dev)")
    else:
        from emulator.report.figures import write_plots

        out = args.output or str(res.path / "plots")
        try:
            paths = write_plots(res, out)
        except OSError as exc:
            raise ResultsError(f"{out}: cannot write plots: {exc.strerror or exc}") from None
        for p in paths:
            print(f"plot: {p}")
    return 0
