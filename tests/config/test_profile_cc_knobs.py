"""congestion_control: preset and overrides reach the rate controller every queue pair gets (endpoint_config)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from emulator.config import CC_KNOBS, load_profile
from emulator.config.docs import knob_default, render
from emulator.errors import ConfigError
from emulator.pacing.params import ALPHA_ROUNDINGS
from emulator.run.runner import endpoint_config

BASE = {"name": "cc", "ranks": {"count": 2}, "fabric": {"ports": {"rate": "25Gbps"}},
        "workload": {"collectives": [{"type": "all_reduce", "group": "0-1", "size": "64KiB"}]}}


def _load(tmp_path: Path, *overrides: str, env: dict | None = None):
    path = tmp_path / "cc.yaml"
    path.write_text(yaml.safe_dump(BASE))
    return load_profile(path, overrides=overrides, env=env or {})


def test_firmware_overrides_change_the_controller(tmp_path: Path) -> None:
    default = endpoint_config(_load(tmp_path)).make_controller().params
    assert default.rpg_ai_rate_mbps == 5.0 and default.alpha_rounding == "exact"
    cfg = endpoint_config(_load(tmp_path, "congestion_control.overrides.rpg_ai_rate=10",
                                "congestion_control.overrides.alpha_rounding=floor",
                                "congestion_control.overrides.min_time_between_cnps=8"))
    params = cfg.make_controller().params
    assert (params.rpg_ai_rate_mbps, params.alpha_rounding) == (10, "floor")
    assert cfg.np_params().min_time_between_cnps_ns == 8000
    # everything else stays at the preset's value
    assert params.rpg_hai_rate_mbps == default.rpg_hai_rate_mbps and params.dce_tcp_g == default.dce_tcp_g


def test_paper_overrides_change_the_controller(tmp_path: Path) -> None:
    cfg = endpoint_config(_load(tmp_path, "congestion_control.preset=paper", "congestion_control.overrides.K=100us",
                                "congestion_control.overrides.R_AI=80Mbps"))
    params = cfg.make_controller().params
    assert (params.alpha_timer_us, params.rate_ai_mbps) == (100.0, 80.0)


def test_env_override_of_a_knob_is_below_the_command_line(tmp_path: Path) -> None:
    env = {"EMULATOR_SET": "congestion_control.overrides.rpg_ai_rate=20;congestion_control.overrides.rpg_gd=9"}
    params = endpoint_config(_load(tmp_path, "congestion_control.overrides.rpg_ai_rate=30", env=env)
                             ).make_controller().params
    assert (params.rpg_ai_rate_mbps, params.rpg_gd) == (30, 9)


@pytest.mark.parametrize(("item", "expected"), [
    ("congestion_control.overrides.alpha_rounding=round",
     "congestion_control.overrides.alpha_rounding (from --set): 'round' is not one of exact, floor, nearest"),
    ("congestion_control.overrides.alpha_rounding=1",
     "congestion_control.overrides.alpha_rounding (from --set): 1 is not one of exact, floor, nearest"),
    ("congestion_control.overrides.rpg_ai_rat=10", "unknown congestion-control knob (did you mean 'rpg_ai_rate'?)"),
])
def test_bad_knob_values_are_one_line_naming_the_knob(tmp_path: Path, item: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, item)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_alpha_rounding_is_not_a_knob_of_the_paper_form(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"overrides\.alpha_rounding.*not a knob of the paper-form preset paper"):
        _load(tmp_path, "congestion_control.preset=paper", "congestion_control.overrides.alpha_rounding=floor")


def test_every_alpha_rounding_reaches_the_controller(tmp_path: Path) -> None:
    for mode in ALPHA_ROUNDINGS:
        p = _load(tmp_path, f"congestion_control.overrides.alpha_rounding={mode}")
        assert endpoint_config(p).make_controller().params.alpha_rounding == mode
        assert dict(p.to_dict()["congestion_control"]["overrides"]) == {"alpha_rounding": mode}


def test_knob_table_lists_every_knob_with_its_preset_defaults() -> None:
    text = render()
    for name in CC_KNOBS:
        assert f"| `{name}`" in text
    assert knob_default(CC_KNOBS["rpg_ai_rate"], "connectx") == "`5`"
    assert knob_default(CC_KNOBS["rate_ai"], "paper") == "`40Mbps`"
    assert knob_default(CC_KNOBS["g"], "paper") == "`1/256`"
    assert knob_default(CC_KNOBS["g"], "connectx") == "—"
    assert knob_default(CC_KNOBS["alpha_rounding"], "connectx") == "`exact`"


def test_switching_preset_form_says_how_to_drop_inherited_overrides(tmp_path: Path) -> None:
    paper = ("congestion_control.preset=paper", "congestion_control.overrides.K=1ms")
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, *paper, "congestion_control.preset=connectx")
    assert "not a knob of the firmware-form preset connectx" in str(info.value)
    assert "congestion_control.overrides: null" in str(info.value)
    p = _load(tmp_path, *paper, "congestion_control.preset=connectx", "congestion_control.overrides=null")
    assert p.congestion_control.overrides == () and endpoint_config(p).cc == "connectx"
