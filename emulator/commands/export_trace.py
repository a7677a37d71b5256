"""``emulator export-trace RESULTS_DIR -o PREFIX``: the run's workload as Chakra ET files with measured times.

Reads the results directory (``schedule.bin`` and ``records.npz``), rebuilds one workload iteration as a
trace (:mod:`emulator.schedule.to_trace`) whose COMM nodes carry the measured ``duration_micros`` of
their rank (``--stat`` over the measured iterations, or one ``--iteration``) and whose COMP nodes keep
the trace's durations, and writes ``PREFIX.<rank>.et`` (GlobalMetadata first, the process groups as a
``## process_group:init ##`` METADATA node). GlobalMetadata attributes say where the file came from
(``exported_from``), which statistic the durations are (``comm_duration``) and the compile choices
(``emulator_algorithms``, ``emulator_chunks``) needed to compile it back to the same flows.
"""

from __future__ import annotations

import argparse
import json
import sys

from emulator.errors import ConfigError, ResultsError, ScheduleError
from emulator.report.console import counted

_STATISTICS = ("median", "mean", "min", "max")  # = emulator.schedule.to_trace.STATISTICS (no numpy at register)


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    p = subparsers.add_parser(name, help=help_text, description=(
        "Write the workload of a results directory as Chakra ET files (PREFIX.<rank>.et, one per rank, "
        "GlobalMetadata first): COMM nodes carry the measured duration of that rank (duration_micros), COMP "
        "nodes their trace durations. 'emulator inspect' and 'emulator compile' read them, and so do "
        "Chakra's own tools (the protobuf is wire-compatible)."))
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="a directory written by 'emulator run'")
    p.add_argument("-o", "--output", required=True, metavar="PREFIX", help="write PREFIX.<rank>.et")
    p.add_argument("--stat", choices=_STATISTICS, default="median",
                   help="statistic of a COMM node's measured duration over the measured iterations (median)")
    p.add_argument("--iteration", default=None, metavar="K",
                   help="take the durations of measured iteration K (0 = the first after warmup) instead")
    p.set_defaults(func=run)


def _iteration(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"--iteration {text}: must be an integer >= 0")
    return value


def run(args: argparse.Namespace) -> int:
    from emulator.results.io import read_results
    from emulator.schedule.to_trace import measured_durations_us, schedule_to_trace
    from emulator.stats.tables import op_table
    from emulator.trace.generators.common import ET_VERSION
    from emulator.trace.io import write_trace
    from emulator.trace.model import CollectiveType, GlobalMetadata

    iteration = _iteration(args.iteration)
    res = read_results(args.results_dir)
    schedule = res.schedule()
    ops = op_table(schedule, res.records())
    try:
        durations, missing = measured_durations_us(schedule, ops["ready_ns"], ops["end_ns"],
                                                   statistic=args.stat, iteration=iteration)
    except ScheduleError as exc:
        raise ConfigError(f"{args.results_dir}: --iteration {args.iteration}: {exc}" if iteration is not None
                          else f"{args.results_dir}: {exc}") from None
    run_meta = schedule.meta.get("run") or {}
    measured = int(run_meta.get("iterations", 1))
    what = (f"measured iteration {iteration}" if iteration is not None
            else f"{args.stat} of {counted(measured, 'measured iteration')}"
            + ("" if res.doc.get("complete", True) else ", those each node completed in: the run is incomplete"))
    n_colls = int(run_meta.get("colls_per_iteration", schedule.n_colls))
    algorithms: dict[str, str] = {}
    for c in range(n_colls):
        algorithms.setdefault(CollectiveType(int(schedule.coll_type[c])).name.lower(),
                              schedule.algorithm_names[int(schedule.coll_algorithm[c])])
    options = schedule.meta.get("options") or {}
    attrs = (
        ("exported_from", ("string_val", str(res.path))),
        ("comm_duration", ("string_val", f"rank's measured time (max end - min ready of its ops), {what}")),
        ("emulator_algorithms", ("string_val", json.dumps(algorithms, sort_keys=True))),
        ("emulator_chunks", ("int64_val", int(options.get("chunks", 1)))),
    )
    try:
        trace = schedule_to_trace(schedule, comm_duration_us=durations,
                                  metadata=GlobalMetadata(version=ET_VERSION, attrs=attrs), source=str(res.path))
    except ScheduleError as exc:
        raise ResultsError(f"{res.path}: {exc}") from None
    paths = write_trace(trace, args.output)
    n_nodes = sum(len(g.nodes) for g in trace.ranks.values())
    n_comm = int(sum(1 for g in trace.ranks.values() for n in g.nodes if n.is_comm))
    measured_part = f"{n_comm - missing} of {n_comm}" if missing else f"{n_comm}"
    print(f"wrote {counted(len(paths), 'rank file')} {args.output}.<rank>.et: {counted(n_nodes, 'node')}, "
          f"{measured_part} comm node{'' if n_comm == 1 else 's'} with measured durations ({what})")
    if missing:
        print(f"warning: {counted(missing, 'comm node')} never completed in the chosen iteration(s): "
              "duration_micros 0", file=sys.stderr)
    return 0
