"""Cross-section rules and derived values of a built profile.

Theory of operation
-------------------
:func:`resolve` takes a :class:`~emulator.config.model.Profile` whose sections are each valid on
their own and makes it *effective*: it fills the values that depend on other sections and checks the
rules that span them, raising :class:`SchemaError` with the key path of the value at fault.

Order: rank count (from ``ranks.count``, else the workload: trace rank files, ``replicate``, largest
group rank + 1), collective groups and roots against that count, inline collectives made explicit
(``group`` = all ranks, ``root`` = the rank at ``workload.compile.roots``' group position, else the first
group member, for rooted types, ``algorithm`` from
``workload.compile.algorithms`` else the compiler's default, ``chunks`` from ``workload.compile.chunks``,
``name`` = ``<type>#<index>``, unique), topology sizes (``hosts_per_leaf``, uplink rate), placement
(``ranks.hosts``; a placement list shares hosts only on direct: sim and loopback give every rank its own
NIC port), PFC thresholds from the buffer, fabric-kind rules (``loss`` is sim only, loopback is a single
switch with addresses in 127.0.0.0/8, direct endpoints per rank). Every derived value is stored
explicitly, so ``resolve(build(to_dict(p))) == p``: resolving twice changes nothing.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import replace
from pathlib import Path

from emulator.config.model import ROOTED_TYPES, Direct, Fabric, Profile, Ranks, Topology, Workload
from emulator.schema import SchemaError

DEFAULT_DIRECT_TEMPLATE = "127.0.0.{rank+2}"
_TEMPLATE_FIELD = re.compile(r"\{rank(?:\+(\d+))?\}")


def trace_rank_files(prefix: str) -> dict[int, Path]:
    """Rank files of a trace prefix: ``PREFIX.<rank>.et`` (or ``.et.gz``/``.json``/``.json.gz``, as the reader
    takes them) → {rank: path}."""
    p = Path(prefix)
    found: dict[int, Path] = {}
    if p.parent.is_dir():
        pattern = re.compile(re.escape(p.name) + r"\.(\d+)\.(?:et|json)(?:\.gz)?$")
        for child in p.parent.iterdir():
            m = pattern.match(child.name)
            if m:
                found[int(m.group(1))] = child
    return found


def _rank_count(profile: Profile) -> int | None:
    wl = profile.workload
    if profile.ranks.count is not None:
        return profile.ranks.count
    if wl.collectives:
        groups = [c.group for c in wl.collectives if c.group is not None]
        if not groups:
            raise SchemaError("ranks.count", "required when no collective names its group")
        return max(max(g) for g in groups) + 1
    if wl.trace is not None:
        if wl.trace.replicate is not None:
            return wl.trace.replicate
        files = trace_rank_files(wl.trace.prefix)
        return max(files) + 1 if files else 1
    if wl.generate is not None:
        raise SchemaError("ranks.count", "required with workload.generate")
    return None  # a schedule file knows its own rank count


def _check_workload(wl: Workload, count: int | None) -> None:
    if wl.trace is not None:
        prefix = wl.trace.prefix
        if not trace_rank_files(prefix) and not Path(prefix).is_file():
            raise SchemaError("workload.trace.prefix", f"no trace files at {prefix} (expected {prefix}.<rank>.et or .json)")
        if wl.trace.groups is not None and not Path(wl.trace.groups).is_file():
            raise SchemaError("workload.trace.groups", f"no such file: {wl.trace.groups}")
    if wl.schedule is not None and not Path(wl.schedule).exists():
        raise SchemaError("workload.schedule", f"no such file: {wl.schedule}")
    if wl.trace is not None and wl.trace.replicate is None and count is not None:
        files = trace_rank_files(wl.trace.prefix)
        if len(files) > 1 and count != len(files):
            raise SchemaError("ranks.count", f"{count}, but the trace has {len(files)} rank files: set ranks.count: "
                                             f"{len(files)}, or ranks.count: null to take it from the trace (a "
                                             "base profile may set it through extends:)")
        if len(files) <= 1 and count > 1:
            raise SchemaError("ranks.count", f"{count}, but the trace has one rank file: set "
                                             f"workload.trace.replicate: {count} to replicate it to {count} ranks, "
                                             "or ranks.count: null")
    if count is None:
        return
    for i, c in enumerate(wl.collectives):
        path = f"workload.collectives[{i}]"
        for r in c.group or ():
            if r >= count:
                raise SchemaError(f"{path}.group", f"rank {r} is outside ranks.count = {count}")
        if c.root is not None and c.root >= count:
            raise SchemaError(f"{path}.root", f"rank {c.root} is outside ranks.count = {count}")


def _default_root(wl: Workload, ctype: str, group: tuple[int, ...], index: int) -> int:
    """``workload.compile.roots`` (a group position) as a rank of ``group``, else the group's first rank."""
    pos = dict(wl.compile.roots).get(ctype)
    if pos is None:
        return group[0]
    if pos >= len(group):
        raise SchemaError(f"workload.compile.roots.{ctype}", f"group position {pos} is outside "
                                                            f"workload.collectives[{index}].group of {len(group)} ranks")
    return sorted(group)[pos]


