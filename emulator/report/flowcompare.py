"""Per-flow differential compare of two runs of the same schedule (the fidelity report).

Theory of operation
-------------------
Two results directories that ran the same schedule (same ``schedule_hash``) have the same flows: a
flow's identity is its schedule row (``flow``, which already names one operation of one rank in one run
iteration), so flows are matched by (``flow``, ``iteration``) and must agree on source, destination and
size. Only measured flows (``warmup`` false) are compared.

* **FCT ratio** per flow = FCT(B) / FCT(A), FCT from the scheduled start (``fct_scheduled_ns``). Its
  distribution (nearest-rank p50/p90/p99, min, max) is taken over the flows finished in both runs with
  FCT(A) > 0; flows unfinished in either run are counted, not ratioed.
* **Rank correlation** = Spearman's ρ: the Pearson correlation of the FCTs' ranks, ties given their
  average rank (:func:`average_ranks`). It is None when either run's FCTs are all equal (no order to
  agree on) or fewer than two flows matched.
* **Flows that differ most**: the ``top`` flows by ``|log ratio|`` (a 2× faster flow differs as much as
  a 2× slower one), ties by flow id.
* **Ports**: ECN marks and drops of every switch port (``summary.fabric.ports``), matched by port name.
* **Instances**: CCT of every measured collective instance (matched by instance id), with its ratio B / A
  and the ratio distribution.

Inputs are typed (:class:`FlowRun`): the flows.csv columns as arrays (derived from records.npz and
schedule.bin), the collectives.csv columns as arrays (collectives.npz) and the typed ``fabric.ports``;
:func:`flow_run` gets them through the results reader; :func:`only_job` cuts a run to one job of
``workload.jobs`` (``compare --flows --job NAME``). :func:`compare_flows` does no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from emulator.errors import ResultsError
from emulator.instruments.percentiles import percentiles
from emulator.report.document import Table
from emulator.report.text import render_table
from emulator.results import Results
from emulator.stats.jobs import flow_jobs
from emulator.stats.summary_types import PortSummary
from emulator.units import format_bytes, format_duration_ns

RATIO_PERCENTILES = (("p50", 50), ("p90", 90), ("p99", 99))


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values`` (argsort order), tied values sharing the average of their ranks."""
    x = np.asarray(values, dtype=np.float64)
    n = x.shape[0]
    order = np.argsort(x, kind="stable")
    s = x[order]
    # start index of each run of equal values in sorted order
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]]) if n else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], n]
    run_rank = (starts + ends + 1) / 2.0  # mean of the 1-based ranks starts+1 .. ends
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.repeat(run_rank, ends - starts)
    return ranks


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's ρ of two equal-length samples (ties averaged); None when undefined."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"rank_correlation: lengths differ ({a.shape[0]} vs {b.shape[0]})")
    if a.shape[0] < 2:
        return None
    ra, rb = average_ranks(a), average_ranks(b)
    da, db = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float(da @ da) * float(db @ db))
    if den == 0:
        return None
    return max(-1.0, min(1.0, float(da @ db) / den))


@dataclass(frozen=True, slots=True)
class FlowDiff:
    flow: int
    iteration: int
    src: int
    dst: int
    size_bytes: int
    fct_a_ns: int
    fct_b_ns: int
    ratio: float

    def to_dict(self) -> dict[str, Any]:
        return {"flow": self.flow, "iteration": self.iteration, "src": self.src, "dst": self.dst,
                "size_bytes": self.size_bytes, "fct_a_ns": self.fct_a_ns, "fct_b_ns": self.fct_b_ns,
                "ratio": self.ratio}


@dataclass(frozen=True, slots=True)
class PortPair:
    name: str
    marks_a: int | None
    marks_b: int | None
    drops_a: int | None
    drops_b: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ecn_marks": [self.marks_a, self.marks_b], "drops": [self.drops_a, self.drops_b]}


@dataclass(frozen=True, slots=True)
class InstancePair:
    instance: int
    type: str
    group: str
    iteration: int
    cct_a_ns: int | None  # None: incomplete in that run
    cct_b_ns: int | None
    ratio: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"instance": self.instance, "type": self.type, "group": self.group, "iteration": self.iteration,
                "cct_ns": [self.cct_a_ns, self.cct_b_ns], "ratio": self.ratio}


