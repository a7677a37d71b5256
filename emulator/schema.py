"""Schema machinery: typed fields, unit conversion, and dict → dataclass conversion with key paths.

Theory of operation
-------------------
The profile schema *is* the dataclass tree in :mod:`emulator.config.model`. Every field is declared
with :func:`opt`, whose metadata names the YAML key (``key``; attribute names carry units, e.g.
``rate_bps`` is written ``rate``), the unit kind (``bytes``, ``bps``, ``ns``, ``fraction``, ...),
allowed choices, bounds, a custom parser, and a one-line doc used for ``profiles/README.md``.

:func:`build` walks a plain mapping against a dataclass: it rejects unknown keys (with a did-you-mean
suggestion), converts each value by its unit kind, recurses into nested dataclasses and tuples of
dataclasses, and fills defaults. Every failure raises :class:`SchemaError` carrying the dotted key
path (``workload.collectives[1].size``) and a short reason; the loader turns it into one
:class:`~emulator.errors.ConfigError` line that also names the file (and ``--set`` when the key came
from an override). :func:`dump` is the inverse: canonical plain data (ints in bytes, bps, ns) that
:func:`build` reads back to an equal tree.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

from emulator.units import parse_duration_ns, parse_duration_us, parse_rate_bps, parse_size_bytes


class SchemaError(Exception):
    """A value failed validation; ``path`` is the dotted key path, ``reason`` the short cause."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


def join(path: str, key: str | int) -> str:
    """``join('a', 'b')`` → ``a.b``; ``join('a', 1)`` → ``a[1]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def suggest(word: str, known: typing.Iterable[str], *, list_known: bool = True) -> str:
    """`` (did you mean 'rate'?)``, else a list of the known keys (nothing when ``list_known`` is false:
    the message already lists them)."""
    known = sorted(known)
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known: {', '.join(known)})" if list_known else ""


def opt(
    default: Any = None,
    *,
    key: str | None = None,
    unit: str | None = None,
    doc: str = "",
    choices: tuple[Any, ...] | None = None,
    lo: float | None = None,
    hi: float | None = None,
    parse: Callable[[Any, str], Any] | None = None,
    required: bool = False,
    default_doc: str | None = None,
    dumper: Callable[[Any], Any] | None = None,
    type_doc: str | None = None,
) -> Any:
    """Declare a schema field (see module docstring); mutable defaults are copied per instance."""
    metadata = {
        "key": key, "unit": unit, "doc": doc, "choices": choices, "lo": lo, "hi": hi, "parse": parse,
        "required": required, "default_doc": default_doc, "dump": dumper,
        "type_doc": type_doc,
    }
    if dataclasses.is_dataclass(default) and not isinstance(default, type):
        return dataclasses.field(default_factory=lambda d=default: d, metadata=metadata)
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def yaml_key(f: dataclasses.Field) -> str:
    return f.metadata.get("key") or f.name


def schema_fields(cls: Any) -> list[dataclasses.Field]:
    """The fields declared with :func:`opt`; every field of a plain dataclass that declares none (its
    fields without a default are then required)."""
    fields = dataclasses.fields(cls)
    declared = [f for f in fields if "key" in f.metadata]
    return declared if declared else list(fields)


def _required(f: dataclasses.Field) -> bool:
    if "key" in f.metadata:
        return bool(f.metadata.get("required"))
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


# ---------------------------------------------------------------------------------------- scalars


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def to_int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SchemaError(path, f"expected an integer, got {_describe(value)}")
    if isinstance(value, float):
        if not value.is_integer():
            raise SchemaError(path, f"expected an integer, got {value!r}")
        value = int(value)
    return value


def to_float(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SchemaError(path, f"expected a number, got {_describe(value)}")
    if value != value or value in (float("inf"), float("-inf")):
        raise SchemaError(path, f"expected a finite number, got {value!r}")
    return float(value)


def to_fraction(value: Any, path: str) -> float:
    """A probability/ratio in [0, 1]: ``0.01``, ``'1%'`` or ``'1/256'``."""
    if isinstance(value, str):
        text = value.strip()
        try:
            if text.endswith("%"):
                number = float(text[:-1]) / 100.0
            elif "/" in text:
                number = float(Fraction(text.replace(" ", "")))
            else:
                number = float(text)
        except (ValueError, ZeroDivisionError):
            raise SchemaError(path, f"cannot read {value!r} as a fraction (write 0.01, '1%' or '1/256')") from None
    else:
        number = to_float(value, path)
    if not 0.0 <= number <= 1.0:
        raise SchemaError(path, f"must be between 0 and 1 (or 0% and 100%), got {value!r}")
    return number


def _unit_parser(fn: Callable[[Any], int], scale_down: int = 1) -> Callable[[Any, str], int]:
    def parse(value: Any, path: str) -> int:
        if value is None:
            raise SchemaError(path, "expected a value, got null")
        try:
            n = fn(value)
        except ValueError as exc:
            raise SchemaError(path, str(exc)) from None
        return round(n / scale_down) if scale_down != 1 else n

    return parse


def _mbps(value: Any, path: str) -> int:
    """Mb/s for firmware knobs: bare numbers are Mb/s, strings with units are converted."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise SchemaError(path, f"rate must not be negative: {value}")
        return round(value)
    return _unit_parser(parse_rate_bps, 10**6)(value, path)


