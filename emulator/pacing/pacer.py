"""Pacer: a token bucket with a bounded burst that turns a rate into send times for packets and batches.

Theory of operation
-------------------
Tokens accrue at ``rate_bps`` up to a cap of ``burst_bytes``; sending ``n`` bytes spends ``n`` bytes of
tokens and is allowed only when that many are there. For any window ``[t, t + W]`` the bytes sent are
therefore at most ``burst_bytes + ∫ rate dt`` (= ``burst + rate·W`` at a constant rate), and a backlogged
sender that honours :meth:`TokenBucketPacer.ready_ns` sends at least ``rate·W − burst − one packet``.
With ``burst_bytes`` around one GSO batch a driver can send a whole batch per timer tick and still hold
the rate over every window much longer than ``burst/rate``; :func:`burst_for` picks a burst that stays
within a given fraction of ``rate × 100 µs``.

Arithmetic is exact: one byte is ``8·10⁹`` token units and the bucket gains ``rate_bps`` units per ns,
so rounding never lets the upper bound slip. Send times are whole nanoseconds (rounded up), so with a
burst of exactly one packet the bucket is full at each send and up to 1 ns of tokens per packet is lost
(0.3 % for 4 KiB at 100 Gb/s); a burst of two packets or more loses nothing. Times only move forward: a call stamped before the bucket's own
clock (e.g. after :meth:`send_times` scheduled packets into the future) acts at the bucket's clock.

Deficit (``max_lag_ns`` > 0)
---------------------------
A plain bucket loses what a late owner would have earned beyond ``burst_bytes``: a driver that wakes 5 ms
late on a 1 ms bucket sends 4 ms less, for ever. With ``max_lag_ns`` the bucket keeps the intended
schedule instead: while the owner is *backlogged* (it asked :meth:`ready_ns`, and has not called
:meth:`idle` since) tokens keep accruing beyond ``burst_bytes``, up to ``rate ×
max_lag_ns`` more — the deficit of a late owner. What may go *at once* is bounded by a second bucket, the
*gate*: capacity ``burst_bytes``, refilled at ``rate × catch_up_ratio``, spent with every send. So after a
late wake-up at most ``burst_bytes`` go back to back, then the deficit is repaid at up to
``catch_up_ratio × rate`` until the schedule is met again: over any window ``[a, b]`` at most
``burst_bytes + catch_up_ratio·rate·(b−a)`` go, and the deficit of a late wake-up is repaid in full as long
as the later wake-ups come often enough (each sends at most ``burst_bytes``: an owner always late by more
than about ``burst / rate`` stays behind). While the tokens stay within the burst
the gate, which refills faster and holds as much, never binds: without a deficit the pacer is the plain
bucket (and with ``max_lag_ns = 0`` it always is). :meth:`idle` (nothing to send) forgets the deficit, so a
flow that restarts after a pause starts with at most ``burst_bytes``, and so does a rate cut
(:meth:`set_rate` to a lower rate: a flow told to slow down owes nothing at the old rate).
"""

from __future__ import annotations

_UNITS_PER_BYTE = 8 * 10**9
_new = object.__new__
#: token units per byte (the sender's one-packet visit does a plain bucket's arithmetic inline)
UNITS_PER_BYTE = _UNITS_PER_BYTE


def burst_for(rate_bps: float, packet_bytes: int, window_ns: int = 100_000, fraction: float = 0.1) -> int:
    """A burst no larger than ``fraction`` of what ``rate_bps`` moves in ``window_ns`` (at least one packet)."""
    return max(packet_bytes, int(rate_bps * window_ns * fraction / _UNITS_PER_BYTE))


