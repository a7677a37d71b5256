"""Straggler attribution: which rank was last, how often, by how much, and what was injected on it.

A rank that is slow to *reach* a collective (slow compute, a wait before it) holds every member up, and
the member that then *finishes* last is often another one (the next rank of a ring). So attribution
counts **last arrivals**: per measured, complete instance, the member whose start (the earliest ready
time of its ops in the instance) is strictly the latest; it arrived ``max start − median start`` after
the median member (:func:`last_arrivals`). With the per-rank last-finisher counts and mean lateness the
summary already holds (``ranks.<r>.last_count``, ``mean_lateness_ns``; :mod:`emulator.stats.stragglers`)
and the perturbation label of each rank (``{rank: "injected compute ×1.5"}``),
:func:`attribute_stragglers` lists the ranks most often last to arrive (up to :data:`TOP`, only ranks
that ever were) and every perturbed rank, most often last first. A line reads
``rank 5 last to arrive in 96 % of instances (48 of 50), by 120.0 us (mean, vs the median member); last to
finish in 10 %; injected compute ×1.5``. :func:`with_attribution` does all of it from a schedule, its
records and the ``perturbations`` record of results.json, for a run and for a recompute alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from emulator.endpoint.records import RankRecords
from emulator.schedule.model import Schedule
from emulator.schema import dump
from emulator.stats.summary_types import RunSummary
from emulator.stats.tables import member_table, op_table

#: how many of the most-often-last ranks are listed besides the perturbed ones
TOP = 3


def last_arrivals(members: Mapping[str, np.ndarray]) -> dict[int, dict[str, float]]:
    """Per rank: ``instances`` (measured, complete), ``last_arrivals`` and ``mean_arrival_lead_ns`` (mean of
    max − median start over the instances it arrived last in); ``members`` as
    :func:`emulator.stats.tables.member_table` gives them."""
    inst = np.asarray(members["instance"], dtype=np.int64)
    rank = np.asarray(members["rank"], dtype=np.int64)
    start = np.asarray(members["start_ns"], dtype=np.int64)
    ok = ~np.asarray(members["warmup"], dtype=bool) & np.asarray(members["has_ops"], dtype=bool)
    bad = np.unique(inst[ok & (start < 0)])
    ok &= ~np.isin(inst, bad)
    inst, rank, start = inst[ok], rank[ok], start[ok]
    out: dict[int, dict[str, float]] = {}
    for r in np.unique(rank).tolist():
        out[r] = {"instances": int(np.count_nonzero(rank == r)), "last_arrivals": 0, "mean_arrival_lead_ns": 0.0}
    order = np.lexsort((start, inst))
    inst, rank, start = inst[order], rank[order], start[order]
    bounds = np.flatnonzero(np.diff(inst)) + 1
    for lo, hi in zip(np.concatenate(([0], bounds)).tolist(), np.concatenate((bounds, [inst.shape[0]])).tolist(),
                      strict=True):
        if hi - lo < 2 or start[hi - 1] == start[hi - 2]:
            continue  # one member, or a tie for the last arrival: nobody held the others up alone
        row = out[int(rank[hi - 1])]
        lead = float(start[hi - 1] - start[lo + (hi - lo - 1) // 2])  # vs the nearest-rank median member
        row["mean_arrival_lead_ns"] += (lead - row["mean_arrival_lead_ns"]) / (row["last_arrivals"] + 1)
        row["last_arrivals"] += 1
    return out


def attribute_stragglers(summary: Mapping[str, Any], labels: Mapping[int, str],
                         arrivals: Mapping[int, Mapping[str, float]]) -> dict[str, Any]:
    """``{"ranks": [{rank, instances, last_arrivals, last_arrival_fraction, mean_arrival_lead_ns, last_count,
    last_fraction, mean_lateness_ns, perturbation}], "lines": [...]}`` (see module docstring)."""
    ranks = summary.get("ranks") or {}
    rows = []
    for rank in sorted(set(arrivals) | {int(k) for k in ranks}):
        a = arrivals.get(rank) or {}
        r = ranks.get(str(rank)) or {}
        instances = int(a.get("instances") or 0)
        last = int(r.get("last_count") or 0)
        arrived = int(a.get("last_arrivals") or 0)
        rows.append({
            "rank": rank, "instances": instances, "last_arrivals": arrived,
            "last_arrival_fraction": arrived / instances if instances else 0.0,
            "mean_arrival_lead_ns": float(a.get("mean_arrival_lead_ns") or 0.0),
            "last_count": last, "last_fraction": last / instances if instances else 0.0,
            "mean_lateness_ns": float(r.get("mean_lateness_ns") or 0.0),
            "perturbation": labels.get(rank),
        })
    rows.sort(key=lambda x: (-x["last_arrivals"], -x["last_count"], x["rank"]))
    top = [x for x in rows if x["last_arrivals"] > 0][:TOP]
    chosen = top + [x for x in rows if x["perturbation"] and x not in top]
    return {"ranks": chosen, "lines": [_line(x) for x in chosen]}


def _line(x: Mapping[str, Any]) -> str:
    text = (f"rank {x['rank']} last to arrive in {100 * x['last_arrival_fraction']:.0f} % of instances "
            f"({x['last_arrivals']} of {x['instances']}), by {x['mean_arrival_lead_ns'] / 1000:.1f} us (mean, vs the "
            f"median member); last to finish in {100 * x['last_fraction']:.0f} %")
    return text + (f"; {x['perturbation']}" if x["perturbation"] else "; not perturbed")


def rank_labels(record: Mapping[str, Any] | None) -> dict[int, str]:
    """Rank → what was injected on it (entries joined with '; '), from a results.json ``perturbations``."""
    out: dict[int, list[str]] = {}
    for e in (record or {}).get("entries", []):
        for r in e.get("ranks") or []:
            out.setdefault(int(r), []).append(str(e.get("text", "")))
    return {r: "; ".join(t) for r, t in out.items()}


def with_attribution(summary: RunSummary, schedule: Schedule, records: Mapping[int, RankRecords],
                     perturbations: Mapping[str, Any] | None) -> RunSummary:
    """``summary`` with its straggler attribution (``perturbations``: results.json's record); as is without."""
    if perturbations is None:
        return summary
    members = member_table(schedule, op_table(schedule, records))
    attribution = attribute_stragglers(dump(summary), rank_labels(perturbations), last_arrivals(members))
    return replace(summary, straggler_attribution=attribution)
