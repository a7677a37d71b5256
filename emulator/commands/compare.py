"""``emulator compare A B [...]``: results directories side by side with per-metric ratios.

Rows are metrics (per collective type: CCT p50/p99/max/cv, p99/p50, busbw; FCT and slowdown tails;
stragglers; ECN marks, CNPs, drops ...), columns are the runs, then one ratio column per run after the
first: ``run ÷ baseline``, where a row's baseline is the first run that has the metric. So
``emulator compare AR_ALONE A2A_ALONE MIXED`` compares the All-Reduce rows of the mixed run with the
All-Reduce-alone run and its All-to-All rows with the All-to-All-alone run — a congestion study in one
command. ``--metric`` picks rows by their dotted path (``all_reduce.cct.cv``), ``A/B`` quotients or
``*`` sums (``ranks.*.cnps_sent``); ``--json`` prints one JSON object for scripts and CI.
"""

from __future__ import annotations

import argparse
import json
import sys

from emulator.errors import ResultsError


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    p = subparsers.add_parser(name, help=help_text, description=__doc__.split("\n\n")[1].replace("\n", " ").replace("``", "'"))
    p.add_argument("results", metavar="RESULTS_DIR", nargs="+", help="results directories (two or more to compare)")
    p.add_argument("--metric", "-m", action="append", default=[], metavar="PATH",
                   help="a metric row (repeatable or comma-separated); default: the standard set")
    p.add_argument("--labels", metavar="A,B,...", help="column labels (default: the run names)")
    p.add_argument("--baseline", type=int, metavar="I",
                   help="use run I (0-based) as the baseline of every row instead of the first run with a value")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--flows", action="store_true",
                   help="per-flow compare of exactly two runs of the same schedule: FCT ratio distribution, "
                        "rank correlation, the flows that differ most, ECN marks and drops per port, CCT per instance")
    p.add_argument("--top", type=int, default=10, metavar="N", help="with --flows: how many most-different flows (default 10)")
    p.add_argument("--job", metavar="NAME", help="with --flows: only the flows and instances of job NAME (workload.jobs)")
    p.set_defaults(func=run)


def _labels(results: list, given: str | None) -> list[str]:
    if given:
        labels = [x.strip() for x in given.split(",")]
        if len(labels) != len(results):
            raise ResultsError(f"--labels: {len(labels)} labels for {len(results)} results directories")
    else:
        labels = [str(r.doc.get("name") or r.path.name) for r in results]
        if len(set(labels)) != len(labels):
            labels = [str(r.path.name) for r in results]
        if len(set(labels)) != len(labels):
            labels = [f"{i}:{r.path.name}" for i, r in enumerate(results)]
    if len(set(labels)) != len(labels):
        raise ResultsError(f"--labels: labels must be distinct, got {', '.join(labels)}")
    return labels


def run(args: argparse.Namespace) -> int:
    from emulator.report.compare import compare_summaries, comparison_table, expression_error
    from emulator.report.document import Table
    from emulator.report.text import render_table
    from emulator.results import read_results

    if args.flows:
        return run_flows(args)
    if args.job is not None:
        raise ResultsError(f"--job {args.job}: applies to --flows; the metric table has the job's rows "
                           f"(--metric jobs.{args.job}.jct.p50)")
    if len(args.results) < 2:
        raise ResultsError(f"compare needs two or more results directories, got one ({args.results[0]}); "
                           f"to see one run: emulator report {args.results[0]}")
    metrics = [m.strip() for item in args.metric for m in item.split(",") if m.strip()]
    for m in metrics:  # checked against the summary's declaration before any directory is read
        why = expression_error(m)
        if why is not None:
            raise ResultsError(f"--metric {m!r}: {why}")
    results = [read_results(p) for p in args.results]
    labels = _labels(results, args.labels)
    if args.baseline is not None and not 0 <= args.baseline < len(results):
        raise ResultsError(f"--baseline {args.baseline}: out of range for {len(results)} runs (0..{len(results) - 1})")
    facts = [{"path": str(r.path), "name": r.doc.get("name"), "results_version": r.doc.get("results_version"),
              "seed": r.doc.get("seed"), "fabric": r.doc.get("fabric_kind"), "complete": r.doc.get("complete"),
              "warnings": list(r.summary.warnings)} for r in results]
    comp = compare_summaries(list(zip(labels, (r.summary for r in results), strict=True)), metrics or None,
                             args.baseline, facts)
    absent = [row.metric for row in comp.rows if metrics and all(v is None for v in row.values)]
    if absent:  # a typo in a CI script must not read as "n/a everywhere" and exit 0
        raise ResultsError(f"--metric {absent[0]!r}: not found (or no value) in any of the {len(results)} runs; "
                           "metric paths: docs/results.md")
    if args.json:
        json.dump(comp.to_dict(), sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    cols, rows = comparison_table(comp)
    align = "l" + "r" * (len(cols) - 2) + "l"
    for label, r in zip(labels, results, strict=True):
        print(f"# {label}: {r.path}")
    print("\n".join(render_table(Table("", cols, tuple(rows), align))))
    for label, f in zip(labels, facts, strict=True):
        for w in f["warnings"]:
            print(f"WARNING ({label}): {w}")
    return 0


def run_flows(args: argparse.Namespace) -> int:
    """``compare A B --flows``: the per-flow fidelity report of two runs of one schedule."""
    from emulator.report.flowcompare import compare_flows, flow_run, only_job, render_flow_comparison
    from emulator.results import read_results

    if len(args.results) != 2:
        raise ResultsError(f"compare --flows: needs exactly two results directories, got {len(args.results)}")
    if args.metric or args.baseline is not None:
        raise ResultsError("compare --flows: --metric and --baseline apply to the metric table, not to --flows")
    if args.top < 0:
        raise ResultsError(f"--top {args.top}: must be 0 or more")
    a, b = (read_results(p) for p in args.results)
    hashes = []
    for r in (a, b):
        h = r.doc.get("schedule_hash")
        if not isinstance(h, str) or not h:
            raise ResultsError(f"{r.file('results')}: key 'schedule_hash' is missing: cannot match flows")
        hashes.append(h)
    if hashes[0] != hashes[1]:
        raise ResultsError(f"compare --flows: {a.path} and {b.path} ran different schedules "
                           f"(schedule_hash {hashes[0]} vs {hashes[1]})")
    la, lb = _labels([a, b], args.labels)
    runs = (flow_run(a), flow_run(b))
    if args.job is not None:
        runs = (only_job(runs[0], args.job), only_job(runs[1], args.job))
    comp = compare_flows((la, lb), hashes[0], runs, top=args.top)
    if args.json:
        doc = comp.to_dict()
        doc["runs"] = [{"label": lbl, "path": str(r.path), "fabric": r.doc.get("fabric_kind")}
                       for lbl, r in ((la, a), (lb, b))]
        json.dump(doc, sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    for lbl, r in ((la, a), (lb, b)):
        print(f"# {lbl}: {r.path} ({r.doc.get('fabric_kind')})")
    print("\n".join(render_flow_comparison(comp)))
    return 0
