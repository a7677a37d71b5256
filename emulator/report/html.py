"""One self-contained HTML file from a report :class:`~emulator.report.document.Document`.

Theory of operation
-------------------
Everything the page needs is inside it: an inline ``<style>`` block, tables as ``<table>``, and
figures as ``<img src="data:image/png;base64,...">``. There are no scripts, no external style
sheets, fonts or images, and no links that leave the file, so a report can be mailed, archived or
opened offline and looks the same years later. Every text that comes from the results (labels,
values, warnings) is HTML-escaped. A table of contents links to the sections by fragment only.
"""

from __future__ import annotations

import base64
import html
import re

from emulator.report.document import Document, Figure, Table

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1100px; padding: 0 1em; color: #1b1b1b; line-height: 1.4; }
h1 { font-size: 1.6em; border-bottom: 2px solid #444; padding-bottom: .2em; }
h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #bbb; }
h3 { font-size: 1.0em; margin: 1.2em 0 .3em; }
table { border-collapse: collapse; margin: .4em 0 1em; font-size: .88em; }
th, td { border: 1px solid #ccc; padding: .2em .55em; }
th { background: #f0f0f0; text-align: center; }
td.r { text-align: right; font-variant-numeric: tabular-nums; }
td.l { text-align: left; }
table.facts td:first-child { font-weight: 600; background: #fafafa; }
.warn { background: #fff4e5; border-left: 4px solid #e69500; padding: .4em .8em; margin: .3em 0; }
.note { color: #555; font-size: .88em; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: .88em; color: #444; }
nav ul { columns: 2; font-size: .9em; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _anchor(title: str) -> str:
    return "s-" + (re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "x")


def _table(t: Table) -> list[str]:
    out = []
    if t.title:
        out.append(f"<h3>{_e(t.title)}</h3>")
    out.append("<table>")
    out.append("<tr>" + "".join(f"<th>{_e(c)}</th>" for c in t.columns) + "</tr>")
    for row in t.rows:
        cells = "".join(f'<td class="{t.alignment(j)}">{_e(c)}</td>' for j, c in enumerate(row))
        out.append(f"<tr>{cells}</tr>")
    if not t.rows:
        out.append(f'<tr><td colspan="{len(t.columns)}" class="l">(no rows)</td></tr>')
    out.append("</table>")
    if t.note:
        out.append(f'<p class="note">{_e(t.note)}</p>')
    return out


def png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _figure(f: Figure) -> list[str]:
    return [
        "<figure>",
        f'<img alt="{_e(f.caption)}" src="{png_data_uri(f.png)}">',
        f"<figcaption>{_e(f.caption)}</figcaption>",
        "</figure>",
    ]


def render_html(doc: Document) -> str:
    """The document as one HTML page (a string; write it with UTF-8)."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(doc.title)}</title>",
        f"<style>{_CSS}</style>",
        "</head><body>",
        f"<h1>{_e(doc.title)}</h1>",
    ]
    out.extend(f'<p class="warn">{_e(w)}</p>' for w in doc.warnings)
    if len(doc.sections) > 1:
        out.append("<nav><ul>")
        out.extend(f'<li><a href="#{_anchor(s.title)}">{_e(s.title)}</a></li>' for s in doc.sections)
        out.append("</ul></nav>")
    for sec in doc.sections:
        out.append(f'<h2 id="{_anchor(sec.title)}">{_e(sec.title)}</h2>')
        if sec.facts:
            out.append('<table class="facts">')
            out.extend(f'<tr><td class="l">{_e(k)}</td><td class="l">{_e(v)}</td></tr>' for k, v in sec.facts)
            out.append("</table>")
        out.extend(f'<p class="note">{_e(n)}</p>' for n in sec.notes)
        for t in sec.tables:
            out.extend(_table(t))
        for f in sec.figures:
            out.extend(_figure(f))
    out.append("</body></html>")
    return "\n".join(out) + "\n"
