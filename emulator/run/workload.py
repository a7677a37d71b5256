"""Profile workload → :class:`Trace` → one-iteration :class:`Schedule` → the run's schedule.

Theory of operation
-------------------
A profile names exactly one workload source (``workload.kind``):

* ``trace``: ``read_trace(prefix, dep_policy, groups, legacy_collectives)`` then ``compile_trace`` with the
  profile's compile
  options (:func:`compile_options`: algorithms per type, chunks, compute scale, open loop, keep_idle, roots
  as group positions, p2p_pairing, replicate; a root position outside a group is a ConfigError naming
  ``workload.compile.roots.<type>``). The trace hash is the
  sha256 of the rank files (:func:`emulator.trace.digest.trace_digest`, as ``emulator compile`` writes).
  The reader's warnings (identical per-rank ones aggregated, :mod:`emulator.trace.checks`) and the
  one-rank-trace hint travel with the workload into the run's printed warnings and results.json.
* ``generate``: the trace generator named by ``kind`` builds the trace in memory from the profile's
  options (the same option schema as ``emulator generate``, ``--ranks`` from ``ranks.count``), equal to
  what reading the files ``emulator generate`` writes gives; it is compiled like a trace, and its hash is
  the hash of those files, computed without writing them.
* ``collectives``: one in-memory :class:`Trace` per inline collective: every member rank gets a chain
  ``[COMP start_offset] → COLL → [COMP gap] → COLL …`` (``iterations`` collectives, Chakra's µs
  resolution: offsets and gaps are rounded to whole µs), all on a process group named after the
  collective's ``name``. Each is compiled with its own algorithm, chunks and root (a group position),
  then the schedules are merged side by side (:func:`emulator.schedule.compose.merge_schedules`), so two
  groups run their collectives at the same time, sharing the fabric.
* ``schedule`` (or ``emulator run --schedule FILE``): a compiled schedule file, loaded as is.
* ``jobs``: each job's workload (trace, generate or collectives, in job-local ranks) is compiled as above
  (an error in it names the job's key, ``workload.jobs[i].workload...``), then
  repeated ``iterations`` times in sequence behind a ``start_offset`` DELAY on each of its ranks
  (:func:`~emulator.schedule.compose.sequence_schedules`), its ranks renamed to its hosts and its group
  names prefixed ``<job>/`` (:func:`~emulator.schedule.compose.place_ranks`), and the jobs merged side
  by side. ``meta["jobs"]`` lists per job: ``name``, ``hosts``, ``groups``, ``flows`` (its ``[lo, hi)``
  flow ids of one workload iteration) and ``rank_ops`` (rank → ``[offset, count]`` of its ops inside that
  rank's ops of one workload iteration), which the per-job summary reads.

The result is one *workload iteration*. :func:`run_schedule` repeats it ``warmup + iterations`` times
(:func:`~emulator.schedule.compose.repeat_schedule`): every run iteration is a full copy of the workload,
its first op on each rank waiting for that rank's previous iteration. The instances of the first
``warmup`` iterations (``warmup × collective.iterations`` instances of each inline group) are
*warmup*: recorded and written, excluded from the statistics. ``meta["run"]`` says which is which.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from emulator.config import Profile
from emulator.errors import ConfigError, EmulatorError, ScheduleError
from emulator.schedule.compiler import CompileOptions, RootOutsideGroupError, compile_trace
from emulator.schedule.compose import (
    delay_schedule,
    merge_schedules,
    place_ranks,
    repeat_schedule,
    sequence_schedules,
)
from emulator.schedule.estimate import CompileEstimate
from emulator.schedule.model import Schedule
from emulator.trace.checks import one_rank_warnings, warning_lines
from emulator.trace.digest import trace_digest
from emulator.trace.model import (
    LEGACY_CHOICES,
    CollectiveType,
    CommInfo,
    Node,
    NodeType,
    ProcessGroup,
    RankGraph,
    Trace,
)


@dataclass(frozen=True, slots=True)
class Workload:
    """One workload iteration compiled, with where it came from."""

    schedule: Schedule
    source: str  # trace | generate | collectives | schedule
    trace_hash: str  # sha256 of the trace files ('' for inline collectives and schedule files)
    description: str
    warnings: tuple[str, ...] = ()  # the trace reader's and compiler's, identical per-rank ones aggregated


def _ctype(name: str) -> CollectiveType:
    return CollectiveType[name.upper()]


def compile_options(profile: Profile) -> CompileOptions:
    c = profile.workload.compile
    replicate = profile.workload.trace.replicate if profile.workload.trace is not None else None
    return CompileOptions(
        algorithms={_ctype(t): a for t, a in c.algorithms},
        chunks=c.chunks,
        compute_scale=c.compute_scale,
        open_loop=c.open_loop,
        keep_idle=c.keep_idle,
        replicate=replicate,
        roots={_ctype(t): pos for t, pos in c.roots},
        p2p_pairing=c.p2p_pairing,
    )


def _compile(profile: Profile, trace: Trace, provenance: dict) -> Schedule:
    """``compile_trace`` with the profile's options; a root position outside a group names its profile key."""
    try:
        return compile_trace(trace, compile_options(profile), provenance=provenance,
                             on_estimate=lambda est: _before_compile(profile, est))
    except RootOutsideGroupError as exc:
        if not exc.from_roots_option:
            raise
        raise ConfigError(f"{profile.source or profile.name}: workload.compile.roots.{exc.collective.name.lower()}: "
                          f"{exc}") from None


