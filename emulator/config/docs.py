"""Render the profile schema as Markdown tables (the key reference in ``profiles/README.md``).

``python -m emulator.config.docs`` prints the tables (``--update profiles/README.md`` rewrites them in place); ``profiles/README.md`` carries them between the
``<!-- schema:begin -->`` and ``<!-- schema:end -->`` markers, and a test checks that the two agree, so
the documentation cannot drift from the dataclasses that enforce it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator
from typing import Any

from emulator.config.knobs import CC_KNOB_ALIASES, CC_KNOBS, Knob, knob_presets, preset_form
from emulator.config.model import Profile
from emulator.schema import UNIT_DOCS, format_exact, yaml_key

BEGIN = "<!-- schema:begin -->"
END = "<!-- schema:end -->"

_KNOB_UNITS = {"int": "integer", "bool": "true/false", "fraction": "fraction", "us": "µs", "mbps": "Mb/s",
               "ns": "duration → ns", "bps": "rate → bit/s", "bytes": "size → bytes", "choice": "one of"}
#: the line rate the knob table's defaults are read at (the presets are :func:`knob_presets`)
KNOB_DEFAULT_LINE_RATE_BPS = 25e9


def _knob_unit(knob: Knob) -> str:
    if knob.unit == "choice":
        return "one of " + ", ".join(f"`{c}`" for c in knob.choices)
    return _KNOB_UNITS[knob.unit]


def knob_default(knob: Knob, preset: str) -> str:
    """The value ``knob`` has under ``preset`` when not overridden, in the knob's own unit ('—': not a knob of it)."""
    from emulator.pacing import get_params, np_params

    form = preset_form(preset)
    target = knob.np or (knob.paper if form == "paper" else knob.firmware)
    if target is None:
        return "—"
    field_name, factor = target
    params = np_params(preset) if knob.np else get_params(preset, KNOB_DEFAULT_LINE_RATE_BPS)
    value = getattr(params, field_name)
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f"`{value}`"
    value = value / factor
    if knob.unit in ("ns", "bps", "bytes") and float(value).is_integer():
        return f"`{format_exact(int(value), knob.unit)}`"
    if knob.unit == "fraction":
        inverse = 1 / value if value else 0
        if inverse and float(inverse).is_integer():
            return f"`1/{int(inverse)}`"
    return f"`{value:g}`"


def _strip_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _type_name(tp: Any, f: dataclasses.Field) -> str:
    if f.metadata.get("type_doc"):
        return f.metadata["type_doc"]
    unit = f.metadata.get("unit")
    if unit is not None:
        return {"bytes": "size", "bps": "rate", "ns": "duration", "us": "µs", "mbps": "Mb/s",
                "fraction": "fraction"}[unit]
    if f.metadata.get("choices"):
        return "one of " + ", ".join(f"`{c}`" for c in f.metadata["choices"])
    tp = _strip_optional(tp)
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return "mapping"
    if origin is tuple:
        inner = typing.get_args(tp)[0]
        return "list of mappings" if dataclasses.is_dataclass(inner) else "list"
    return {bool: "bool", int: "int", float: "number", str: "string"}.get(tp, "see description")


def _default(f: dataclasses.Field) -> str:
    if f.metadata.get("required"):
        return "**required**"
    if f.metadata.get("default_doc"):
        return f.metadata["default_doc"]
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return ""
    if dataclasses.is_dataclass(value):
        return "(section)"
    if value is None:
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple) and f.metadata.get("type_doc") == "mapping":
        return "`{}`"
    if isinstance(value, tuple):
        return "`[" + ", ".join(str(v) for v in value) + "]`" if value else "`[]`"
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    unit = f.metadata.get("unit")
    if isinstance(value, int) and unit in ("bytes", "bps", "ns"):
        return f"`{format_exact(value, unit)}`"
    return f"`{value}`"


def rows(cls: type = Profile, prefix: str = "", within: tuple[type, ...] = ()) -> Iterator[tuple[str, str, str, str]]:
    """(key path, type, default, description) for every schema key, depth first (a section nested in
    itself, as a job's ``workload``, is listed once, where it first appears)."""
    within = (*within, cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if "key" not in f.metadata:
            continue
        key = prefix + yaml_key(f)
        tp = hints[f.name]
        yield key, _type_name(tp, f), _default(f), f.metadata.get("doc", "")
        inner = _strip_optional(tp)
        if typing.get_origin(inner) is tuple and dataclasses.is_dataclass(typing.get_args(inner)[0]):
            yield from rows(typing.get_args(inner)[0], key + "[].", within)
        elif dataclasses.is_dataclass(inner) and inner not in within:
            yield from rows(inner, key + ".", within)


def render() -> str:
    """The Markdown block that goes between the README markers."""
    out = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, tp, default, doc in rows():
        out.append(f"| `{key}` | {tp} | {default} | {doc} |")
    out += ["", "Units:", ""]
    out += [f"- **{name}**: {doc}" for name, doc in UNIT_DOCS.items()]
    presets = " · ".join(knob_presets())
    out += ["", "Congestion-control knobs (`congestion_control.overrides`; defaults per preset, in the knob's unit, "
            f"at a {format_exact(int(KNOB_DEFAULT_LINE_RATE_BPS), 'bps')} line rate; — = not a knob of that preset):",
            "", f"| knob | unit | default ({presets}) | meaning |", "|---|---|---|---|"]
    aliases = {v: k for k, v in CC_KNOB_ALIASES.items()}
    for knob in CC_KNOBS.values():
        alias = f" (alias `{aliases[knob.name]}`)" if knob.name in aliases else ""
        defaults = " · ".join(knob_default(knob, p) for p in knob_presets())
        out.append(f"| `{knob.name}`{alias} | {_knob_unit(knob)} | {defaults} | {knob.doc} |")
    return "\n".join(out)


def update(readme: str) -> bool:
    """Rewrite the block between the markers of ``readme``; True if the file changed."""
    from pathlib import Path

    path = Path(readme)
    text = path.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    new = text[:start] + "\n" + render() + "\n" + text[end:]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":  # pragma: no cover
    import sys

    if sys.argv[1:2] == ["--update"]:
        print("updated" if update(sys.argv[2]) else "up to date")
    else:
        print(render())
