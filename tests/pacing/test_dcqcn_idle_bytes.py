"""A DCQCN reaction point before its first CNP sets no clock, so the bytes it sends only move its time:
``on_bytes_sent`` then skips ``_advance`` (one call per packet on the sim), leaves the state the full
path leaves, in both forms, and answers False (its rate and timer are still those of its making: the
sender has nothing to sync)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.pacing.base import slot_names
from emulator.pacing.dcqcn import DcqcnFirmware, DcqcnPaper

_FORMS = st.sampled_from([DcqcnFirmware, DcqcnPaper])
_OPS = st.lists(st.tuples(st.sampled_from(["bytes", "bytes", "bytes", "cnp", "timer"]), st.integers(0, 400_000),
                          st.integers(1, 70_000)), min_size=1, max_size=80)


def _full_path(c, n_bytes: int, now_ns: int) -> None:
    """``on_bytes_sent`` as it was: ``_advance`` first, whatever the state."""
    c._advance(now_ns)
    if not c._active or c._byte_period_bytes <= 0:
        return
    c._byte_acc += n_bytes
    while c._byte_acc >= c._byte_period_bytes:
        c._byte_acc -= c._byte_period_bytes
        c._increase(timer=False)


@settings(max_examples=120, deadline=None)
@given(form=_FORMS, ops=_OPS)
def test_on_bytes_sent_leaves_the_state_of_the_full_path(form, ops):
    a, b = form(25e9), form(25e9)
    now = 0
    for op, dt, n in ops:
        now += dt
        if op == "bytes":
            quiet = a.on_bytes_sent(n, now) is False
            _full_path(b, n, now)
            assert quiet == (not b._active)
            if quiet:  # nothing the sender reads back changed since the controller was made
                fresh = form(25e9)
                assert (b.rate_bps, b.next_timer_ns()) == (fresh.rate_bps, fresh.next_timer_ns())
        elif op == "cnp":
            a.on_cnp(now)
            b.on_cnp(now)
        else:
            a.on_timer(now)
            b.on_timer(now)
        assert _state(a) == _state(b)
        assert a.state() == b.state()


def _state(c) -> dict:
    return {name: getattr(c, name) for name in slot_names(type(c))}


def test_before_the_first_cnp_sending_runs_no_advance():
    for form in (DcqcnFirmware, DcqcnPaper):
        calls = []

        class Spy(form):
            __slots__ = ()

            def _advance(self, now_ns, _calls=calls):
                _calls.append(now_ns)
                super()._advance(now_ns)

        c = Spy(25e9)
        c.on_bytes_sent(4096, 1000)
        assert calls == [] and c.state().t_ns == 1000
        c.on_cnp(2000)
        c.on_bytes_sent(4096, 3000)
        assert calls == [2000, 3000]