class TokenBucketPacer:
    """Send-time decisions for one queue pair (or one port)."""

    def __init__(self, rate_bps: float, burst_bytes: int, now_ns: int = 0, start_full: bool = True,
                 max_lag_ns: int = 0, catch_up_ratio: float = 2.0) -> None:
        if burst_bytes <= 0:
            raise ValueError(f"burst_bytes must be positive, got {burst_bytes}")
        if max_lag_ns < 0:
            raise ValueError(f"max_lag_ns must be non-negative, got {max_lag_ns}")
        if not catch_up_ratio >= 1.0:
            raise ValueError(f"catch_up_ratio must be at least 1, got {catch_up_ratio}")
        self.burst_bytes = int(burst_bytes)
        self._cap = self.burst_bytes * _UNITS_PER_BYTE
        self._rate = self._check_rate(rate_bps)
        self._tokens = self._cap if start_full else 0
        self._t_ns = now_ns
        self.bytes_sent = 0
        self.max_lag_ns = int(max_lag_ns)
        self.catch_up_ratio = float(catch_up_ratio)
        self._gate = self._cap
        self._gate_rate = self._rate_of_gate()
        self._gate_t_ns = now_ns  # the gate's own clock: ≥ ``_t_ns``, later after a late send (:meth:`sent_late`)
        self._spent_ns = None  # the bucket's time at its last spend (deficit pacers only)
        self._accrue = False  # backlogged: tokens beyond the burst are a deficit, kept
        #: no deficit (``max_lag_ns`` = 0): the gate, which refills faster and is spent alike, never binds,
        #: so it is not kept (a plain bucket)
        self._plain = not self.max_lag_ns

    @classmethod
    def full_plain(cls, rate_bps: float, burst_bytes: int, now_ns: int) -> TokenBucketPacer:
        """``cls(rate_bps, burst_bytes, now_ns)`` — a full plain bucket — in one frame: the same checks, and the same
        attributes set in the same order (a sender makes one per queue pair)."""
        if burst_bytes <= 0:
            raise ValueError(f"burst_bytes must be positive, got {burst_bytes}")
        if rate_bps < 0 or rate_bps != rate_bps:
            raise ValueError(f"rate_bps must be non-negative, got {rate_bps}")
        p = _new(cls)
        p.burst_bytes = burst = int(burst_bytes)
        p._cap = cap = burst * _UNITS_PER_BYTE
        p._rate = rate = int(round(rate_bps))
        p._tokens = cap
        p._t_ns = now_ns
        p.bytes_sent = 0
        p.max_lag_ns = 0
        p.catch_up_ratio = 2.0
        p._gate = cap
        p._gate_rate = int(round(rate * 2.0))
        p._gate_t_ns = now_ns
        p._spent_ns = None
        p._accrue = False
        p._plain = True
        return p

    @staticmethod
    def _check_rate(rate_bps: float) -> int:
        if rate_bps < 0 or rate_bps != rate_bps:
            raise ValueError(f"rate_bps must be non-negative, got {rate_bps}")
        return int(round(rate_bps))

    @property
    def rate_bps(self) -> int:
        return self._rate

    def _rate_of_gate(self) -> int:
        return int(round(self._rate * self.catch_up_ratio))

    def _refill(self, now_ns: int) -> None:
        if now_ns > self._t_ns:
            dt = now_ns - self._t_ns
            cap = self._cap
            tokens = self._tokens
            if self._plain:
                if tokens < cap:
                    tokens += self._rate * dt
                    self._tokens = tokens if tokens < cap else cap
                self._t_ns = now_ns
                return
            if self._accrue:  # min() written out: no builtin call per refill (one per socket visit)
                top = cap + self._rate * self.max_lag_ns
                tokens += self._rate * dt
                self._tokens = tokens if tokens < top else top
            elif tokens < cap:
                tokens += self._rate * dt
                self._tokens = tokens if tokens < cap else cap
            if now_ns > self._gate_t_ns:
                gate = self._gate + self._gate_rate * (now_ns - self._gate_t_ns)
                self._gate = gate if gate < cap else cap
                self._gate_t_ns = now_ns
            self._t_ns = now_ns

    def _usable(self) -> int:
        """Token units that may go at once: the tokens, or the gate if lower (never for a plain bucket)."""
        tokens = self._tokens
        if self._plain:
            return tokens
        gate = self._gate
        return tokens if tokens < gate else gate

    @property
    def plain(self) -> bool:
        """A plain bucket (no deficit): :meth:`available_bytes`, :meth:`spend` and :meth:`ready_ns` are the
        arithmetic the sender's one-packet visit (:mod:`emulator.endpoint.visit`) does inline on ``_tokens``,
        ``_t_ns``, ``_cap`` and ``_rate``."""
        return self._plain

    @property
    def deficit_bytes(self) -> int:
        """Bytes earned beyond the burst and not sent yet: what a late owner still owes its schedule."""
        return max(0, self._tokens - self._cap) // _UNITS_PER_BYTE

    def idle(self, now_ns: int) -> None:
        """The owner has nothing to send from ``now_ns``: stop accruing and forget any deficit."""
        self._refill(now_ns)
        self._accrue = False
        self._tokens = min(self._tokens, self._cap)

    def restart(self, now_ns: int) -> None:
        """The owner's first send, late against its schedule, went at ``now_ns``: nothing is owed for the time
        before it, and what went (``bytes_sent``) came out of a full bucket, so at most the rest of one burst
        may follow at once."""
        self.idle(now_ns)
        self._tokens = min(self._tokens, max(0, self.burst_bytes - self.bytes_sent) * _UNITS_PER_BYTE)

    def set_rate(self, rate_bps: float, now_ns: int) -> None:
        """Change the rate from ``now_ns`` on (tokens earned so far are kept, but a cut forgets any deficit)."""
        self._refill(now_ns)
        rate = self._check_rate(rate_bps)
        if rate < self._rate:
            self._tokens = min(self._tokens, self._cap)
        self._rate = rate
        self._gate_rate = self._rate_of_gate()

    def available_bytes(self, now_ns: int) -> int:
        """Bytes that may go back to back at ``now_ns``."""
        if now_ns > self._t_ns:
            if self._plain:  # _refill of a plain bucket, inline (called once or twice per batch sent)
                tokens = self._tokens
                if tokens < self._cap:
                    tokens += self._rate * (now_ns - self._t_ns)
                    self._tokens = tokens if tokens < self._cap else self._cap
                self._t_ns = now_ns
                return self._tokens // _UNITS_PER_BYTE
            self._refill(now_ns)
        tokens = self._tokens
        if not self._plain and self._gate < tokens:
            tokens = self._gate
        return tokens // _UNITS_PER_BYTE

    def ready_ns(self, size_bytes: int, now_ns: int) -> int | None:
        """Earliest time ≥ now when ``size_bytes`` may go; None if never (rate 0, or bigger than the burst).

        With ``max_lag_ns``, asking makes the owner backlogged (see the module docstring)."""
        if now_ns > self._t_ns:
            self._refill(now_ns)
        if size_bytes > self.burst_bytes:
            return None
        cost = size_bytes * _UNITS_PER_BYTE
        need = cost - self._tokens
        if self._plain:
            if need <= 0:
                return self._t_ns
            return self._t_ns - (-need // self._rate) if self._rate else None
        self._accrue = True
        gate_need = cost - self._gate
        if need <= 0 and gate_need <= 0:
            return self._t_ns
        if self._rate == 0:
            return None
        t = self._t_ns - (-need // self._rate) if need > 0 else self._t_ns
        if gate_need > 0:
            t_gate = self._gate_t_ns - (-gate_need // self._gate_rate)
            if t_gate > t:
                t = t_gate
        return t

    def try_send(self, size_bytes: int, now_ns: int) -> bool:
        """Spend tokens for one packet if they are there."""
        if now_ns > self._t_ns:
            self._refill(now_ns)
        cost = size_bytes * _UNITS_PER_BYTE
        if size_bytes > self.burst_bytes or cost > self._tokens:
            return False
        if not self._plain:
            if cost > self._gate:
                return False
            self._gate -= cost
            self._spent_ns = self._t_ns
        self._tokens -= cost
        self.bytes_sent += size_bytes
        return True

    def spend(self, size_bytes: int) -> None:
        """:meth:`try_send` of ``size_bytes`` at the bucket's own time when the caller knows it succeeds
        (``available_bytes`` at that time was at least ``size_bytes`` and nothing was spent since): the same
        spending, without the refill and the checks."""
        cost = size_bytes * _UNITS_PER_BYTE
        self._tokens -= cost
        if not self._plain:
            self._gate -= cost
            self._spent_ns = self._t_ns
        self.bytes_sent += size_bytes

    def _spend(self, units: int) -> None:
        self._tokens -= units
        if not self._plain and units:
            self._gate -= units
            self._spent_ns = self._t_ns

    def sent_late(self, paced_ns: int, sent_ns: int) -> bool:
        """What this bucket let go at ``paced_ns`` (its last spend) left only by ``sent_ns``: a driver's send
        that ended later than it was paced (preempted before or inside its system call). The gate earns
        nothing from ``paced_ns`` to ``sent_ns``, so what may go at once next counts from when those bytes
        went, not from when they were paced, and a late send followed by the next pacing decision cannot
        put more than the gate holds plus what it earns after the send back to back. The tokens keep
        accruing (the schedule, hence the rate, is kept: a deficit is still repaid, at the catch-up ratio).
        Returns whether the gate was held; a plain bucket, or one that spent nothing at ``paced_ns``, is
        left alone."""
        if self._plain or self._spent_ns != paced_ns or sent_ns <= self._gate_t_ns:
            return False
        self._gate_t_ns = sent_ns
        return True

    def take_burst(self, packet_bytes: int, max_packets: int, now_ns: int) -> int:
        """How many ``packet_bytes`` packets (≤ max_packets) go now, e.g. as one GSO batch; spends their tokens."""
        self._refill(now_ns)
        if packet_bytes <= 0 or packet_bytes > self.burst_bytes:
            return 0
        n = min(max_packets, self._usable() // (packet_bytes * _UNITS_PER_BYTE))
        self._spend(n * packet_bytes * _UNITS_PER_BYTE)
        self.bytes_sent += n * packet_bytes
        return int(n)

    def send_times(self, sizes_bytes: list[int], now_ns: int) -> list[int | None]:
        """Schedule packets back to back at the earliest times the bucket allows, spending their tokens.

        An entry is None if that packet can never go (then the rest are None too).
        """
        out: list[int | None] = []
        t = now_ns
        for size in sizes_bytes:
            ready = self.ready_ns(size, t)
            if ready is None:
                out.extend([None] * (len(sizes_bytes) - len(out)))
                break
            self.try_send(size, ready)
            out.append(ready)
            t = ready
        return out
