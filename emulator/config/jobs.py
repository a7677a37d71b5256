"""Placement of ``workload.jobs`` on the shared fabric: every job rank gets a host (= fabric rank).

With jobs the fabric rank of a host is its index (``ranks.hosts`` is the identity); a job's placement
picks hosts for its ranks 0..n-1: ``contiguous`` the lowest free hosts in index order, ``round_robin``
job rank ``i`` on leaf ``i mod leaves`` at that leaf's lowest free host, or an explicit list. A job with
``share: true`` ignores what other jobs took (it is placed as if alone); two jobs on one host need
``share: true`` on at least one of them. A host outside the topology is refused with the key at fault. A
trace job's rank count is its trace's (``replicate``, else its rank files); a trace that is not there,
or a ``ranks`` that disagrees with it, is refused naming ``workload.jobs[i]...``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from emulator.config.model import Job, Topology
from emulator.config.resolve import trace_rank_files
from emulator.schema import SchemaError


def _trace_ranks(job: Job, path: str) -> int | None:
    """Ranks of a trace job's trace (``replicate``, else its rank files); its files checked to exist."""
    wt = job.workload.trace
    if wt is None:
        return None
    key = f"{path}.workload.trace"
    files = trace_rank_files(wt.prefix)
    if not files and not Path(wt.prefix).is_file():
        raise SchemaError(f"{key}.prefix", f"no trace files at {wt.prefix} (expected {wt.prefix}.<rank>.et or .json)")
    if wt.groups is not None and not Path(wt.groups).is_file():
        raise SchemaError(f"{key}.groups", f"no such file: {wt.groups}")
    n = wt.replicate if wt.replicate is not None else (max(files) + 1 if files else 1)
    if job.ranks is not None and job.ranks != n:
        hint = f"set {key}.replicate: {job.ranks}" if len(files) <= 1 else "leave it out to take it from the trace"
        raise SchemaError(f"{path}.ranks", f"{job.ranks}, but the trace has {n} ranks: {hint}")
    return n


def job_rank_count(job: Job, path: str) -> int:
    """Ranks of ``job``: ``ranks``, else its trace's ranks (``replicate`` or rank files), else the length of
    its placement list, else the largest rank of its inline collectives' groups + 1."""
    traced = _trace_ranks(job, path)
    if job.ranks is not None:
        return job.ranks
    if traced is not None:
        return traced
    if isinstance(job.placement, tuple):
        return len(job.placement)
    groups = [c.group for c in job.workload.collectives if c.group is not None]
    if not groups:
        raise SchemaError(f"{path}.ranks", "required when no collective of the job names its group")
    return max(max(g) for g in groups) + 1


def hosts_needed(jobs: tuple[Job, ...]) -> int:
    """Hosts the jobs need at least (unshared ranks side by side, or the largest host listed + 1)."""
    total = sum(job_rank_count(j, f"workload.jobs[{i}]") for i, j in enumerate(jobs) if not j.share)
    listed = [max(j.placement) + 1 for j in jobs if isinstance(j.placement, tuple) and j.placement]
    shared = [job_rank_count(j, f"workload.jobs[{i}]") for i, j in enumerate(jobs) if j.share]
    return max([total, *listed, *shared, 1])


def _pick(job: Job, n: int, taken: set[int], topo: Topology, n_hosts: int, path: str) -> tuple[int, ...]:
    if isinstance(job.placement, tuple):
        if len(job.placement) != n:
            raise SchemaError(f"{path}.placement", f"lists {len(job.placement)} hosts for the job's {n} ranks")
        for i, h in enumerate(job.placement):
            if h >= n_hosts:
                raise SchemaError(f"{path}.placement[{i}]", f"host {h} outside the fabric's {n_hosts} hosts "
                                                            "(fabric.topology host ports)")
        if len(set(job.placement)) != len(job.placement):
            raise SchemaError(f"{path}.placement", "lists one host twice")
        return job.placement
    if n > n_hosts:
        raise SchemaError(f"{path}.placement", f"{n} ranks do not fit: the fabric has {n_hosts} hosts")
    free = [h for h in range(n_hosts) if job.share or h not in taken]
    if job.placement == "round_robin" and topo.kind == "leaf_spine":
        assert topo.hosts_per_leaf is not None
        per_leaf = [[h for h in free if h // topo.hosts_per_leaf == leaf] for leaf in range(topo.leaves)]
        out = []
        for i in range(n):
            leaf = per_leaf[i % topo.leaves]
            if not leaf:
                raise SchemaError(f"{path}.placement", f"job rank {i} does not fit: leaf {i % topo.leaves} has no "
                                                       f"free host ({n_hosts} host ports)")
            out.append(leaf.pop(0))
        return tuple(out)
    if len(free) < n:
        raise SchemaError(f"{path}.placement", f"{n} ranks do not fit: {len(free)} free hosts of {n_hosts}")
    return tuple(free[:n])


def place_jobs(jobs: tuple[Job, ...], topo: Topology, n_hosts: int) -> tuple[Job, ...]:
    """Every job with ``ranks`` and ``hosts`` filled (see module docstring)."""
    names: dict[str, int] = {}
    owner: dict[int, int] = {}
    out = []
    for j, job in enumerate(jobs):
        path = f"workload.jobs[{j}]"
        if job.name in names:
            raise SchemaError(f"{path}.name", f"{job.name!r} already names workload.jobs[{names[job.name]}]")
        names[job.name] = j
        n = job_rank_count(job, path)
        for i, c in enumerate(job.workload.collectives):
            outside = [r for r in c.group or () if r >= n]
            if outside:
                raise SchemaError(f"{path}.workload.collectives[{i}].group",
                                  f"rank {outside[0]} is outside the job's {n} ranks")
        hosts = _pick(job, n, set(owner), topo, n_hosts, path)
        for r, h in enumerate(hosts):
            other = owner.get(h)
            if other is not None and not (job.share or jobs[other].share):
                raise SchemaError(f"{path}.placement", f"host {h} (job rank {r}) already carries job "
                                                       f"{jobs[other].name!r}: set share: true to let two jobs "
                                                       "share a host")
            owner.setdefault(h, j)
        out.append(replace(job, ranks=n, hosts=hosts))
    return tuple(out)
