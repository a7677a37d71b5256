"""Preset values against the numbers in docs/dcqcn.md, one row per documented value (table-driven).

Each row is (preset, where, knob, expected, doc reference). ``where`` picks the RP parameters, the NP or
the RED settings of the preset, at a 25 Gb/s line rate unless the row says otherwise. The expected
values are transcribed from the doc's tables, not from the code.
"""

from __future__ import annotations

import dataclasses

import pytest

from emulator.pacing import (
    FixedRate,
    NoCongestionControl,
    get_controller,
    get_params,
    np_params,
    red_params,
)
from emulator.pacing.params import DcqcnFirmwareParams, DcqcnPaperParams, knob_names

G25 = 25e9

ROWS = [
    # --- paper, §4.1 (and §3 for N) ---------------------------------------------------------------------
    ("paper", "rp", "g", 1 / 256, "§4.1 g"),
    ("paper", "rp", "alpha_timer_us", 55.0, "§4.1 K"),
    ("paper", "rp", "rate_increase_timer_us", 55.0, "§4.1 T"),
    ("paper", "rp", "byte_counter_bytes", 10_000_000, "§4.1 B 10 MB"),
    ("paper", "rp", "fast_recovery_steps", 5, "§4.1 F"),
    ("paper", "rp", "rate_ai_mbps", 40.0, "§4.1 R_AI"),
    ("paper", "rp", "rate_hai_mbps", 200.0, "§4.1 R_HAI (authors' sample config)"),
    ("paper", "rp", "min_rate_mbps", 100.0, "§4 floor: ns3-rdma default 100 Mb/s"),
    ("paper", "rp", "clamp_target_rate", True, "§4 on CNP step 1: R_T ← R_C"),
    ("paper", "rp", "alpha_update_before_cut", False, "§4 on CNP: cut with α, then update α"),
    ("paper", "rp", "initial_alpha", 1.0, "§7 α = 1, one CNP halves the rate"),
    ("paper", "rp", "max_rate_mbps", 0.0, "§4 R_C capped at line rate"),
    ("paper", "np", "min_time_between_cnps_ns", 50_000, "§3 / §4.1 N = 50 µs"),
    ("paper", "red", "kmin_bytes", 5_000, "§4.1 Kmin 5 KB"),
    ("paper", "red", "kmax_bytes", 200_000, "§4.1 Kmax 200 KB"),
    ("paper", "red", "pmax", 0.01, "§4.1 Pmax 1 %"),
    # --- connectx, §5.1 ------------------------------------------------------------------------------
    ("connectx", "rp", "dce_tcp_g", 1019, "§5.1 dce_tcp_g"),
    ("connectx", "rp", "dce_tcp_rtt_us", 1.0, "§5.1 dce_tcp_rtt"),
    ("connectx", "rp", "initial_alpha_value", 1023, "§5.1 initial_alpha_value"),
    ("connectx", "rp", "rate_to_set_on_first_cnp_mbps", 0.0, "§5.1 rate_to_set_on_first_cnp"),
    ("connectx", "rp", "rpg_min_dec_fac_pct", 50.0, "§5.1 rpg_min_dec_fac"),
    ("connectx", "rp", "rpg_min_rate_mbps", 1.0, "§5.1 rpg_min_rate"),
    ("connectx", "rp", "rpg_gd", 11, "§5.1 rpg_gd"),
    ("connectx", "rp", "rate_reduce_monitor_period_us", 4.0, "§5.1 rate_reduce_monitor_period"),
    ("connectx", "rp", "clamp_tgt_rate", False, "§5.1 clamp_tgt_rate"),
    ("connectx", "rp", "clamp_tgt_rate_after_time_inc", True, "§5.1 clamp_tgt_rate_after_time_inc"),
    ("connectx", "rp", "rpg_time_reset_us", 300.0, "§5.1 rpg_time_reset"),
    ("connectx", "rp", "rpg_byte_reset", 32767, "§5.1 rpg_byte_reset"),
    ("connectx", "rp", "rpg_byte_unit_bytes", 64, "§5 increase: isekai × 64 B (inferred)"),
    ("connectx", "rp", "rpg_threshold", 1, "§5.1 rpg_threshold"),
    ("connectx", "rp", "rpg_max_rate_mbps", 0.0, "§5.1 rpg_max_rate (0 = line rate)"),
    ("connectx", "rp", "rpg_ai_rate_mbps", 5.0, "§5.1 rpg_ai_rate"),
    ("connectx", "rp", "rpg_hai_rate_mbps", 50.0, "§5.1 rpg_hai_rate"),
    ("connectx", "rp", "first_cnp_cuts", False, "§5 first CNP: isekai clears the flag (no cut)"),
    ("connectx", "rp", "rate_on_first_cnp_fraction", 1.0, "§5 first CNP: 0 read as keep the rate (ours)"),
    ("connectx", "rp", "alpha_rounding", "exact", "§5 half-life ≈ 142 µs at every α (see params.py)"),
    ("connectx", "np", "min_time_between_cnps_ns", 4_000, "§5.1 min_time_between_cnps"),
    ("connectx", "red", "kmin_bytes", 150_000, "§6 NVIDIA switch ECN min 150 KB"),
    ("connectx", "red", "kmax_bytes", 1_500_000, "§6 NVIDIA switch ECN max 1500 KB"),
    # --- hpcc-ns3, §5.2 run.py --cc dcqcn (bw = 25 G unless noted) -------------------------------------
    ("hpcc-ns3", "rp", "g", 1 / 256, "§5.2 EWMA_GAIN"),
    ("hpcc-ns3", "rp", "dce_tcp_rtt_us", 1.0, "§5.2 ALPHA_RESUME_INTERVAL"),
    ("hpcc-ns3", "rp", "rate_reduce_monitor_period_us", 4.0, "§5.2 RATE_DECREASE_INTERVAL"),
    ("hpcc-ns3", "rp", "rpg_time_reset_us", 300.0, "§5.2 RP_TIMER"),
    ("hpcc-ns3", "rp", "rpg_threshold", 1, "§5.2 FAST_RECOVERY_TIMES"),
    ("hpcc-ns3", "rp", "clamp_tgt_rate", False, "§5.2 CLAMP_TARGET_RATE 0"),
    ("hpcc-ns3", "rp", "clamp_tgt_rate_after_time_inc", True, "§5 HPCC clamps unless time stage = 0"),
    ("hpcc-ns3", "rp", "rpg_ai_rate_mbps", 5.0, "§5.2 RATE_AI 5·bw/25"),
    ("hpcc-ns3", "rp", "rpg_hai_rate_mbps", 50.0, "§5.2 RATE_HAI 50·bw/25"),
    ("hpcc-ns3", "rp", "rpg_min_rate_mbps", 1000.0, "§5.2 MIN_RATE"),
    ("hpcc-ns3", "rp", "rpg_byte_reset", 0, "§5 HPCC increase: timer only, no byte counter"),
    ("hpcc-ns3", "rp", "initial_alpha_value", 1024, "§5 first CNP: HPCC uses α = 1"),
    ("hpcc-ns3", "rp", "rate_on_first_cnp_fraction", 1.0, "§5.2 RateOnFirstCnp 1.0"),
    ("hpcc-ns3", "rp", "first_cnp_cuts", True, "§5 first CNP: HPCC leaves the decrease flag set"),
    ("hpcc-ns3", "rp", "rpg_min_dec_fac_pct", 0.0, "§5 HPCC cut R_C(1 − α/2), no cap"),
    ("hpcc-ns3", "rp", "alpha_rounding", "exact", "§5 HPCC α is a double"),
    ("hpcc-ns3", "np", "min_time_between_cnps_ns", 0, "§3 HPCC: CNP flag on every ACK of a CE packet"),
    ("hpcc-ns3", "red", "kmin_bytes", 100_000, "§5.2 Kmin 100·bw/25 KB"),
    ("hpcc-ns3", "red", "kmax_bytes", 400_000, "§5.2 Kmax 400·bw/25 KB"),
    ("hpcc-ns3", "red", "pmax", 0.2, "§5.2 Pmax"),
]