@dataclass(frozen=True, slots=True)
class FlowComparison:
    labels: tuple[str, str]
    schedule_hash: str
    flows: int  # measured flows matched
    compared: int  # finished in both with FCT(A) > 0: the ratio sample
    unfinished_a: int
    unfinished_b: int
    fct_ratio: Mapping[str, float | None]  # p50/p90/p99/min/max of FCT(B)/FCT(A)
    spearman: float | None
    spearman_note: str  # why ``spearman`` is None ("" when it is a number)
    top: tuple[FlowDiff, ...]
    ports: tuple[PortPair, ...]
    instances: tuple[InstancePair, ...]
    cct_ratio: Mapping[str, float | None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "labels": list(self.labels), "schedule_hash": self.schedule_hash,
            "fct": "fct_scheduled_ns (from the scheduled start), measured flows only",
            "flows": self.flows, "compared": self.compared,
            "unfinished": dict(zip(self.labels, (self.unfinished_a, self.unfinished_b), strict=True)),
            "fct_ratio": dict(self.fct_ratio), "spearman": self.spearman,
            **({"spearman_note": self.spearman_note} if self.spearman_note else {}),
            "top": [f.to_dict() for f in self.top],
            "ports": [p.to_dict() for p in self.ports],
            "instances": [i.to_dict() for i in self.instances], "cct_ratio": dict(self.cct_ratio),
        }


@dataclass(frozen=True, slots=True)
class FlowRun:
    """One run's side of the comparison: ``flows`` holds the flows.csv columns as arrays (at least
    ``flow, iteration, warmup, src, dst, size_bytes, fct_scheduled_ns, end_ns``), ``instances`` the
    collectives.csv columns as arrays (at least ``instance, type, group, iteration, warmup, cct_ns``, NaN
    where an instance has no CCT), ``ports`` the run's ``fabric.ports``."""

    flows: Mapping[str, np.ndarray]
    instances: Mapping[str, np.ndarray]
    ports: tuple[PortSummary, ...] = ()


def flow_run(results: Results) -> FlowRun:
    """The typed inputs of one results directory: flow columns (with each flow's ``job``) from records.npz and schedule.bin,
    instance columns from collectives.npz, ports from the typed summary (no CSV file is read)."""
    flows = {**results.flow_columns(), "job": flow_jobs(results.schedule())}
    return FlowRun(flows, results.collective_arrays(), tuple(results.summary.fabric.ports))


def only_job(run: FlowRun, job: str) -> FlowRun:
    """``run`` cut to the flows of ``job`` (the ``job`` flow column) and the instances of its groups
    (``<job>/…``); the ports stay whole-fabric."""
    keep = np.asarray(run.flows["job"]).astype(np.str_) == job if "job" in run.flows else np.zeros(0, bool)
    if not keep.any():
        raise ResultsError(f"--job {job}: no flow of the run belongs to a job of that name")
    groups = np.asarray(run.instances["group"]).astype(np.str_)
    mine = np.char.startswith(groups, f"{job}/") if groups.size else np.zeros(0, dtype=bool)
    return FlowRun({k: np.asarray(v)[keep] for k, v in run.flows.items()},
                   {k: np.asarray(v)[mine] for k, v in run.instances.items()}, run.ports)


_FLOW_KEYS = ("flow", "iteration", "warmup", "src", "dst", "size_bytes", "fct_scheduled_ns", "end_ns")
_INSTANCE_KEYS = ("instance", "type", "group", "iteration", "warmup", "cct_ns")


def _columns(table: Mapping[str, np.ndarray], keys: Sequence[str], where: str) -> dict[str, np.ndarray]:
    """``keys`` of ``table`` as 1-D arrays of one length (ResultsError naming ``where`` and the key)."""
    out = {}
    for key in keys:
        if key not in table:
            raise ResultsError(f"{where}: no column {key!r}")
        out[key] = np.asarray(table[key]).reshape(-1)
    lengths = {k: v.shape[0] for k, v in out.items()}
    if len(set(lengths.values())) > 1:
        raise ResultsError(f"{where}: columns differ in length ({lengths})")
    return out


def _ratio_summary(ratios: np.ndarray) -> dict[str, float | None]:
    vals = percentiles(ratios, [p for _, p in RATIO_PERCENTILES]) if ratios.size else [None] * len(RATIO_PERCENTILES)
    out: dict[str, float | None] = {k: (float(v) if v is not None else None)
                                    for (k, _), v in zip(RATIO_PERCENTILES, vals, strict=True)}
    out["min"] = float(ratios.min()) if ratios.size else None
    out["max"] = float(ratios.max()) if ratios.size else None
    return out


