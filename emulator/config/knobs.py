"""Congestion-control knob names a profile may override, with their units.

Two spellings exist (``docs/dcqcn.md``): the ConnectX firmware names of §5.1 (kept exactly,
in snake_case, in their **native** units: µs, Mb/s, 1/1024 fixed point — as in sysfs
``/sys/class/net/<if>/ecn/roce_rp/<p>``), and the paper form of §4 (``g``, ``alpha_timer`` = K, ...)
in canonical units (ns, bit/s, bytes). Paper letters (``K``, ``T``, ``B``, ``F``, ``R_AI``, ``R_HAI``,
``N``) are accepted as aliases and stored under their long names. The pacing module reads the same
names; :data:`CC_KNOBS` is the single list both sides agree on.

A value may carry a unit (``dce_tcp_rtt: 2us`` → 2, ``rpg_ai_rate: 5Mbps`` → 5,
``alpha_timer: 55us`` → 55000); the stored value is always in the knob's unit below. A ``choice`` knob
(``alpha_rounding``) takes one of its listed words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulator.pacing.params import ALPHA_ROUNDINGS
from emulator.pacing.registry import controller_names, controller_spec, dcqcn_presets
from emulator.schema import UNIT_PARSERS, SchemaError, join, suggest, to_float, to_int


@dataclass(frozen=True, slots=True)
class Knob:
    """One overridable knob: ``unit`` is the conversion kind, ``doc`` what it means.

    ``paper``/``firmware``/``np`` name the field of :mod:`emulator.pacing`'s parameter dataclass the
    knob sets in that form, with the factor from this knob's unit to that field's unit; ``None`` means
    the form has no such knob (an override of it is an error for presets of that form).
    """

    name: str
    unit: str  # int | bool | choice | fraction | us | mbps | ns | bps | bytes
    doc: str
    lo: float | None = None
    hi: float | None = None
    paper: tuple[str, float] | None = None
    firmware: tuple[str, float] | None = None
    np: tuple[str, float] | None = None
    choices: tuple[str, ...] = ()  # the allowed values of a ``choice`` knob


def _fw(name: str, unit: str, doc: str, field: str, lo: float | None = None, hi: float | None = None) -> Knob:
    return Knob(name, unit, doc, lo, hi, firmware=(field, 1))


_NS_TO_US = 1e-3
_BPS_TO_MBPS = 1e-6

CC_KNOBS: dict[str, Knob] = {k.name: k for k in (
    # ConnectX firmware form (docs/dcqcn.md §5.1), native units
    _fw("dce_tcp_g", "int", "α gain, 1/1024 fixed point (1019 ⇒ g = 5/1024)", "dce_tcp_g", 0, 1023),
    _fw("dce_tcp_rtt", "us", "α update period, µs", "dce_tcp_rtt_us"),
    Knob("alpha_rounding", "choice", "α after each update: exact (a real number), floor or nearest 1/1024 "
         "(ConnectX keeps α in 1/1024 fixed point; the rounding is not documented)",
         firmware=("alpha_rounding", 1), choices=ALPHA_ROUNDINGS),
    _fw("initial_alpha_value", "int", "α on the first CNP, /1024", "initial_alpha_value", 0, 1024),
    _fw("rate_to_set_on_first_cnp", "mbps", "rate on the first CNP, Mb/s (0 = keep current)",
        "rate_to_set_on_first_cnp_mbps"),
    _fw("rpg_min_dec_fac", "int", "maximum cut per event, % (100 = never cut)", "rpg_min_dec_fac_pct", 0, 100),
    _fw("rpg_min_rate", "mbps", "minimum rate, Mb/s", "rpg_min_rate_mbps"),
    _fw("rpg_gd", "int", "α → cut shift (11 ⇒ cut R·α/2)", "rpg_gd", 0, 31),
    _fw("rate_reduce_monitor_period", "us", "at most one cut per period, µs", "rate_reduce_monitor_period_us"),
    _fw("clamp_tgt_rate", "bool", "always set the target rate to the current rate on a cut", "clamp_tgt_rate"),
    _fw("clamp_tgt_rate_after_time_inc", "bool", "clamp the target rate if a timer increase happened",
        "clamp_tgt_rate_after_time_inc"),
    _fw("rpg_time_reset", "us", "rate-increase timer period, µs", "rpg_time_reset_us"),
    _fw("rpg_byte_reset", "int", "byte-counter period, in firmware units (≈64 B each; 0 = off)", "rpg_byte_reset", 0),
    _fw("rpg_threshold", "int", "F: increase events before additive increase", "rpg_threshold", 0),
    _fw("rpg_max_rate", "mbps", "maximum rate, Mb/s (0 = line rate)", "rpg_max_rate_mbps"),
    _fw("rpg_ai_rate", "mbps", "additive-increase step, Mb/s", "rpg_ai_rate_mbps"),
    _fw("rpg_hai_rate", "mbps", "hyper-increase step, Mb/s", "rpg_hai_rate_mbps"),
    Knob("min_time_between_cnps", "us", "NP: at most one CNP per QP per this many µs",
         np=("min_time_between_cnps_ns", 1000)),
    # paper form (docs/dcqcn.md §4), canonical units
    Knob("g", "fraction", "α gain g (e.g. 1/256); paper presets only", paper=("g", 1)),
    Knob("alpha_timer", "ns", "K: α decays after this long without a CNP; paper presets only",
         paper=("alpha_timer_us", _NS_TO_US)),
    Knob("increase_timer", "ns", "T: rate-increase timer period (firmware: rpg_time_reset)",
         paper=("rate_increase_timer_us", _NS_TO_US), firmware=("rpg_time_reset_us", _NS_TO_US)),
    Knob("byte_counter", "bytes", "B: a rate-increase event every B bytes sent (0 = off); paper presets only",
         paper=("byte_counter_bytes", 1)),
    Knob("fast_recovery_steps", "int", "F: fast-recovery steps before additive increase (firmware: rpg_threshold)",
         0, paper=("fast_recovery_steps", 1), firmware=("rpg_threshold", 1)),
    Knob("rate_ai", "bps", "R_AI: additive-increase step", paper=("rate_ai_mbps", _BPS_TO_MBPS),
         firmware=("rpg_ai_rate_mbps", _BPS_TO_MBPS)),
    Knob("rate_hai", "bps", "R_HAI: hyper-increase step", paper=("rate_hai_mbps", _BPS_TO_MBPS),
         firmware=("rpg_hai_rate_mbps", _BPS_TO_MBPS)),
    Knob("min_rate", "bps", "rate floor", paper=("min_rate_mbps", _BPS_TO_MBPS),
         firmware=("rpg_min_rate_mbps", _BPS_TO_MBPS)),
    Knob("max_rate", "bps", "rate ceiling (0 = line rate)", paper=("max_rate_mbps", _BPS_TO_MBPS),
         firmware=("rpg_max_rate_mbps", _BPS_TO_MBPS)),
    Knob("cnp_interval", "ns", "N: NP sends at most one CNP per QP per interval",
         np=("min_time_between_cnps_ns", 1)),
)}

#: paper letters → long names
CC_KNOB_ALIASES: dict[str, str] = {
    "K": "alpha_timer", "T": "increase_timer", "B": "byte_counter", "F": "fast_recovery_steps",
    "R_AI": "rate_ai", "R_HAI": "rate_hai", "N": "cnp_interval",
}


def parse_knob(name: str, value: Any, path: str) -> int | float | bool | str:
    """Convert one override value to its knob's unit (``path`` is the key path of the value)."""
    knob = CC_KNOBS[name]
    if value is None:
        raise SchemaError(path, "expected a value, got null")
    if knob.unit == "bool":
        if not isinstance(value, bool):
            raise SchemaError(path, f"expected true or false, got {type(value).__name__} {value!r}")
        return value
    if knob.unit == "choice":
        if value not in knob.choices:
            raise SchemaError(path, f"{value!r} is not one of {', '.join(knob.choices)}"
                              + (suggest(value, knob.choices, list_known=False) if isinstance(value, str) else ""))
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


