"""``emulator compile``: trace → schedule file (see ``emulator.schedule.compiler`` for the semantics).

Only parses options, reads the trace, compiles, saves and prints. Every bad option value is one
``error: ...`` line (:class:`~emulator.errors.ConfigError`, exit 2): numeric options are validated in
:func:`run`, not by argparse (whose errors add a usage block). ``--root COLL=POS`` takes a *group
position* (index in the sorted member list of the collective's process group; equal to the rank in the
default all-rank group), because one override applies to every group; profiles take a root *rank* and
``emulator.run.workload`` converts it. ``--json`` prints exactly the
:func:`emulator.schedule.summary.summarize` object. A compile too large for the memory available is one
``error:`` line before it starts (:mod:`emulator.schedule.estimate`); one of 2 M flows or more says so on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

from emulator.errors import ConfigError
from emulator.report.console import counted
from emulator.trace.model import DEP_POLICIES, LEGACY_CHOICES, ROOTED, CollectiveType, collective_from_name

_COLLECTIVES = tuple(c.name.lower() for c in CollectiveType)
#: = emulator.schedule.compiler.P2P_PAIRINGS (not imported here: registering a command must not load numpy)
_P2P_PAIRINGS = ("strict", "group", "ignore")


def _pairs(text: str, option: str) -> list[tuple[CollectiveType, str]]:
    out = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not value.strip():
            raise ConfigError(f"{option} {item!r}: expected COLLECTIVE=VALUE (e.g. all_reduce=ring)")
        ctype = collective_from_name(key)
        if ctype is None:
            raise ConfigError(f"{option} {item!r}: unknown collective {key.strip().lower().replace('-', '_')!r} "
                              f"(one of {', '.join(_COLLECTIVES)})")
        out.append((ctype, value.strip()))
    return out


def parse_algorithms(text: str) -> dict[CollectiveType, str]:
    """``all_reduce=ring,all_to_all=direct`` → {CollectiveType: name}; names checked against the registry."""
    from emulator.schedule.algorithms import available_algorithms, normalise_name

    result = {}
    for ctype, given in _pairs(text, "--algo"):
        name = normalise_name(given)  # as get_algorithm reads it
        names = list(available_algorithms(ctype))
        if name not in names:
            raise ConfigError(
                f"--algo {ctype.name.lower()}={given}: unknown algorithm (available: {', '.join(names) or 'none'})"
            )
        result[ctype] = name
    return result


def parse_roots(text: str) -> dict[CollectiveType, int]:
    """``broadcast=0,reduce=2`` → {CollectiveType: group position}; only rooted collectives take one."""
    result = {}
    for ctype, value in _pairs(text, "--root"):
        if ctype not in ROOTED:
            rooted = ", ".join(sorted(c.name.lower() for c in ROOTED))
            raise ConfigError(f"--root {ctype.name.lower()}={value}: {ctype.name.lower()} has no root (rooted: {rooted})")
        root = _int_at_least(f"--root {ctype.name.lower()}={value}", value, 0, "an integer group position")
        result[ctype] = root
    return result


def _int_at_least(label: str, text: str, lo: int, noun: str = "an integer") -> int:
    """``int(text)`` if it is >= ``lo``, else ConfigError ``"<label>: must be <noun> >= <lo>"``."""
    try:
        value = int(text)
    except ValueError:
        value = lo - 1
    if value < lo:
        raise ConfigError(f"{label}: must be {noun} >= {lo}")
    return value


def _positive_int(option: str, text: str | None) -> int | None:
    return None if text is None else _int_at_least(f"{option} {text}", text, 1)


def _scale(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ConfigError(f"--compute-scale {text!r}: must be a number >= 0 (0.5 = twice-as-fast compute)") from None
    if not v >= 0 or v == float("inf"):
        raise ConfigError(f"--compute-scale {text}: must be a finite number >= 0")
    return v


def _algorithm_listing() -> str:
    from emulator.schedule.algorithms import DEFAULT_ALGORITHMS, available_algorithms

    rows = []
    for ctype in sorted(DEFAULT_ALGORITHMS, key=lambda c: c.name):
        names = [f"{a}*" if a == DEFAULT_ALGORITHMS[ctype] else a for a in available_algorithms(ctype)]
        rows.append(f"  {ctype.name.lower():<22} {', '.join(names)}")
    return "algorithms (--algo COLL=NAME; * = default):\n" + "\n".join(rows)


class _CompileStatus:
    """A large compile (``NOTICE_FLOWS`` flows or more) says so on stderr before it starts, with its estimate;
    on a terminal a status line then follows the walk over ranks, the assembly and the write."""

    def __init__(self) -> None:
        self._status = None

    def __enter__(self) -> _CompileStatus:
        return self

    def __exit__(self, *exc) -> None:
        if self._status is not None:
            self._status.stop()

    def estimate(self, est) -> None:
        line = est.notice()
        if line is None:
            return
        print(line, file=sys.stderr, flush=True)
        if sys.stderr.isatty():
            from rich.console import Console

            self._status = Console(file=sys.stderr).status("compiling")
            self._status.start()

    def progress(self, phase: str, done: int, total: int) -> None:
        if self._status is not None:
            self._status.update({"walk": f"compiling: rank {done:,} of {total:,}", "assemble": "compiling: assembling",
                                 "write": "writing the schedule"}[phase])


def register(subparsers, name: str, help_text: str) -> None:
    p = subparsers.add_parser(
        name,
        help=help_text,
        description=(
            "Compile a Chakra trace set (PREFIX.<rank>.et) into a per-rank flow schedule file\n"
            "(versioned, deterministic, sha256-stamped; 'emulator inspect SCHEDULE' summarises it).\n"
            "Closed loop by default: an op starts when its parents are done. Collectives are matched\n"
            "across ranks by issue order within their process group, at most one in flight per group\n"
            "and rank (different groups overlap); SEND/RECV pair by (src, dst, tag, k-th occurrence);\n"
            "one queue pair per (group, src, dst). comm_size as in Chakra/ASTRA-sim: the full buffer,\n"
            "except all_gather and gather (the per-rank shard)."
        ),
        epilog=_algorithm_listing(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("prefix", metavar="PREFIX", help="trace prefix (PREFIX.<rank>.et) or a single .et file")
    p.add_argument("-o", "--output", required=True, metavar="SCHEDULE", help="schedule file to write")
    p.add_argument("--algo", default="", metavar="COLL=NAME,...",
                   help="algorithm per collective type, e.g. all_reduce=ring,all_to_all=direct (list below)")
    p.add_argument("--chunks", default=None, metavar="K", help="split each collective into K pipelined chunks (1)")
    p.add_argument("--window", default=None, metavar="W", help="all_to_all/direct: at most W peers in flight (all)")
    p.add_argument("--compute-scale", default="1", metavar="X",
                   help="multiply compute/memory durations (0.5 = twice-as-fast accelerators; 1)")
    p.add_argument("--open-loop", action="store_true",
                   help="ops start at their recorded start times (else a compute-only estimate), no dependencies")
    p.add_argument("--keep-idle", action="store_true",
                   help="when the trace has start_time_micros, keep idle gaps before a node as extra delays")
    p.add_argument("--groups", default=None, metavar="comm_group.json",
                   help="process-group mapping {\"<pg_name>\": [ranks...]} (overrides the trace's groups)")
    p.add_argument("--dep-policy", choices=DEP_POLICIES, default="auto",
                   help="which dependencies to use: auto (data_deps if any, else ctrl_deps), data, ctrl, union")
    p.add_argument("--legacy-collectives", choices=tuple(LEGACY_CHOICES), default="auto",
                   help="pre-2023 collective numbering: auto (by schema version), yes, no")
    p.add_argument("--replicate", default=None, metavar="N",
                   help="replicate a single-rank trace to N data-parallel ranks (e.g. a PyTorch rank-0 trace)")
    p.add_argument("--root", default="", metavar="COLL=POS,...",
                   help="root of broadcast/reduce/gather/scatter as a GROUP POSITION (index in the sorted member "
                        "list; = the rank in the all-rank group), e.g. broadcast=0; default: the node's root "
                        "attribute, else position 0 (the group's first rank)")
    p.add_argument("--p2p-pairing", choices=_P2P_PAIRINGS, default="strict",
                   help="SEND/RECV without a peer (PyTorch conversions) or a match: error (strict), peer = the "
                        "other member of the node's 2-rank pg_name group (group), or a zero wait (ignore)")
    p.add_argument("--summary", action="store_true", help="print a text summary (per rank flows and bytes)")
    p.add_argument("--json", action="store_true",
                   help='print {"ranks", "flows", "bytes", "per_rank", "collectives", "hash"} as one JSON object')
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from emulator.schedule.compiler import CompileOptions, compile_trace
    from emulator.schedule.io import save_schedule
    from emulator.schedule.summary import render_summary, summarize
    from emulator.trace.checks import one_rank_warnings, warning_lines
    from emulator.trace.digest import trace_digest
    from emulator.trace.io import read_trace

    options = CompileOptions(
        algorithms=parse_algorithms(args.algo),
        chunks=_positive_int("--chunks", args.chunks) or 1,
        window=_positive_int("--window", args.window),
        compute_scale=_scale(args.compute_scale),
        open_loop=args.open_loop,
        keep_idle=args.keep_idle,
        replicate=_positive_int("--replicate", args.replicate),
        roots=parse_roots(args.root),
        p2p_pairing=args.p2p_pairing,
    )
    trace = read_trace(args.prefix, dep_policy=args.dep_policy, groups_file=args.groups,
                       legacy_collectives=LEGACY_CHOICES[args.legacy_collectives])
    for w in [*warning_lines(trace), *one_rank_warnings(trace, options.replicate)]:
        print(f"warning: {w}", file=sys.stderr)
    with _CompileStatus() as status:
        schedule = compile_trace(trace, options, provenance={"trace_sha256": trace_digest(trace)},
                                 on_estimate=status.estimate, progress=status.progress)
        status.progress("write", 0, 1)
        digest = save_schedule(schedule, args.output)
    for w in schedule.meta.get("warnings", []):
        print(f"warning: {args.prefix}: {w}", file=sys.stderr)
    summary = summarize(schedule, hash_hex=digest)
    if args.json:
        print(json.dumps(summary, sort_keys=False))
    elif args.summary:
        print(render_summary(summary, schedule))
    else:
        print(
            f"wrote {args.output}: {counted(summary['ranks'], 'rank')}, {counted(schedule.n_ops, 'op')}, "
            f"{counted(summary['flows'], 'flow')}, {counted(summary['bytes'], 'byte')}, hash {digest[:16]}"
        )
    return 0