def _value(preset: str, where: str, knob: str, line_rate_bps: float = G25) -> object:
    if where == "rp":
        return getattr(get_params(preset, line_rate_bps), knob)
    if where == "np":
        return getattr(np_params(preset), knob)
    return getattr(red_params(preset, line_rate_bps), knob)


@pytest.mark.parametrize("preset,where,knob,expected,ref", ROWS, ids=[f"{r[0]}-{r[2]}" for r in ROWS])
def test_preset_value_matches_the_doc(preset, where, knob, expected, ref):
    got = _value(preset, where, knob)
    if isinstance(expected, float):
        assert got == pytest.approx(expected, rel=1e-12), ref
    else:
        assert got == expected and type(got) is type(expected), ref


def test_every_rp_knob_of_the_documented_presets_is_covered():
    for preset, params_type in (("paper", DcqcnPaperParams), ("connectx", DcqcnFirmwareParams)):
        covered = {r[2] for r in ROWS if r[0] == preset and r[1] == "rp"}
        untested = set(knob_names(params_type)) - covered
        assert not untested, (preset, sorted(untested))


def test_hpcc_scales_with_the_line_rate():
    # §5.2: AI/HAI 5/50 Mb/s × bw/25; Kmin/Kmax 100/400 KB × bw/25 (100 G: 20/200 Mb/s, 400/1600 KB)
    assert _value("hpcc-ns3", "rp", "rpg_ai_rate_mbps", 100e9) == pytest.approx(20.0)
    assert _value("hpcc-ns3", "rp", "rpg_hai_rate_mbps", 100e9) == pytest.approx(200.0)
    assert _value("hpcc-ns3", "red", "kmin_bytes", 100e9) == 400_000
    assert _value("hpcc-ns3", "red", "kmax_bytes", 100e9) == 1_600_000


def test_knob_names_carry_units():
    """Every knob with a physical quantity names its unit; the rest are ratios, counts, flags or modes."""
    unitless = {"g", "initial_alpha", "fast_recovery_steps", "clamp_target_rate", "alpha_update_before_cut",
                "dce_tcp_g", "alpha_rounding", "initial_alpha_value", "rate_on_first_cnp_fraction",
                "first_cnp_cuts", "rpg_gd", "clamp_tgt_rate", "clamp_tgt_rate_after_time_inc", "rpg_byte_reset",
                "rpg_threshold", "pmax", "defer"}  # fmt: skip
    units = ("_us", "_ns", "_bytes", "_mbps", "_bps", "_pct")
    for params in (get_params("paper", G25), get_params("connectx", G25), np_params("paper"),
                   red_params("paper", G25)):  # fmt: skip
        for f in dataclasses.fields(params):
            assert f.name in unitless or f.name.endswith(units), f.name


def test_none_and_fixed():
    assert isinstance(get_controller("none", G25), NoCongestionControl)
    assert get_controller("none", G25).rate_bps == G25
    fixed = get_controller("fixed", G25, rate_bps="7Gbps")
    assert isinstance(fixed, FixedRate) and fixed.rate_bps == 7e9
    assert get_controller("fixed", G25, rate_bps=40e9).rate_bps == G25       # never above the line rate