def _measured_flows(flows: Mapping[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
    """Measured flows sorted by (flow, iteration): ``flow, iteration, src, dst, size_bytes`` and ``fct``
    (int64, −1 when unfinished)."""
    c = _columns(flows, _FLOW_KEYS, where)
    try:
        keep = ~c["warmup"].astype(bool)
        ints = {k: c[k][keep].astype(np.int64) for k in _FLOW_KEYS if k != "warmup"}
    except (TypeError, ValueError) as exc:
        raise ResultsError(f"{where}: a flow column is not numeric: {exc}") from None
    order = np.lexsort((ints["iteration"], ints["flow"]))
    out = {k: v[order] for k, v in ints.items()}
    done = (out["fct_scheduled_ns"] >= 0) & (out["end_ns"] >= 0)
    out["fct"] = np.where(done, out["fct_scheduled_ns"], -1)
    return out


def _ports(pa: Sequence[PortSummary], pb: Sequence[PortSummary]) -> tuple[PortPair, ...]:
    def by_name(ports: Sequence[PortSummary]) -> dict[str, PortSummary]:
        return {str(p.name if p.name is not None else p.port): p for p in ports}

    a, b = by_name(pa), by_name(pb)
    names = list(a) + [n for n in b if n not in a]

    def marks(p: PortSummary | None) -> int | None:
        return None if p is None or p.marked_packets is None else int(p.marked_packets)

    def drops(p: PortSummary | None) -> int | None:
        return None if p is None or p.dropped_packets is None else int(p.dropped_packets)

    return tuple(PortPair(n, marks(a.get(n)), marks(b.get(n)), drops(a.get(n)), drops(b.get(n))) for n in names)


def _instances(table: Mapping[str, np.ndarray], where: str) -> dict[int, tuple[str, str, int, int | None]]:
    """instance → (type, group, iteration, CCT ns or None) of measured instances (first member row)."""
    c = _columns(table, _INSTANCE_KEYS, where)
    try:
        keep = np.flatnonzero(~c["warmup"].astype(bool))
        inst = c["instance"][keep].astype(np.int64)
        cct = c["cct_ns"][keep].astype(np.float64)
        iteration = c["iteration"][keep].astype(np.int64)
    except (TypeError, ValueError) as exc:
        raise ResultsError(f"{where}: an instance column is not numeric: {exc}") from None
    ids, first = np.unique(inst, return_index=True)
    return {int(i): (str(c["type"][keep[j]]), str(c["group"][keep[j]]), int(iteration[j]),
                     int(cct[j]) if math.isfinite(cct[j]) else None)
            for i, j in zip(ids.tolist(), first.tolist(), strict=True)}


def compare_flows(
    labels: tuple[str, str],
    schedule_hash: str,
    runs: tuple[FlowRun, FlowRun],
    top: int = 10,
) -> FlowComparison:
    """The per-flow comparison of run B against run A (see module docstring)."""
    fa = _measured_flows(runs[0].flows, f"{labels[0]} flow table")
    fb = _measured_flows(runs[1].flows, f"{labels[1]} flow table")
    if not (np.array_equal(fa["flow"], fb["flow"]) and np.array_equal(fa["iteration"], fb["iteration"])):
        ka = set(zip(fa["flow"].tolist(), fa["iteration"].tolist(), strict=True))
        kb = set(zip(fb["flow"].tolist(), fb["iteration"].tolist(), strict=True))
        only = sorted(ka ^ kb)[0]
        raise ResultsError(f"compare --flows: flow {only[0]} (iteration {only[1]}) is measured in only one of "
                           f"{labels[0]} and {labels[1]}")
    ident = ("src", "dst", "size_bytes")
    differ = np.flatnonzero(np.logical_or.reduce([fa[k] != fb[k] for k in ident]))
    if differ.size:
        i = int(differ[0])
        raise ResultsError(f"compare --flows: flow {int(fa['flow'][i])} differs between {labels[0]} and {labels[1]} "
                           f"(src, dst, size {tuple(int(fa[k][i]) for k in ident)} vs "
                           f"{tuple(int(fb[k][i]) for k in ident)})")
    fct_a, fct_b = fa["fct"], fb["fct"]
    both = (fct_a >= 0) & (fct_b >= 0)
    ok = both & (fct_a > 0)
    idx = np.flatnonzero(ok)
    ratios = fct_b[idx] / fct_a[idx]
    spearman = rank_correlation(fct_a[both], fct_b[both])
    note = ""
    if spearman is None:
        equal = [lbl for lbl, f in zip(labels, (fct_a[both], fct_b[both]), strict=True) if f.size and (f == f[0]).all()]
        note = (f"every FCT equal in {' and '.join(equal)}" if int(both.sum()) >= 2 and equal
                else "fewer than 2 flows finished in both")
    with np.errstate(divide="ignore"):
        dev = np.abs(np.log(ratios)) if ratios.size else ratios
    order = np.lexsort((idx, -dev))[:max(0, top)] if ratios.size else np.zeros(0, np.int64)
    diffs = tuple(FlowDiff(*(int(fa[k][idx[j]]) for k in ("flow", "iteration", *ident)), int(fct_a[idx[j]]),
                           int(fct_b[idx[j]]), float(ratios[j])) for j in order)
    ia = _instances(runs[0].instances, f"{labels[0]} collectives.npz")
    ib = _instances(runs[1].instances, f"{labels[1]} collectives.npz")
    insts = []
    for inst in sorted(ia.keys() | ib.keys()):
        ta, tb = ia.get(inst), ib.get(inst)
        meta = ta or tb
        assert meta is not None
        ca, cb = (ta[3] if ta else None), (tb[3] if tb else None)
        insts.append(InstancePair(inst, meta[0], meta[1], meta[2], ca, cb,
                                  cb / ca if ca and cb is not None else None))
    cct_ratios = np.asarray([i.ratio for i in insts if i.ratio is not None], dtype=np.float64)
    return FlowComparison(
        labels=labels, schedule_hash=schedule_hash, flows=int(fa["flow"].size), compared=int(idx.size),
        unfinished_a=int((fct_a < 0).sum()), unfinished_b=int((fct_b < 0).sum()),
        fct_ratio=_ratio_summary(ratios), spearman=spearman, spearman_note=note, top=diffs,
        ports=_ports(runs[0].ports, runs[1].ports), instances=tuple(insts), cct_ratio=_ratio_summary(cct_ratios))


def _fmt_ratio(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.3f}x"


def _fmt_ns(v: int | None) -> str:
    return "n/a" if v is None else format_duration_ns(v)


def _fmt_count(v: int | None) -> str:
    return "n/a" if v is None else str(v)


def render_flow_comparison(comp: FlowComparison) -> list[str]:
    """The comparison as text lines: headline figures, then the top flows, ports and instances tables."""
    a, b = comp.labels
    dist = ", ".join(f"{k} {_fmt_ratio(comp.fct_ratio.get(k))}" for k in ("p50", "p90", "p99", "min", "max"))
    rho = f"n/a ({comp.spearman_note})" if comp.spearman is None else f"{comp.spearman:.4f}"
    cdist = ", ".join(f"{k} {_fmt_ratio(comp.cct_ratio.get(k))}" for k in ("p50", "p90", "p99", "min", "max"))
    out = [
        f"schedule {comp.schedule_hash}: {comp.flows} measured flows matched, {comp.compared} finished in both",
        f"unfinished flows: {a} {comp.unfinished_a}, {b} {comp.unfinished_b}",
        f"FCT ratio {b} ÷ {a} (from the scheduled start): {dist}",
        f"FCT rank correlation (Spearman): {rho}",
        f"CCT ratio {b} ÷ {a} over {sum(i.ratio is not None for i in comp.instances)} instances: {cdist}",
        "",
    ]
    top_rows = tuple((str(f.flow), str(f.iteration), f"{f.src}->{f.dst}", format_bytes(f.size_bytes),
                      _fmt_ns(f.fct_a_ns), _fmt_ns(f.fct_b_ns), _fmt_ratio(f.ratio)) for f in comp.top)
    out += render_table(Table(f"flows that differ most (top {len(comp.top)} by |log ratio|)",
                              ("flow", "iter", "src->dst", "size", f"FCT {a}", f"FCT {b}", "ratio"), top_rows,
                              "rrlrrrr"))
    out.append("")
    port_rows = tuple((p.name, _fmt_count(p.marks_a), _fmt_count(p.marks_b), _fmt_count(p.drops_a),
                       _fmt_count(p.drops_b)) for p in comp.ports)
    out += render_table(Table("ECN marks and drops per port", ("port", f"marks {a}", f"marks {b}", f"drops {a}",
                                                                f"drops {b}"), port_rows, "lrrrr"))
    out.append("")
    inst_rows = tuple((str(i.instance), i.type, i.group, str(i.iteration), _fmt_ns(i.cct_a_ns), _fmt_ns(i.cct_b_ns),
                       _fmt_ratio(i.ratio)) for i in comp.instances)
    out += render_table(Table("CCT per measured collective instance", ("instance", "type", "group", "iter",
                                                                        f"CCT {a}", f"CCT {b}", "ratio"),
                              inst_rows, "rllrrrr"))
    return out
