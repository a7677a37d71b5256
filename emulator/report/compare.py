"""Runs side by side: one row per metric, one column per run, plus ratios against a baseline run.

Theory of operation
-------------------
Input is a list of (label, summary) pairs — typed :class:`~emulator.stats.summary_types.RunSummary`
objects (plain summary dicts read the same; metric paths as documented in :mod:`emulator.stats.run_summary`). A *metric expression* is one of

* a dotted path, looked up with :func:`emulator.stats.lookup_metric` (``all_reduce.cct.p99``); a
  list value counts its items (``stragglers.slow_ranks`` → number of slow ranks);
* a path with ``*`` segments, which sums over every child at that level (``ranks.*.cnps_sent`` = CNPs
  sent by all ranks);
* ``A/B`` — the quotient of two such expressions (``all_to_all.cct.p99/all_to_all.cct.p50``).

A value is None when the path is missing in that run (e.g. ``all_to_all.*`` in a run without
All-to-All), null, or a quotient by zero — never a silent 0.

Ratios: per metric row, the **baseline** is the first run (in argument order) that has a value for
it, and every run's ratio is ``value / baseline value`` (the baseline's own ratio is 1; runs before
it have None). So ``compare AR_ALONE A2A_ALONE MIXED`` gives the All-Reduce rows against the
All-Reduce-alone run and the All-to-All rows against the All-to-All-alone run: a congestion study is
one command. With ``baseline`` fixed to a run index, that run is the baseline of every row.

Default rows (:func:`default_metrics`) per collective type present in any run: instance count, CCT
p50/p99/max/cv, CCT p99/p50, per-member completion p99/p50, busbw (``<type>.busbw_weighted_gbps``, the
byte-weighted mean the run's summary and reports print; ``<type>.busbw_gbps``, the instance at the median
CCT, for results written before it); then, when any run
has them, the job view (``iteration.*``: measured iterations, JCT p50/p99/max/cv, JCT p99/p50, per-rank
iteration completion p99/p50, largest iteration skew) and point-to-point flows (``p2p.*``); then flow FCT and
slowdown tails, straggler figures, fabric congestion signals (ECN marks, CNPs, drops, retransmits,
peak queue, pause time; injected loss when a run has any) and generator lag.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from emulator.report.console import format_value as console_value
from emulator.stats import lookup_metric
from emulator.trace.model import (
    COLLECTIVE_NAMES as COLLECTIVE_TYPES,  # the collective type names, in report order
)

_DIST_FIELDS = ("p50", "p90", "p99", "p999", "max", "min", "mean", "stdev")


@dataclass(frozen=True, slots=True)
class MetricRow:
    metric: str  # the expression
    unit: str  # "ns", "bytes", "GB/s", "fraction", "x" (ratio of like quantities) or "" (count / plain)
    values: tuple[float | None, ...]
    baseline: int | None  # index of the baseline run (None: no run has a value)
    ratios: tuple[float | None, ...]

    def to_dict(self, labels: Sequence[str]) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "values": dict(zip(labels, self.values, strict=True)),
            "baseline": labels[self.baseline] if self.baseline is not None else None,
            "ratios": dict(zip(labels, self.ratios, strict=True)),
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    labels: tuple[str, ...]
    rows: tuple[MetricRow, ...]
    runs: tuple[Mapping[str, Any], ...] = ()  # per-run facts (path, profile, version ...)

    def row(self, metric: str) -> MetricRow:
        for r in self.rows:
            if r.metric == metric:
                return r
        raise KeyError(metric)

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": [dict(r, label=lbl) for lbl, r in zip(self.labels, self.runs or [{}] * len(self.labels),
                                                           strict=True)],
            "baseline_rule": "per metric: the first run (in argument order) that has a value",
            "metrics": {r.metric: r.to_dict(self.labels) for r in self.rows},
        }


def _number(v: Any) -> float | None:
    if v is None or isinstance(v, (str, bytes)) or type(v).__name__ in ("bool", "bool_"):
        return None
    if isinstance(v, (list, tuple)):
        return float(len(v))
    if isinstance(v, Mapping):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _path_value(summary: Any, path: str) -> float | None:
    if "*" in path.split("."):
        head, _, tail = path.partition(".*")
        tail = tail.lstrip(".")
        try:
            node = lookup_metric(summary, head) if head else summary
        except KeyError:
            return None
        if not isinstance(node, Mapping):
            return None
        parts = [_path_value(child, tail) if tail else _number(child) for child in node.values()]
        vals = [p for p in parts if p is not None]
        return float(sum(vals)) if vals else None
    try:
        return _number(lookup_metric(summary, path))
    except KeyError:
        return None


def expression_error(expr: str) -> str | None:
    """Why a metric expression can name no metric of any run summary (a typo, with a did-you-mean), or None."""
    from emulator.stats.summary_types import metric_path_error

    for part in expr.split("/"):
        why = metric_path_error(part.strip(), wildcard=True)
        if why is not None:
            return why
    return None


def metric_value(summary: Any, expr: str) -> float | None:
    """Value of a metric expression in one summary (see module docstring)."""
    if "/" in expr:
        num_expr, _, den_expr = expr.partition("/")
        num, den = metric_value(summary, num_expr.strip()), metric_value(summary, den_expr.strip())
        if num is None or den is None or den == 0:
            return None
        return num / den
    return _path_value(summary, expr.strip())


def metric_unit(expr: str) -> str:
    """Unit of a metric expression, from its path (ratios of like quantities are ``x``)."""
    if "/" in expr:
        return "x"
    parts = expr.split(".")
    last = parts[-1]
    if last in ("count", "cv", "instances", "warmup", "incomplete") or last.startswith("n_"):
        return ""
    in_time_dist = "cct" in parts or "jct" in parts or "completion" in parts
    if any(p.endswith("_ns") for p in parts) or (in_time_dist and last in _DIST_FIELDS):
        return "ns"
    if any(p.endswith("_bytes") for p in parts):
        return "bytes"
    if last.endswith("_gbps"):
        return "GB/s"
    if last.endswith("_bps") or (len(parts) > 1 and parts[-2].endswith("_bps")):
        return "bit/s"
    if last in ("max_skew", "median_skew", "p99_skew", "late_fraction", "max_utilisation") or (
            "skew_fraction" in parts or "straggler_delay" in parts):
        return "fraction"
    if "slowdown" in parts or "straggler_slowdown" in parts:
        return "x"
    return ""


def types_present(summaries: Sequence[Any]) -> list[str]:
    """Collective types with at least one measured instance in any of the runs, in a fixed order."""
    return [t for t in COLLECTIVE_TYPES if any((metric_value(s, f"{t}.count") or 0) > 0 for s in summaries)]


def jobs_present(summaries: Sequence[Any]) -> list[str]:
    """Job names of ``workload.jobs`` in any of the runs (first seen first): a job alone and the same job
    next to others line up by name."""
    names: dict[str, None] = {}
    for s in summaries:
        names.update(dict.fromkeys(getattr(s, "jobs", None) or {}))
    return list(names)


def default_metrics(summaries: Sequence[Any]) -> list[str]:
    rows: list[str] = []
    for t in types_present(summaries):
        weighted = any(metric_value(s, f"{t}.busbw_weighted_gbps") is not None for s in summaries)
        rows += [f"{t}.count", f"{t}.cct.p50", f"{t}.cct.p99", f"{t}.cct.max", f"{t}.cct.cv",
                 f"{t}.cct.p99/{t}.cct.p50", f"{t}.completion.p99/{t}.completion.p50",
                 f"{t}.busbw_weighted_gbps" if weighted else f"{t}.busbw_gbps"]
    if any(metric_value(s, "iteration.count") for s in summaries):
        rows += ["iteration.count", "iteration.jct.p50", "iteration.jct.p99", "iteration.jct.max", "iteration.jct.cv",
                 "iteration.jct.p99/iteration.jct.p50", "iteration.completion.p99/iteration.completion.p50",
                 "iteration.stragglers.max_skew"]
    for job in jobs_present(summaries):
        rows += [f"jobs.{job}.count", f"jobs.{job}.jct.p50", f"jobs.{job}.jct.p99", f"jobs.{job}.cct.p50",
                 f"jobs.{job}.cct.p99", f"jobs.{job}.stragglers.max_skew"]
    if any(metric_value(s, "p2p.flows") for s in summaries):
        rows += ["p2p.flows", "p2p.fct_scheduled_ns.p50", "p2p.fct_scheduled_ns.p99", "p2p.slowdown.p99"]
    rows += [
        "flows.fct_scheduled_ns.p50", "flows.fct_scheduled_ns.p99", "flows.fct_scheduled_ns.p99/flows.fct_scheduled_ns.p50",
        "flows.slowdown.p50", "flows.slowdown.p99", "flows.unfinished",
        "stragglers.median_skew", "stragglers.p99_skew", "stragglers.max_skew", "stragglers.p99_skew_ns",
        "stragglers.instances_with_slow_rank", "stragglers.slow_ranks",
        "fabric.ecn_marks", "ranks.*.cnps_sent", "fabric.drops", "ranks.*.retransmits",
        "fabric.max_peak_queue_bytes", "fabric.pause_time_ns",
        "generator.lag_ns.p99", "generator.flows_late",
    ]
    if any(metric_value(s, "fabric.lost_packets") for s in summaries):  # injected loss (sim's fabric.loss)
        rows.insert(rows.index("fabric.drops") + 1, "fabric.lost_packets")
    return rows


def compare_summaries(
    runs: Sequence[tuple[str, Any]],
    metrics: Sequence[str] | None = None,
    baseline: int | None = None,
    run_facts: Sequence[Mapping[str, Any]] | None = None,
) -> Comparison:
    """The comparison table of ``runs`` = [(label, summary), ...] (at least one run)."""
    if not runs:
        raise ValueError("compare needs at least one run")
    labels = tuple(lbl for lbl, _ in runs)
    if len(set(labels)) != len(labels):
        raise ValueError(f"run labels must be distinct, got {', '.join(labels)}")
    if baseline is not None and not 0 <= baseline < len(runs):
        raise ValueError(f"baseline run {baseline} is out of range (0..{len(runs) - 1})")
    summaries = [s for _, s in runs]
    exprs = list(metrics) if metrics else default_metrics(summaries)
    rows = []
    for expr in exprs:
        values = tuple(metric_value(s, expr) for s in summaries)
        if baseline is not None:
            base = baseline if values[baseline] is not None else None
        else:
            base = next((i for i, v in enumerate(values) if v is not None), None)
        ratios: list[float | None] = []
        for i, v in enumerate(values):
            if base is None or v is None or (baseline is None and i < base):
                ratios.append(None)
            elif i == base:
                ratios.append(1.0)
            else:
                b = values[base]
                ratios.append(v / b if b else (1.0 if v == 0 else None))
        rows.append(MetricRow(expr, metric_unit(expr), values, base, tuple(ratios)))
    facts = tuple(run_facts) if run_facts is not None else tuple({} for _ in runs)
    return Comparison(labels, tuple(rows), facts)


def format_value(v: float | None, unit: str) -> str:
    """Human form of one cell: the summary's form (µs/ms for ns, %, binary sizes), plus GB/s, Gb/s, 3-digit ratios."""
    if v is None:
        return "n/a"
    if unit in ("ns", "fraction", "bytes"):
        return console_value(v, unit)
    if unit == "GB/s":
        return f"{v:.2f} GB/s"
    if unit == "bit/s":
        return f"{v / 1e9:.2f} Gb/s"
    if unit == "x":
        return f"{v:.3f}"
    if float(v).is_integer():
        return f"{int(v)}"
    return f"{v:.4g}"


def format_ratio(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.3f}x"


def comparison_table(comp: Comparison) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """(columns, rows) of preformatted cells: metric, one value per run, then ``run ÷ baseline`` ratios."""
    cols = ("metric",) + comp.labels + tuple(f"{lbl} ÷ base" for lbl in comp.labels[1:]) + ("baseline",)
    rows = []
    for r in comp.rows:
        cells = (r.metric,) + tuple(format_value(v, r.unit) for v in r.values)
        cells += tuple(format_ratio(x) for x in r.ratios[1:])
        cells += (comp.labels[r.baseline] if r.baseline is not None else "n/a",)
        rows.append(cells)
    return cols, rows