def _before_compile(profile: Profile, est: CompileEstimate) -> None:
    """A large compile says so; a run that would not fit in memory stops before its compile starts."""
    from emulator.run.preflight import check_run_memory

    check_run_memory(profile, est.flows, est.ops, est.edges, largest=est.largest)
    if (line := est.notice()) is not None:
        print(line, file=sys.stderr, flush=True)


def _from_trace(profile: Profile) -> Workload:
    from emulator.trace.io import read_trace

    wt = profile.workload.trace
    assert wt is not None
    trace = read_trace(wt.prefix, dep_policy=wt.dep_policy, groups_file=wt.groups,
                       legacy_collectives=LEGACY_CHOICES[wt.legacy_collectives])
    digest = trace_digest(trace)
    schedule = _compile(profile, trace, {"trace_sha256": digest})
    warnings = (*warning_lines(trace), *one_rank_warnings(trace, wt.replicate),
                *(f"{wt.prefix}: {w}" for w in schedule.meta.get("warnings", [])))
    return Workload(schedule, "trace", digest, f"trace {wt.prefix}", warnings)


def _profile_key(name: str) -> str:
    """The profile key of a generator option named in a message."""
    return "ranks.count" if name == "ranks" else name


def _from_generator(profile: Profile) -> Workload:
    """Generate the trace in memory (no files); its hash is that of the files ``emulator generate`` writes."""
    from emulator.trace.generators import GeneratorError, generate, option_text

    wg = profile.workload.generate
    assert wg is not None
    where = profile.source or profile.name
    ranks = profile.ranks.count
    if ranks is None:
        raise ConfigError(f"{where}: ranks.count: required with workload.generate")
    given = {name.replace("-", "_"): option_text(value) for name, value in wg.options}
    try:
        generated = generate(wg.kind, ranks, given)
        trace = generated.to_trace()
    except GeneratorError as exc:
        path = "workload.generate.options" + (f".{exc.option}" if exc.option in given else "")
        raise ConfigError(f"{where}: {path}: {wg.kind} generator: {exc.detail(_profile_key)}") from None
    digest = generated.digest()
    schedule = _compile(profile, trace, {"trace_sha256": digest, "generator": wg.kind})
    return Workload(schedule, "generate", digest, f"generated {wg.kind} trace ({ranks} ranks)",
                    tuple(warning_lines(trace)))


