"""Pacing and congestion control, sans-IO: rate controllers by name (RP), NP, CP/RED marking and a pacer.

Use::

    ctrl = get_controller("paper", line_rate_bps=25e9, rate_ai_mbps=20)   # overrides by keyword
    ctrl.on_cnp(now_ns); ctrl.rate_bps; ctrl.next_timer_ns(); ctrl.state()

Controllers are looked up in an explicit table (never via ``globals()``); an unknown name or knob raises
:class:`~emulator.errors.ConfigError` naming it.
"""

from __future__ import annotations

from emulator.errors import ConfigError
from emulator.pacing.base import FixedRate, NoCongestionControl, RateController, RateState
from emulator.pacing.dcqcn import DcqcnFirmware, DcqcnPaper
from emulator.pacing.notification import CnpGenerator, NpParams
from emulator.pacing.pacer import TokenBucketPacer, burst_for
from emulator.pacing.params import DcqcnFirmwareParams, DcqcnPaperParams, apply_overrides
from emulator.pacing.presets import DCQCN_PRESETS, PRESET_NAMES, np_params, preset_params, red_params
from emulator.pacing.red import RedMarker, RedParams, mark_probability
from emulator.units import parse_rate_bps

__all__ = [
    "DCQCN_PRESETS", "PRESET_NAMES", "CnpGenerator", "DcqcnFirmware", "DcqcnFirmwareParams", "DcqcnPaper",
    "DcqcnPaperParams", "FixedRate", "NoCongestionControl", "NpParams", "RateController", "RateState",
    "RedMarker", "RedParams", "TokenBucketPacer", "burst_for", "controller_for_params", "controller_names",
    "get_controller", "get_params", "mark_probability", "np_params", "red_params",
]


def controller_names() -> tuple[str, ...]:
    """Every name :func:`get_controller` accepts."""
    return PRESET_NAMES


def get_params(name: str, line_rate_bps: float, **overrides: object) -> DcqcnPaperParams | DcqcnFirmwareParams:
    """The parameter dataclass of a DCQCN preset with keyword overrides applied and validated."""
    params = preset_params(name, line_rate_bps)
    if params is None:
        raise ConfigError(f"congestion-control preset {name!r} has no DCQCN parameters")
    return apply_overrides(params, overrides, f"congestion-control preset {name!r}")


def controller_for_params(params: DcqcnPaperParams | DcqcnFirmwareParams, line_rate_bps: float) -> RateController:
    """A DCQCN controller of the form the parameter dataclass belongs to."""
    if isinstance(params, DcqcnPaperParams):
        return DcqcnPaper(line_rate_bps, params)
    if isinstance(params, DcqcnFirmwareParams):
        return DcqcnFirmware(line_rate_bps, params)
    raise ConfigError(f"not a DCQCN parameter set: {type(params).__name__}")


def get_controller(name: str, line_rate_bps: float, **overrides: object) -> RateController:
    """A fresh rate controller (one per queue pair) for preset ``name`` at ``line_rate_bps``.

    ``fixed`` needs ``rate_bps`` (a number or a string such as ``"10Gbps"``); ``none`` takes no knobs.
    """
    if line_rate_bps <= 0:
        raise ConfigError(f"congestion-control preset {name!r}: line rate must be positive, got {line_rate_bps}")
    if name == "none":
        if overrides:
            raise ConfigError(f"congestion-control preset 'none': unknown knob {next(iter(overrides))!r} (it has none)")
        return NoCongestionControl(line_rate_bps)
    if name == "fixed":
        extra = [k for k in overrides if k != "rate_bps"]
        if extra:
            raise ConfigError(f"congestion-control preset 'fixed': unknown knob {extra[0]!r} (known: rate_bps)")
        if "rate_bps" not in overrides:
            raise ConfigError("congestion-control preset 'fixed': knob 'rate_bps' is required")
        try:
            rate = parse_rate_bps(overrides["rate_bps"])
        except ValueError as exc:
            raise ConfigError(f"congestion-control preset 'fixed': knob 'rate_bps': {exc}") from None
        if rate <= 0:
            raise ConfigError("congestion-control preset 'fixed': knob 'rate_bps' must be positive")
        return FixedRate(min(rate, line_rate_bps))
    return controller_for_params(get_params(name, line_rate_bps, **overrides), line_rate_bps)
