"""Where code lives: test support is a package the tests import (no ``sys.path`` edits), no product
module is named like a common import alias, and no product module exceeds 600 lines."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: module names the code base binds as aliases (``import numpy as np``): a module of that name shadows it
ALIASES = {"np", "pd", "plt", "mpl", "sp", "tf", "pb"}


def test_tests_import_helpers_without_editing_sys_path() -> None:
    bad = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").rglob("*.py"))
           if re.search(r"sys\.path\.(insert|append)", p.read_text(encoding="utf-8"))]
    assert not bad, f"use the tests/support package instead of editing sys.path: {bad}"


def test_no_module_shadows_an_import_alias() -> None:
    bad = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "emulator").rglob("*.py")) if p.stem in ALIASES]
    assert not bad, f"module named like an import alias: {bad}"


#: the most lines a module of the product may have (issue 11 §1)
MAX_MODULE_LINES = 600


def test_no_module_exceeds_600_lines() -> None:
    """Every module under emulator/ (generated ``*_pb2.py`` aside) stays within :data:`MAX_MODULE_LINES`."""
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for p in sorted((ROOT / "emulator").rglob("*.py")) if not p.name.endswith("_pb2.py")}
    over = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert len(sizes) > 50 and not over, f"modules over {MAX_MODULE_LINES} lines (split them): {over}"




def test_the_layer_contract_is_kept(monkeypatch) -> None:
    """The import-linter contracts of pyproject.toml (the test command also runs them as ``lint-imports``)."""
    from importlinter.cli import lint_imports

    monkeypatch.chdir(ROOT)
    assert lint_imports(config_filenames=(str(ROOT / "pyproject.toml"),), no_cache=True, no_logo=True) == 0
