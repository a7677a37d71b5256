"""Pacing and congestion control, sans-IO: rate controllers by name (RP), NP, CP/RED marking and a pacer.

Use::

    ctrl = get_controller("paper", line_rate_bps=25e9, rate_ai_mbps=20)   # overrides by keyword
    ctrl.on_cnp(now_ns); ctrl.rate_bps; ctrl.next_timer_ns(); ctrl.state()

Controllers are looked up by name in the registry (:mod:`emulator.pacing.registry`;
:func:`register_controller` adds one); an unknown name or knob raises :class:`~emulator.errors.ConfigError`
naming it.
"""

from __future__ import annotations

from emulator.errors import ConfigError
from emulator.pacing.base import FixedRate, NoCongestionControl, RateController, RateState
from emulator.pacing.dcqcn import DcqcnFirmware, DcqcnPaper
from emulator.pacing.notification import CnpGenerator, NpParams
from emulator.pacing.pacer import TokenBucketPacer, burst_for
from emulator.pacing.params import DcqcnFirmwareParams, DcqcnPaperParams, FixedRateParams, apply_overrides
from emulator.pacing.presets import dcqcn_controller, np_params, red_params
from emulator.pacing.red import RedMarker, RedParams, mark_probability
from emulator.pacing.registry import (
    ControllerSpec,
    build_controller,
    controller_names,
    controller_params,
    controller_spec,
    dcqcn_presets,
    register_controller,
    unregister_controller,
)

__all__ = [
    "CnpGenerator", "ControllerSpec", "DcqcnFirmware", "DcqcnFirmwareParams", "DcqcnPaper", "DcqcnPaperParams",
    "FixedRate", "FixedRateParams", "NoCongestionControl", "NpParams", "RateController", "RateState", "RedMarker",
    "RedParams", "TokenBucketPacer", "apply_overrides", "build_controller", "burst_for", "controller_for_params",
    "controller_names", "controller_params", "controller_spec", "dcqcn_presets", "get_controller", "get_params",
    "mark_probability", "np_params", "red_params", "register_controller", "unregister_controller",
]


def get_params(name: str, line_rate_bps: float, **overrides: object) -> DcqcnPaperParams | DcqcnFirmwareParams:
    """The parameter dataclass of a DCQCN preset with keyword overrides applied and validated."""
    if controller_spec(name).dcqcn_form is None:
        raise ConfigError(f"congestion-control preset {name!r} has no DCQCN parameters")
    return controller_params(name, line_rate_bps, **overrides)


def controller_for_params(params: DcqcnPaperParams | DcqcnFirmwareParams, line_rate_bps: float) -> RateController:
    """A DCQCN controller of the form the parameter dataclass belongs to."""
    return dcqcn_controller(line_rate_bps, params)


def get_controller(name: str, line_rate_bps: float, **overrides: object) -> RateController:
    """A fresh rate controller (one per queue pair) for preset ``name`` at ``line_rate_bps``.

    ``fixed`` needs ``rate_bps`` (a number or a string such as ``"10Gbps"``); ``none`` takes no knobs.
    """
    if line_rate_bps <= 0:
        raise ConfigError(f"congestion-control preset {name!r}: line rate must be positive, got {line_rate_bps}")
    return build_controller(name, line_rate_bps, controller_params(name, line_rate_bps, **overrides))
