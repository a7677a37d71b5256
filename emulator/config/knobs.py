"""Congestion-control knob names a profile may override, with their units.

Two spellings exist (``../shared/docs/dcqcn.md``): the ConnectX firmware names of §5.1 (kept exactly,
in snake_case, in their **native** units: µs, Mb/s, 1/1024 fixed point — as in sysfs
``/sys/class/net/<if>/ecn/roce_rp/<p>``), and the paper form of §4 (``g``, ``alpha_timer`` = K, ...)
in canonical units (ns, bit/s, bytes). Paper letters (``K``, ``T``, ``B``, ``F``, ``R_AI``, ``R_HAI``,
``N``) are accepted as aliases and stored under their long names. The pacing module reads the same
names; :data:`CC_KNOBS` is the single list both sides agree on.

A value may carry a unit (``dce_tcp_rtt: 2us`` → 2, ``rpg_ai_rate: 5Mbps`` → 5,
``alpha_timer: 55us`` → 55000); the stored value is always in the knob's unit below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulator.config.schema import UNIT_PARSERS, SchemaError, join, suggest, to_float, to_int


@dataclass(frozen=True, slots=True)
class Knob:
    """One overridable knob: ``unit`` is the conversion kind, ``doc`` what it means."""

    name: str
    unit: str  # int | bool | fraction | us | mbps | ns | bps | bytes
    doc: str
    lo: float | None = None
    hi: float | None = None


CC_KNOBS: dict[str, Knob] = {k.name: k for k in (
    # ConnectX firmware form (dcqcn.md §5.1), native units
    Knob("dce_tcp_g", "int", "α gain, 1/1024 fixed point (1019 ⇒ g = 5/1024)", 0, 1024),
    Knob("dce_tcp_rtt", "us", "α update period, µs"),
    Knob("initial_alpha_value", "int", "α on the first CNP, /1024", 0, 1024),
    Knob("rate_to_set_on_first_cnp", "mbps", "rate on the first CNP, Mb/s (0 = keep current)"),
    Knob("rpg_min_dec_fac", "int", "maximum cut per event, % (100 = never cut)", 0, 100),
    Knob("rpg_min_rate", "mbps", "minimum rate, Mb/s"),
    Knob("rpg_gd", "int", "α → cut shift (11 ⇒ cut R·α/2)", 0, 31),
    Knob("rate_reduce_monitor_period", "us", "at most one cut per period, µs"),
    Knob("clamp_tgt_rate", "bool", "always set the target rate to the current rate on a cut"),
    Knob("clamp_tgt_rate_after_time_inc", "bool", "clamp the target rate if a timer increase happened"),
    Knob("rpg_time_reset", "us", "rate-increase timer period, µs"),
    Knob("rpg_byte_reset", "int", "byte-counter period, in firmware units (≈64 B each)", 0),
    Knob("rpg_threshold", "int", "F: increase events before additive increase", 0),
    Knob("rpg_max_rate", "mbps", "maximum rate, Mb/s (0 = line rate)"),
    Knob("rpg_ai_rate", "mbps", "additive-increase step, Mb/s"),
    Knob("rpg_hai_rate", "mbps", "hyper-increase step, Mb/s"),
    Knob("min_time_between_cnps", "us", "NP: at most one CNP per QP per this many µs"),
    # paper form (dcqcn.md §4), canonical units
    Knob("g", "fraction", "α gain g (e.g. 1/256)"),
    Knob("alpha_timer", "ns", "K: α decays after this long without a CNP"),
    Knob("increase_timer", "ns", "T: rate-increase timer period"),
    Knob("byte_counter", "bytes", "B: a rate-increase event every B bytes sent"),
    Knob("fast_recovery_steps", "int", "F: fast-recovery steps before additive increase", 0),
    Knob("rate_ai", "bps", "R_AI: additive-increase step"),
    Knob("rate_hai", "bps", "R_HAI: hyper-increase step"),
    Knob("min_rate", "bps", "rate floor"),
    Knob("max_rate", "bps", "rate ceiling (0 = line rate)"),
    Knob("cnp_interval", "ns", "N: NP sends at most one CNP per QP per interval"),
)}

#: paper letters → long names
CC_KNOB_ALIASES: dict[str, str] = {
    "K": "alpha_timer", "T": "increase_timer", "B": "byte_counter", "F": "fast_recovery_steps",
    "R_AI": "rate_ai", "R_HAI": "rate_hai", "N": "cnp_interval",
}


def parse_knob(name: str, value: Any, path: str) -> int | float | bool:
    """Convert one override value to its knob's unit (``path`` is the key path of the value)."""
    knob = CC_KNOBS[name]
    if value is None:
        raise SchemaError(path, "expected a value, got null")
    if knob.unit == "bool":
        if not isinstance(value, bool):
            raise SchemaError(path, f"expected true or false, got {type(value).__name__} {value!r}")
        return value
    if knob.unit == "int":
        out: int | float = to_int(value, path)
    elif knob.unit == "float":
        out = to_float(value, path)
    else:
        out = UNIT_PARSERS[knob.unit](value, path)
    if knob.lo is not None and out < knob.lo:
        raise SchemaError(path, f"must be at least {knob.lo}, got {out}")
    if knob.hi is not None and out > knob.hi:
        raise SchemaError(path, f"must be at most {knob.hi}, got {out}")
    return out


def parse_overrides(value: Any, path: str) -> tuple[tuple[str, int | float | bool], ...]:
    """``{rpg_ai_rate: 10, K: 55us}`` → sorted ``(name, value)`` pairs; unknown names are errors."""
    if not isinstance(value, dict):
        raise SchemaError(path, f"expected a mapping of knob names to values, got {type(value).__name__}")
    out: dict[str, int | float | bool] = {}
    for raw_name, raw_value in value.items():
        name = CC_KNOB_ALIASES.get(str(raw_name), str(raw_name))
        sub = join(path, str(raw_name))
        if name not in CC_KNOBS:
            raise SchemaError(sub, "unknown congestion-control knob" + suggest(str(raw_name), CC_KNOBS))
        if name in out:
            raise SchemaError(sub, f"given twice (as {name!r} and an alias)")
        out[name] = parse_knob(name, raw_value, sub)
    return tuple(sorted(out.items()))
