"""Service-level objectives declared in a profile: ``'<metric path> <op> <value>[unit]'``.

A line such as ``all_reduce.cct.p99 < 5ms`` or ``stragglers.max_skew < 20%`` is parsed into a
:class:`Slo` record: the metric path (dotted, as the results summary names it), the comparison, and
the threshold in canonical units (ns for durations, a fraction for percentages, bit/s for rates, bytes
for sizes, a plain number otherwise). Evaluating SLOs against results belongs to the stats/report
stage; this module only reads and checks the syntax.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from emulator.schema import SchemaError, join
from emulator.units import parse_duration_ns, parse_rate_bps, parse_size_bytes

OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
}
_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)\s*(<=|>=|==|!=|<|>)\s*(\S.*?)\s*$")
_VALUE = re.compile(r"^([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-zµ/%]*)$")
_DURATION_UNITS = {"ns", "us", "µs", "ms", "s", "sec", "min"}


@dataclass(frozen=True, slots=True)
class Slo:
    """One threshold: ``metric op value``; ``unit`` is ns, fraction, bps, bytes or '' (a plain number)."""

    metric: str
    op: str
    value: float
    unit: str
    text: str

    def holds(self, measured: float) -> bool:
        """True when ``measured`` (in this SLO's canonical unit) satisfies the threshold."""
        return OPS[self.op](measured, self.value)


def _threshold(text: str) -> tuple[float, str]:
    m = _VALUE.match(text)
    if not m:
        raise ValueError(f"cannot read {text!r} as a threshold (e.g. 5ms, 20%, 10Gbps, 4MiB, 1.5)")
    number, unit = m.group(1), m.group(2)
    low = unit.lower()
    if unit == "":
        return float(number), ""
    if unit == "%":
        return float(number) / 100.0, "fraction"
    if low in _DURATION_UNITS:
        return float(parse_duration_ns(text)), "ns"
    if low.endswith("bps") or low.endswith("/s"):
        return float(parse_rate_bps(text)), "bps"
    try:
        return float(parse_size_bytes(text)), "bytes"
    except ValueError:
        raise ValueError(f"unknown unit {unit!r} in {text!r} (durations ns..s, %, rates like Gbps, sizes like MiB)") from None


def parse_slo_line(line: Any, path: str) -> Slo:
    if not isinstance(line, str):
        raise SchemaError(path, f"expected a line like 'all_reduce.cct.p99 < 5ms', got {type(line).__name__}")
    m = _LINE.match(line)
    if not m:
        raise SchemaError(path, f"cannot read {line!r} as '<metric> <op> <value>' (ops: {' '.join(OPS)})")
    metric, op, raw = m.groups()
    try:
        value, unit = _threshold(raw)
    except ValueError as exc:
        raise SchemaError(path, str(exc)) from None
    return Slo(metric=metric, op=op, value=value, unit=unit, text=f"{metric} {op} {raw}")


def parse_slo(value: Any, path: str) -> tuple[Slo, ...]:
    """A list of SLO lines (a single string is one line)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise SchemaError(path, f"expected a list of lines like 'all_reduce.cct.p99 < 5ms', got {type(value).__name__}")
    return tuple(parse_slo_line(v, join(path, i)) for i, v in enumerate(value))
