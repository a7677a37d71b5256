"""The controller registry is the one source of preset names: config choices, knob table and endpoint follow it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from emulator.config import profile_from_dict
from emulator.config.docs import render
from emulator.config.knobs import knob_presets, rate_presets
from emulator.endpoint.config import EndpointConfig
from emulator.errors import ConfigError
from emulator.pacing import (
    DcqcnFirmwareParams,
    FixedRate,
    controller_names,
    controller_spec,
    get_controller,
    register_controller,
    unregister_controller,
)
from emulator.pacing.presets import dcqcn_controller

G25 = 25e9
BUILT_IN = ("paper", "connectx", "hpcc-ns3", "none", "fixed")


@pytest.fixture
def slow_cx():
    """A firmware-form DCQCN preset registered for one test only."""
    register_controller("slow-cx", dcqcn_controller, lambda _rate: DcqcnFirmwareParams(rpg_ai_rate_mbps=1.0),
                        doc="test preset")
    try:
        yield "slow-cx"
    finally:
        unregister_controller("slow-cx")


def _profile(cc: dict) -> dict:
    return {"name": "r", "workload": {"collectives": [{"type": "all_reduce", "size": "1MiB"}]},
            "ranks": {"count": 2}, "congestion_control": cc}


def test_built_in_presets_are_registered_in_order() -> None:
    assert controller_names() == BUILT_IN
    assert knob_presets() == ("paper", "connectx", "hpcc-ns3")
    assert rate_presets() == ("fixed",)
    assert [controller_spec(n).constant_rate for n in BUILT_IN] == [False, False, False, True, True]


def test_a_registered_controller_is_a_config_choice_and_a_knob_table_column(slow_cx) -> None:
    p = profile_from_dict(_profile({"preset": slow_cx, "overrides": {"rpg_hai_rate": 20}}))
    assert p.congestion_control.preset == slow_cx
    text = render()
    assert f"default (paper · connectx · hpcc-ns3 · {slow_cx})" in text
    row = next(line for line in text.splitlines() if line.startswith("| `rpg_ai_rate` |"))
    assert row.split(" | ")[2].split(" · ")[-1] == "`1`"  # its own default, read from its parameters
    assert f"`{slow_cx}`" in next(line for line in text.splitlines() if "`congestion_control.preset`" in line)
    assert get_controller(slow_cx, G25).params.rpg_ai_rate_mbps == 1.0
    assert EndpointConfig(cc=slow_cx).make_controller().params.rpg_hai_rate_mbps == 50.0


def test_after_unregistering_the_name_is_unknown_everywhere(slow_cx) -> None:
    unregister_controller(slow_cx)
    with pytest.raises(ConfigError, match="congestion_control.preset: 'slow-cx' is not one of paper, connectx"):
        profile_from_dict(_profile({"preset": slow_cx}))
    with pytest.raises(ConfigError, match="unknown congestion-control preset 'slow-cx'"):
        get_controller(slow_cx, G25)
    with pytest.raises(ConfigError, match="'cc' must be one of paper"):
        EndpointConfig(cc=slow_cx)


def test_a_constant_rate_controller_with_a_rate_knob_takes_the_profile_rate() -> None:
    from emulator.pacing import FixedRateParams

    register_controller("half", lambda rate, p: FixedRate(min(p.rate_bps or rate / 2, rate)),
                        lambda _rate: FixedRateParams(), constant_rate=True, doc="test")
    try:
        assert rate_presets() == ("fixed", "half")
        p = profile_from_dict(_profile({"preset": "half", "rate": "5Gbps"}))
        assert p.congestion_control.pacing_kwargs()[0] == {"rate_bps": 5_000_000_000}
        with pytest.raises(ConfigError, match="congestion_control.rate: only preset fixed or half takes a rate"):
            profile_from_dict(_profile({"preset": "none", "rate": "5Gbps"}))
        with pytest.raises(ConfigError, match="congestion_control.overrides: preset half has no DCQCN knobs"):
            profile_from_dict(_profile({"preset": "half", "rate": "5Gbps", "overrides": {"g": 0.5}}))
        assert get_controller("half", G25).rate_bps == G25 / 2
    finally:
        unregister_controller("half")


def test_a_name_is_registered_once() -> None:
    with pytest.raises(ConfigError, match="'paper' is already registered"):
        register_controller("paper", dcqcn_controller)


def test_no_preset_name_is_compared_outside_the_registry() -> None:
    """Code decides by registry queries (``controller_spec(name).constant_rate``...), never by a name."""
    names = "|".join(map(re.escape, BUILT_IN))
    compare = re.compile(rf"""(?:[=!]=|\bin)\s*\(?[^)\n]*["']({names})["']|["']({names})["']\s*[=!]=""")
    root = Path(__file__).resolve().parents[2] / "emulator"
    found = []
    for path in root.rglob("*.py"):
        if path.name in ("registry.py", "presets.py") and path.parent.name == "pacing":
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if compare.search(line) and re.search(r"\bcc\b|preset", line):
                found.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
    assert not found, found


def test_parameters_must_be_a_dataclass() -> None:
    with pytest.raises(ConfigError, match="parameters must be a dataclass, got dict"):
        register_controller("bad", lambda rate, p: FixedRate(rate), lambda _rate: {})
    assert "bad" not in controller_names()
