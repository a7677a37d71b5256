"""Plain-text rendering of a report :class:`~emulator.report.document.Document`.

Sections are headed by their title underlined with ``=``; facts print as aligned ``label: value``
lines; tables as space-aligned columns (first column left, numbers right) under a ``#``-prefixed
header, as nccl-tests prints its table, so the output is easy to read and to ``grep``. Tables are laid
out by ``rich`` (every column as wide as its widest cell, two spaces apart, cells never wrapped nor
cut, no colour or markup), the same on a terminal and in a file. Figures are not drawn in text; their
names are listed so the reader knows what ``--format html`` would show.
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from emulator.report.document import Document, Table


def render_table(table: Table, indent: str = "") -> list[str]:
    """The lines of ``table``: optional title, ``#``-prefixed header, rows, ``# note``."""
    grid = RichTable(box=None, show_edge=False, pad_edge=False, padding=(0, 1), show_header=True,
                     header_style="", collapse_padding=False)
    for j, name in enumerate(table.columns):
        head = ("#" if j == 0 else "") + name
        grid.add_column(Text(head), justify="left" if table.alignment(j) == "l" else "right", no_wrap=True)
    for row in table.rows:
        grid.add_row(*(Text((" " if j == 0 else "") + cell) for j, cell in enumerate(row)))
    buf = io.StringIO()
    width = 2 + sum(max([len(c) + 1, *(len(r[j]) + 1 for r in table.rows)]) + 2 for j, c in enumerate(table.columns))
    Console(file=buf, width=max(width, 80), color_system=None, force_terminal=False, highlight=False,
            emoji=False, markup=False, legacy_windows=False, soft_wrap=False).print(grid)
    out = []
    if table.title:
        out.append(f"{indent}{table.title}")
    lines = [ln.rstrip() for ln in buf.getvalue().splitlines()]
    out.extend(indent + ln for ln in lines[:1])
    if not table.rows:
        out.append(f"{indent}  (no rows)")
    out.extend(indent + ln for ln in lines[1:])
    if table.note:
        out.append(f"{indent}# {table.note}")
    return out


def render_text(doc: Document) -> str:
    """The whole document as text (ends with a newline)."""
    out = [doc.title, "=" * len(doc.title)]
    for w in doc.warnings:
        out.append(f"WARNING: {w}")
    for sec in doc.sections:
        out.append("")
        out.append(sec.title)
        out.append("-" * len(sec.title))
        if sec.facts:
            width = max(len(k) for k, _ in sec.facts)
            out.extend(f"{k.ljust(width)} : {v}" for k, v in sec.facts)
        out.extend(sec.notes)
        for t in sec.tables:
            out.append("")
            out.extend(render_table(t))
        if sec.figures:
            out.append("")
            out.append("figures (see --format html): " + ", ".join(f.name for f in sec.figures))
    return "\n".join(out) + "\n"
