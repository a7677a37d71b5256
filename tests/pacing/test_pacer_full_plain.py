"""``TokenBucketPacer.full_plain``: the sender's per-queue-pair bucket made in one frame is the constructor's full
plain bucket — the same attributes, values, types and order — and refuses what the constructor refuses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.endpoint.qpn import receiver_qpn
from emulator.endpoint.txqp import TxQp
from emulator.pacing.dcqcn import DcqcnPaper
from emulator.pacing.pacer import TokenBucketPacer


def _attrs(p: TokenBucketPacer) -> list:
    return [(k, type(v), v) for k, v in vars(p).items()]


@settings(max_examples=300, deadline=None)
@given(rate=st.one_of(st.integers(0, 10**12), st.floats(0, 1e12, allow_nan=False)),
       burst=st.integers(1, 1 << 24), now=st.integers(0, 1 << 50))
def test_full_plain_is_the_constructors_bucket(rate, burst, now):
    fast, slow = TokenBucketPacer.full_plain(rate, burst, now), TokenBucketPacer(rate, burst, now)
    assert _attrs(fast) == _attrs(slow)
    assert fast.plain and fast.available_bytes(now + 1000) == slow.available_bytes(now + 1000)
    assert fast.ready_ns(burst, now + 5) == slow.ready_ns(burst, now + 5)


@pytest.mark.parametrize(("rate", "burst"), [(-1.0, 100), (float("nan"), 100), (1e9, 0), (1e9, -5)])
def test_full_plain_refuses_what_the_constructor_refuses(rate, burst):
    with pytest.raises(ValueError) as slow:
        TokenBucketPacer(rate, burst, 0)
    with pytest.raises(ValueError) as fast:
        TokenBucketPacer.full_plain(rate, burst, 0)
    assert str(fast.value) == str(slow.value)


def test_a_queue_pairs_destination_qpn_is_the_receivers():
    ctrl = DcqcnPaper(25e9)
    for qp in (0, 1, 77, (1 << 22) - 1):
        assert TxQp(qp, 1, ctrl, TokenBucketPacer.full_plain(1e9, 9000, 0), None).dqpn == receiver_qpn(qp)
