"""``emulator inspect TRACE|SCHEDULE [--json]``: summarise a Chakra trace or a compiled schedule file.

TRACE is a prefix (``PREFIX.<rank>.et`` files), one file, a gzip file or a JSON trace — whatever
:func:`emulator.trace.io.read_trace` accepts. The summary itself is :mod:`emulator.trace.inspection`;
this module only parses options, reads, checks (a dependency cycle, or ranks of one process group
issuing different numbers of collectives on it, is an error: one line, exit 2), and prints text or
exactly one JSON object.
"""

from __future__ import annotations

import argparse
import json

from emulator.trace.model import DEP_POLICIES, LEGACY_CHOICES


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = subparsers.add_parser(
        name, help=help_text,
        description="Summarise a Chakra trace: per rank node counts by type, communication by collective "
                    "type (and SEND/RECV) with count, bytes and groups, compute time on the critical path, "
                    "warnings.",
    )
    parser.add_argument("trace", metavar="TRACE",
                        help="trace prefix (PREFIX.<rank>.et), one .et/.et.gz or JSON file, or a schedule file")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    parser.add_argument("--dep-policy", choices=DEP_POLICIES, default="auto",
                        help="which dependencies to use: auto (data_deps if any, else ctrl_deps), data, ctrl, union")
    parser.add_argument("--groups", metavar="FILE", default=None,
                        help="process-group JSON {\"1\": [0, 1, ...], ...} (overrides groups in the trace)")
    parser.add_argument("--legacy-collectives", choices=tuple(LEGACY_CHOICES), default="auto",
                        help="pre-2023 collective numbering: auto (by schema version), yes, no")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from emulator.schedule.io import is_schedule_file

    if is_schedule_file(args.trace):  # a compiled schedule, not a trace
        from emulator.schedule.summary import render_schedule_file

        print(render_schedule_file(args.trace, as_json=args.json))
        return 0
    from emulator.trace.graph import check_collective_counts
    from emulator.trace.inspection import format_summary_text, summarize_trace
    from emulator.trace.io import read_trace

    trace = read_trace(args.trace, dep_policy=args.dep_policy, legacy_collectives=LEGACY_CHOICES[args.legacy_collectives],
                       groups_file=args.groups)
    summary = summarize_trace(trace)  # raises on a dependency cycle
    check_collective_counts(trace)  # ranks of a group must issue as many collectives on it
    if args.json:
        print(json.dumps(summary, sort_keys=False))
    else:
        print(format_summary_text(summary))
    return 0
