"""``emulator generate KIND --ranks N -o PREFIX [options]``: write a synthetic Chakra trace.

One ``PREFIX.<rank>.et`` per rank (``.et.gz`` with ``--compress``), streamed through the trace writer,
so very large traces need bounded memory. Same options → byte-identical files. Sizes take units
(``16MiB``), durations too (``250us``; bare numbers are microseconds). Every usage error is one line.
The options of each KIND are the fields of its options dataclass (:mod:`emulator.trace.generators.options`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from emulator.report.console import counted
from emulator.trace import generators as gen
from emulator.trace.generators.options import OptionSpec
from emulator.units import format_bytes


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one ``error: ...`` line (exit 2), like every other error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"error: {self.prog}: {message}", file=sys.stderr)
        sys.exit(2)


def _argument(spec: OptionSpec) -> dict[str, Any]:
    """argparse keywords of an option: plain kinds are converted by argparse, the others after parsing."""
    kw: dict[str, Any] = {"default": None, "help": spec.help}
    if spec.kind == "int":
        kw["type"] = int
    elif spec.kind == "float":
        kw["type"] = float
    elif spec.kind == "choice":
        kw["choices"] = spec.choices
    return kw


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = subparsers.add_parser(
        name, help=help_text,
        description="Write a synthetic Chakra execution trace, one PREFIX.<rank>.et per rank. "
                    "Sizes take units (16MiB, 4KB), durations too (250us, 1ms; bare numbers are µs).",
    )
    parser.error = _OneLineParser.error.__get__(parser)  # type: ignore[method-assign]
    kinds = parser.add_subparsers(dest="kind", metavar="KIND", parser_class=_OneLineParser, required=True)
    for g in gen.GENERATORS.values():
        p = kinds.add_parser(g.kind, help=g.help, description=g.description)
        required = p.add_argument_group("required arguments")
        ranks = required if g.ranks_required else p
        ranks.add_argument("--ranks", type=int, required=g.ranks_required, default=None, metavar="N",
                           help="number of ranks (files)" + (f"; {g.ranks_help}" if g.ranks_help else ""))
        required.add_argument("-o", "--output", required=True, metavar="PREFIX", help="write PREFIX.<rank>.et")
        specs = g.option_specs()
        common = [s for s in specs if s.name == "iterations"]  # listed with the options every kind takes
        for spec in common:
            p.add_argument(spec.flag, **_argument(spec))
        p.add_argument("--compress", action="store_true", help="gzip the files (PREFIX.<rank>.et.gz)")
        for spec in specs:
            if spec not in common:
                p.add_argument(spec.flag, **_argument(spec))
    parser.set_defaults(func=run)


def build(args: argparse.Namespace) -> gen.GeneratedTrace:
    """The trace description the parsed command line asks for."""
    given = {s.name: getattr(args, s.name) for s in gen.GENERATORS[args.kind].option_specs()}
    return gen.generate(args.kind, args.ranks, {k: v for k, v in given.items() if v is not None})


def run(args: argparse.Namespace) -> int:
    trace = build(args)
    report = gen.write_generated(trace, args.output, compress=args.compress)
    total_nodes = sum(report.node_counts)
    total_bytes = sum(p.stat().st_size for p in report.paths)
    suffix = ".et.gz" if args.compress else ".et"
    print(f"wrote {counted(len(report.paths), 'rank file')} {args.output}.{{0..{len(report.paths) - 1}}}{suffix}: "
          f"{counted(total_nodes, 'node')}, {format_bytes(total_bytes)}, {counted(len(trace.groups), 'process group')}")
    if len(report.paths) == 1:
        print(f"warning: generate {args.kind} --ranks 1: one rank's collectives have no peer and make no traffic; "
              f"use --ranks 2 or more (or run this trace with --replicate N)", file=sys.stderr)
    return 0