def parse_overrides(value: Any, path: str) -> tuple[tuple[str, int | float | bool | str], ...]:
    """``{rpg_ai_rate: 10, K: 55us}`` → sorted ``(name, value)`` pairs; unknown names are errors."""
    if not isinstance(value, dict):
        raise SchemaError(path, f"expected a mapping of knob names to values, got {type(value).__name__}")
    out: dict[str, int | float | bool | str] = {}
    for raw_name, raw_value in value.items():
        name = CC_KNOB_ALIASES.get(str(raw_name), str(raw_name))
        sub = join(path, str(raw_name))
        if name not in CC_KNOBS:
            raise SchemaError(sub, "unknown congestion-control knob" + suggest(str(raw_name), CC_KNOBS))
        if name in out:
            raise SchemaError(sub, f"given twice (as {name!r} and an alias)")
        out[name] = parse_knob(name, raw_value, sub)
    return tuple(sorted(out.items()))


def preset_form(preset: str) -> str:
    """The DCQCN form (``paper`` or ``firmware``) of a registered DCQCN preset."""
    form = controller_spec(preset).dcqcn_form
    if form is None:
        raise SchemaError("congestion_control.preset", f"preset {preset} has no DCQCN knobs")
    return form


def knob_presets() -> tuple[str, ...]:
    """The presets the knob table covers: every registered controller with DCQCN parameters."""
    return dcqcn_presets()


def rate_presets() -> tuple[str, ...]:
    """Presets that take ``congestion_control.rate`` (their parameters have a ``rate_bps`` knob)."""
    return tuple(n for n in controller_names() if "rate_bps" in controller_spec(n).knob_names())


def pacing_kwargs(preset: str, overrides: tuple[tuple[str, Any], ...], path: str = "congestion_control.overrides",
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Translate profile overrides into keyword overrides for :mod:`emulator.pacing`.

    Returns ``(rp, np)``: ``rp`` for ``emulator.pacing.get_params(preset, line_rate_bps, **rp)`` and
    ``np`` for ``dataclasses.replace(np_params(preset), **np)``. Raises :class:`SchemaError` for a knob
    the preset's form does not have, or two knobs that set the same field.
    """
    form = controller_spec(preset).dcqcn_form
    rp: dict[str, Any] = {}
    np_: dict[str, Any] = {}
    set_by: dict[str, str] = {}
    for name, value in overrides:
        knob = CC_KNOBS[name]
        sub = join(path, name)
        if form is None:
            raise SchemaError(sub, f"preset {preset} has no DCQCN knobs")
        target = knob.np or (knob.paper if form == "paper" else knob.firmware)
        if target is None:
            raise SchemaError(sub, f"not a knob of the {form}-form preset {preset} (its knobs: the knob table of "
                                   "profiles/README.md; overrides inherited for another preset are dropped with "
                                   "congestion_control.overrides: null)")
        field_name, factor = target
        if field_name in set_by:
            raise SchemaError(sub, f"sets the same knob as {set_by[field_name]!r}")
        set_by[field_name] = name
        if isinstance(value, (int, float)) and not isinstance(value, bool) and factor != 1:
            value = value * factor
            if knob.np is not None:
                value = round(value)
        (np_ if knob.np is not None else rp)[field_name] = value
    return rp, np_
