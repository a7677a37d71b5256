"""Reading profiles: YAML files, ``extends:``, ``matrix:``, overrides and precedence.

Theory of operation
-------------------
1. **Read** a YAML file into a plain mapping; every path-valued key (``workload.trace.prefix``,
   ``workload.trace.groups``, ``workload.schedule``) is made absolute relative to *that* file's folder
   (``pkg:<path>`` means a path inside the installed ``emulator`` package).
2. **Inherit**: ``extends:`` (a path or a list of paths, relative to the file) loads each parent the
   same way, recursively, and deep-merges: mappings merge key by key, anything else (lists included)
   is replaced, and ``null`` removes an inherited key (back to its default). Later parents win over
   earlier ones, the file itself over all of them. A file met again on the chain is a cycle: an error
   listing the chain. ``name`` is not inherited: it defaults to the leaf file's stem.
3. **Sweep**: ``matrix:`` maps dotted key paths to lists; the cartesian product (in the order written)
   yields one raw profile per combination, named ``base[key=value,...]`` with each key shortened to
   its shortest dotted suffix no other matrix key ends with and path values to their last component
   (``sweep[preset=paper,rate=10Gbps]``); if that makes two names equal, full keys and values are used.
4. **Override**, lowest to highest precedence: defaults < profile (incl. matrix) < environment
   ``EMULATOR_SET="a.b=1;c.d=2"`` < command line ``--set a.b=1``. Values are YAML-parsed
   (``--set fabric.ports.rate=10Gbps``, ``--set 'workload.collectives[0].group=[0,1]'``).
5. **Build and resolve**: :func:`emulator.schema.build` then
   :func:`emulator.config.resolve.resolve`. Any failure becomes one :class:`ConfigError` line:
   ``<file>: <key path>: <reason>``, with ``(from --set)``, ``(from EMULATOR_SET)`` or
   ``(from matrix)`` after the key when an override put the value there.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from emulator.config.model import Profile
from emulator.config.resolve import resolve
from emulator.errors import ConfigError
from emulator.schema import SchemaError, build

ENV_VAR = "EMULATOR_SET"
MAX_MATRIX = 10_000
#: keys whose values are file paths, resolved relative to the profile file that sets them
PATH_KEYS: tuple[tuple[str, ...], ...] = (
    ("workload", "trace", "prefix"), ("workload", "trace", "groups"), ("workload", "schedule"),
)
_SEGMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)((?:\[\d+\])*)")

Override = tuple[list[str | int], Any, str, str]  # (segments, value, dotted path, origin)


def package_dir() -> Path:
    """The installed ``emulator`` package folder (``pkg:`` paths start here)."""
    return Path(__file__).resolve().parent.parent


def _resolve_path(value: Any, base_dir: Path) -> Any:
    if not isinstance(value, str) or not value:
        return value
    if value.startswith("pkg:"):
        return str(package_dir() / value[4:].lstrip("/"))
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else (base_dir / p).resolve())


def resolve_paths(raw: dict[str, Any], base_dir: Path) -> None:
    """Make the path-valued keys of one raw mapping absolute (in place), also inside ``workload.jobs[i]``."""
    jobs = raw.get("workload", {}).get("jobs") if isinstance(raw.get("workload"), dict) else None
    for job in jobs if isinstance(jobs, list) else ():
        if isinstance(job, dict) and isinstance(job.get("workload"), dict):
            resolve_paths({"workload": job["workload"]}, base_dir)
    for keys in PATH_KEYS:
        node: Any = raw
        for k in keys[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict) and keys[-1] in node:
            node[keys[-1]] = _resolve_path(node[keys[-1]], base_dir)


def _read_yaml(path: Path, label: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{label}: no such profile file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{label}: cannot read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{label}: {where}not valid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: a profile is a mapping of keys, got a {type(data).__name__}")
    return data


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Mappings merge recursively; other values replace; ``None`` deletes the inherited key."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _load_chain(path: Path, label: str, stack: tuple[Path, ...]) -> dict[str, Any]:
    raw = _read_yaml(path, label)
    resolve_paths(raw, path.parent)
    parents = raw.pop("extends", None)
    if parents is None:
        return raw
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) and p for p in parents):
        raise ConfigError(f"{label}: extends: expected a path or a list of paths")
    merged: dict[str, Any] = {}
    for i, parent in enumerate(parents):
        key = "extends" if len(parents) == 1 else f"extends[{i}]"
        target = (path.parent / parent).resolve()
        if target in stack or target == path:
            chain = " → ".join(p.name for p in (*stack, path, target))
            raise ConfigError(f"{label}: {key}: cycle: {chain}")
        if not target.is_file():
            raise ConfigError(f"{label}: {key}: no such file {parent!r} (looked for {target})")
        parent_raw = _load_chain(target, str(target), (*stack, path))
        merged = deep_merge(merged, parent_raw)
    own_name = raw.get("name")
    merged = deep_merge(merged, raw)
    merged.pop("name", None)
    if own_name is not None:
        merged["name"] = own_name
    return merged


# ------------------------------------------------------------------------------------ overrides


def parse_key_path(text: str) -> list[str | int]:
    """``'workload.collectives[1].size'`` → ``['workload', 'collectives', 1, 'size']``."""
    out: list[str | int] = []
    for part in text.split("."):
        m = _SEGMENT.fullmatch(part)
        if not m:
            raise ValueError(f"{text!r} is not a key path like fabric.ports.rate or workload.collectives[0].size")
        out.append(m.group(1))
        out.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    return out


def parse_set(text: str, origin: str = "--set") -> Override:
    """``'fabric.ports.rate=10Gbps'`` → (segments, YAML-parsed value, dotted path, origin)."""
    key, sep, value_text = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"{origin} {text!r}: expected KEY=VALUE, e.g. fabric.ports.rate=10Gbps")
    try:
        segments = parse_key_path(key)
    except ValueError as exc:
        raise ConfigError(f"{origin} {text!r}: {exc}") from None
    try:
        value = yaml.safe_load(value_text) if value_text.strip() else ""
    except yaml.YAMLError:
        value = value_text
    return segments, value, key, origin


def env_overrides(env: Mapping[str, str]) -> list[Override]:
    """Overrides from ``EMULATOR_SET`` (``;`` or newlines between ``key=value`` items)."""
    text = env.get(ENV_VAR, "")
    return [parse_set(item.strip(), ENV_VAR) for item in re.split(r"[;\n]", text) if item.strip()]


def _dotted(segments: Sequence[str | int]) -> str:
    out = ""
    for s in segments:
        out = f"{out}[{s}]" if isinstance(s, int) else (f"{out}.{s}" if out else s)
    return out


def apply_override(raw: dict[str, Any], segments: Sequence[str | int], value: Any) -> None:
    """Set ``value`` at ``segments`` in ``raw``, creating mappings on the way (lists must exist)."""
    node: Any = raw
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        where = _dotted(segments[: i + 1])
        if isinstance(seg, int):
            if not isinstance(node, list):
                raise SchemaError(_dotted(segments[:i]), "is not a list")
            if seg >= len(node):
                raise SchemaError(where, f"index out of range (the list has {len(node)} items)")
        else:
            if not isinstance(node, dict):
                raise SchemaError(_dotted(segments[:i]), "is not a mapping")
            if not last and seg not in node:
                node[seg] = [] if isinstance(segments[i + 1], int) else {}
            if seg == "topology" and isinstance(node.get(seg), str) and not last:
                node[seg] = {"kind": node[seg]}  # expand the shorthand so a sub-key can be set
        if last:
            node[seg] = value
        else:
            node = node[seg]


def _format_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def _origin_of(path: str, overrides: Sequence[Override]) -> str | None:
    for _seg, _value, key, origin in reversed(overrides):
        if path == key or path.startswith(key + ".") or path.startswith(key + "["):
            return origin
    return None


# ------------------------------------------------------------------------------------ building


def _build(raw: dict[str, Any], label: str, profile_overrides: Sequence[Override], base_dir: Path,
           user_overrides: Sequence[Override]) -> Profile:
    """Apply overrides (matrix ones resolve paths against the file, user ones against the cwd), build, resolve."""
    overrides = [*profile_overrides, *user_overrides]
    try:
        for batch, where in ((profile_overrides, base_dir), (user_overrides, Path.cwd())):
            for segments, value, key, _origin in batch:
                try:
                    apply_override(raw, segments, copy.deepcopy(value))
                except SchemaError as exc:
                    raise SchemaError(key, f"{exc.path} {exc.reason}" if exc.path != key else exc.reason) from None
            resolve_paths(raw, where)  # only relative paths are touched; file paths are absolute already
        profile = build(Profile, raw)
        return resolve(profile)
    except SchemaError as exc:
        origin = _origin_of(exc.path, overrides)
        where_text = f"{exc.path} (from {origin})" if origin else exc.path
        raise ConfigError(f"{label}: {where_text}: {exc.reason}" if where_text else f"{label}: {exc.reason}") from None


def _expand(raw: dict[str, Any], label: str) -> list[tuple[str, list[Override]]]:
    """Matrix combinations as (name suffix, overrides); one empty combination without a matrix."""
    matrix = raw.pop("matrix", None)
    if matrix is None:
        return [("", [])]
    if not isinstance(matrix, dict) or not matrix:
        raise ConfigError(f"{label}: matrix: expected a mapping of key paths to lists of values")
    axes: list[list[Override]] = []
    total = 1
    for key, values in matrix.items():
        where = f"{label}: matrix.{key}"
        if not isinstance(key, str):
            raise ConfigError(f"{where}: keys must be dotted key paths")
        try:
            segments = parse_key_path(key)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if segments[0] in ("matrix", "extends", "name"):
            raise ConfigError(f"{where}: {segments[0]} cannot be swept")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}: expected a non-empty list of values")
        axes.append([(segments, v, key, "matrix") for v in values])
        total *= len(values)
    if total > MAX_MATRIX:
        raise ConfigError(f"{label}: matrix: {total} combinations (at most {MAX_MATRIX})")
    combos = [list(combo) for combo in itertools.product(*axes)]
    short = _short_keys([key for key, _ in matrix.items()])
    for shorten in (True, False):
        names = []
        for combo in combos:
            parts = (f"{short[key]}={_short_value(value)}" if shorten else f"{key}={_format_value(value)}"
                     for _s, value, key, _o in combo)
            names.append(f"[{','.join(parts)}]")
        if len(set(names)) == len(names):
            break
    return list(zip(names, combos, strict=True))


def _short_keys(keys: Sequence[str]) -> dict[str, str]:
    """Each matrix key by its shortest dotted suffix that no other key ends with (``fabric.ports.rate`` → ``rate``)."""
    out = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if not any(other != key and (other == tail or other.endswith("." + tail)) for other in keys):
                break
        out[key] = tail
    return out


def _short_value(value: Any) -> str:
    """A path value by its last component (``pkg:data/traces/.../all_reduce`` → ``all_reduce``)."""
    text = _format_value(value)
    return text.rstrip("/").rsplit("/", 1)[-1] if isinstance(value, str) and "/" in text.rstrip("/") else text


def _user_overrides(overrides: Iterable[str], env: Mapping[str, str] | None) -> list[Override]:
    env_items = env_overrides(os.environ if env is None else env)
    return [*env_items, *(parse_set(text) for text in overrides)]


def load_profiles(path: str | os.PathLike[str], overrides: Iterable[str] = (),
                  env: Mapping[str, str] | None = None) -> list[Profile]:
    """Every effective profile of a file: one per matrix combination (one without a matrix).

    ``overrides`` are ``key=value`` strings (``--set``); ``env`` defaults to ``os.environ``
    (pass ``{}`` to ignore ``EMULATOR_SET``).
    """
    p = Path(path)
    label = str(path)
    raw = _load_chain(p.resolve(), label, ())
    raw.setdefault("name", p.stem)
    user = _user_overrides(overrides, env)
    profiles = []
    for suffix, combo in _expand(raw, label):
        one = copy.deepcopy(raw)
        if suffix:
            one["name"] = f"{one['name']}{suffix}"
        profiles.append(replace(_build(one, label, combo, p.resolve().parent, user), source=str(p)))
    return profiles


def load_profile(path: str | os.PathLike[str], overrides: Iterable[str] = (),
                 env: Mapping[str, str] | None = None) -> Profile:
    """The one effective profile of a file; a matrix with several combinations is an error here."""
    profiles = load_profiles(path, overrides, env)
    if len(profiles) != 1:
        raise ConfigError(f"{path}: matrix: sweeps {len(profiles)} combinations; use load_profiles to run each")
    return profiles[0]


def profile_from_dict(data: Mapping[str, Any], source: str = "<dict>", base_dir: str | os.PathLike[str] | None = None,
                      overrides: Iterable[str] = ()) -> Profile:
    """Build and resolve a profile from plain data (e.g. :meth:`Profile.to_dict` output).

    Relative paths resolve against ``base_dir`` (default: the current directory). No ``extends``,
    no ``matrix`` and no environment here.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: a profile is a mapping of keys, got a {type(data).__name__}")
    raw = copy.deepcopy(dict(data))
    for key in ("extends", "matrix"):
        if key in raw:
            raise ConfigError(f"{source}: {key}: only profile files may use {key}")
    resolve_paths(raw, Path(base_dir) if base_dir is not None else Path.cwd())
    raw.setdefault("name", "profile")
    profile = _build(raw, source, [], Path.cwd(), [parse_set(text) for text in overrides])
    return replace(profile, source=source)
