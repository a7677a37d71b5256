"""The congestion study's figures: All-Reduce and All-to-All alone vs mixed (README, ``docs/study``).

Theory of operation
-------------------
Input: three results directories — All-Reduce alone, All-to-All alone, both mixed on the same fabric
(``profiles/study_*.yaml``). Output (PNG files in one directory):

* ``study_all_reduce_cdf.png`` / ``study_all_to_all_cdf.png`` — the CCT CDF of one collective type
  alone and mixed, on one axis;
* ``study_summary.png`` — the study's claims side by side: All-Reduce CCT coefficient of variation,
  All-to-All CCT p99/p50 and per-member completion p99/p50, alone vs mixed (the same numbers
  ``emulator compare`` prints);
* ``mixed_stragglers_all_reduce.png``, ``mixed_stragglers_all_to_all.png``, ``mixed_busiest_port.png`` —
  the mixed run's straggler heatmaps and its busiest port.

With ``--markdown`` it prints the README's study table instead (metric, alone, mixed, mixed ÷ alone; the
All-Reduce rows against the All-Reduce-alone run, the All-to-All rows against the All-to-All-alone run).
Given more than one triple of directories (the same study at other seeds), it adds one line per claim
with its range alone and mixed over all triples.

Run as ``python -m emulator.report.study AR_ALONE A2A_ALONE MIXED [-o results/study | --markdown]``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from emulator.report import plots
from emulator.report.compare import metric_value
from emulator.report.console import counted
from emulator.report.figures import (
    busiest_port_png,
    cct_by_type,
    collective_instances,
    straggler_figures,
    write_pngs,
)

AR, A2A = "all_reduce", "all_to_all"
CLAIMS = (
    ("All-Reduce CCT cv", AR, f"{AR}.cct.cv"),
    ("All-to-All CCT p99/p50", A2A, f"{A2A}.cct.p99/{A2A}.cct.p50"),
    ("All-to-All completion p99/p50", A2A, f"{A2A}.completion.p99/{A2A}.completion.p50"),
)


def _us(v: float) -> str:
    return f"{v / 1000:.1f} µs"


def _gbps(v: float) -> str:
    return f"{v:.2f} GB/s"


def _f3(v: float) -> str:
    return f"{v:.3f}"


def _int(v: float) -> str:
    return f"{v:.0f}"


# (label, collective whose alone run is the baseline, metric expression, formatter, bold); ``{n}`` in a
# label is the number of measured instances of that collective type in the mixed run (with fewer than
# 100, the nearest-rank p99 is the max).
TABLE: tuple[tuple[str, str, str, Callable[[float], str], bool], ...] = (
    ("All-Reduce CCT p50", AR, f"{AR}.cct.p50", _us, False),
    ("All-Reduce CCT p99 ({n})", AR, f"{AR}.cct.p99", _us, False),
    ("All-Reduce CCT coefficient of variation", AR, f"{AR}.cct.cv", _f3, True),
    ("All-to-All CCT p50", A2A, f"{A2A}.cct.p50", _us, False),
    ("All-to-All CCT p99/p50", A2A, f"{A2A}.cct.p99/{A2A}.cct.p50", _f3, True),
    ("All-to-All per-rank completion p99/p50", A2A, f"{A2A}.completion.p99/{A2A}.completion.p50", _f3, False),
    ("All-to-All busbw (`all_to_all.busbw_gbps`)", A2A, f"{A2A}.busbw_gbps", _gbps, False),
    ("ECN marks (whole fabric; All-Reduce alone → mixed)", AR, "fabric.ecn_marks", _int, False),
)


def _value(summary: Any, expr: str) -> float:
    from emulator.errors import ResultsError

    v = metric_value(summary, expr)
    if v is None:
        raise ResultsError(f"summary has no metric {expr!r}")
    return v


def markdown_table(ar_alone: Any, a2a_alone: Any, mixed: Any) -> str:
    """The study table (see module docstring) as GitHub markdown, one line per row."""
    lines = ["| metric | alone | mixed | mixed ÷ alone |", "|---|---|---|---|"]
    for label, t, expr, fmt, bold in TABLE:
        alone = _value((ar_alone if t == AR else a2a_alone).summary, expr)
        mix = _value(mixed.summary, expr)
        n = int(_value(mixed.summary, f"{t}.cct.count"))
        label = label.format(n=f"= max, n = {n}" if n < 100 else f"n = {n}")
        ratio = f"{mix / alone:.2f}" if alone else "n/a"
        if bold:
            label, ratio = f"**{label}**", f"**{ratio}**"
        lines.append(f"| {label} | {fmt(alone)} | {fmt(mix)} | {ratio} |")
    return "\n".join(lines)


def claim_ranges(triples: Sequence[tuple[Any, Any, Any]]) -> list[str]:
    """Per study claim, its range alone and mixed over several runs of the study (e.g. other seeds)."""
    out = []
    for label, t, expr in CLAIMS:
        alone = [_value((ar if t == AR else a2a).summary, expr) for ar, a2a, _ in triples]
        mix = [_value(m.summary, expr) for _, _, m in triples]
        ratios = [b / a for a, b in zip(alone, mix, strict=True) if a]
        out.append(f"{label}: alone {min(alone):.3f}–{max(alone):.3f}, mixed {min(mix):.3f}–{max(mix):.3f} "
                   f"(mixed ÷ alone {min(ratios):.2f}–{max(ratios):.2f}; {counted(len(triples), 'run')})")
    return out


def write_study_figures(ar_alone: object, a2a_alone: object, mixed: object, out_dir: str | Path) -> list[Path]:
    """Write the study figures (see module docstring) from three :class:`~emulator.results.Results`."""
    out: list[tuple[str, bytes]] = []
    mixed_inst = collective_instances(mixed)
    mixed_cct = cct_by_type(mixed_inst)
    for t, alone, label in ((AR, ar_alone, "All-Reduce"), (A2A, a2a_alone, "All-to-All")):
        series = {f"{t} alone": cct_by_type(collective_instances(alone)).get(t, []),
                  f"{t} mixed": mixed_cct.get(t, [])}
        out.append((f"study_{t}_cdf", plots.cct_cdf_png(series, title=f"{label} completion time: alone vs mixed")))
    values = []
    for _, t, expr in CLAIMS:
        alone = ar_alone if t == AR else a2a_alone
        values.append([metric_value(alone.summary, expr), metric_value(mixed.summary, expr)])  # type: ignore[attr-defined]
    out.append(("study_summary", plots.grouped_bars_png(
        [c[0] for c in CLAIMS], ["alone", "mixed"], values, "value (dimensionless)",
        "Mixing All-Reduce with All-to-All under DCQCN (sim fabric, leaf-spine 2:1)")))
    out.extend((f"mixed_{stem}", png) for stem, _, png in straggler_figures(mixed_inst))
    out.append(("mixed_busiest_port", busiest_port_png(mixed)))
    return write_pngs(out, out_dir)


def main(argv: list[str] | None = None) -> int:
    from emulator.errors import EmulatorError
    from emulator.results import read_results

    ap = argparse.ArgumentParser(prog="python -m emulator.report.study", description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", metavar="DIR",
                    help="AR_ALONE A2A_ALONE MIXED results directories; more triples (other seeds) add ranges")
    ap.add_argument("-o", "--output", default="results/study", help="figures directory (default: %(default)s)")
    ap.add_argument("--markdown", action="store_true", help="print the README's study table, write no figures")
    args = ap.parse_args(argv)
    if len(args.dirs) % 3:
        print(f"error: expected results directories in triples (AR_ALONE A2A_ALONE MIXED), got {len(args.dirs)}",
              file=sys.stderr)
        return 2
    try:
        runs = [read_results(d) for d in args.dirs]
        triples = [(runs[i], runs[i + 1], runs[i + 2]) for i in range(0, len(runs), 3)]
        if args.markdown:
            print(markdown_table(*triples[0]))
            if len(triples) > 1:
                print()
                print("\n".join(f"- {line}" for line in claim_ranges(triples)))
            return 0
        paths = write_study_figures(*triples[0], args.output)
    except EmulatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
