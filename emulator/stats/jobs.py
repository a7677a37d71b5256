"""``jobs.<name>.*``: per-job figures of a run of ``workload.jobs`` (the fabric view stays whole-run).

A job's ops are found from ``schedule.meta["jobs"]`` (``rank_ops``: per rank, the offset and count of its
ops inside one workload iteration of that rank, repeated every run iteration); its collective instances
are those of its groups (``<job>/…``). Per measured run iteration the job's **JCT** is the last end minus
the first ready time over its ops (an iteration with an op that never ended is incomplete); **CCT** is
over its measured, complete collective instances; **stragglers** are the straggler figures of those
instances (skew, slow ranks in fabric ranks); ``flows``/``flows_unfinished``/``bytes_scheduled``/
``bytes_finished`` cover its flows of the measured and warmup iterations alike. :func:`flow_jobs` names the
job of every flow (the ``job`` column of flows.csv); :func:`job_flow_figures` gives the FCT and slowdown of
each job's measured flows from those columns (the report's "Flows per job", ``report --job``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from emulator.instruments.percentiles import Distribution, summarize
from emulator.schedule.model import OP_RECV, Schedule
from emulator.stats import CollectiveRecords, analyze_stragglers
from emulator.stats.bounded import SummaryPolicy, summarize_bounded
from emulator.stats.tables import op_iterations, run_info


def job_op_mask(schedule: Schedule, job: Mapping[str, Any]) -> np.ndarray:
    """Bool per op of ``schedule``: the op belongs to ``job`` (an entry of ``meta["jobs"]``)."""
    info = run_info(schedule)
    n_iter = max(1, info["iterations"] + info["warmup"])
    counts = np.diff(schedule.rank_op_ptr.astype(np.int64))
    mask = np.zeros(schedule.n_ops, dtype=bool)
    for rank_text, (offset, count) in job["rank_ops"].items():
        r = int(rank_text)
        per = int(counts[r]) // n_iter
        for k in range(n_iter):
            a = int(schedule.rank_op_ptr[r]) + k * per + int(offset)
            mask[a : a + int(count)] = True
    return mask


def flow_jobs(schedule: Schedule) -> np.ndarray:
    """The job name of every flow of ``schedule`` (``""`` for a flow of no job, or every flow without jobs)."""
    out = np.full(schedule.n_flows, "", dtype=object)
    for job in schedule.meta.get("jobs") or ():
        recv = job_op_mask(schedule, job) & (schedule.op_kind == OP_RECV)
        out[schedule.op_flow[recv].astype(np.int64)] = str(job["name"])
    return out.astype(np.str_) if out.size else np.zeros(0, dtype=np.str_)


def job_flow_figures(flows: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Per job (in order of first flow): ``flows``, ``unfinished`` (measured flows), ``bytes`` and the
    distributions ``fct_scheduled_ns`` and ``slowdown`` of its finished measured flows; ``flows`` holds the
    flows.csv columns as arrays (at least ``job, warmup, size_bytes, end_ns, fct_scheduled_ns, slowdown``)."""
    job = np.asarray(flows["job"]).astype(np.str_)
    measured = ~np.asarray(flows["warmup"]).astype(bool)
    done = np.asarray(flows["end_ns"]) >= 0
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(job.tolist()):
        if not name:
            continue
        sel = measured & (job == name)
        ok = sel & done
        out[name] = {"flows": int(sel.sum()), "unfinished": int((sel & ~done).sum()),
                     "bytes": int(np.asarray(flows["size_bytes"])[sel].sum()),
                     "fct_scheduled_ns": summarize(np.asarray(flows["fct_scheduled_ns"])[ok].astype(np.int64)),
                     "slowdown": summarize(np.asarray(flows["slowdown"])[ok].astype(np.float64))}
    return out


def _collective_figures(recs: CollectiveRecords | None, slow_factor: float,
                        policy: SummaryPolicy) -> tuple[dict[str, Any], dict[str, Any]]:
    """(``cct``, ``stragglers``) of a job's measured complete instances."""
    if recs is None:
        return Distribution.empty().to_dict(), {"instances": 0, "max_skew": None, "p99_skew_ns": None,
                                                "slow_ranks": []}
    analysis = analyze_stragglers(recs, slow_factor, policy)
    frac = analysis.instances.skew_fraction
    frac = frac[~np.isnan(frac)]
    ranks = analysis.ranks
    return summarize_bounded(analysis.times.cct_ns, policy).to_dict(), {
        "instances": int(analysis.times.cct_ns.shape[0]),
        "max_skew": float(frac.max()) if frac.size else None,
        "p99_skew_ns": analysis.summary.skew_ns.p99,
        "slow_ranks": [int(r) for r, c in zip(ranks.rank.tolist(), ranks.slow_count.tolist(), strict=True) if c > 0]}


def job_summaries(schedule: Schedule, ops: Mapping[str, np.ndarray], members: Mapping[str, np.ndarray],
                  slow_factor: float, policy: SummaryPolicy) -> dict[str, dict[str, Any]] | None:
    """``jobs.<name>`` for every job of ``schedule`` (None without ``meta["jobs"]``)."""
    jobs = schedule.meta.get("jobs")
    if not jobs:
        return None
    info = run_info(schedule)
    n_iter = info["iterations"] + info["warmup"]
    op_it = op_iterations(schedule)
    inst = members["instance"]
    warm_inst = np.zeros(schedule.n_colls, dtype=bool)
    bad_inst = np.zeros(schedule.n_colls, dtype=bool)
    if inst.size:
        warm_inst[inst] = members["warmup"]
        np.logical_or.at(bad_inst, inst[members["has_ops"]], members["end_ns"][members["has_ops"]] < 0)
    out: dict[str, dict[str, Any]] = {}
    for job in jobs:
        mask = job_op_mask(schedule, job)
        jct, incomplete = [], 0
        for k in range(info["warmup"], n_iter):
            sel = mask & (op_it == k)
            if not sel.any():
                continue
            ready, end = ops["ready_ns"][sel], ops["end_ns"][sel]
            if (ready < 0).any() or (end < 0).any():
                incomplete += 1
                continue
            jct.append(int(end.max() - ready.min()))
        recv = mask & (schedule.op_kind == OP_RECV)
        flows = schedule.op_flow[recv].astype(np.int64)
        finished = ops["end_ns"][recv] >= 0
        groups = [i for i, g in enumerate(schedule.group_names) if g in set(job["groups"])]
        in_job = np.isin(schedule.coll_group, groups)
        good = in_job & ~warm_inst & ~bad_inst
        rows = members["has_ops"] & good[inst] if inst.size else np.zeros(0, dtype=bool)
        recs = None
        if rows.any():
            recs = CollectiveRecords.from_instance_ids(inst[rows], members["rank"][rows], members["start_ns"][rows],
                                                       members["end_ns"][rows])
        cct, st = _collective_figures(recs, slow_factor, policy)
        out[str(job["name"])] = {
            "hosts": [int(h) for h in job["hosts"]],
            "count": len(jct),
            "incomplete": incomplete,
            "jct": (summarize_bounded(np.asarray(jct, dtype=np.int64), policy).to_dict() if jct
                    else Distribution.empty().to_dict()),
            "instances": int(good.sum()),
            "cct": cct,
            "stragglers": st,
            "flows": int(flows.shape[0]),
            "flows_unfinished": int((~finished).sum()),
            "bytes_scheduled": int(schedule.flow_size_bytes[flows].sum()),
            "bytes_finished": int(schedule.flow_size_bytes[flows[finished]].sum()),
        }
    return out
