"""Shared fixtures of the results tests: the stored results_v1 directory and a scratch copy of it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

STORED = Path(__file__).resolve().parents[1] / "data" / "results_v1"


@pytest.fixture
def stored_copy(tmp_path: Path) -> Path:
    """A copy of tests/data/results_v1 that a test may edit."""
    d = tmp_path / "r"
    shutil.copytree(STORED, d)
    return d


def _stored_part(new: object, stored: object) -> object:
    if isinstance(new, dict) and isinstance(stored, dict):
        return {k: _stored_part(new[k], v) if k in new else None for k, v in stored.items()}
    if isinstance(new, list) and isinstance(stored, list) and len(new) == len(stored):
        return [_stored_part(a, b) for a, b in zip(new, stored, strict=True)]
    return new


@pytest.fixture
def stored_part():
    """``f(new, stored)``: ``new`` cut down to the keys ``stored`` has, at every depth (keys added within
    results version 1 after ``stored`` was written are left out)."""
    return _stored_part
