"""How late a worker's timed sleeps end: the wake-up it should ask for to be awake when its timer is due.

A worker sleeps in ``select`` until ``spin_ns`` before its next timer and polls from there. On the 2-vCPU VM
the benches run on (``haltpoll`` idle driver with its guest polling off), a ``select`` of 200 µs with 1 µs
timer slack returned 31–33 µs late at the median, 37–39 µs at p90, 71–86 µs at p99 (a 1 ms sleep: 48 / 59 /
127 µs): a 20 µs spin window that starts when the sleep was asked to end is over before the worker is
awake, and every paced timer is served ~13 µs late at the median (bench/pacing.py's generator lag, p99
45–134 µs on an idle machine). :class:`WakeEstimate` learns that overshoot from the sleeps that timed out,
so the worker asks to wake that much earlier; it spins only the window it was configured for.

Sans-IO: the caller measures each sleep and hands the overshoot in ns.
"""

from __future__ import annotations

#: an overshoot longer than this counts as this much (a preemption, not the wake-up path)
WAKE_CAP_NS = 200_000
#: the estimate follows 1/2**WAKE_SHIFT of each new sample (an exponential average over ~16 sleeps)
WAKE_SHIFT = 4
#: a sleep is asked to end early only when it is at least this many times the estimate, so the spin it adds is
#: at most 1/WAKE_FROM of the time slept: a flow paced at a sleep's overshoot or two per batch (8 Gbit/s on
#: loopback) would otherwise spin most of its gaps (goodput_direct: sender loop busy 90 % against 66–79 %),
#: while a 200 µs wait (bench/pacing.py's generator lag) still wakes early (4 would leave it: p50 34 µs)
WAKE_FROM = 2


class WakeEstimate:
    """An exponential average of how late timed sleeps end, each sample capped at ``cap_ns``."""

    __slots__ = ("cap_ns", "early_ns", "samples")

    def __init__(self, cap_ns: int = WAKE_CAP_NS) -> None:
        self.cap_ns = cap_ns
        #: how much earlier than the wanted time to ask to wake up (0 until a sleep was measured)
        self.early_ns = 0
        self.samples = 0

    def observe(self, late_ns: int) -> int:
        """A sleep asked to end at some time ended ``late_ns`` after it (negative: before); returns the new
        :attr:`early_ns`."""
        x = min(max(late_ns, 0), self.cap_ns)
        if self.samples == 0:
            self.early_ns = x
        else:
            self.early_ns += (x - self.early_ns) >> WAKE_SHIFT
        self.samples += 1
        return self.early_ns
