"""Every ``*.md`` file named in the package's docstrings and comments, in the READMEs and in docs/ is a
file of this repository (users have no copy of the project's shared folder), and the package's docstrings
and comments say what is, not what was."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
URL = re.compile(r"[a-z]+://\S+")
MD = re.compile(r"(?<![\w./-])([\w.-]+(?:/[\w.-]+)*\.md)\b")


def _references(path: Path) -> list[str]:
    return MD.findall(URL.sub("", path.read_text(encoding="utf-8")))


def _sources() -> list[Path]:
    pkg = ROOT / "emulator"
    return sorted([*pkg.rglob("*.py"), *pkg.rglob("*.proto")]) + [ROOT / "README.md", ROOT / "profiles" / "README.md"]


def _in_repo(candidate: Path) -> bool:
    return candidate.resolve().is_relative_to(ROOT) and candidate.is_file()


def _missing(path: Path, refs: list[str]) -> list[str]:
    return [r for r in refs if not (_in_repo(ROOT / r) or _in_repo(path.parent / r))]


def test_md_references_in_the_package_and_readmes_resolve() -> None:
    bad = {str(p.relative_to(ROOT)): m for p in _sources() if (m := _missing(p, _references(p)))}
    assert not bad, f"references to files not in the repository: {bad}"


def test_md_references_between_docs_resolve() -> None:
    docs = sorted((ROOT / "docs").glob("*.md"))
    assert docs
    bad = {p.name: m for p in docs
           if (m := [r for r in _references(p) if "/" not in r and not (p.parent / r).is_file()])}
    assert not bad, f"docs/ names files it does not hold: {bad}"


def test_the_check_finds_a_missing_file(tmp_path) -> None:
    f = tmp_path / "m.py"
    f.write_text('"""See ``docs/nowhere.md`` §3, metrics.md, https://example.org/x.md, README.md and '
                 '../shared/docs/dcqcn.md."""\n')
    refs = _references(f)
    assert refs == ["docs/nowhere.md", "metrics.md", "README.md", "../shared/docs/dcqcn.md"]
    assert _missing(f, refs) == ["docs/nowhere.md", "metrics.md", "../shared/docs/dcqcn.md"]


#: phrasing that tells history (belongs in commit messages), not what the code is
HISTORY = re.compile(r"\b(?:it|they|this|that|which) used to\b|\bno longer\b|\bpreviously\b|\bformerly\b"
                     r"|\(issue \d+\)|\bissue \d+'s\b", re.I)


def _docs_and_comments(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment of a Python file."""
    import ast
    import io
    import tokenize

    source = path.read_text(encoding="utf-8")
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((node.body[0].lineno, doc))
    return out


def test_docstrings_and_comments_say_what_is_not_history() -> None:
    bad = [f"{p.relative_to(ROOT)}:{line}: {m.group(0)!r}" for p in sorted((ROOT / "emulator").rglob("*.py"))
           if not p.name.endswith("_pb2.py") for line, text in _docs_and_comments(p)
           for m in [HISTORY.search(text)] if m]
    assert not bad, f"history belongs in commit messages: {bad}"
