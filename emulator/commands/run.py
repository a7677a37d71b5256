"""``emulator run PROFILE``: compile (or load a schedule), run on a fabric, write a results directory.

Exit status: 0 ok · 1 an SLO of the profile is broken (each printed as ``SLO broken: ...``) · 2 bad input
(one ``error:`` line) · 3 the run was incomplete (a rank died, hung or the run timed out; what was
measured is still written) · 130 Ctrl-C (after writing what was measured). The work is done by
:func:`emulator.run.pipeline.run_profile`.
"""

from __future__ import annotations

import argparse


def _slow_factor(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--slow-factor must be a number, got {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"--slow-factor must be a positive number, got {text!r}")
    return v


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    p = subparsers.add_parser(
        name, help=help_text,
        description="Run a profile: compile its workload (or load --schedule), run warmup + measured iterations "
                    "on the sim, loopback or direct fabric, write a results directory (results.json, flows.csv, "
                    "collectives.csv, ranks.csv, raw records) and print a summary. Exit 0 ok, 1 SLO broken, "
                    "2 bad input, 3 incomplete run, 130 interrupted.",
    )
    p.add_argument("profile", metavar="PROFILE",
                   help="profile YAML file (profiles/*.yaml); with a matrix: every combination runs, each into "
                        "RESULTS_DIR/<combination>")
    p.add_argument("--fabric", choices=("sim", "fluid", "loopback", "direct"), default=None,
                   help="run on this fabric instead of the profile's fabric.kind")
    p.add_argument("-o", "--output", metavar="RESULTS_DIR", default=None,
                   help="results directory (default: output.dir of the profile, else results/<name>-<UTC time>)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a profile key, e.g. --set fabric.ports.rate=10Gbps (repeatable)")
    p.add_argument("--schedule", metavar="FILE", default=None,
                   help="run this compiled schedule (from 'emulator compile') instead of the profile's workload")
    p.add_argument("--slow-factor", type=_slow_factor, default=1.5, metavar="K",
                   help="flag a rank slow in an instance when its completion > K × the median (default 1.5)")
    p.add_argument("--quiet", action="store_true", help="no summary table and no progress line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from emulator.config import load_profiles

    overrides = list(args.set)
    if args.fabric:
        overrides.append(f"fabric.kind={args.fabric}")
    profiles = load_profiles(args.profile, overrides=overrides)
    if len(profiles) == 1:
        from emulator.run.pipeline import run_profile

        return run_profile(profiles[0], schedule_path=args.schedule, out_dir=args.output,
                           slow_factor=args.slow_factor, quiet=args.quiet).exit_code
    return _run_matrix(profiles, args)


#: exit codes from least to most severe (130 stops a sweep at once)
_SEVERITY = (0, 1, 3)


def _run_matrix(profiles: list, args: argparse.Namespace) -> int:
    """A profile with ``matrix:``: every combination runs into ``BASE/<combination name>``; then a table."""
    from pathlib import Path

    from emulator.run.pipeline import EXIT_INTERRUPTED, default_results_dir, run_profile, safe_name

    first = profiles[0]
    base = Path(args.output or first.output.dir or default_results_dir(first, name=Path(args.profile).stem))
    done: list[tuple[str, int, Path]] = []
    for i, profile in enumerate(profiles, 1):
        print(f"[{i}/{len(profiles)}] {profile.name}", flush=True)
        report = run_profile(profile, schedule_path=args.schedule, out_dir=base / safe_name(profile.name),
                             slow_factor=args.slow_factor, quiet=args.quiet)
        done.append((profile.name, report.exit_code, report.results_dir))
        if report.exit_code == EXIT_INTERRUPTED:
            break
    width = max(len(name) for name, _, _ in done)
    print(f"\nsweep of {len(profiles)} runs ({len(done)} run) in {base}:")
    for name, code, path in done:
        verdict = {0: "ok", 1: "SLO broken", 3: "INCOMPLETE", EXIT_INTERRUPTED: "interrupted"}.get(code, str(code))
        print(f"  {name:<{width}}  {verdict:<12} {path}")
    print("compare them: emulator compare " + " ".join(str(p) for _, _, p in done))
    codes = [code for _, code, _ in done]
    if EXIT_INTERRUPTED in codes:
        return EXIT_INTERRUPTED
    return max(codes, key=_SEVERITY.index)
