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
