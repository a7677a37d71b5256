"""Helpers for the profile tests: write small profiles into tmp_path and load them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml


@pytest.fixture
def write(tmp_path: Path):
    """write(name, mapping_or_text) → path of a profile file in tmp_path."""

    def _write(name: str, content) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
        return path

    return _write
