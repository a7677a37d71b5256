"""Plain-text rendering of a report :class:`~emulator.report.document.Document`.

Sections are headed by their title underlined with ``=``; facts print as aligned ``label: value``
lines; tables as space-aligned columns (first column left, numbers right) under a ``#``-prefixed
header, as nccl-tests prints its table, so the output is easy to read and to ``grep``. Figures are
not drawn in text; their names are listed so the reader knows what ``--format html`` would show.
"""

from __future__ import annotations

from emulator.report.document import Document, Table


def render_table(table: Table, indent: str = "") -> list[str]:
    widths = [len(c) for c in table.columns]
    for row in table.rows:
        for j, cell in enumerate(row):
            widths[j] = max(widths[j], len(cell))

    def line(cells: tuple[str, ...], lead: str) -> str:
        parts = []
        for j, cell in enumerate(cells):
            w = widths[j] + (1 if j == 0 else 0)  # room for the header's '#'
            parts.append(cell.ljust(w) if table.alignment(j) == "l" else cell.rjust(w))
        return (indent + lead + "  ".join(parts)).rstrip()

    out = []
    if table.title:
        out.append(f"{indent}{table.title}")
    header = ("#" + table.columns[0],) + table.columns[1:]
    out.append(line(header, ""))
    if not table.rows:
        out.append(f"{indent}  (no rows)")
    for row in table.rows:
        out.append(line((" " + row[0],) + row[1:], ""))
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
