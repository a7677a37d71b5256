"""``emulator compile``: trace → schedule file (see ``emulator.schedule.compiler`` for the semantics)."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from emulator.errors import ConfigError
from emulator.trace.model import DEP_POLICIES, CollectiveType

_COLLECTIVES = {c.name.lower(): c for c in CollectiveType}


def _pairs(text: str, option: str) -> list[tuple[CollectiveType, str]]:
    out = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not sep or not value.strip():
            raise ConfigError(f"{option} {item!r}: expected COLLECTIVE=VALUE (e.g. all_reduce=ring)")
        if key not in _COLLECTIVES:
            raise ConfigError(f"{option} {item!r}: unknown collective {key!r} (one of {', '.join(_COLLECTIVES)})")
        out.append((_COLLECTIVES[key], value.strip()))
    return out


def parse_algorithms(text: str) -> dict[CollectiveType, str]:
    """``all_reduce=ring,all_to_all=direct`` → {CollectiveType: name}; names checked against the registry."""
    from emulator.schedule.algorithms import available_algorithms

    result = {}
    for ctype, name in _pairs(text, "--algo"):
        names = list(available_algorithms(ctype))
        if name not in names:
            raise ConfigError(
                f"--algo {ctype.name.lower()}={name}: unknown algorithm (available: {', '.join(names) or 'none'})"
            )
        result[ctype] = name
    return result


def parse_roots(text: str) -> dict[CollectiveType, int]:
    result = {}
    for ctype, value in _pairs(text, "--root"):
        try:
            root = int(value)
        except ValueError:
            raise ConfigError(f"--root {ctype.name.lower()}={value}: root must be an integer group position") from None
        if root < 0:
            raise ConfigError(f"--root {ctype.name.lower()}={value}: root must be >= 0")
        result[ctype] = root
    return result


def _positive_int(option: str):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} must be an integer, got {text!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{option} must be >= 1, got {v}")
        return v

    return parse


def _scale(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--compute-scale must be a number, got {text!r}") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"--compute-scale must be a finite number >= 0, got {text!r}")
    return v


def register(subparsers, name: str, help_text: str) -> None:
    p = subparsers.add_parser(
        name,
        help=help_text,
        description=(
            "Compile a Chakra trace set (PREFIX.<rank>.et) into a per-rank flow schedule file. "
            "Closed loop by default (an op starts when its parents are done); collectives are matched "
            "across ranks by issue order within their process group, at most one in flight per group "
            "and rank; one queue pair per (group, src, dst)."
        ),
    )
    p.add_argument("prefix", metavar="PREFIX", help="trace prefix (PREFIX.<rank>.et) or a single .et file")
    p.add_argument("-o", "--output", required=True, metavar="SCHEDULE", help="schedule file to write")
    p.add_argument("--algo", default="", metavar="COLL=NAME,...", help="algorithm per collective, e.g. all_reduce=ring,all_to_all=direct")
    p.add_argument("--chunks", type=_positive_int("--chunks"), default=1, metavar="K", help="split each collective into K pipelined chunks")
    p.add_argument("--window", type=_positive_int("--window"), default=None, metavar="W", help="all-to-all: at most W peers in flight")
    p.add_argument("--compute-scale", type=_scale, default=1.0, metavar="X", help="multiply compute/memory durations (0.5 = twice as fast)")
    p.add_argument("--open-loop", action="store_true", help="ops start at recorded (or estimated) times, no dependencies")
    p.add_argument("--keep-idle", action="store_true", help="keep idle gaps between recorded start times as delays")
    p.add_argument("--groups", default=None, metavar="comm_group.json", help="process-group mapping file {id: [ranks]}")
    p.add_argument("--dep-policy", choices=DEP_POLICIES, default="auto", help="which dependency edges to honour")
    p.add_argument("--replicate", type=_positive_int("--replicate"), default=None, metavar="N", help="replicate a single-rank trace to N data-parallel ranks")
    p.add_argument("--root", default="", metavar="COLL=POS,...", help="root per rooted collective as a group position (= the rank in the all-rank group), e.g. broadcast=0")
    p.add_argument("--p2p-pairing", choices=("strict", "ignore"), default="strict", help="unmatched SEND/RECV: error (strict) or drop (ignore)")
    p.add_argument("--summary", action="store_true", help="print a text summary")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def _trace_digest(trace) -> str:
    """sha256 over the rank files' bytes (rank order), for provenance; '' when the files are unknown."""
    h = hashlib.sha256()
    found = False
    for r in sorted(trace.ranks):
        src = trace.ranks[r].source
        if not src or not Path(src).is_file():
            return ""
        found = True
        with open(src, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest() if found else ""


def run(args: argparse.Namespace) -> int:
    from emulator.schedule.compiler import CompileOptions, compile_trace
    from emulator.schedule.io import save_schedule
    from emulator.schedule.summary import render_summary, summarize
    from emulator.trace.io import read_trace

    options = CompileOptions(
        algorithms=parse_algorithms(args.algo),
        chunks=args.chunks,
        window=args.window,
        compute_scale=args.compute_scale,
        open_loop=args.open_loop,
        keep_idle=args.keep_idle,
        replicate=args.replicate,
        roots=parse_roots(args.root),
        p2p_pairing=args.p2p_pairing,
    )
    trace = read_trace(args.prefix, dep_policy=args.dep_policy, groups_file=args.groups)
    for w in [*trace.warnings, *(w for r in sorted(trace.ranks) for w in trace.ranks[r].warnings)]:
        print(f"warning: {w}", file=sys.stderr)
    schedule = compile_trace(trace, options, provenance={"trace_sha256": _trace_digest(trace)})
    digest = save_schedule(schedule, args.output)
    summary = summarize(schedule, hash_hex=digest)
    if args.json:
        print(json.dumps(summary, sort_keys=False))
    elif args.summary:
        print(render_summary(summary, schedule))
    else:
        print(
            f"wrote {args.output}: {summary['ranks']} ranks, {schedule.n_ops} ops, {summary['flows']} flows, "
            f"{summary['bytes']} bytes, hash {digest[:16]}"
        )
    return 0
