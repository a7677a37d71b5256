"""``emulator run PROFILE``: compile (or load a schedule), run on a fabric, write a results directory.

Exit status: 0 ok · 1 an SLO of the profile is broken (each printed as ``SLO broken: ...``) · 2 bad input
(one ``error:`` line) · 3 the run was incomplete (a rank died, hung or the run timed out; what was
measured is still written) · 4 internal error (an unexpected exception: a bug of the emulator, one
``internal error:`` line; ``EMULATOR_DEBUG=1`` shows the traceback) · 130 Ctrl-C (after writing what was
measured). The work is done by :func:`emulator.run.pipeline.run_profile`.

``emulator run --trace PREFIX`` needs no profile: the packaged defaults of the fabric
(``emulator/data/profiles/trace_<fabric>.yaml``, which extend the shipped ``profiles/base`` files, copied
into the package) with ``ranks.count`` from the trace, named after the trace. With a PROFILE, ``--trace``
replaces its workload (and its ``ranks.count``).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from emulator.report.console import counted
from emulator.trace.model import DEP_POLICIES, LEGACY_CHOICES

FABRICS = ("sim", "fluid", "loopback", "direct")


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
                    "2 bad input, 3 incomplete run, 4 internal error (a bug: EMULATOR_DEBUG=1 shows the traceback), "
                    "130 interrupted.",
    )
    p.add_argument("profile", metavar="PROFILE", nargs="?", default=None,
                   help="profile YAML file (profiles/*.yaml); with a matrix: every combination runs, each into "
                        "RESULTS_DIR/<combination>. Optional with --trace")
    p.add_argument("--fabric", choices=FABRICS, default=None,
                   help="run on this fabric instead of the profile's fabric.kind (with --trace and no profile: "
                        "the shipped defaults of that fabric; sim when not given)")
    t = p.add_argument_group(
        "trace", "run a Chakra trace: 'emulator run --trace PREFIX' needs no profile (the run is named after the "
                 "trace, ranks.count comes from it); with a PROFILE it replaces the profile's workload")
    t.add_argument("--trace", metavar="PREFIX", default=None,
                   help="trace prefix (PREFIX.<rank>.et) or one .et/.json file")
    t.add_argument("--ranks", metavar="N", default=None,
                   help="ranks.count; must match a multi-rank trace; on a one-rank trace = --replicate N")
    t.add_argument("--replicate", metavar="N", default=None,
                   help="replicate a one-rank trace (e.g. a PyTorch rank-0 trace) to N data-parallel ranks")
    t.add_argument("--dep-policy", choices=DEP_POLICIES, default=None,
                   help="which dependencies to use: auto (data_deps if any, else ctrl_deps), data, ctrl, union "
                        "(workload.trace.dep_policy)")
    t.add_argument("--legacy-collectives", choices=tuple(LEGACY_CHOICES), default=None,
                   help="pre-2023 collective numbering: auto (by schema version), yes, no "
                        "(workload.trace.legacy_collectives)")
    t.add_argument("--groups", metavar="FILE", default=None,
                   help="process-group JSON {\"1\": [0, 1, ...], ...} (workload.trace.groups)")
    p.add_argument("-o", "--output", metavar="RESULTS_DIR", default=None,
                   help="results directory (default: output.dir of the profile, else results/<name>-<UTC time>)")
    p.add_argument("--overwrite", action="store_true",
                   help="write into a RESULTS_DIR that holds an earlier run's results, deleting that run's files "
                        "first (results.json, CSV, records, report.html, timeline.json, plots/*.png; nothing else)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a profile key, e.g. --set fabric.ports.rate=10Gbps (repeatable)")
    p.add_argument("--schedule", metavar="FILE", default=None,
                   help="run this compiled schedule (from 'emulator compile') instead of the profile's workload")
    p.add_argument("--slow-factor", type=_slow_factor, default=1.5, metavar="K",
                   help="flag a rank slow in an instance when its completion > K × the median (default 1.5)")
    p.add_argument("--quiet", action="store_true", help="no summary table and no progress line (the run's warnings, the timing verdict among them, still go to stderr)")
    m = p.add_argument_group("many hosts", "run the ranks on agents ('emulator agent') named in HOSTS.yaml; "
                                           "the fabric is direct")
    m.add_argument("--hosts", metavar="HOSTS.yaml", default=None, help="agents, their ranks and data-plane addresses")
    m.add_argument("--token-file", metavar="FILE", default=None, help="file holding the agents' token")
    m.add_argument("--ca-file", metavar="FILE", default=None, help="CA certificate to verify https:// agents with")
    sw = p.add_argument_group("sweep", "a profile with matrix: runs every combination into RESULTS_DIR/<combination>")
    sw.add_argument("--jobs", "-j", type=_jobs, default=1, metavar="N",
                    help="run the combinations in N local processes (default 1: one after the other)")
    sw.add_argument("--emit-slurm-array", metavar="FILE", default=None,
                    help="run nothing: write a Slurm job-array script to FILE, one combination per array task, "
                         "all into RESULTS_DIR (then 'emulator compare RESULTS_DIR/*/')")
    sw.add_argument("--combination", type=int, default=None, metavar="I",
                    help="run only combination I (0-based, in the order of the matrix) into RESULTS_DIR/<its name>")
    p.set_defaults(func=run)


def _jobs(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--jobs must be an integer >= 1, got {text!r}")
    return int(text)


def _trace_overrides(args: argparse.Namespace) -> list[str]:
    """``--set``-style overrides for the trace options (placed before the user's own ``--set``)."""
    from emulator.config.resolve import trace_rank_files
    from emulator.errors import ConfigError

    out = []
    if args.trace is not None:
        prefix = str(Path(args.trace).expanduser().resolve())
        out += [f"workload.trace.prefix={json.dumps(prefix)}", "ranks.count=null",
                *(f"workload.{k}=null" for k in ("collectives", "generate", "schedule"))]
        files = trace_rank_files(prefix)
        if not files and not Path(prefix).is_file():
            raise ConfigError(f"--trace {args.trace}: no trace files (expected {args.trace}.<rank>.et or .json, or one file)")
        ranks = _count("--ranks", args.ranks)
        if ranks is not None and args.replicate is None and len(files) <= 1:
            args.replicate = str(ranks)  # a one-rank trace on N ranks is a replicated one
        elif ranks is not None and len(files) <= 1:
            if ranks != _count("--replicate", args.replicate):
                raise ConfigError(f"--ranks {ranks} and --replicate {args.replicate} disagree: on the one-rank trace "
                                  f"{args.trace} --ranks N means --replicate N (give one of them)")
        elif ranks is not None:
            if ranks != len(files):
                raise ConfigError(f"--ranks {ranks}: the trace {args.trace} has {counted(len(files), 'rank file')} "
                                  f"(--ranks may be left out: the count comes from the trace)")
            out.append(f"ranks.count={ranks}")
    elif args.ranks is not None:
        out.append(f"ranks.count={_count('--ranks', args.ranks)}")
    if args.replicate is not None:
        out.append(f"workload.trace.replicate={_count('--replicate', args.replicate)}")
    for key, value in (("dep_policy", args.dep_policy), ("legacy_collectives", args.legacy_collectives)):
        if value is not None:
            out.append(f"workload.trace.{key}={value}")
    if args.groups is not None:
        groups = Path(args.groups).expanduser().resolve()
        if not groups.is_file():
            raise ConfigError(f"--groups {args.groups}: no such file")
        out.append(f"workload.trace.groups={json.dumps(str(groups))}")
    return out


def _count(option: str, text: str | None) -> int | None:
    from emulator.errors import ConfigError

    if text is None:
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise ConfigError(f"{option} {text}: must be an integer >= 1")
    return int(text)


def trace_run_name(prefix: str) -> str:
    """The name of a profile-less trace run: the prefix's last component (``…/chakra.0.et`` → ``chakra``)."""
    name = Path(prefix).name
    return re.sub(r"(\.\d+)?\.(et|json)(\.gz)?$", "", name) or name


def load_run_profiles(args: argparse.Namespace) -> list:
    """The effective profiles of ``emulator run`` (PROFILE, or the packaged defaults of the fabric for
    ``--trace`` without one), with the trace options and ``--set`` applied."""
    from dataclasses import replace

    from emulator.config import load_profiles
    from emulator.config.loader import package_dir
    from emulator.errors import ConfigError

    if args.profile is None and args.trace is None:
        raise ConfigError("run: give a PROFILE, or --trace PREFIX to run a trace with the shipped defaults")
    overrides = _trace_overrides(args) + list(args.set)
    if args.fabric:
        overrides.append(f"fabric.kind={args.fabric}")
    if args.profile is None:
        defaults = package_dir() / "data" / "profiles" / f"trace_{args.fabric or 'sim'}.yaml"
        label = f"run --trace {args.trace}"
        try:
            loaded = load_profiles(defaults, overrides=overrides)
        except ConfigError as exc:  # name what the user typed, not the packaged defaults file
            raise ConfigError(str(exc).replace(str(defaults), label)) from None
        return [replace(p, name=trace_run_name(args.trace), source=label) for p in loaded]
    return load_profiles(args.profile, overrides=overrides)


def _remote_driver(args: argparse.Namespace, profile):
    """The remote driver of ``--hosts`` (None without it)."""
    from emulator.errors import ConfigError

    if args.hosts is None:
        if args.token_file or args.ca_file:
            raise ConfigError("--token-file and --ca-file go with --hosts")
        return None
    if args.token_file is None:
        raise ConfigError("--hosts needs --token-file (the agents' token)")
    from emulator.commands.agent import read_token
    from emulator.remote.controller import ControllerConfig, check_agents
    from emulator.remote.hosts import load_hosts
    from emulator.run.runner import remote_driver

    cfg = ControllerConfig(token=read_token(args.token_file), ca_file=args.ca_file)
    plan = load_hosts(args.hosts)
    driver = remote_driver(profile, plan, cfg)
    if args.schedule is None and profile.ranks.count:  # the schedule's world, as the run checks it
        plan.check_world(profile.ranks.count)
    check_agents(plan, cfg)  # before --overwrite deletes an earlier run: token, CA, agent addresses
    return driver


def run(args: argparse.Namespace) -> int:
    if args.hosts is not None and args.fabric is None:
        args.fabric = "direct"
    profiles = load_run_profiles(args)
    if len(profiles) == 1 and args.combination is None and not args.emit_slurm_array:
        from emulator.run.pipeline import run_profile

        return run_profile(profiles[0], schedule_path=args.schedule, out_dir=args.output,
                           driver=_remote_driver(args, profiles[0]),
                           slow_factor=args.slow_factor, quiet=args.quiet, overwrite=args.overwrite).exit_code
    if args.hosts is not None:
        from emulator.errors import ConfigError

        raise ConfigError("--hosts: a profile with a matrix is not supported (run one combination at a time)")
    return _run_matrix(profiles, args)


def _run_matrix(profiles: list, args: argparse.Namespace) -> int:
    """A profile with ``matrix:``: every combination runs into ``BASE/<combination name>`` (``--jobs N``: in N
    processes; ``--combination I``: only the I-th; ``--emit-slurm-array FILE``: none, a job-array script instead)."""
    from emulator.run.pipeline import default_results_dir, prepare_sweep
    from emulator.run.sweep import run_sweep, sweep_exit_code, sweep_table

    first = profiles[0]
    base = Path(args.output or first.output.dir or default_results_dir(
        first, name=Path(args.profile).stem if args.profile else first.name))
    if args.combination is not None:
        return _run_one_combination(profiles, base, args)
    prepare_sweep(profiles, base, schedule_path=args.schedule, overwrite=args.overwrite)
    if args.emit_slurm_array:
        return _emit_slurm_array(profiles, base, args)
    runs = run_sweep(profiles, base, jobs=args.jobs, schedule_path=args.schedule, slow_factor=args.slow_factor,
                     quiet=args.quiet)
    print(sweep_table(runs, len(profiles), base))
    return sweep_exit_code(runs)


def _run_one_combination(profiles: list, base: Path, args: argparse.Namespace) -> int:
    """``--combination I``: run combination I (0-based, the order of the matrix) into ``BASE/<its name>``."""
    from emulator.errors import ConfigError
    from emulator.run.sweep import run_combination

    i = args.combination
    if not 0 <= i < len(profiles):
        raise ConfigError(f"--combination {i}: the matrix has {counted(len(profiles), 'combination')} "
                          f"(0..{len(profiles) - 1})")
    return run_combination(profiles[i], base, schedule_path=args.schedule, slow_factor=args.slow_factor,
                           quiet=args.quiet, overwrite=args.overwrite).exit_code


def _emit_slurm_array(profiles: list, base: Path, args: argparse.Namespace) -> int:
    """Write the Slurm job-array script of the sweep (one combination per array task) and run nothing."""
    from emulator.errors import ConfigError
    from emulator.run.sweep import slurm_array_script

    script = Path(args.emit_slurm_array)
    argv = [str(Path(args.profile).resolve())] if args.profile else []
    for opt, value in (("--fabric", args.fabric), ("--trace", args.trace), ("--ranks", args.ranks),
                       ("--replicate", args.replicate), ("--dep-policy", args.dep_policy),
                       ("--legacy-collectives", args.legacy_collectives), ("--groups", args.groups),
                       ("--schedule", args.schedule)):  # fmt: skip
        if value is not None:
            argv += [opt, str(Path(value).resolve()) if opt in ("--trace", "--groups", "--schedule") else str(value)]
    for item in args.set:
        argv += ["--set", item]
    argv += ["--slow-factor", repr(args.slow_factor), "--quiet"]
    base = base.resolve()
    text = slurm_array_script(argv, len(profiles), base, job_name=Path(args.profile or args.trace).stem,
                              cwd=Path.cwd())
    try:
        base.mkdir(parents=True, exist_ok=True)  # Slurm writes the tasks' logs there and creates no directory
        script.write_text(text)
        script.chmod(0o755)
    except OSError as exc:
        raise ConfigError(f"--emit-slurm-array {script}: cannot write: {exc.strerror or exc}") from None
    print(f"wrote {script}: a Slurm job array of {counted(len(profiles), 'combination')} into {base}")
    print(f"submit: sbatch {script}; then: emulator compare {base}/*/")
    return 0
