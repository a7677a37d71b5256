"""A pacer without a deficit (``max_lag_ns`` = 0) skips the gate: it answers every call exactly as the
gated two-bucket arithmetic does (the gate refills faster and is spent alike, so it never binds)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.pacing import TokenBucketPacer

_OPS = st.lists(st.tuples(st.sampled_from(["avail", "ready", "send", "rate", "idle", "burst"]),
                          st.integers(0, 50_000), st.integers(1, 20_000), st.floats(0.0, 100e9)),
                min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(rate=st.floats(1e6, 100e9), burst=st.integers(1, 200_000), full=st.booleans(), ops=_OPS)
def test_plain_bucket_answers_as_the_gated_one(rate, burst, full, ops):
    plain = TokenBucketPacer(rate, burst, start_full=full)
    gated = TokenBucketPacer(rate, burst, start_full=full)
    gated._plain = False  # the general arithmetic, gate kept
    assert plain._plain
    now = 0
    for op, dt, size, new_rate in ops:
        now += dt
        got = [_call(p, op, now, size, new_rate) for p in (plain, gated)]
        assert got[0] == got[1], (op, now)
        assert plain.available_bytes(now) == gated.available_bytes(now)
        assert plain.bytes_sent == gated.bytes_sent


def _call(p: TokenBucketPacer, op: str, now: int, size: int, rate: float) -> object:
    if op == "avail":
        return p.available_bytes(now)
    if op == "ready":
        return p.ready_ns(size, now)
    if op == "send":
        return p.try_send(size, now)
    if op == "rate":
        return p.set_rate(rate, now)
    if op == "idle":
        return p.idle(now)
    return p.take_burst(size, 8, now)
