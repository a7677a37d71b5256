"""DCQCN parameter sets: one frozen dataclass per algorithm form, with units in the field names.

Two forms (see ``docs/dcqcn.md`` §4 and §5):

* :class:`DcqcnPaperParams` — the SIGCOMM 2015 form: every CNP cuts at once, α has its own timer of
  period K that only runs while no CNP arrives, increase events come from a timer (T) and a byte counter (B).
* :class:`DcqcnFirmwareParams` — the NIC firmware form (ConnectX, HPCC ns-3 "Mlx", isekai): α, the
  rate-reduce check and the increase timer run on independent periodic clocks. Field names follow NVIDIA's
  ``roce_rp`` / ``roce_np`` sysfs names with the unit appended, so values copied from a NIC fit unchanged.
  A few fields beyond NVIDIA's list (``alpha_rounding``, ``rate_on_first_cnp_fraction``,
  ``first_cnp_cuts``) express the documented differences between ConnectX, HPCC and isekai, and one
  undocumented property of the firmware (how α is rounded, see :data:`ALPHA_ROUNDINGS`).

Validation happens in ``__post_init__`` and raises :class:`~emulator.errors.ConfigError` naming the knob.
:func:`apply_overrides` replaces fields by keyword and names any unknown knob.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from emulator.errors import ConfigError
from emulator.units import parse_rate_bps


def _check_number(form: str, name: str, value: object, *, lo: float = 0.0, hi: float = math.inf,
                  lo_open: bool = False, integer: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{form}: knob {name!r} must be a number, got {value!r}")
    if integer and not isinstance(value, int):
        raise ConfigError(f"{form}: knob {name!r} must be an integer, got {value!r}")
    if value != value or value < lo or value > hi or (lo_open and value == lo):
        bound = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise ConfigError(f"{form}: knob {name!r} = {value!r} is outside {bound}")


#: How the firmware form rounds α after each update, in units of 1/1024 (docs/dcqcn.md §5):
#:
#: * ``"exact"`` — no rounding: ``α ← G·α/1024 + (1024 − G)`` / ``α ← G·α/1024`` with full precision, i.e.
#:   the geometric decay whose half-life docs/dcqcn.md states (≈ 142 µs at G = 1019, every 1 µs) at every α.
#:   The default: the register width of the NIC is not documented, and this is the only reading that agrees
#:   with the documented half-life over the whole range.
#: * ``"floor"`` — a 10-bit register that truncates: every tick without a CNP loses at least 1/1024 (exactly
#:   1/1024 below α ≈ 205/1024), so α falls linearly to 0 within ~200 µs of the last CNP and later cuts vanish (with CNPs more than ~5 µs
#:   apart α cannot stay up). A hypothesis to test against, not a documented behaviour.
#: * ``"nearest"`` — a 10-bit register that rounds to nearest: the decay stops at α ≈ 102/1024, where
#:   5·α/1024 rounds to 0, so every cut removes at least ≈ 5 %. Also a hypothesis.
ALPHA_ROUNDINGS: tuple[str, ...] = ("exact", "floor", "nearest")


def _check_bool(form: str, name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{form}: knob {name!r} must be true or false, got {value!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class DcqcnPaperParams:
    """Paper-form DCQCN knobs (defaults = SIGCOMM 2015 values, docs/dcqcn.md §4.1)."""

    g: float = 1 / 256                    # α gain
    initial_alpha: float = 1.0            # α before the first CNP
    alpha_timer_us: float = 55.0          # K: α decays once per K without a CNP
    rate_increase_timer_us: float = 55.0  # T: timer increase event period
    byte_counter_bytes: int = 10_000_000  # B: byte-counter increase event every B bytes (0 = off)
    fast_recovery_steps: int = 5          # F
    rate_ai_mbps: float = 40.0            # R_AI
    rate_hai_mbps: float = 200.0          # R_HAI (authors' sample config)
    min_rate_mbps: float = 100.0          # floor (ns3-rdma default; the paper gives none)
    max_rate_mbps: float = 0.0            # cap; 0 = line rate
    clamp_target_rate: bool = True        # R_T ← R_C on every CNP (the paper text); False keeps R_T
    alpha_update_before_cut: bool = False  # True = authors' ns-3 order (update α, then cut with it)

    def __post_init__(self) -> None:
        f = "dcqcn paper form"
        _check_number(f, "g", self.g, lo=0.0, hi=1.0, lo_open=True)
        _check_number(f, "initial_alpha", self.initial_alpha, lo=0.0, hi=1.0)
        _check_number(f, "alpha_timer_us", self.alpha_timer_us, lo_open=True)
        _check_number(f, "rate_increase_timer_us", self.rate_increase_timer_us, lo_open=True)
        _check_number(f, "byte_counter_bytes", self.byte_counter_bytes, integer=True)
        _check_number(f, "fast_recovery_steps", self.fast_recovery_steps, integer=True)
        _check_number(f, "rate_ai_mbps", self.rate_ai_mbps)
        _check_number(f, "rate_hai_mbps", self.rate_hai_mbps)
        _check_number(f, "min_rate_mbps", self.min_rate_mbps, lo_open=True)
        _check_number(f, "max_rate_mbps", self.max_rate_mbps)
        _check_bool(f, "clamp_target_rate", self.clamp_target_rate)
        _check_bool(f, "alpha_update_before_cut", self.alpha_update_before_cut)
        if self.max_rate_mbps and self.max_rate_mbps < self.min_rate_mbps:
            raise ConfigError(f"{f}: knob 'max_rate_mbps' = {self.max_rate_mbps} is below "
                              f"'min_rate_mbps' = {self.min_rate_mbps}")


@dataclasses.dataclass(frozen=True, slots=True)
class DcqcnFirmwareParams:
    """Firmware-form DCQCN knobs (defaults = NVIDIA ConnectX, docs/dcqcn.md §5.1)."""

    dce_tcp_g: int = 1019                     # α keeps G/1024 per period: g = (1024 - G)/1024
    dce_tcp_rtt_us: float = 1.0               # α update period
    alpha_rounding: str = "exact"             # α in 1/1024 after each update: exact | floor | nearest
    initial_alpha_value: int = 1023           # α on the first CNP, in 1/1024
    rate_to_set_on_first_cnp_mbps: float = 0.0  # R_C = R_T = this on the first CNP; 0 = keep the rate
    rate_on_first_cnp_fraction: float = 1.0   # else R_C = R_T = fraction × current rate (HPCC RateOnFirstCnp)
    first_cnp_cuts: bool = False              # True: the first CNP also requests a cut (HPCC); False: isekai
    rpg_min_dec_fac_pct: float = 50.0         # one cut removes at most (100 - this) % of the rate
    rpg_min_rate_mbps: float = 1.0            # floor
    rpg_max_rate_mbps: float = 0.0            # cap; 0 = line rate
    rpg_gd: int = 11                          # cut = R_C · α_1024 >> rpg_gd  (11 → R_C·α/2)
    rate_reduce_monitor_period_us: float = 4.0  # at most one cut per period
    clamp_tgt_rate: bool = False              # R_T ← R_C on every cut
    clamp_tgt_rate_after_time_inc: bool = True  # R_T ← R_C on a cut if a timer increase happened since the last
    rpg_time_reset_us: float = 300.0          # increase timer period
    rpg_byte_reset: int = 32767               # byte-counter period in units of rpg_byte_unit_bytes (0 = off)
    rpg_byte_unit_bytes: int = 64             # unit inferred from isekai (NVIDIA wording not seen)
    rpg_threshold: int = 1                    # F
    rpg_ai_rate_mbps: float = 5.0             # R_AI
    rpg_hai_rate_mbps: float = 50.0           # R_HAI (constant per hyper event)

    def __post_init__(self) -> None:
        f = "dcqcn firmware form"
        _check_number(f, "dce_tcp_g", self.dce_tcp_g, lo=0, hi=1023, integer=True)
        _check_number(f, "dce_tcp_rtt_us", self.dce_tcp_rtt_us, lo_open=True)
        if self.alpha_rounding not in ALPHA_ROUNDINGS:
            raise ConfigError(f"{f}: knob 'alpha_rounding' = {self.alpha_rounding!r} is not one of "
                              f"{', '.join(ALPHA_ROUNDINGS)}")
        _check_number(f, "initial_alpha_value", self.initial_alpha_value, lo=0, hi=1024, integer=True)
        _check_number(f, "rate_to_set_on_first_cnp_mbps", self.rate_to_set_on_first_cnp_mbps)
        _check_number(f, "rate_on_first_cnp_fraction", self.rate_on_first_cnp_fraction, hi=1.0, lo_open=True)
        _check_bool(f, "first_cnp_cuts", self.first_cnp_cuts)
        _check_number(f, "rpg_min_dec_fac_pct", self.rpg_min_dec_fac_pct, hi=100.0)
        _check_number(f, "rpg_min_rate_mbps", self.rpg_min_rate_mbps, lo_open=True)
        _check_number(f, "rpg_max_rate_mbps", self.rpg_max_rate_mbps)
        _check_number(f, "rpg_gd", self.rpg_gd, lo=0, hi=31, integer=True)
        _check_number(f, "rate_reduce_monitor_period_us", self.rate_reduce_monitor_period_us, lo_open=True)
        _check_bool(f, "clamp_tgt_rate", self.clamp_tgt_rate)
        _check_bool(f, "clamp_tgt_rate_after_time_inc", self.clamp_tgt_rate_after_time_inc)
        _check_number(f, "rpg_time_reset_us", self.rpg_time_reset_us, lo_open=True)
        _check_number(f, "rpg_byte_reset", self.rpg_byte_reset, integer=True)
        _check_number(f, "rpg_byte_unit_bytes", self.rpg_byte_unit_bytes, lo=1, integer=True)
        _check_number(f, "rpg_threshold", self.rpg_threshold, integer=True)
        _check_number(f, "rpg_ai_rate_mbps", self.rpg_ai_rate_mbps)
        _check_number(f, "rpg_hai_rate_mbps", self.rpg_hai_rate_mbps)
        if self.rpg_max_rate_mbps and self.rpg_max_rate_mbps < self.rpg_min_rate_mbps:
            raise ConfigError(f"{f}: knob 'rpg_max_rate_mbps' = {self.rpg_max_rate_mbps} is below "
                              f"'rpg_min_rate_mbps' = {self.rpg_min_rate_mbps}")

    @property
    def g(self) -> float:
        """Effective α gain per period, (1024 − dce_tcp_g)/1024."""
        return (1024 - self.dce_tcp_g) / 1024


DcqcnParams = DcqcnPaperParams | DcqcnFirmwareParams


@dataclasses.dataclass(frozen=True, slots=True)
class FixedRateParams:
    """The one knob of a constant-rate controller: ``rate_bps`` (a number or a string such as ``"10Gbps"``,
    stored in bit/s; ``None`` until set: the controller refuses to start without it)."""

    rate_bps: float | None = None

    def __post_init__(self) -> None:
        if self.rate_bps is None:
            return
        try:
            rate = float(parse_rate_bps(self.rate_bps))
        except ValueError as exc:
            raise ConfigError(f"knob 'rate_bps': {exc}") from None
        if not rate > 0:
            raise ConfigError("knob 'rate_bps' must be positive")
        object.__setattr__(self, "rate_bps", rate)


def knob_names(params_type: type) -> tuple[str, ...]:
    """The field names of a parameter dataclass, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(params_type))


def apply_overrides(params: Any, overrides: dict[str, object], where: str) -> Any:
    """``dataclasses.replace`` with a ConfigError naming any knob the form does not have.

    ``where`` names the preset (or profile key) in the message. Ints are accepted for float knobs and
    whole floats for int knobs (YAML writes ``1e6`` as a float).
    """
    known = knob_names(type(params))
    clean: dict[str, object] = {}
    types = {f.name: f.type for f in dataclasses.fields(params)}
    for key, value in overrides.items():
        if key not in known:
            raise ConfigError(f"{where}: unknown congestion-control knob {key!r} (known: {', '.join(known)})")
        t = types[key]
        if t in ("float", float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if t in ("int", int) and isinstance(value, float) and value.is_integer():
            value = int(value)
        clean[key] = value
    try:
        return dataclasses.replace(params, **clean)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