def inline_trace(profile: Profile, index: int) -> Trace:
    """The in-memory trace of inline collective ``index`` (see module docstring)."""
    c = profile.workload.collectives[index]
    assert c.group is not None and c.name is not None
    ctype = _ctype(c.type)
    size = int(c.size_bytes or 0)
    ranks: dict[int, RankGraph] = {}
    offset_us = round(c.start_offset_ns / 1000)
    gap_us = round(c.gap_ns / 1000)
    for r in c.group:
        nodes: list[Node] = []
        if offset_us > 0:
            nodes.append(Node(id=len(nodes) + 1, name=f"{c.name}:start_offset", type=NodeType.COMP_NODE,
                              duration_micros=offset_us))
        for k in range(c.iterations):
            prev = (nodes[-1].id,) if nodes else ()
            if k and gap_us > 0:
                nodes.append(Node(id=len(nodes) + 1, name=f"{c.name}:gap", type=NodeType.COMP_NODE,
                                  data_deps=prev, duration_micros=gap_us))
                prev = (nodes[-1].id,)
            nodes.append(Node(id=len(nodes) + 1, name=f"{c.name}#{k}", type=NodeType.COMM_COLL_NODE,
                              data_deps=prev, comm=CommInfo(collective=ctype, size_bytes=size, pg_name=c.name)))
        ranks[r] = RankGraph(rank=r, nodes=nodes, dep_policy="data", source="")
    group = ProcessGroup(name=c.name, ranks=tuple(sorted(c.group)))
    return Trace(ranks=ranks, groups={c.name: group}, source=f"{profile.source or profile.name}: {c.name}")


def _from_collectives(profile: Profile) -> Workload:
    parts = []
    cc = profile.workload.compile
    for i, c in enumerate(profile.workload.collectives):
        ctype = _ctype(c.type)
        roots = {}
        if c.root is not None and c.group is not None:
            roots[ctype] = sorted(c.group).index(c.root)
        options = CompileOptions(
            algorithms={ctype: c.algorithm} if c.algorithm else {},
            chunks=c.chunks or cc.chunks,
            compute_scale=cc.compute_scale,
            roots=roots,
            p2p_pairing=cc.p2p_pairing,
        )
        try:
            parts.append(compile_trace(inline_trace(profile, i), options))
        except ScheduleError as exc:
            raise ScheduleError(f"{profile.source or profile.name}: workload.collectives[{i}]: {exc}") from None
    meta = {"schedule_version": parts[0].meta.get("schedule_version", 1), "source": "inline collectives",
            "collectives": [c.name for c in profile.workload.collectives]}
    schedule = merge_schedules(parts, meta=meta)  # one part comes back as it is
    names = ", ".join(f"{c.name} ({c.type})" for c in profile.workload.collectives)
    return Workload(schedule, "collectives", "", f"inline collectives: {names}")


def _job_schedule(profile: Profile, index: int) -> tuple[Schedule, Workload]:
    """Job ``index`` compiled, repeated behind its start offset and placed on its hosts."""
    from dataclasses import replace

    job = profile.workload.jobs[index]
    n = int(job.ranks or len(job.hosts))
    sub = replace(profile, workload=job.workload, ranks=replace(profile.ranks, count=n, hosts=()))
    try:
        part = load_workload(sub)
    except EmulatorError as exc:
        raise _job_error(exc, profile.source or profile.name, f"workload.jobs[{index}]", job.workload.kind) from None
    local = part.schedule
    if local.world_size < n:  # idle job ranks still get the start offset
        local = place_ranks(local, range(n), n)
    from emulator.run.preflight import check_job_memory

    check_job_memory(profile, index, local.n_flows, local.n_ops, int(local.dep_idx.shape[0]), job.iterations)
    seq = [local] * job.iterations
    if job.start_offset_ns > 0:
        seq = [delay_schedule(n, job.start_offset_ns), *seq]
    placed = place_ranks(sequence_schedules(seq, meta=dict(local.meta)), job.hosts,
                         profile.ranks.count or max(job.hosts) + 1, group_prefix=f"{job.name}/")
    return placed, part


