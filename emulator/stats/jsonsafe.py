"""Plain, strictly valid JSON data from summaries: numpy → Python, NaN/±inf → null.

JSON has no NaN or infinity. Every float that is not finite is written as ``null``: a ratio with a zero
denominator (e.g. straggler slowdown when the fastest member took 0 ns), a bandwidth over a zero time,
a mean of nothing. ``null`` therefore always means "no finite value" — never zero. Tuples become lists,
mapping keys become strings, dataclasses with ``to_dict`` are expanded.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np


def jsonable(value: Any) -> Any:
    """A deep copy of ``value`` made of dict/list/str/int/float/bool/None only (see module docstring)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()]
    if hasattr(value, "to_dict"):
        return jsonable(value.to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    return str(value)
