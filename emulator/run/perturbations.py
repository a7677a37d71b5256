"""A profile's ``perturbations:`` → checks before the run, the perturbed run schedule, the sim's link faults.

Theory of operation
-------------------
:func:`check_perturbations` refuses, before anything runs and with the key path, what cannot be applied:
ranks outside the world, a link on a fabric other than ``sim`` or ``fluid`` or a name the sim topology lacks, a NIC
cap on ``fluid`` (which has no rank endpoints). :func:`perturbed_run_schedule` inserts the waits before
collectives into the one-iteration schedule, repeats it (:func:`emulator.run.workload.run_schedule`) and
applies compute scaling, the seeded delay draws and the NIC caps
(:mod:`emulator.schedule.perturb`); it returns the record written to ``results.json`` under
``perturbations``: one entry per profile entry (``index``, ``ranks`` or ``link``, ``text``) and
``injected_delay`` per rank (count, total, mean, max ns). :func:`link_down` gives the sim driver its
``(port name, from ns, until ns)`` triples.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from emulator.config import Profile
from emulator.errors import ConfigError
from emulator.schedule.model import Schedule
from emulator.schedule.perturb import DelaySpec, RankPerturbation, insert_delays, perturb_run
from emulator.trace.model import CollectiveType


def _where(profile: Profile, i: int, key: str) -> str:
    return f"{profile.source or profile.name}: perturbations[{i}].{key}"


def check_perturbations(profile: Profile, world_size: int, kind: str | None = None) -> None:
    """ConfigError naming the key for a perturbation that cannot apply to this run (see module docstring)."""
    kind = kind or profile.fabric.kind
    for i, p in enumerate(profile.perturbations):
        if p.ranks is not None:
            outside = [r for r in p.ranks if r >= world_size]
            if outside:
                raise ConfigError(f"{_where(profile, i, 'ranks')}: rank {outside[0]} is outside the world of "
                                  f"{world_size} ranks (0-{world_size - 1})")
            if p.nic_rate_bps is not None and kind == "fluid":
                raise ConfigError(f"{_where(profile, i, 'nic_rate')}: not modelled on the fluid fabric "
                                  "(use sim, loopback or direct)")
        if p.link is not None:
            if kind not in ("sim", "fluid"):
                raise ConfigError(f"{_where(profile, i, 'link')}: a link that goes down is modelled on the sim "
                                  f"and fluid fabrics only, not on {kind}")
            from emulator.fabric.topology import build_topology, link_down_intervals
            from emulator.run.runner import sim_config

            cfg = sim_config(profile)
            topo = build_topology(cfg.topology, world_size, cfg.port_rate_bps, cfg.latency_ns)
            try:
                link_down_intervals(topo, ((p.link, 0, 1),))
            except ConfigError as exc:
                raise ConfigError(f"{_where(profile, i, 'link')}: {exc}") from None


def link_down(profile: Profile) -> tuple[tuple[str, int, int], ...]:
    return tuple((p.link, p.down.at_ns, p.down.at_ns + p.down.for_ns) for p in profile.perturbations
                 if p.link is not None and p.down is not None)


def _specs(profile: Profile) -> tuple[list[DelaySpec], list[RankPerturbation]]:
    delays, ranks = [], []
    for p in profile.perturbations:
        if p.ranks is None:
            continue
        d = p.delay_before
        if d is not None:
            ctype = int(CollectiveType[d.collective.upper()]) if d.collective else None
            delays.append(DelaySpec(ranks=p.ranks, collective=ctype, dist=d.distribution, fixed_ns=d.fixed_ns or 0,
                                    median_ns=d.median_ns or 0, sigma=d.sigma))
        if p.compute_scale is not None or p.nic_rate_bps is not None:
            ranks.append(RankPerturbation(ranks=p.ranks, compute_scale=p.compute_scale,
                                          nic_rate_bps=float(p.nic_rate_bps) if p.nic_rate_bps else None))
    return delays, ranks


def perturbed_run_schedule(workload: Any, profile: Profile) -> tuple[Schedule, dict[str, Any] | None]:
    """The run schedule of ``workload`` with the profile's perturbations, and their record (None without)."""
    from emulator.run.workload import run_schedule

    if not profile.perturbations:
        return run_schedule(workload, profile), None
    check_perturbations(profile, workload.schedule.world_size)
    delays, ranks = _specs(profile)
    one = insert_delays(workload.schedule, delays)
    schedule = run_schedule(dataclasses.replace(workload, schedule=one), profile)
    schedule, injected = perturb_run(schedule, delays, ranks, profile.seed)
    entries = []
    for i, p in enumerate(profile.perturbations):
        entry: dict[str, Any] = {"index": i, "text": p.describe()}
        if p.ranks is not None:
            entry["ranks"] = list(p.ranks)
        else:
            entry["link"] = p.link
        entries.append(entry)
    return schedule, {"entries": entries, "injected_delay": injected}