def format_exact(value: int, unit: str) -> str:
    """Exact short form of a canonical value: 1048576 bytes → 1MiB, 25e9 bps → 25Gbps, 1000 ns → 1us."""
    tables = {
        "bytes": (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)),
        "bps": (("Tbps", 10**12), ("Gbps", 10**9), ("Mbps", 10**6), ("Kbps", 10**3)),
        "ns": (("s", 10**9), ("ms", 10**6), ("us", 10**3)),
    }
    for suffix, factor in tables.get(unit, ()):
        if value and value % factor == 0:
            return f"{value // factor}{suffix}"
    return {"bytes": f"{value}B", "bps": f"{value}bps", "ns": f"{value}ns"}.get(unit, str(value))


UNIT_PARSERS: dict[str, Callable[[Any, str], Any]] = {
    "bytes": _unit_parser(parse_size_bytes),
    "bps": _unit_parser(parse_rate_bps),
    "ns": _unit_parser(parse_duration_ns),
    "us": _unit_parser(parse_duration_us),
    "mbps": _mbps,
    "fraction": to_fraction,
}

#: how each unit kind is documented in profiles/README.md
UNIT_DOCS: dict[str, str] = {
    "bytes": "size (`4096`, `4KiB`, `16MiB`, `1MB`); canonical: int bytes",
    "bps": "rate (`25Gbps`, `400Gb/s`, `1e9`); canonical: int bits/s",
    "ns": "duration (`10us`, `5ms`, `1.5s`; bare numbers are ns); canonical: int ns",
    "us": "duration in µs (bare numbers are µs; `2ms` → 2000)",
    "mbps": "rate in Mb/s (bare numbers are Mb/s; `5Gbps` → 5000)",
    "fraction": "fraction in [0, 1] (`0.01`, `1%`, `1/256`)",
}


def _check_bounds(value: Any, f: dataclasses.Field, path: str) -> None:
    lo, hi = f.metadata.get("lo"), f.metadata.get("hi")
    if lo is not None and value < lo:
        raise SchemaError(path, f"must be at least {lo}, got {value}")
    if hi is not None and value > hi:
        raise SchemaError(path, f"must be at most {hi}, got {value}")


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
        if len(args) < len(typing.get_args(tp)):
            return typing.Union[tuple(args)], True  # noqa: UP007 - built from a runtime tuple
    return tp, False


def _is_number(tp: Any) -> bool:
    """``int | float`` (a JSON number that keeps its kind)."""
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and set(typing.get_args(tp)) == {int, float}


def _is_mapping(tp: Any) -> bool:
    return typing.get_origin(tp) in (dict, Mapping)


