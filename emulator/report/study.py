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

Run as ``python -m emulator.report.study AR_ALONE A2A_ALONE MIXED -o docs/study``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from emulator.report import plots
from emulator.report.compare import metric_value
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
    ap.add_argument("ar_alone")
    ap.add_argument("a2a_alone")
    ap.add_argument("mixed")
    ap.add_argument("-o", "--output", default="docs/study")
    args = ap.parse_args(argv)
    try:
        paths = write_study_figures(read_results(args.ar_alone), read_results(args.a2a_alone),
                                    read_results(args.mixed), args.output)
    except EmulatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
