"""PSN wrap arithmetic, DSCP/ECN helpers, UDP source port entropy."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulator.wire import (
    CE,
    ECT0,
    ECT1,
    NOT_ECT,
    PSN_MASK,
    Marking,
    dscp_of,
    ecn_of,
    is_ce,
    psn_add,
    psn_diff,
    psn_ge,
    psn_gt,
    psn_le,
    psn_lt,
    psn_range,
    tos,
    udp_source_port,
)

psns = st.integers(0, PSN_MASK)


def test_psn_wrap_examples():
    assert psn_add(0xFFFFFF, 1) == 0
    assert psn_add(0, -1) == 0xFFFFFF
    assert psn_add(0xFFFFF0, 0x20) == 0x10
    assert psn_diff(0, 0xFFFFFF) == 1
    assert psn_diff(0xFFFFFF, 0) == -1
    assert psn_lt(0xFFFFFF, 0) and psn_gt(0, 0xFFFFFF)
    assert psn_diff(1 << 23, 0) == -(1 << 23)  # the half-way point counts as "before"
    assert list(psn_range(0xFFFFFE, 4)) == [0xFFFFFE, 0xFFFFFF, 0, 1]


@given(psns, st.integers(-(1 << 23), (1 << 23) - 1))
def test_psn_add_diff_inverse(a, n):
    b = psn_add(a, n)
    assert 0 <= b <= PSN_MASK
    assert psn_diff(b, a) == n
    assert psn_add(a, psn_diff(b, a)) == b
    assert psn_gt(b, a) == (n > 0) and psn_lt(b, a) == (n < 0)
    assert psn_ge(b, a) == (n >= 0) and psn_le(b, a) == (n <= 0)


@given(psns, psns)
def test_psn_diff_antisymmetric_in_range(a, b):
    d = psn_diff(a, b)
    assert -(1 << 23) <= d < (1 << 23)
    if d != -(1 << 23):
        assert psn_diff(b, a) == -d


def test_tos_and_ecn():
    assert (NOT_ECT, ECT1, ECT0, CE) == (0, 1, 2, 3)
    assert tos(26, ECT0) == 0x6A and tos(48, ECT0) == 0xC2  # 0xC2 = the captured CX-4 Lx CNP
    assert dscp_of(0xC2) == 48 and ecn_of(0xC2) == ECT0
    assert is_ce(tos(26, CE)) and not is_ce(tos(26, ECT0)) and not is_ce(tos(26, ECT1))
    with pytest.raises(ValueError):
        tos(64, 0)
    with pytest.raises(ValueError):
        tos(0, 4)


def test_marking_defaults_and_configurable():
    m = Marking()
    assert (m.data_dscp, m.data_ecn, m.cnp_dscp) == (26, ECT0, 48)
    assert m.data_tos == 0x6A and m.cnp_tos == 0xC2
    assert Marking(data_dscp=24, data_ecn=ECT1).data_tos == 0x61
    with pytest.raises(ValueError):
        Marking(cnp_dscp=99)


def _reference_sport(lqpn, rqpn):
    """rocev2.md §2 step by step, written independently of the module."""
    v = lqpn * rqpn
    v = v ^ (v >> 20)
    v = v ^ (v >> 40)
    fl = v % (1 << 20)
    low = (fl % (1 << 14)) ^ (fl >> 14)
    return 0xC000 + low


def test_udp_source_port_worked_examples():
    assert udp_source_port(0x11, 0x22) == 0xC000 | 0x242
    # By hand (rocev2.md §2): 0x12345 · 0x6789A = 0x7_5CD5_8F82; v >> 20 = 0x75CD; v ^= → 0x7_5CD5_FA4F;
    # v >> 40 = 0; fl = 0x5FA4F; low 14 bits 0x3A4F, high 6 bits 0x17; 0x3A4F ^ 0x17 = 0x3A58 → 0xFA58
    assert udp_source_port(0x12345, 0x6789A) == 0xFA58
    # Both folds matter: 0xFFFFFF² = 0xFFFF_FE00_0001; ^ (v >> 20 = 0xFFF_FFE0) → 0xFFFF_F1FF_FFE1;
    # ^ (v >> 40 = 0xFF) → 0xFFFF_F1FF_FF1E; fl = 0xFFF1E; 0x3F1E ^ 0x3F = 0x3F21 → 0xFF21
    assert udp_source_port(0xFFFFFF, 0xFFFFFF) == 0xFF21
    assert udp_source_port(1, 1, flow_label=0xFC001) == 0xC000 | (0x0001 ^ 0x3F)
    assert udp_source_port(0, 5) == 0xC000  # product 0 -> flow label 0 -> lowest port


@given(st.integers(0, (1 << 24) - 1), st.integers(0, (1 << 24) - 1))
def test_udp_source_port_range_and_reference(lqpn, rqpn):
    sport = udp_source_port(lqpn, rqpn)
    assert 0xC000 <= sport <= 0xFFFF
    assert sport == _reference_sport(lqpn, rqpn)