def convert(value: Any, tp: Any, f: dataclasses.Field | None, path: str) -> Any:
    """Convert one YAML value to the field's Python type (value is not None here)."""
    md = f.metadata if f is not None else {}
    if md.get("parse") is not None:
        return md["parse"](value, path)
    tp, _ = _strip_optional(tp)
    unit = md.get("unit")
    if unit is not None:
        out = UNIT_PARSERS[unit](value, path)
    elif tp is Any:
        out = value
    elif _is_number(tp):
        out = value if isinstance(value, int) and not isinstance(value, bool) else to_float(value, path)
    elif hasattr(tp, "schema_load"):
        out = tp.schema_load(value, path)
    elif _is_mapping(tp):
        if not isinstance(value, Mapping):
            raise SchemaError(path, f"expected a mapping, got {_describe(value)}")
        item_tp, nullable = _strip_optional(typing.get_args(tp)[1])
        out = {str(k): None if v is None and nullable else convert_item(v, item_tp, join(path, str(k)))
               for k, v in value.items()}
    elif dataclasses.is_dataclass(tp):
        out = build(tp, value, path)
    elif typing.get_origin(tp) is tuple:
        (item_tp, *_rest) = typing.get_args(tp)
        if not isinstance(value, list):
            raise SchemaError(path, f"expected a list, got {_describe(value)}")
        out = tuple(convert_item(v, item_tp, join(path, i)) for i, v in enumerate(value))
    elif tp is bool:
        if not isinstance(value, bool):
            raise SchemaError(path, f"expected true or false, got {_describe(value)}")
        out = value
    elif tp is int:
        out = to_int(value, path)
    elif tp is float:
        out = to_float(value, path)
    elif tp is str:
        if not isinstance(value, str):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = str(value)
            else:
                raise SchemaError(path, f"expected a string, got {_describe(value)}")
        out = value
    else:  # pragma: no cover - schema bug
        raise TypeError(f"unsupported schema type {tp!r} at {path}")
    choices = md.get("choices")
    if choices is not None and out not in choices:
        raise SchemaError(path, f"{out!r} is not one of {', '.join(map(str, choices))}"
                          + (suggest(out, map(str, choices), list_known=False) if isinstance(out, str) else ""))
    if isinstance(out, (int, float)) and not isinstance(out, bool):
        _check_bounds(out, f, path) if f is not None else None
    return out


def convert_item(value: Any, tp: Any, path: str) -> Any:
    if value is None:
        raise SchemaError(path, "expected a value, got null")
    return convert(value, tp, None, path)


def build(cls: type, data: Any, path: str = "") -> Any:
    """Build dataclass ``cls`` from a mapping, checking keys, converting values, filling defaults."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise SchemaError(path, f"expected a mapping, got {_describe(data)}")
    fields = [f for f in schema_fields(cls) if f.init]
    by_key = {yaml_key(f): f for f in fields}
    extra_key = getattr(cls, "EXTRA_KEY", None)
    extra: dict[str, Any] = {}
    for key in data:
        if not isinstance(key, str):
            raise SchemaError(join(path, str(key)), f"keys must be strings, got {_describe(key)}")
        if extra_key is not None and (key not in by_key or key == extra_key):
            extra[key] = data[key]
        elif key not in by_key:
            raise SchemaError(join(path, key), "unknown key" + suggest(key, [*by_key, *getattr(cls, "LOADER_KEYS", ())]))
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {extra_key: extra} if extra_key is not None else {}
    for key, f in by_key.items():
        if key == extra_key:
            continue
        sub = join(path, key)
        value = data.get(key)
        if value is None:
            if _required(f) and (key not in data or "key" in f.metadata):
                raise SchemaError(sub, "required")
            if key in data and "key" not in f.metadata:
                kwargs[f.name] = None
            continue
        kwargs[f.name] = convert(value, hints[f.name], f, sub)
    obj = cls(**kwargs)
    check = getattr(obj, "check", None)
    if check is not None:
        check(path)
    return obj


def dump(obj: Any) -> Any:
    """Canonical plain data (dict/list/str/int/float/bool) under YAML keys; ``None`` fields are left out."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        custom = getattr(obj, "dump", None)
        if custom is not None:
            return custom()
        out: dict[str, Any] = {}
        nulls = getattr(obj, "DUMP_NULLS", False) or not any("key" in f.metadata for f in dataclasses.fields(obj))
        extra_key = getattr(obj, "EXTRA_KEY", None)
        for f in schema_fields(obj):
            value = getattr(obj, f.name)
            if f.name == extra_key:
                out.update((str(k), dump(v)) for k, v in value.items())
                continue
            if value is None:
                if nulls:
                    out[yaml_key(f)] = None
                continue
            dumper = f.metadata.get("dump")
            out[yaml_key(f)] = dumper(value) if dumper is not None else dump(value)
        return out
    if isinstance(obj, (tuple, list)):
        return [dump(v) for v in obj]
    if isinstance(obj, Mapping):
        return {str(k): dump(v) for k, v in obj.items()}
    return obj