def _job_error(exc: EmulatorError, where: str, key: str, kind: str) -> EmulatorError:
    """``exc`` of a job's workload re-worded to name the job's key: ``<where>: workload.X`` becomes
    ``<where>: <key>.workload.X``, any other message (a trace file's) gets ``<where>: <key>.workload.<kind>: ``."""
    text = str(exc)
    head = f"{where}: workload."
    if text.startswith(head):
        text = f"{where}: {key}.workload.{text[len(head):]}"
    else:
        text = f"{where}: {key}.workload.{kind}: {text}"
    try:
        return type(exc)(text)
    except TypeError:  # a subclass with its own constructor
        return ConfigError(text)


def _from_jobs(profile: Profile) -> Workload:
    jobs = profile.workload.jobs
    built = [_job_schedule(profile, i) for i in range(len(jobs))]
    parts = [s for s, _ in built]
    world = max(p.world_size for p in parts)
    info, flow_lo = [], 0
    before = np.zeros(world, dtype=np.int64)  # ops of earlier jobs per rank
    for job, p in zip(jobs, parts, strict=True):
        counts = np.zeros(world, dtype=np.int64)
        counts[: p.world_size] = np.diff(p.rank_op_ptr)
        info.append({"name": job.name, "hosts": list(job.hosts), "groups": list(p.group_names),
                     "iterations": job.iterations, "start_offset_ns": job.start_offset_ns,
                     "flows": [flow_lo, flow_lo + p.n_flows],
                     "rank_ops": {str(r): [int(before[r]), int(counts[r])] for r in np.flatnonzero(counts)}})
        flow_lo += p.n_flows
        before += counts
    meta = {"schedule_version": parts[0].meta.get("schedule_version", 1), "source": "jobs", "jobs": info}
    schedule = merge_schedules(parts, meta=meta)
    if len(parts) == 1:
        schedule = replace_meta(schedule, meta)
    warnings = tuple(f"job {j.name}: {w}" for j, (_, w) in zip(jobs, built, strict=True) for w in w.warnings)
    hashes = ",".join(w.trace_hash for _, w in built if w.trace_hash)
    return Workload(schedule, "jobs", hashes, "jobs: " + ", ".join(
        f"{j.name} ({w.description}, hosts {_host_text(j.hosts)})" for j, (_, w) in zip(jobs, built, strict=True)),
        warnings)


def replace_meta(s: Schedule, meta: dict) -> Schedule:
    from dataclasses import replace

    return replace(s, meta=meta)


def _host_text(hosts: tuple[int, ...]) -> str:
    return ",".join(map(str, hosts)) if len(hosts) <= 8 else f"{hosts[0]},…,{hosts[-1]} ({len(hosts)})"


def _from_schedule_file(path: str) -> Workload:
    from emulator.schedule.io import load_schedule

    schedule = load_schedule(path)
    if "run" in schedule.meta:
        raise ScheduleError(f"{path}: this is a run's expanded schedule (meta.run present); "
                            "pass the one-iteration schedule written by 'emulator compile'")
    return Workload(schedule, "schedule", str(schedule.meta.get("trace_sha256", "")), f"schedule {path}")


def load_workload(profile: Profile, schedule_path: str | None = None) -> Workload:
    """The profile's workload compiled into one iteration (``schedule_path`` overrides the profile's)."""
    if schedule_path is not None:
        return _from_schedule_file(schedule_path)
    kind = profile.workload.kind
    if kind == "trace":
        return _from_trace(profile)
    if kind == "generate":
        return _from_generator(profile)
    if kind == "collectives":
        return _from_collectives(profile)
    if kind == "jobs":
        return _from_jobs(profile)
    assert profile.workload.schedule is not None
    return _from_schedule_file(profile.workload.schedule)


def run_schedule(workload: Workload, profile: Profile) -> Schedule:
    """The schedule the drivers run: ``warmup + iterations`` copies of the workload iteration."""
    s = workload.schedule
    count = profile.ranks.count
    if count is not None and s.world_size > count:
        raise ConfigError(f"{profile.source or profile.name}: ranks.count: {count}, but the schedule has "
                          f"{s.world_size} ranks")
    return repeat_schedule(s, profile.iterations, profile.warmup)