def _collectives(wl: Workload, count: int | None) -> Workload:
    """Make every inline collective explicit: group, root, algorithm, chunks and a unique name."""
    if not wl.collectives or count is None:
        return wl
    from emulator.schedule.algorithms import DEFAULT_ALGORITHMS
    from emulator.trace.model import CollectiveType

    algorithms = dict(wl.compile.algorithms)
    out = []
    names: dict[str, int] = {}
    for i, c in enumerate(wl.collectives):
        group = c.group if c.group is not None else tuple(range(count))
        if len(group) < 2:
            raise SchemaError(f"workload.collectives[{i}].group", "a collective needs at least 2 ranks")
        root = c.root if c.root is not None or c.type not in ROOTED_TYPES else _default_root(wl, c.type, group, i)
        algorithm = c.algorithm or algorithms.get(c.type) or DEFAULT_ALGORITHMS[CollectiveType[c.type.upper()]]
        name = c.name or f"{c.type}#{i}"
        if name in names:
            raise SchemaError(f"workload.collectives[{i}].name",
                              f"{name!r} already names workload.collectives[{names[name]}]")
        names[name] = i
        out.append(replace(c, group=group, root=root, algorithm=algorithm, name=name,
                           chunks=c.chunks if c.chunks is not None else wl.compile.chunks))
    return replace(wl, collectives=tuple(out))


def _topology(topo: Topology, fabric: Fabric, count: int | None) -> Topology:
    if topo.kind != "leaf_spine":
        return topo
    hpl = topo.hosts_per_leaf
    if hpl is None:
        if count is None:
            raise SchemaError("fabric.topology.hosts_per_leaf", "required when the rank count is not known")
        hpl = math.ceil(count / topo.leaves)
    uplink = topo.uplink_rate_bps
    if uplink is None:
        uplink = max(1, round(hpl * fabric.ports.rate_bps / (topo.spines * topo.oversubscription)))
    return replace(topo, hosts_per_leaf=hpl, uplink_rate_bps=uplink)


