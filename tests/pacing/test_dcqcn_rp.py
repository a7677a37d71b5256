"""DCQCN reaction point: trajectories worked out by hand from the equations in docs/dcqcn.md §4–§5."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.errors import ConfigError
from emulator.pacing import (
    DcqcnFirmware,
    DcqcnFirmwareParams,
    DcqcnPaper,
    DcqcnPaperParams,
    FixedRate,
    NoCongestionControl,
    RateController,
    get_controller,
    get_params,
)

G25 = 25e9
US = 1_000


# --------------------------------------------------------------------------------------------------- paper form
def test_paper_cnp_at_line_rate_with_alpha_one_halves_and_sets_target_to_old_rate():
    c = DcqcnPaper(G25)
    assert c.rate_bps == G25 and c.next_timer_ns() is None     # no slow start, idle at line rate
    c.on_cnp(0)
    s = c.state()
    assert s.rate_bps == 12.5e9
    assert s.target_rate_bps == 25e9
    assert s.alpha == 1.0                                       # (1 − g)·1 + g
    assert s.cuts == 1 and s.cnps_received == 1
    assert c.next_timer_ns() == 55 * US                          # increase timer T restarted at the CNP


def test_paper_alpha_update_before_cut_follows_the_ns3_order():
    p = DcqcnPaperParams(initial_alpha=0.5, alpha_update_before_cut=True)
    c = DcqcnPaper(G25, p)
    c.on_cnp(0)
    a = (1 - 1 / 256) * 0.5 + 1 / 256                           # 0.501953125
    assert c.state().alpha == pytest.approx(0.501953125)
    assert c.rate_bps == pytest.approx(G25 * (1 - a / 2))
    c2 = DcqcnPaper(G25, dataclasses.replace(p, alpha_update_before_cut=False))
    c2.on_cnp(0)
    assert c2.rate_bps == pytest.approx(G25 * 0.75)             # paper order: cut with the old α = 0.5


def test_paper_no_clamp_keeps_target():
    c = DcqcnPaper(G25, DcqcnPaperParams(clamp_target_rate=False))
    c.on_cnp(0)
    c.on_cnp(1 * US)
    assert c.target_rate_bps == G25 and c.rate_bps == 6.25e9


def test_paper_alpha_decays_by_one_minus_g_per_K_and_half_life_is_9_7_ms():
    c = DcqcnPaper(G25)
    c.on_cnp(0)                                                 # α = 1, α timer (K = 55 µs) starts
    g = 1 / 256
    for k in (1, 2, 10, 100):
        c.on_timer(k * 55 * US - 1)
        assert c.state().alpha == pytest.approx((1 - g) ** (k - 1), rel=1e-12)
        c.on_timer(k * 55 * US)
        assert c.state().alpha == pytest.approx((1 - g) ** k, rel=1e-12)
    # (255/256)^177 = 0.50019 > 0.5, (255/256)^178 = 0.49824: half-life 178 periods = 9.79 ms
    c.on_timer(177 * 55 * US)
    assert c.state().alpha > 0.5
    c.on_timer(178 * 55 * US)
    assert c.state().alpha < 0.5
    assert 9.7e6 <= 178 * 55 * US <= 9.8e6


def test_paper_fast_recovery_then_additive_with_exact_rates():
    c = DcqcnPaper(G25)
    c.on_cnp(0)              # R_C 12.5, R_T 25
    c.on_cnp(1 * US)         # α still 1 (no full K elapsed): R_T 12.5, R_C 6.25
    assert (c.rate_bps, c.target_rate_bps) == (6.25e9, 12.5e9)
    # timer events at 56, 111, ... µs; the first F = 5 are fast recovery: R_C ← (R_T + R_C)/2, gap halves
    expected_rc = [9.375e9, 10.9375e9, 11.71875e9, 12.109375e9, 12.3046875e9]
    for k, rc in enumerate(expected_rc, start=1):
        c.on_timer(1 * US + k * 55 * US)
        assert c.rate_bps == rc and c.target_rate_bps == 12.5e9
        assert c.state().time_stage == k
    gap = (12.5e9 - c.rate_bps) / (12.5e9 - 6.25e9)
    assert gap == pytest.approx(1 / 32)                          # 3.1 % after 5 events
    # event 6, 7: additive increase, R_T += 40 Mb/s
    c.on_timer(1 * US + 6 * 55 * US)
    assert c.target_rate_bps == pytest.approx(12.54e9)
    assert c.rate_bps == pytest.approx(12.42234375e9)           # (12.54 + 12.3046875)/2
    c.on_timer(1 * US + 7 * 55 * US)
    assert c.target_rate_bps == pytest.approx(12.58e9)
    assert c.rate_bps == pytest.approx(12.501171875e9)


def test_paper_hyper_increase_needs_both_counters_at_F_and_grows_by_i_times_hai():
    c = DcqcnPaper(G25, DcqcnPaperParams(byte_counter_bytes=1_000_000))
    c.on_cnp(0)
    c.on_cnp(1 * US)                                             # R_T 12.5 G, R_C 6.25 G
    c.on_bytes_sent(5_000_000, 2 * US)                           # 5 byte events, all fast recovery
    assert c.state().byte_stage == 5 and c.rate_bps == 12.3046875e9 and c.target_rate_bps == 12.5e9
    # 5 timer events: max(T, BC) = 5 ≥ F but min(T, BC) = T < F → additive, +40 Mb/s each
    for k, rt in enumerate([12.54e9, 12.58e9, 12.62e9, 12.66e9, 12.70e9], start=1):
        c.on_timer(1 * US + k * 55 * US)
        assert c.target_rate_bps == pytest.approx(rt)
    assert c.rate_bps == pytest.approx(12.655146484375e9)
    # now T = BC = 5: a byte event is hyper with i = min − F + 1 = 1 → +200 Mb/s
    c.on_bytes_sent(1_000_000, 277 * US)
    assert c.target_rate_bps == pytest.approx(12.90e9)
    assert c.rate_bps == pytest.approx((12.90e9 + 12.655146484375e9) / 2)
    c.on_bytes_sent(1_000_000, 278 * US)                         # T 5, BC 6: i = 1
    assert c.target_rate_bps == pytest.approx(13.10e9)
    c.on_timer(331 * US)                                         # T 5, BC 7: i = 1
    assert c.target_rate_bps == pytest.approx(13.30e9)
    c.on_timer(386 * US)                                         # T 6, BC 7: i = 2 → +400 Mb/s
    assert c.target_rate_bps == pytest.approx(13.70e9)
    assert c.rate_bps == pytest.approx(13.409696655273438e9)


def test_byte_counter_fires_every_B_bytes():
    c = DcqcnPaper(G25, DcqcnPaperParams(byte_counter_bytes=1_000_000))
    c.on_bytes_sent(5_000_000, 0)                                # before the first CNP: nothing counts
    assert c.state().increase_events == 0
    c.on_cnp(0)
    c.on_bytes_sent(999_999, 1 * US)
    assert c.state().byte_stage == 0
    c.on_bytes_sent(1, 2 * US)
    assert c.state().byte_stage == 1 and c.rate_bps == 18.75e9
    c.on_bytes_sent(3_000_000, 3 * US)
    assert c.state().byte_stage == 4
    c.on_bytes_sent(999_999, 4 * US)
    assert c.state().byte_stage == 4
    c.on_cnp(5 * US)                                             # a CNP resets the counter and the stages
    c.on_bytes_sent(1, 6 * US)
    assert c.state().byte_stage == 0


def test_firmware_byte_counter_unit_is_64_bytes():
    c = DcqcnFirmware(G25, DcqcnFirmwareParams(rpg_byte_reset=100, rate_to_set_on_first_cnp_mbps=10_000))
    c.on_cnp(0)
    c.on_bytes_sent(6399, 1 * US)
    assert c.state().byte_stage == 0
    c.on_bytes_sent(1, 1 * US)
    assert c.state().byte_stage == 1


def test_min_rate_floor_and_max_rate_cap():
    c = DcqcnPaper(G25)
    for k in range(40):
        c.on_cnp(k * US)
    assert c.rate_bps == 100e6                                   # preset floor: 100 Mb/s
    capped = DcqcnPaper(G25, DcqcnPaperParams(max_rate_mbps=10_000))
    assert capped.rate_bps == 10e9
    capped.on_cnp(0)
    for k in range(1, 200):
        capped.on_timer(k * 55 * US)
    assert capped.rate_bps == 10e9 and capped.target_rate_bps == 10e9
    assert capped.next_timer_ns() is None                        # back at the cap: idle
    fw = DcqcnFirmware(G25, DcqcnFirmwareParams(rpg_min_rate_mbps=2_000, rpg_min_dec_fac_pct=0))
    fw.on_cnp(0)
    for k in range(1, 100):
        fw.on_cnp(k * 4 * US)
    fw.on_timer(500 * US)
    assert fw.rate_bps >= 2e9


def test_late_timer_call_replays_missed_events():
    a, b = DcqcnPaper(G25), DcqcnPaper(G25)
    a.on_cnp(0)
    b.on_cnp(0)
    for k in range(1, 8):
        a.on_timer(k * 55 * US)
    b.on_timer(7 * 55 * US)
    assert a.state() == b.state()


# ------------------------------------------------------------------------------------------------ firmware form
def _alpha_exact(alpha_1024: float, cnp: bool, G: int = 1019) -> float:
    """docs/dcqcn.md §5 in ConnectX units, no rounding."""
    a = G * alpha_1024 / 1024
    return a + 1024 - G if cnp else a


def _alpha_floor(alpha: int, cnp: bool, G: int = 1019) -> int:
    a = G * alpha // 1024
    return min(1023, a + 1024 - G) if cnp else a


def test_connectx_alpha_is_exact_by_default_with_the_documented_half_life():
    c = get_controller("connectx", G25)                          # α = 1023/1024 on the first CNP, flag clear
    c.on_cnp(0)
    assert c.state().alpha == 1023 / 1024
    c.on_timer(1 * US)
    assert c.state().alpha == pytest.approx(1019 * 1023 / 1024 / 1024, rel=1e-12)   # 1017.995/1024, not 1018
    c.on_timer(142 * US)
    assert c.state().alpha == pytest.approx(1023 / 1024 * (1019 / 1024) ** 142)    # 0.4986: one half-life
    c.on_timer(141 * US)                                          # (a late call is a no-op for the past)
    c2 = get_controller("connectx", G25)
    c2.on_cnp(0)
    c2.on_timer(141 * US)
    assert c2.state().alpha > 0.5 > c.state().alpha
    c.on_timer(2_000 * US)                                        # still geometric, never 0: 14 half-lives
    assert c.state().alpha == pytest.approx(1023 / 1024 * (1019 / 1024) ** 2000)
    assert 0 < c.state().alpha < 1e-4


def test_alpha_rounding_floor_steps_and_falls_to_zero():
    c = DcqcnFirmware(G25, DcqcnFirmwareParams(alpha_rounding="floor"))
    c.on_cnp(0)
    assert c.state().alpha == 1023 / 1024
    c.on_timer(1 * US)
    assert c.state().alpha == 1018 / 1024                        # ⌊1019·1023/1024⌋ = 1018
    c.on_timer(2 * US)
    assert c.state().alpha == 1013 / 1024                        # ⌊1019·1018/1024⌋ = 1013
    a, k = 1023, 0
    while a > 511:
        a, k = _alpha_floor(a, False), k + 1
    c.on_timer(k * US)
    assert c.state().alpha == a / 1024
    c2 = DcqcnFirmware(G25, DcqcnFirmwareParams(alpha_rounding="floor"))
    c2.on_cnp(0)
    c2.on_timer((k - 1) * US)
    assert c2.state().alpha > 511 / 1024
    assert 125 <= k <= 142                                       # flooring makes it a little faster than 142 µs
    while a > 0:
        a, k = _alpha_floor(a, False), k + 1
    assert k < 600                                               # below ≈205/1024 it loses 1/1024 per µs
    c.on_timer((k - 1) * US)
    assert c.state().alpha > 0
    c.on_timer(k * US)
    assert c.state().alpha == 0.0


def test_alpha_rounding_nearest_stops_near_a_tenth():
    c = DcqcnFirmware(G25, DcqcnFirmwareParams(alpha_rounding="nearest"))
    c.on_cnp(0)
    c.on_timer(1 * US)
    assert c.state().alpha == 1018 / 1024                        # round(1017.995) = 1018
    c.on_timer(10_000 * US)
    a = 1023
    for _ in range(10_000):
        a = round(1019 * a / 1024)
    assert c.state().alpha == a / 1024 and 100 <= a <= 103       # 5·α/1024 rounds to 0 below ≈ 102.4


def test_firmware_float_alpha_half_life_is_142_us():
    p = DcqcnFirmwareParams(initial_alpha_value=1024)
    c = DcqcnFirmware(G25, p)
    c.on_cnp(0)
    c.on_timer(141 * US)
    assert c.state().alpha == pytest.approx((1019 / 1024) ** 141)   # 0.50149
    assert c.state().alpha > 0.5
    c.on_timer(142 * US)
    assert c.state().alpha == pytest.approx((1019 / 1024) ** 142)   # 0.49905
    assert c.state().alpha < 0.5


def test_firmware_two_cnps_in_one_monitor_period_give_one_cut():
    c = DcqcnFirmware(G25)
    c.on_cnp(0)                                                  # arms the clocks (grid 4, 8, 12 µs), no cut
    assert c.rate_bps == G25 and c.state().cuts == 0
    c.on_cnp(5 * US)
    c.on_cnp(6 * US)
    assert c.next_timer_ns() == 8 * US
    c.on_timer(8 * US)
    # α by hand: ticks 1..5 decay from 1023; CNP after tick 5 → tick 6 adds; CNP after tick 6 → tick 7 adds;
    # tick 8 decays (α ticks run before the monitor tick at the same instant)
    a = 1023.0
    for cnp in (False, False, False, False, False, True, True, False):
        a = _alpha_exact(a, cnp)
    assert c.state().alpha == pytest.approx(a / 1024, rel=1e-12)
    assert c.state().cuts == 1
    assert c.rate_bps == pytest.approx(G25 - min(G25 * a / 2048, G25 * 0.5))
    c.on_timer(40 * US)
    assert c.state().cuts == 1
    assert c.target_rate_bps == G25                              # no timer increase yet → no clamp


def test_firmware_cut_cap_rpg_min_dec_fac():
    c = DcqcnFirmware(G25, DcqcnFirmwareParams(rpg_min_dec_fac_pct=90, rpg_gd=10))  # α·R cut, capped at 10 %
    c.on_cnp(0)
    c.on_cnp(1 * US)
    c.on_timer(4 * US)
    assert c.rate_bps == pytest.approx(G25 * 0.9)
    never = DcqcnFirmware(G25, DcqcnFirmwareParams(rpg_min_dec_fac_pct=100))
    never.on_cnp(0)
    never.on_cnp(1 * US)
    never.on_timer(4 * US)
    assert never.rate_bps == G25


def test_firmware_stages_fast_recovery_additive_hyper_hpcc():
    c = get_controller("hpcc-ns3", G25)                          # F = 1, timer 300 µs, no byte counter
    c.on_cnp(0)
    c.on_timer(4 * US)
    r0 = c.rate_bps
    assert c.target_rate_bps == G25                              # no clamp (no timer increase yet)
    c.on_cnp(5 * US)
    c.on_timer(8 * US)                                           # second cut
    r1 = c.rate_bps
    assert r1 < r0
    t0 = 8 * US
    c.on_timer(t0 + 300 * US)                                    # stage 0 < F: fast recovery
    assert c.target_rate_bps == G25 and c.rate_bps == pytest.approx((G25 + r1) / 2)
    assert c.state().time_stage == 1


def test_firmware_additive_then_hyper_with_exact_rates():
    p = DcqcnFirmwareParams(rate_to_set_on_first_cnp_mbps=10_000, rpg_byte_reset=0)  # timer only, F = 1
    c = DcqcnFirmware(G25, p)
    c.on_cnp(0)
    assert (c.rate_bps, c.target_rate_bps) == (10e9, 10e9)
    assert c.next_timer_ns() == 300 * US
    c.on_timer(300 * US)                                         # stage 0: fast recovery (no change)
    assert (c.rate_bps, c.target_rate_bps) == (10e9, 10e9)
    c.on_timer(600 * US)                                         # stage 1 = F: additive, +5 Mb/s
    assert c.target_rate_bps == pytest.approx(10.005e9) and c.rate_bps == pytest.approx(10.0025e9)
    c.on_timer(900 * US)                                         # stage 2 > F: hyper, +50 Mb/s
    assert c.target_rate_bps == pytest.approx(10.055e9) and c.rate_bps == pytest.approx(10.02875e9)
    c.on_timer(1200 * US)                                        # constant +50 Mb/s (no i multiplier)
    assert c.target_rate_bps == pytest.approx(10.105e9)


def test_firmware_clamp_after_time_increase():
    p = DcqcnFirmwareParams(rate_to_set_on_first_cnp_mbps=10_000)
    c = DcqcnFirmware(G25, p)
    c.on_cnp(0)
    c.on_timer(300 * US)                                         # a timer increase happened
    c.on_timer(600 * US)                                         # R_T 10.005 G, R_C 10.0025 G
    c.on_cnp(601 * US)
    c.on_timer(604 * US)
    assert c.target_rate_bps == pytest.approx(10.0025e9)         # clamped to R_C before the cut
    noclamp = DcqcnFirmware(G25, dataclasses.replace(p, clamp_tgt_rate_after_time_inc=False))
    noclamp.on_cnp(0)
    noclamp.on_timer(600 * US)
    noclamp.on_cnp(601 * US)
    noclamp.on_timer(604 * US)
    assert noclamp.target_rate_bps == pytest.approx(10.005e9)
    always = DcqcnFirmware(G25, DcqcnFirmwareParams(clamp_tgt_rate=True, first_cnp_cuts=True))
    always.on_cnp(0)
    always.on_timer(4 * US)
    assert always.target_rate_bps == G25                         # R_C was 25 G at the clamp
    always.on_cnp(5 * US)
    r = always.rate_bps
    always.on_timer(8 * US)
    assert always.target_rate_bps == r


# ----------------------------------------------------------------------------------------------- first CNP
def test_first_cnp_paper_halves_at_once():
    c = get_controller("paper", G25)
    c.on_cnp(10 * US)
    assert c.rate_bps == 12.5e9 and c.target_rate_bps == G25


def test_first_cnp_connectx_sets_alpha_and_does_not_cut():
    c = get_controller("connectx", G25)
    c.on_cnp(10 * US)
    assert c.rate_bps == G25 and c.state().alpha == 1023 / 1024
    assert c.next_timer_ns() is None                             # nothing pending, at line rate
    c.on_timer(100 * US)
    assert c.rate_bps == G25 and c.state().cuts == 0
    c.on_cnp(101 * US)                                           # the second CNP cuts at the next grid point
    assert c.next_timer_ns() == 102 * US                         # grid: 10 + 4k µs
    c.on_timer(102 * US)
    a = 1023.0                                                   # α ticks at 11..102 µs; the CNP flag at 102
    for k in range(92):
        a = _alpha_exact(a, k == 91)
    assert c.state().cuts == 1 and c.state().alpha == pytest.approx(a / 1024, rel=1e-12)
    assert c.rate_bps == pytest.approx(G25 * (1 - a / 2048))     # α ≈ 0.64 → a 32 % cut, R_T stays at line
    assert c.target_rate_bps == G25


def test_first_cnp_rate_zero_keeps_the_current_rate_or_applies_the_fraction():
    c = get_controller("connectx", G25, rpg_max_rate_mbps=10_000)  # running at a 10 G cap when the CNP comes
    c.on_cnp(0)
    assert (c.rate_bps, c.target_rate_bps) == (10e9, 10e9)
    half = get_controller("connectx", G25, rate_on_first_cnp_fraction=0.5)
    half.on_cnp(0)
    assert (half.rate_bps, half.target_rate_bps) == (12.5e9, 12.5e9) and half.state().cuts == 0


def test_first_cnp_connectx_rate_to_set():
    c = get_controller("connectx", G25, rate_to_set_on_first_cnp_mbps=1_000)
    c.on_cnp(0)
    assert c.rate_bps == 1e9 and c.target_rate_bps == 1e9 and c.state().cuts == 0


def test_first_cnp_hpcc_cuts_at_first_check_with_alpha_near_one():
    c = get_controller("hpcc-ns3", G25)
    c.on_cnp(0)
    assert c.rate_bps == G25 and c.next_timer_ns() == 4 * US
    c.on_timer(4 * US)
    g = 1 / 256
    alpha = (1 - g) ** 3        # tick 1: CNP flag → (1−g)·1 + g = 1; ticks 2, 3, 4 decay
    assert c.state().alpha == pytest.approx(alpha)
    assert c.rate_bps == pytest.approx(G25 * (1 - alpha / 2))    # ≈ 12.65 G: roughly halves


def test_none_and_fixed_ignore_cnps():
    n = get_controller("none", G25)
    f = get_controller("fixed", G25, rate_bps="10Gbps")
    assert isinstance(n, NoCongestionControl) and isinstance(f, FixedRate)
    for c in (n, f):
        c.on_cnp(0)
        c.on_bytes_sent(10**9, 1)
        c.on_timer(2)
        assert c.next_timer_ns() is None and c.state().cnps_received == 1
    assert n.rate_bps == G25 and f.rate_bps == 10e9


# ----------------------------------------------------------------------------------------------- configuration
def test_presets_return_parameter_dataclasses():
    assert isinstance(get_params("paper", G25), DcqcnPaperParams)
    assert isinstance(get_params("connectx", G25), DcqcnFirmwareParams)
    hp = get_params("hpcc-ns3", 100e9)
    assert hp.rpg_ai_rate_mbps == pytest.approx(20) and hp.rpg_hai_rate_mbps == pytest.approx(200)
    assert get_params("paper", G25, g=1 / 16).g == 1 / 16
    for name in ("paper", "connectx", "hpcc-ns3", "none"):
        assert isinstance(get_controller(name, G25), RateController)


@pytest.mark.parametrize("name,kwargs,fragment", [
    ("paper", {"bogus_knob": 1}, "'bogus_knob'"),
    ("connectx", {"rpg_ai_rate": 5}, "'rpg_ai_rate'"),
    ("paper", {"g": 0}, "'g'"),
    ("paper", {"fast_recovery_steps": 2.5}, "'fast_recovery_steps'"),
    ("connectx", {"dce_tcp_g": 2000}, "'dce_tcp_g'"),
    ("connectx", {"clamp_tgt_rate": "yes"}, "'clamp_tgt_rate'"),
    ("connectx", {"alpha_rounding": "up"}, "'alpha_rounding'"),
    ("connectx", {"rpg_max_rate_mbps": 0.5}, "'rpg_max_rate_mbps'"),
    ("nope", {}, "'nope'"),
    ("fixed", {}, "'rate_bps'"),
    ("fixed", {"rate_bps": "fast"}, "'rate_bps'"),
    ("none", {"g": 1}, "'g'"),
])
def test_bad_configuration_names_the_knob(name, kwargs, fragment):
    with pytest.raises(ConfigError) as exc:
        get_controller(name, G25, **kwargs)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


# ----------------------------------------------------------------------------------------------- properties
_inputs = st.lists(st.tuples(st.sampled_from(["cnp", "bytes", "timer"]), st.integers(0, 400 * US),
                             st.integers(1, 4_000_000)), max_size=60)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["paper", "connectx", "hpcc-ns3"]), line_gbps=st.sampled_from([10, 25, 100]),
       max_frac=st.sampled_from([0, 0.5]), inputs=_inputs, rounding=st.sampled_from(["exact", "floor", "nearest"]))
def test_rate_always_within_min_and_max(name, line_gbps, max_frac, inputs, rounding):
    line = line_gbps * 1e9
    knob = "max_rate_mbps" if name == "paper" else "rpg_max_rate_mbps"
    extra = {} if name == "paper" else {"alpha_rounding": rounding}
    c = get_controller(name, line, **{knob: max_frac * line / 1e6}, **extra)
    lo, hi = c.min_rate_bps, c.max_rate_bps
    t = 0
    for kind, dt, n in inputs:
        t += dt
        nt = c.next_timer_ns()
        if nt is not None and nt <= t:
            c.on_timer(nt)
            assert lo <= c.rate_bps <= hi
        if kind == "cnp":
            c.on_cnp(t)
        elif kind == "bytes":
            c.on_bytes_sent(n, t)
        else:
            c.on_timer(t)
        s = c.state()
        assert lo <= s.rate_bps <= hi and s.target_rate_bps <= hi
        assert 0.0 <= s.alpha <= 1.0
        nt = c.next_timer_ns()
        assert nt is None or nt > t
