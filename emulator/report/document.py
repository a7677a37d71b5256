"""A format-neutral report document: sections of key/value lines, tables and figures.

Theory of operation
-------------------
A report is built once from a results directory (:mod:`emulator.report.build`) into a
:class:`Document` — an ordered list of :class:`Section`, each holding facts (label, value text),
free notes, :class:`Table` and :class:`Figure` (PNG bytes). The text renderer
(:mod:`emulator.report.text`) prints facts and tables and lists figures by name; the HTML renderer
(:mod:`emulator.report.html`) embeds the figures as base64 PNG. Cells are already formatted strings
(units in the column headers), so both renderers print the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Table:
    """Rows of preformatted cells under ``columns`` (``align`` per column: 'l' or 'r')."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    align: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ValueError(f"table {self.title!r}: row {i} has {len(row)} cells for {len(self.columns)} columns")

    def alignment(self, j: int) -> str:
        return self.align[j] if j < len(self.align) else ("l" if j == 0 else "r")


@dataclass(frozen=True, slots=True)
class Figure:
    name: str  # file stem, e.g. "cct_cdf"
    caption: str
    png: bytes


@dataclass(slots=True)
class Section:
    title: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)


@dataclass(slots=True)
class Document:
    title: str
    sections: list[Section] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def section(self, title: str) -> Section:
        s = Section(title)
        self.sections.append(s)
        return s

    @property
    def figures(self) -> list[Figure]:
        return [f for s in self.sections for f in s.figures]