# ------------------------------------------------------------------------------------ metric paths


def _path_keys(tp: Any) -> dict[str, Any] | None:
    """The keys a declared type has and the type under each (None: not a keyed type)."""
    if hasattr(tp, "SCHEMA_KEYS"):
        return dict(tp.SCHEMA_KEYS)
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        hidden = {getattr(tp, "EXTRA_KEY", None), *getattr(tp, "PATH_HIDDEN", ())}
        return {**{yaml_key(f): hints[f.name] for f in schema_fields(tp) if f.name not in hidden}, **getattr(tp, "PATH_KEYS", {})}
    return None


def path_error(tp: Any, parts: list[str], done: tuple[str, ...] = (), wildcard: bool = False) -> str | None:
    """Why the dotted path ``parts`` names no value under declared type ``tp`` (one line), or None.

    Mapping keys may hold dots (one or more segments are tried); a tuple takes an integer index or ends
    the path (its length); ``Any`` accepts the rest; ``*`` (with ``wildcard``) matches any mapping key."""
    tp, _ = _strip_optional(tp)
    if not parts:
        keys = _path_keys(tp)
        if keys is None:
            return None
        return f"{'.'.join(done)!r} is a group of values, not one; keys there: {', '.join(sorted(keys)[:12])}"
    if tp is Any:
        return None
    here = f"under {'.'.join(done)!r}" if done else "at the top level"
    head = parts[0]
    if _is_mapping(tp):
        item = typing.get_args(tp)[1]
        first = None
        for j in range(1, len(parts) + 1):
            if j > 1 and (wildcard and head == "*"):
                break
            why = path_error(item, parts[j:], (*done, ".".join(parts[:j])), wildcard)
            if why is None:
                return None
            first = first or why
        return first
    if typing.get_origin(tp) is tuple:
        if not head.isdigit():
            return f"no key {head!r} {here} (a list: an index or nothing)"
        return path_error(typing.get_args(tp)[0], parts[1:], (*done, head), wildcard)
    keys = _path_keys(tp)
    if keys is None:
        return f"{'.'.join(done)!r} is a value, it has no key {head!r}"
    for j in range(len(parts), 0, -1):  # keys may hold dots themselves
        key = ".".join(parts[:j])
        if key in keys:
            return path_error(keys[key], parts[j:], (*done, key), wildcard)
    if getattr(tp, "PATH_OPEN", False):
        return None  # the class keeps keys it does not declare (EXTRA_KEY): any key may be there
    close = difflib.get_close_matches(head, sorted(keys), n=1, cutoff=0.6)
    hint = f"; did you mean {'.'.join([*done, close[0], *parts[1:]])!r}?" if close else \
        f"; keys there: {', '.join(sorted(keys)[:12])}" + (f" ... ({len(keys)} keys)" if len(keys) > 12 else "")
    return f"no key {head!r} {here}{hint}"
