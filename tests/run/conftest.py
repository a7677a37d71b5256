"""Helpers for the run tests: tiny profiles written into tmp_path."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

#: 4 ranks, an All-Reduce group and an All-to-All group at once on the sim fabric, 1 warmup + 2 measured
TINY = {
    "name": "tiny",
    "seed": 3,
    "fabric": {"kind": "sim", "ports": {"rate": "25Gbps", "latency": "1us"}},
    "ranks": {"count": 4},
    "warmup": 1,
    "iterations": 2,
    "workload": {"collectives": [
        {"name": "ar", "type": "all_reduce", "group": "0-3", "size": "64KiB", "algorithm": "ring", "iterations": 2},
        {"name": "a2a", "type": "all_to_all", "group": "0-3", "size": "64KiB", "iterations": 2},
    ]},
}


@pytest.fixture
def tiny_profile(tmp_path: Path):
    """tiny_profile(**changes) → path of a profile file (TINY with top-level keys replaced)."""

    def _write(name: str = "tiny.yaml", **changes) -> Path:
        data = copy.deepcopy(TINY)
        data.update(changes)
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return _write
