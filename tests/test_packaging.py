"""Packaging facts that drift silently: the minimum Python version and the declared dependencies.

* ``requires-python`` is checked by vermin (the minimum version each construct, module and member needs),
  so a 3.11-only API (``datetime.UTC``, ``tomllib``, ``enum.StrEnum``...) fails here even when the tests
  run on a newer interpreter. Annotations are skipped (``--no-eval-annotations``): every module with
  annotations has ``from __future__ import annotations``, so they are strings at run time; the config
  schema evaluates its own with ``typing.get_type_hints``, so ``emulator/config`` is also checked with
  ``--eval-annotations``.
* Every third-party import of ``emulator/`` is a core dependency and every core dependency is imported;
  every third-party import of ``tests/`` is a core or ``test`` dependency.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
STDLIB = set(sys.stdlib_module_names) | {"tomllib"}  # tomllib is stdlib from 3.11 on, guarded below it
TOOLS = {"ruff", "vermin", "pytest-xdist"}  # test dependencies run as commands or pytest plugins, never imported


def _min_python() -> str:
    m = re.fullmatch(r">=\s*(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"].strip())
    assert m, PYPROJECT["project"]["requires-python"]
    return f"{m[1]}.{m[2]}"


def _vermin(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    """vermin's exit code is 1 when some code needs a newer Python than ``target``. No code here carries a
    ``# novermin`` exclusion comment, so comments are not parsed (a quarter of vermin's time); such a
    comment would not be honoured and its line would be reported."""
    cmd = [sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())",
           f"-t={target}-", "--no-tips", "--violations", "-q", "--no-parse-comments", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(reqs: list[str]) -> set[str]:
    return {_dist(re.match(r"[A-Za-z0-9_.\-]+", r)[0]) for r in reqs}


def _third_party_imports(root: Path) -> dict[str, set[str]]:
    """Top-level third-party module name -> files importing it (local helper modules left out)."""
    local = {p.stem for p in root.rglob("*.py")} | {p.parent.name for p in root.rglob("__init__.py")} | {"emulator"}
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in STDLIB and top not in local:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _as_distributions(imports: dict[str, set[str]], declared: set[str]) -> dict[str, set[str]]:
    """Import name -> distribution (the declared one when several provide it, e.g. ``google``)."""
    dists = packages_distributions()
    out: dict[str, set[str]] = {}
    for top, files in imports.items():
        candidates = {_dist(d) for d in dists.get(top, [top])}
        chosen = sorted(candidates & declared) or sorted(candidates)
        out.setdefault(chosen[0], set()).update(files)
    return out


@pytest.mark.serial  # vermin runs a process per core
def test_code_runs_on_the_declared_minimum_python() -> None:
    res = _vermin(_min_python(), "--no-eval-annotations", "emulator", "tests", "bench", "hwtests")
    assert res.returncode == 0, f"needs a newer Python than {_min_python()}:\n{res.stdout}{res.stderr}"
    res = _vermin(_min_python(), "--eval-annotations", "emulator/config")
    assert res.returncode == 0, f"config annotations need a newer Python:\n{res.stdout}{res.stderr}"


@pytest.mark.serial  # vermin runs a process per core
def test_vermin_catches_a_newer_api(tmp_path) -> None:
    (tmp_path / "m.py").write_text("from datetime import UTC\nimport tomllib\n")
    res = _vermin("3.10", "--no-eval-annotations", str(tmp_path))
    assert res.returncode == 1 and "datetime.UTC" in res.stdout and "tomllib" in res.stdout, res.stdout


def test_ruff_targets_the_declared_minimum_python() -> None:
    assert PYPROJECT["tool"]["ruff"]["target-version"] == "py" + _min_python().replace(".", "")


def test_core_dependencies_are_exactly_the_package_imports() -> None:
    declared = _requirement_names(PYPROJECT["project"]["dependencies"])
    used = _as_distributions(_third_party_imports(ROOT / "emulator"), declared)
    undeclared = {d: sorted(f)[:3] for d, f in used.items() if d not in declared}
    assert not undeclared, f"imported by emulator/ but not in [project] dependencies: {undeclared}"
    assert declared <= set(used), f"declared but never imported by emulator/: {sorted(declared - set(used))}"


def test_test_dependencies_cover_the_test_imports() -> None:
    core = _requirement_names(PYPROJECT["project"]["dependencies"])
    test = _requirement_names(PYPROJECT["project"]["optional-dependencies"]["test"])
    used = _as_distributions(_third_party_imports(ROOT / "tests"), core | test)
    undeclared = {d: sorted(f)[:3] for d, f in used.items() if d not in core | test}
    assert not undeclared, f"imported by tests/ but not declared (core or test extra): {undeclared}"
    assert test - TOOLS <= set(used), f"test extra never imported by tests/: {sorted(test - TOOLS - set(used))}"