def _hosts(ranks: Ranks, topo: Topology, count: int) -> tuple[int, ...]:
    if topo.kind == "leaf_spine":
        assert topo.hosts_per_leaf is not None
        n_hosts = topo.leaves * topo.hosts_per_leaf
    else:
        n_hosts = count
    where = f"fabric.topology ({n_hosts} host ports)"
    if isinstance(ranks.placement, tuple):
        if len(ranks.placement) != count:
            raise SchemaError("ranks.placement", f"lists {len(ranks.placement)} hosts for {count} ranks")
        for i, h in enumerate(ranks.placement):
            if h >= n_hosts:
                raise SchemaError(f"ranks.placement[{i}]", f"host {h} does not exist in {where}")
        return ranks.placement
    if count > n_hosts:
        raise SchemaError("ranks.count", f"{count} ranks do not fit {where}; list ranks.placement to share hosts")
    if ranks.placement == "block" or topo.kind != "leaf_spine":
        return tuple(range(count))
    assert topo.hosts_per_leaf is not None
    return tuple((r % topo.leaves) * topo.hosts_per_leaf + r // topo.leaves for r in range(count))


def _render(template: str, rank: int) -> str:
    return _TEMPLATE_FIELD.sub(lambda m: str(rank + int(m.group(1) or 0)), template)


def _check_address(text: str, path: str, loopback_only: bool = False) -> None:
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        raise SchemaError(path, f"{text!r} is not an IP address") from None
    if loopback_only and not addr.is_loopback:
        raise SchemaError(path, f"{text} is not a loopback address (the loopback fabric stays in 127.0.0.0/8)")


def _direct(direct: Direct, fabric: Fabric, count: int | None) -> Direct:
    template = direct.address_template
    if not direct.ranks and template is None:
        template = DEFAULT_DIRECT_TEMPLATE
    if template is not None and direct.ranks:
        raise SchemaError("fabric.direct", "give ranks or address_template, not both")
    if count is None:
        return replace(direct, address_template=template)
    endpoints: list[tuple[str, int]] = []
    if template is not None:
        if "{" in _TEMPLATE_FIELD.sub("", template) or not _TEMPLATE_FIELD.search(template):
            raise SchemaError("fabric.direct.address_template", f"{template!r} needs '{{rank}}' or '{{rank+K}}'")
        for r in range(count):
            address = _render(template, r)
            _check_address(address, "fabric.direct.address_template")
            endpoints.append((address, fabric.udp_port))
    else:
        by_rank = {}
        for i, entry in enumerate(direct.ranks):
            path = f"fabric.direct.ranks[{i}]"
            if entry.rank in by_rank:
                raise SchemaError(f"{path}.rank", f"rank {entry.rank} listed twice")
            if entry.rank >= count:
                raise SchemaError(f"{path}.rank", f"rank {entry.rank} is outside ranks.count = {count}")
            _check_address(entry.address, f"{path}.address")
            by_rank[entry.rank] = (entry.address, entry.port or fabric.udp_port)
        missing = [r for r in range(count) if r not in by_rank]
        if missing:
            raise SchemaError("fabric.direct.ranks", f"no address for rank {missing[0]}"
                              + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        endpoints = [by_rank[r] for r in range(count)]
    if len(set(endpoints)) != len(endpoints):
        raise SchemaError("fabric.direct", "two ranks share one address and port")
    return replace(direct, address_template=template, endpoints=tuple(endpoints))


def _fabric(fabric: Fabric, count: int | None) -> Fabric:
    if fabric.loss > 0 and fabric.kind != "sim":
        what = "per-packet loss injection has no meaning on the fluid fabric; " if fabric.kind == "fluid" else ""
        raise SchemaError("fabric.loss", f"{what}injected loss needs fabric.kind sim (kind is {fabric.kind})")
    buf = fabric.ports.buffer_bytes
    pfc = fabric.pfc
    xoff = pfc.xoff_bytes if pfc.xoff_bytes is not None else buf * 3 // 4
    xon = pfc.xon_bytes if pfc.xon_bytes is not None else min(buf // 2, xoff - 1)
    if xoff > buf:
        raise SchemaError("fabric.pfc.xoff", f"{xoff} bytes exceeds ports.buffer ({buf} bytes)")
    if xon >= xoff:
        raise SchemaError("fabric.pfc.xon", f"must be below xoff ({xon} ≥ {xoff} bytes)")
    fabric = replace(fabric, pfc=replace(pfc, xoff_bytes=xoff, xon_bytes=xon),
                     topology=_topology(fabric.topology, fabric, count))
    if fabric.kind == "loopback":
        _check_address(fabric.switch.address, "fabric.switch.address", loopback_only=True)
        if fabric.topology.kind != "single_switch":
            raise SchemaError("fabric.topology.kind", f"the loopback software switch is one switch, not "
                                                      f"{fabric.topology.kind} (use fabric.kind sim)")
    if fabric.kind == "direct":
        fabric = replace(fabric, direct=_direct(fabric.direct, fabric, count))
    if fabric.kind == "fluid":
        _check_fluid(fabric)
    return fabric


def _check_fluid(fabric: Fabric) -> None:
    """Options that have no meaning for a flow-level model (no packets to check)."""
    if fabric.transport.icrc == "compute":
        raise SchemaError("fabric.transport.icrc", "the fluid fabric carries no packets to check (use fabric.kind sim)")


def _check_own_nic(ranks: Ranks, kind: str) -> None:
    """On sim and loopback every rank has its own NIC port, so a placement list cannot share hosts."""
    if kind == "direct" or not isinstance(ranks.placement, tuple):
        return
    first: dict[int, int] = {}
    for r, h in enumerate(ranks.placement):
        if h in first:
            raise SchemaError(f"ranks.placement[{r}]", f"host {h} already carries rank {first[h]}: the {kind} fabric "
                                                       "gives every rank its own NIC port (only direct ranks share hosts)")
        first[h] = r


def resolve(profile: Profile) -> Profile:
    """Fill derived values and check cross-section rules (see module docstring)."""
    if profile.workload.jobs:
        return _resolve_jobs(profile)
    count = _rank_count(profile)
    _check_workload(profile.workload, count)
    fabric = _fabric(profile.fabric, count)
    ranks = replace(profile.ranks, count=count)
    if count is not None:
        ranks = replace(ranks, hosts=_hosts(ranks, fabric.topology, count))
        _check_own_nic(ranks, fabric.kind)
    return replace(profile, fabric=fabric, ranks=ranks, workload=_collectives(profile.workload, count))


def _job_collectives(wl: Workload, count: int | None, index: int) -> Workload:
    """:func:`_collectives` of job ``index``'s workload; an error names ``workload.jobs[index].workload...``."""
    try:
        return _collectives(wl, count)
    except SchemaError as exc:
        raise SchemaError(f"workload.jobs[{index}].{exc.path}", exc.reason) from None


def _resolve_jobs(profile: Profile) -> Profile:
    """Jobs: hosts from each job's placement, fabric rank = host index (see :mod:`emulator.config.jobs`)."""
    from emulator.config.jobs import hosts_needed, place_jobs

    wl = profile.workload
    fabric = _fabric(profile.fabric, profile.ranks.count or hosts_needed(wl.jobs))
    topo = fabric.topology
    n_hosts = topo.leaves * (topo.hosts_per_leaf or 0) if topo.kind == "leaf_spine" else (
        profile.ranks.count or hosts_needed(wl.jobs))
    if profile.ranks.count is not None and profile.ranks.count > n_hosts:
        raise SchemaError("ranks.count", f"{profile.ranks.count} ranks do not fit fabric.topology "
                                         f"({n_hosts} host ports)")
    jobs = place_jobs(wl.jobs, topo, n_hosts)
    jobs = tuple(replace(j, workload=_job_collectives(j.workload, j.ranks, i)) for i, j in enumerate(jobs))
    count = profile.ranks.count or max(max(j.hosts) for j in jobs) + 1
    ranks = replace(profile.ranks, count=count, hosts=tuple(range(count)))
    return replace(profile, fabric=fabric, ranks=ranks, workload=replace(wl, jobs=jobs))
