"""``spend`` is ``try_send`` for a caller that knows the tokens are there (the sim's one-packet visit asked
``available_bytes`` at the same time): the same bucket after it, plain or with a deficit."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.pacing import TokenBucketPacer

_OPS = st.lists(st.tuples(st.integers(0, 50_000), st.integers(1, 20_000), st.booleans(), st.floats(1e6, 100e9)),
                min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(rate=st.floats(1e6, 100e9), burst=st.integers(1, 200_000), full=st.booleans(),
       lag=st.sampled_from([0, 0, 50_000]), ops=_OPS)
def test_spend_leaves_the_bucket_try_send_leaves(rate, burst, full, lag, ops):
    a = TokenBucketPacer(rate, burst, start_full=full, max_lag_ns=lag)
    b = TokenBucketPacer(rate, burst, start_full=full, max_lag_ns=lag)
    now = 0
    spent = 0
    for dt, size, ask, new_rate in ops:
        now += dt
        if ask:  # a backlogged owner (accrues a deficit when it has a lag bound)
            assert a.ready_ns(size, now) == b.ready_ns(size, now)
        if a.available_bytes(now) >= size:
            assert b.available_bytes(now) >= size
            a.spend(size)
            assert b.try_send(size, now)
            spent += 1
        else:
            a.set_rate(new_rate, now)
            b.set_rate(new_rate, now)
        assert vars(a) == vars(b)
    assert a.bytes_sent == b.bytes_sent
