"""NP spacing and CP (RED) marking probabilities."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.errors import ConfigError
from emulator.pacing import (
    CnpGenerator,
    NpParams,
    RedMarker,
    RedParams,
    mark_probability,
    np_params,
    red_params,
)

US = 1_000


# ------------------------------------------------------------------------------------------------------ NP
def test_np_connectx_spacing_drops_marks_inside_the_interval():
    np_gen = CnpGenerator(np_params("connectx"))                 # 4 µs, no deferral
    assert np_gen.on_packet("qp1", True, 0) is True
    assert np_gen.on_packet("qp1", True, 1 * US) is False
    assert np_gen.on_packet("qp1", True, 3999) is False
    assert np_gen.on_packet("qp2", True, 3999) is True           # per queue pair
    assert np_gen.on_packet("qp1", True, 4 * US) is True
    assert np_gen.next_timer_ns() is None
    assert np_gen.cnps_sent == 3 and np_gen.ce_packets == 5 and np_gen.ce_unanswered == 2


def test_np_only_ce_triggers():
    np_gen = CnpGenerator(NpParams(0))
    assert not any(np_gen.on_packet(1, False, t) for t in range(0, 100 * US, US))
    assert np_gen.cnps_sent == 0
    assert all(np_gen.on_packet(1, True, t) for t in range(0, 10 * US, US))   # interval 0: every CE packet


def test_np_paper_defers_one_cnp_to_the_end_of_the_window():
    np_gen = CnpGenerator(np_params("paper"))                    # 50 µs, deferred
    assert np_gen.on_packet("a", True, 0) is True
    assert np_gen.on_packet("a", True, 10 * US) is False
    assert np_gen.on_packet("a", True, 20 * US) is False         # still one pending CNP
    assert np_gen.on_packet("a", False, 30 * US) is False
    assert np_gen.next_timer_ns() == 50 * US
    assert np_gen.on_timer(49_999) == []
    assert np_gen.on_timer(50 * US) == ["a"]
    assert np_gen.next_timer_ns() is None
    assert np_gen.on_packet("a", True, 60 * US) is False         # last CNP at 50 µs → next window ends at 100
    assert np_gen.next_timer_ns() == 100 * US
    assert np_gen.on_packet("b", False, 70 * US) is False
    assert np_gen.on_timer(200 * US) == ["a"]
    assert np_gen.cnps_sent == 3


@settings(max_examples=80, deadline=None)
@given(interval_us=st.integers(0, 60), defer=st.booleans(),
       arrivals=st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.integers(0, 30 * US)), max_size=80))
def test_np_cnps_per_qp_are_spaced_by_the_interval(interval_us, defer, arrivals):
    interval = interval_us * US
    np_gen = CnpGenerator(NpParams(interval, defer))
    sent: dict[int, list[int]] = {}
    t = 0
    for qp, ce, dt in arrivals:
        t += dt
        due = np_gen.next_timer_ns()
        while due is not None and due <= t:
            for q in np_gen.on_timer(due):
                sent.setdefault(q, []).append(due)
            due = np_gen.next_timer_ns()
        if np_gen.on_packet(qp, ce, t):
            assert ce
            sent.setdefault(qp, []).append(t)
    for times in sent.values():
        assert all(b - a >= interval for a, b in zip(times, times[1:], strict=False))
    assert sum(len(v) for v in sent.values()) == np_gen.cnps_sent <= np_gen.ce_packets


# ----------------------------------------------------------------------------------------------------- RED
def test_red_probability_at_between_and_beyond_thresholds():
    p = RedParams(kmin_bytes=100_000, kmax_bytes=400_000, pmax=0.2)
    assert mark_probability(p, 0) == 0.0
    assert mark_probability(p, 100_000) == 0.0                   # at Kmin: 0
    assert mark_probability(p, 250_000) == pytest.approx(0.1)    # halfway: Pmax/2
    assert mark_probability(p, 400_000) == pytest.approx(0.2)    # at Kmax: Pmax
    assert mark_probability(p, 400_001) == 1.0                   # beyond Kmax: 1
    step = RedParams(kmin_bytes=50_000, kmax_bytes=50_000, pmax=1.0)   # DCTCP-style
    assert mark_probability(step, 50_000) == 0.0 and mark_probability(step, 50_001) == 1.0


@pytest.mark.parametrize("rng_factory", [lambda: random.Random(7), lambda: np.random.default_rng(7)])
@pytest.mark.parametrize("queue_bytes,p_expected", [(100_000, 0.0), (175_000, 0.05), (250_000, 0.1),
                                                     (400_000, 0.2), (500_000, 1.0)])
def test_red_marking_rate_matches_probability(rng_factory, queue_bytes, p_expected):
    marker = RedMarker(RedParams(kmin_bytes=100_000, kmax_bytes=400_000, pmax=0.2), rng_factory())
    n = 20_000
    marks = sum(marker.should_mark(queue_bytes) for _ in range(n))
    sd = math.sqrt(n * p_expected * (1 - p_expected))
    assert abs(marks - n * p_expected) <= 5 * sd + 1e-9          # 5 binomial sd: fails ~1 in 1.7 million


def test_red_same_seed_same_marks():
    a = RedMarker(RedParams(0, 100, 0.5), random.Random(3))
    b = RedMarker(RedParams(0, 100, 0.5), random.Random(3))
    assert [a.should_mark(50) for _ in range(200)] == [b.should_mark(50) for _ in range(200)]


@pytest.mark.parametrize("kwargs,fragment", [({"kmin_bytes": 10, "kmax_bytes": 5}, "kmax_bytes"),
                                             ({"pmax": 1.5}, "pmax"), ({"kmin_bytes": -1}, "kmin_bytes")])
def test_red_validation(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        RedParams(**kwargs)


def test_red_presets():
    assert red_params("paper", 40e9) == RedParams(5_000, 200_000, 0.01)
    assert red_params("hpcc-ns3", 100e9) == RedParams(400_000, 1_600_000, 0.2)
    assert red_params("connectx", 100e9) == RedParams(150_000, 1_500_000, 1.0)     # NVIDIA switch defaults
    assert np_params("paper") == NpParams(50_000, True)
    assert np_params("connectx").min_time_between_cnps_ns == 4_000
