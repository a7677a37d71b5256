"""Clock offset estimation (sans-IO): the true offset always lies within offset ± uncertainty."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulator.errors import RunError
from emulator.remote.clock import ClockSample, estimate_offset


def _sample(t1: int, offset: int, d_out: int, d_back: int, serve: int) -> ClockSample:
    t2 = t1 + d_out + offset
    t3 = t2 + serve
    return ClockSample(t1, t2, t3, t3 - offset + d_back)


@given(offset=st.integers(-10**15, 10**15),
       delays=st.lists(st.tuples(st.integers(0, 5_000_000), st.integers(0, 5_000_000), st.integers(0, 100_000)),
                       min_size=1, max_size=40))
def test_true_offset_is_within_the_uncertainty_whatever_the_delays(offset, delays):
    t1 = 10**12
    samples = []
    for d_out, d_back, serve in delays:
        samples.append(_sample(t1, offset, d_out, d_back, serve))
        t1 += d_out + d_back + serve + 1000
    est = estimate_offset(samples)
    assert abs(est.offset_ns - offset) <= est.uncertainty_ns
    assert est.min_rtt_ns == min(d_o + d_b for d_o, d_b, _ in delays)


def test_minimum_rtt_samples_are_kept_and_symmetric_delays_give_the_exact_offset():
    samples = [_sample(1000 * i, 12345, 50, 50, 5) for i in range(4)] + \
              [_sample(10**6 + i, 12345, 900_000, 10, 5) for i in range(4)]  # slow, asymmetric: dropped
    est = estimate_offset(samples)
    assert est.kept == 4 and est.min_rtt_ns == 100
    assert est.offset_ns == 12345 and est.uncertainty_ns <= 51


def test_no_sample_is_an_error():
    with pytest.raises(RunError, match="no exchange"):
        estimate_offset([])
