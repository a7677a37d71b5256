"""Rate controllers by name: the one table every preset name is looked up in.

:func:`register_controller` adds a name with a factory and its parameter dataclass; the profile schema
(choices, knob table, docs), the endpoint and the drivers read names and properties from here, so no
module outside this one compares a preset name. The built-in presets are registered by
:mod:`emulator.pacing.presets`.

A controller's *parameters* are a frozen dataclass whose fields are its knobs (overridden by keyword,
:func:`~emulator.pacing.params.apply_overrides`); a controller without parameters takes no knobs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from emulator.errors import ConfigError
from emulator.pacing.base import RateController
from emulator.pacing.notification import NpParams
from emulator.pacing.params import DcqcnFirmwareParams, DcqcnPaperParams, apply_overrides
from emulator.pacing.red import RedParams

#: (line_rate_bps, parameters or None) → a fresh controller for one queue pair
Factory = Callable[[float, Any], RateController]
#: line_rate_bps → the default parameter dataclass of a controller
ParamsFactory = Callable[[float], Any]

#: the DCQCN algorithm form of each parameter dataclass (docs/dcqcn.md §4 paper, §5 firmware)
DCQCN_FORMS: dict[type, str] = {DcqcnPaperParams: "paper", DcqcnFirmwareParams: "firmware"}


def paper_red(line_rate_bps: float) -> RedParams:
    """RED thresholds of the DCQCN paper (5 KB / 200 KB / 1 %), at any line rate."""
    return RedParams(kmin_bytes=5_000, kmax_bytes=200_000, pmax=0.01)


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerSpec:
    """One registered controller: how to build it and the NP and CP settings that go with it.

    ``params`` gives the default parameter dataclass at a line rate (None: the controller takes no
    knobs); ``constant_rate`` says its rate never changes (the endpoint lets such pacers burst several
    batches); ``doc`` is one line for the schema docs.
    """

    name: str
    factory: Factory
    params: ParamsFactory | None
    np: NpParams
    red: Callable[[float], RedParams]
    constant_rate: bool
    doc: str
    #: the parameter dataclass (None without parameters)
    params_type: type | None = None

    @property
    def dcqcn_form(self) -> str | None:
        """``paper`` or ``firmware`` when the parameters are a DCQCN form, else None."""
        return None if self.params_type is None else DCQCN_FORMS.get(self.params_type)

    def knob_names(self) -> tuple[str, ...]:
        """The knobs (parameter fields) the controller takes, in declaration order."""
        t = self.params_type
        return tuple(f.name for f in dataclasses.fields(t)) if t is not None else ()


_REGISTRY: dict[str, ControllerSpec] = {}


def register_controller(name: str, factory: Factory, params: ParamsFactory | None = None, *,
                        np: NpParams | None = None, red: Callable[[float], RedParams] = paper_red,
                        constant_rate: bool = False, doc: str = "") -> ControllerSpec:
    """Register ``name``; ``params(line_rate_bps)`` gives its default parameter dataclass (None: no knobs).

    ``np`` defaults to the ConnectX notification point (4 µs between CNPs, no deferral). A name is
    registered once; :func:`unregister_controller` removes it.
    """
    if not name or not isinstance(name, str):
        raise ConfigError(f"controller name must be a non-empty string, got {name!r}")
    if name in _REGISTRY:
        raise ConfigError(f"congestion-control preset {name!r} is already registered")
    params_type = None if params is None else type(params(25e9))  # the type does not depend on the rate
    if params_type is not None and not dataclasses.is_dataclass(params_type):
        raise ConfigError(f"congestion-control preset {name!r}: parameters must be a dataclass, "
                          f"got {params_type.__name__}")
    spec = ControllerSpec(name, factory, params, np if np is not None else NpParams(4_000, False), red,
                          constant_rate, doc, params_type)
    _REGISTRY[name] = spec
    return spec


def unregister_controller(name: str) -> None:
    """Remove ``name`` from the registry (a no-op for an unknown name)."""
    _REGISTRY.pop(name, None)


def controller_names() -> tuple[str, ...]:
    """Every registered name, in registration order."""
    return tuple(_REGISTRY)


class _RegisteredNames(Sequence[str]):
    """A read-only, live view of the registered names (what a schema's ``choices`` can hold)."""

    def __getitem__(self, index):  # type: ignore[override]
        return tuple(_REGISTRY)[index]

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __contains__(self, name: object) -> bool:
        return name in _REGISTRY

    def __repr__(self) -> str:
        return repr(tuple(_REGISTRY))


#: every registered name, read at each use (so a controller registered later is a valid choice)
CONTROLLER_NAMES: Sequence[str] = _RegisteredNames()


def controller_spec(name: str) -> ControllerSpec:
    """The registration of ``name``; a ConfigError listing the known names otherwise."""
    spec = _REGISTRY.get(name)
    if spec is None:
        raise ConfigError(f"unknown congestion-control preset {name!r} (known: {', '.join(_REGISTRY)})")
    return spec


def dcqcn_presets() -> tuple[str, ...]:
    """Names whose parameters are a DCQCN form, in registration order."""
    return tuple(n for n, s in _REGISTRY.items() if s.dcqcn_form is not None)


def controller_params(name: str, line_rate_bps: float, **overrides: object) -> Any:
    """The parameters of ``name`` at ``line_rate_bps`` with keyword overrides applied and validated
    (None for a controller without parameters, which takes no overrides)."""
    spec = controller_spec(name)
    if spec.params is None:
        if overrides:
            raise ConfigError(f"congestion-control preset {name!r}: unknown knob {next(iter(overrides))!r} "
                              "(it has none)")
        return None
    return apply_overrides(spec.params(line_rate_bps), overrides, f"congestion-control preset {name!r}")


def build_controller(name: str, line_rate_bps: float, params: Any) -> RateController:
    """A fresh controller of ``name`` from parameters :func:`controller_params` returned."""
    try:
        return controller_spec(name).factory(line_rate_bps, params)
    except ConfigError as exc:
        raise ConfigError(f"congestion-control preset {name!r}: {exc}") from None
