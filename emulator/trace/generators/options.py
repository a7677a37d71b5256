"""Generator options: each kind's options dataclass is the one schema of its options.

A field declared with :func:`option` is an option: its name (``size``, ``group_size``; the CLI flag is
``--size``, ``--group-size``), its kind (how text becomes a value), its help line and, for a
``choice``, the allowed words. ``emulator generate KIND`` builds its argparse options from these
fields and the profile's ``workload.generate.options`` is checked against the same names; both turn
given values into an options dataclass through :func:`make_options`, so the two front ends cannot
differ. Fields without :func:`option` metadata (``ranks``) are filled by the caller.

A generator that rejects its options raises :class:`GeneratorError`, whose message names options
as :class:`Ref` parts: rendered as ``--flag`` on the command line and as profile keys by the profile
path, with no text parsed back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from emulator.errors import ConfigError
from emulator.trace.model import MAX_COMM_SIZE_BYTES, CollectiveType, collective_from_name
from emulator.units import parse_duration_us, parse_size_bytes

#: option kinds: int, float, str and choice are plain (argparse converts them on the command line); size,
#: sizes (a comma list), duration (bare numbers are µs) and collectives (a comma list) are parsed here
OPTION_KINDS = ("int", "float", "str", "choice", "size", "sizes", "duration", "collectives")
PLAIN_KINDS = frozenset({"int", "float", "str", "choice"})


@dataclasses.dataclass(frozen=True, slots=True)
class Ref:
    """An option named inside an error message."""

    name: str


def cli_flag(name: str) -> str:
    """``group_size`` → ``--group-size``."""
    return "--" + name.replace("_", "-")


class GeneratorError(ConfigError):
    """A generator rejected its options.

    ``parts`` is the message with every option named as a :class:`Ref`; ``option`` is the one option
    the message is about, if any (shown before it). ``str()`` speaks in command-line flags;
    :meth:`detail` renders the parts with any naming function.
    """

    def __init__(self, *parts: str | Ref, option: str | None = None) -> None:
        self.parts = parts
        self.option = option
        text = self.detail(cli_flag)
        super().__init__(f"{cli_flag(option)}: {text}" if option else text)

    def detail(self, name_of: Callable[[str], str]) -> str:
        """The message without the option prefix, each :class:`Ref` written as ``name_of(name)``."""
        return "".join(name_of(p.name) if isinstance(p, Ref) else p for p in self.parts)


def option(default: Any, *, kind: str, help: str, name: str | None = None,  # noqa: A002 - argparse's word
           choices: tuple[str, ...] = ()) -> Any:
    """A dataclass field that is a generator option (``name`` defaults to the field name)."""
    if kind not in OPTION_KINDS:
        raise ValueError(f"unknown option kind {kind!r}")
    return dataclasses.field(default=default, metadata={"option": (name, kind, help, choices)})


def iterations_option() -> Any:
    """The ``iterations`` option every generator has."""
    return option(1, kind="int", help="repetitions of the pattern (default 1)")


@dataclasses.dataclass(frozen=True, slots=True)
class OptionSpec:
    """One option of a generator, read from its dataclass field."""

    field: str
    name: str
    kind: str
    help: str
    choices: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        return cli_flag(self.name)

    def parse(self, value: object) -> Any:
        """The field value of ``value`` (command-line text, or a plain kind already converted)."""
        if self.kind == "int":
            return value if type(value) is int else _plain(self.name, int, value)
        if self.kind == "float":
            return value if type(value) is float else _plain(self.name, float, value)
        text = str(value)
        if self.kind == "str":
            return text
        if self.kind == "choice":
            if text not in self.choices:
                raise GeneratorError(f"invalid choice: {text!r} (choose from {', '.join(map(repr, self.choices))})",
                                     option=self.name)
            return text
        if self.kind == "size":
            return parse_size(self.name, text)
        if self.kind == "sizes":
            return tuple(parse_size(self.name, part) for part in text.split(",") if part.strip())
        if self.kind == "duration":
            try:
                return parse_duration_us(text)
            except ValueError as exc:
                raise GeneratorError(str(exc), option=self.name) from None
        return parse_collectives(text)


def _plain(name: str, convert: type, value: object) -> Any:
    try:
        return convert(str(value))
    except ValueError:
        raise GeneratorError(f"invalid {convert.__name__} value: {str(value)!r}", option=name) from None


def parse_size(name: str, text: str) -> int:
    """A size with units (``16MiB``) of at most 2^53 bytes."""
    try:
        size = parse_size_bytes(text)
    except ValueError as exc:
        raise GeneratorError(str(exc), option=name) from None
    if size > MAX_COMM_SIZE_BYTES:
        raise GeneratorError(f"{text} is more than 2^53 bytes (8 PiB), the largest size a run can hold", option=name)
    return size


def parse_collectives(text: str) -> tuple[CollectiveType, ...]:
    """``"all_reduce,ALL_TO_ALL"`` → collective types; a GeneratorError naming the bad entry."""
    out: list[CollectiveType] = []
    for raw in text.split(","):
        if not raw.strip():
            continue
        ctype = collective_from_name(raw)
        if ctype is None:
            known = ", ".join(c.name.lower() for c in CollectiveType)
            raise GeneratorError(f"unknown collective {raw.strip()!r} (known: {known})", option="collective")
        out.append(ctype)
    if not out:
        raise GeneratorError("no collective given", option="collective")
    return tuple(out)


def option_specs(options_type: type) -> tuple[OptionSpec, ...]:
    """The options of a generator's options dataclass, in declaration order."""
    out = []
    for f in dataclasses.fields(options_type):
        if "option" in f.metadata:
            name, kind, help_text, choices = f.metadata["option"]
            out.append(OptionSpec(f.name, name or f.name, kind, help_text, choices))
    return tuple(out)


def option_text(value: object) -> str:
    """The command-line text of a profile value: a list becomes a comma list."""
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def require_positive(name: str, value: int) -> int:
    if value < 1:
        raise GeneratorError(Ref(name), f" must be at least 1, got {value}")
    return value


#: ``(ranks, values) → values``: fills what the given options and ``ranks`` imply (field names as keys)
Resolve = Callable[[int | None, dict[str, Any]], dict[str, Any]]


def make_options(options_type: type, ranks: int | None, given: Mapping[str, object], *,
                 resolve: Resolve | None = None, kind: str = "") -> Any:
    """The options dataclass from the given options (by option name; absent ones keep their defaults).

    Plain kinds are converted first, then ``resolve`` (default: ``ranks`` is required and set as the
    ``ranks`` field), then the parsed kinds, in declaration order.
    """
    specs = {s.name: s for s in option_specs(options_type)}
    unknown = [name for name in given if name not in specs]
    if unknown:
        raise GeneratorError(f"unknown option {unknown[0]!r} (known: {', '.join(specs)})")
    values: dict[str, Any] = {}
    for plain in (True, False):
        if not plain:
            values = resolve(ranks, values) if resolve is not None else _with_ranks(kind, ranks, values)
        for spec in specs.values():
            if (spec.kind in PLAIN_KINDS) == plain and spec.name in given:
                values[spec.field] = spec.parse(given[spec.name])
    return options_type(**values)


def _with_ranks(kind: str, ranks: int | None, values: dict[str, Any]) -> dict[str, Any]:
    if ranks is None:
        raise GeneratorError(f"generate {kind}: ", Ref("ranks"), " is required")
    return {"ranks": require_positive("ranks", ranks), **values}
