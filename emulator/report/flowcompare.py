"""Per-flow differential compare of two runs of the same schedule (the fidelity report).

Theory of operation
-------------------
Two results directories that ran the same schedule (same ``schedule_hash``) have the same flows: a
flow's identity is its schedule row (``flow`` in flows.csv, which already names one operation of one
rank in one run iteration), so flows are matched by (``flow``, ``iteration``) and must agree on
source, destination and size. Only measured flows (``warmup`` = 0) are compared.

* **FCT ratio** per flow = FCT(B) / FCT(A), FCT from the scheduled start (``fct_scheduled_ns``). Its
  distribution (nearest-rank p50/p90/p99, min, max) is taken over the flows finished in both runs with
  FCT(A) > 0; flows unfinished in either run are counted, not ratioed.
* **Rank correlation** = Spearman's ρ: the Pearson correlation of the FCTs' ranks, ties given their
  average rank (:func:`average_ranks`). It is None when either run's FCTs are all equal (no order to
  agree on) or fewer than two flows matched.
* **Flows that differ most**: the ``top`` flows by ``|log ratio|`` (a 2× faster flow differs as much as
  a 2× slower one), ties by flow id.
* **Ports**: ECN marks and drops of every switch port (``summary.fabric.ports``), matched by port name.
* **Instances**: CCT of every measured collective instance (collectives.csv, matched by instance id),
  with its ratio B / A and the ratio distribution.

Inputs are plain rows (dicts of strings, as :func:`emulator.results.csvfiles.read_csv` gives them) and
summary dicts; this module does no I/O.
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


def _int(row: Mapping[str, str], key: str, where: str) -> int:
    try:
        return int(float(row[key]))
    except KeyError:
        raise ResultsError(f"{where}: no column {key!r}") from None
    except ValueError:
        raise ResultsError(f"{where}: column {key!r} is not a number ({row[key]!r})") from None


def _opt_int(row: Mapping[str, str], key: str) -> int | None:
    v = row.get(key, "")
    try:
        return int(float(v)) if v not in ("", None) else None
    except ValueError:
        return None


def _ratio_summary(ratios: np.ndarray) -> dict[str, float | None]:
    vals = percentiles(ratios, [p for _, p in RATIO_PERCENTILES]) if ratios.size else [None] * len(RATIO_PERCENTILES)
    out: dict[str, float | None] = {k: (float(v) if v is not None else None)
                                    for (k, _), v in zip(RATIO_PERCENTILES, vals, strict=True)}
    out["min"] = float(ratios.min()) if ratios.size else None
    out["max"] = float(ratios.max()) if ratios.size else None
    return out


def _measured_flows(rows: Sequence[Mapping[str, str]], where: str) -> dict[tuple[int, int], tuple[int, int, int, int]]:
    """(flow, iteration) → (src, dst, size_bytes, fct_ns or -1 when unfinished) of measured flows."""
    out = {}
    for row in rows:
        if _int(row, "warmup", where):
            continue
        fct = _opt_int(row, "fct_scheduled_ns")
        end = _opt_int(row, "end_ns")
        done = fct is not None and fct >= 0 and (end is None or end >= 0)
        out[(_int(row, "flow", where), _int(row, "iteration", where))] = (
            _int(row, "src", where), _int(row, "dst", where), _int(row, "size_bytes", where), fct if done else -1)
    return out


def _ports(fabric_a: Mapping[str, Any], fabric_b: Mapping[str, Any]) -> tuple[PortPair, ...]:
    def by_name(fabric: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        return {str(p.get("name", p.get("port"))): p for p in (fabric.get("ports") or []) if isinstance(p, Mapping)}

    pa, pb = by_name(fabric_a), by_name(fabric_b)
    names = list(pa) + [n for n in pb if n not in pa]

    def get(p: Mapping[str, Any] | None, key: str) -> int | None:
        return int(p[key]) if p is not None and p.get(key) is not None else None

    return tuple(PortPair(n, get(pa.get(n), "marked_packets"), get(pb.get(n), "marked_packets"),
                          get(pa.get(n), "dropped_packets"), get(pb.get(n), "dropped_packets")) for n in names)


def _instances(rows: Sequence[Mapping[str, str]], where: str) -> dict[int, tuple[str, str, int, int | None]]:
    """instance → (type, group, iteration, CCT ns or None) of measured instances."""
    out: dict[int, tuple[str, str, int, int | None]] = {}
    for row in rows:
        if _int(row, "warmup", where):
            continue
        inst = _int(row, "instance", where)
        if inst not in out:
            out[inst] = (row.get("type", ""), row.get("group", ""), _int(row, "iteration", where),
                         _opt_int(row, "cct_ns"))
    return out


def compare_flows(
    labels: tuple[str, str],
    schedule_hash: str,
    flow_rows: tuple[Sequence[Mapping[str, str]], Sequence[Mapping[str, str]]],
    collective_rows: tuple[Sequence[Mapping[str, str]], Sequence[Mapping[str, str]]],
    fabrics: tuple[Mapping[str, Any], Mapping[str, Any]],
    top: int = 10,
) -> FlowComparison:
    """The per-flow comparison of run B against run A (see module docstring); rows are flows.csv /
    collectives.csv rows, ``fabrics`` the ``summary.fabric`` dicts of the two runs."""
    fa = _measured_flows(flow_rows[0], f"{labels[0]} flows.csv")
    fb = _measured_flows(flow_rows[1], f"{labels[1]} flows.csv")
    if fa.keys() != fb.keys():
        only = sorted(fa.keys() ^ fb.keys())[0]
        raise ResultsError(f"compare --flows: flow {only[0]} (iteration {only[1]}) is measured in only one of "
                           f"{labels[0]} and {labels[1]}")
    keys = sorted(fa)
    for k in keys:
        if fa[k][:3] != fb[k][:3]:
            raise ResultsError(f"compare --flows: flow {k[0]} differs between {labels[0]} and {labels[1]} "
                               f"(src, dst, size {fa[k][:3]} vs {fb[k][:3]})")
    fct_a = np.asarray([fa[k][3] for k in keys], dtype=np.int64).reshape(-1)
    fct_b = np.asarray([fb[k][3] for k in keys], dtype=np.int64).reshape(-1)
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
    diffs = tuple(FlowDiff(keys[idx[j]][0], keys[idx[j]][1], *fa[keys[idx[j]]][:3], int(fct_a[idx[j]]),
                           int(fct_b[idx[j]]), float(ratios[j])) for j in order)
    ia = _instances(collective_rows[0], f"{labels[0]} collectives.csv")
    ib = _instances(collective_rows[1], f"{labels[1]} collectives.csv")
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
        labels=labels, schedule_hash=schedule_hash, flows=len(keys), compared=int(idx.size),
        unfinished_a=int((fct_a < 0).sum()), unfinished_b=int((fct_b < 0).sum()),
        fct_ratio=_ratio_summary(ratios), spearman=spearman, spearman_note=note, top=diffs,
        ports=_ports(*fabrics), instances=tuple(insts), cct_ratio=_ratio_summary(cct_ratios))


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
