"""Evaluate service-level objectives against a nested dict of summary metrics.

Theory of operation
-------------------
An SLO is ``(metric path, op, threshold)``, e.g. ``("all_reduce.cct.p99", "<", 5e6)``, already
parsed (the profile code turns ``all_reduce.cct.p99 < 5ms`` into numbers in the metric's own unit).
The path is looked up in the metrics (a mapping or a typed
:class:`~emulator.stats.summary_types.RunSummary`) one dotted segment at a time; because keys may contain
dots themselves (``"1.5"``, ``"ib0.port1"``), each step tries the longest run of segments that is a
key first. Sequences are indexed by integer segments; an object with ``metric_child`` answers through it,
other objects by attribute.

The SLO *holds* when ``value <op> threshold`` is true, with op one of ``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=``
(the equalities for counters, e.g. ``fabric.drops == 0``).
It is *broken* when the comparison is false, and also — with a line that says why — when the path
does not exist, the value is missing (None: no samples), NaN, or not a number. A missing metric is
never a pass and never a crash. :func:`check_slos` returns every result, in input order (the run's
verdict lines are :func:`emulator.report.console.evaluate_slos`). :func:`missing_metric` checks a path before a run, against a
summary of the same workload (the closest existing path is named).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from emulator.config.slo import OPS as _OPS  # the one table of SLO operators
from emulator.errors import ConfigError


@dataclass(frozen=True, slots=True)
class SloResult:
    path: str
    op: str
    threshold: float
    value: float | None  # None when the metric is missing or not a number
    ok: bool
    message: str  # one human line
    reason: str | None = None  # why a metric with no usable value broke the SLO ("metric is NaN", ...)


class _Missing(Exception):
    pass


def _step(node: Any, key: str) -> Any:
    if isinstance(node, Mapping):
        if key in node:
            return node[key]
        raise _Missing(key)
    if isinstance(node, Sequence) and not isinstance(node, (str, bytes)):
        try:
            return node[int(key)]
        except (ValueError, IndexError):
            raise _Missing(key) from None
    child = getattr(node, "metric_child", None)
    if child is not None:
        try:
            return child(key)
        except KeyError:
            raise _Missing(key) from None
    if not key.startswith("_") and hasattr(node, key) and not callable(getattr(node, key)):
        return getattr(node, key)
    raise _Missing(key)


def _walk(metrics: Mapping[str, Any], path: str) -> tuple[Any, list[str], str | None]:
    """(node reached, keys taken, the segment that is absent there or None when the whole path exists)."""
    parts = path.split(".")
    node: Any = metrics
    i = 0
    done: list[str] = []
    while i < len(parts):
        for j in range(len(parts), i, -1):  # longest key first
            key = ".".join(parts[i:j])
            try:
                node = _step(node, key)
            except _Missing:
                continue
            done.append(key)
            i = j
            break
        else:
            return node, done, parts[i]
    return node, done, None


def lookup_metric(metrics: Mapping[str, Any], path: str) -> Any:
    """Value at a dotted ``path``; raises KeyError with a one-line reason when it is absent."""
    node, done, absent = _walk(metrics, path)
    if absent is not None:
        where = "the top level" if not done else repr(".".join(done))
        raise KeyError(f"no key {absent!r} under {where}")
    return node


def metric_paths(metrics: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Every dotted path from the top of ``metrics`` to a value that is not a mapping (lists are leaves)."""
    out: list[str] = []
    for key, value in metrics.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.extend(metric_paths(value, path + "."))
        else:
            out.append(path)
    return out


def missing_metric(metrics: Mapping[str, Any], path: str, open_keys: Iterable[str] = ()) -> str | None:
    """Why ``path`` names no metric of ``metrics`` (one line, with the closest existing path), or None.

    ``metrics`` is a summary of the same workload as the run to come; a path may still exist after the
    run when it stops at a list (an index the run may fill) or under one of ``open_keys`` (mappings whose
    keys depend on the measurements, e.g. a histogram of counts): those are not reported."""
    node, done, absent = _walk(metrics, path)
    if absent is None or ".".join(done) in set(open_keys):
        return None
    if isinstance(node, Sequence) and not isinstance(node, (str, bytes)):
        return None
    where = "at the top level" if not done else f"under {'.'.join(done)!r}"
    if not isinstance(node, Mapping):
        return f"no metric {path!r} ({'.'.join(done)!r} is a value, it has no key {absent!r})"
    keys = [str(k) for k in node]
    close = difflib.get_close_matches(absent, keys, n=1, cutoff=0.6)
    if close:
        rest = path.split(".")[sum(len(k.split(".")) for k in done) + 1:]
        hint = f"; did you mean {'.'.join([*done, close[0], *rest])!r}?"
    elif keys:
        hint = f"; keys there: {', '.join(keys[:12])}" + (f" ... ({len(keys)} keys)" if len(keys) > 12 else "")
    else:
        hint = ""
    return f"no metric {path!r} (no key {absent!r} {where}){hint}"


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:.6g}"


def check_slo(metrics: Mapping[str, Any], path: str, op: str, threshold: float) -> SloResult:
    """Evaluate one SLO (see module docstring)."""
    if op not in _OPS:
        raise ConfigError(f"SLO {path!r}: unknown comparison {op!r} (use <, <=, >, >=, == or !=)")
    threshold = float(threshold)
    head = f"SLO {path} {op} {_fmt(threshold)}"

    def broken(reason: str) -> SloResult:
        return SloResult(path, op, threshold, None, False, f"{head}: {reason}", reason)

    try:
        value = lookup_metric(metrics, path)
    except KeyError as exc:
        return broken(f"metric not found ({exc.args[0]})")
    if value is None:
        return broken("metric has no value (no samples)")
    if isinstance(value, (bool, str, bytes)) or type(value).__name__ == "bool_":
        return broken(f"metric is not a number ({type(value).__name__})")
    try:
        v = float(value)  # int, float, numpy scalars
    except (TypeError, ValueError):
        return broken(f"metric is not a number ({type(value).__name__})")
    if math.isnan(v):
        return broken("metric is NaN")
    ok = _OPS[op](v, threshold)
    verdict = "ok" if ok else "broken"
    return SloResult(path, op, threshold, v, ok, f"SLO {verdict}: {path} = {_fmt(v)}, needs {op} {_fmt(threshold)}")


def check_slos(metrics: Mapping[str, Any], slos: Iterable[tuple[str, str, float]]) -> list[SloResult]:
    """Every SLO's result, in input order."""
    return [check_slo(metrics, path, op, threshold) for path, op, threshold in slos]


