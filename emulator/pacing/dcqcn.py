"""DCQCN reaction point (RP): the paper form and the firmware form, as sans-IO state machines.

Theory of operation
-------------------
Both forms keep a current rate ``R_C`` and a target rate ``R_T`` (both start at the maximum rate, which
is the line rate unless capped), a congestion estimate ``α`` and two stage counters: ``time_stage`` counts
increase-timer events and ``byte_stage`` byte-counter events since the last rate cut.

Increase events (both forms): classify with the counters as they were *before* this event, then bump the
counter of the event's kind. With ``F`` the fast-recovery threshold::

    fast recovery   max(T, BC) < F                 R_C ← (R_T + R_C)/2
    additive        otherwise, not hyper           R_T ← R_T + R_AI;  R_C ← (R_T + R_C)/2
    hyper           paper: min(T, BC) ≥ F          R_T ← R_T + i·R_HAI, i = min(T, BC) − F + 1
                    firmware: min(T, BC) > F       R_T ← R_T + R_HAI
    (firmware with the byte counter off: T alone stands for both min and max, as in HPCC's ns-3 model)

so the first ``F`` events after a cut are fast recovery (the gap to ``R_T`` halves each time). ``R_T`` and
``R_C`` never exceed the maximum rate; ``R_C`` never drops below the minimum rate.

**Paper form** (:class:`DcqcnPaper`). A CNP acts at once: ``R_T ← R_C`` (if ``clamp_target_rate``),
``R_C ← R_C(1 − α/2)``, ``α ← (1 − g)α + g`` (or α first, then the cut, with ``alpha_update_before_cut``),
stage counters and byte counter reset, increase timer restarted (period T). The α timer (period K)
restarts at every CNP and decays ``α ← (1 − g)α`` once per full period without a CNP. α is evaluated
lazily — ``α(t) = α_cnp · (1 − g)^⌊(t − t_cnp)/K⌋`` — so it needs no timer of its own. Before the first
CNP nothing runs and α stays at ``initial_alpha``.

**Firmware form** (:class:`DcqcnFirmware`). The first CNP arms the machine: α ← ``initial_alpha_value``,
``R_C = R_T`` ← ``rate_to_set_on_first_cnp`` if it is positive, else ``rate_on_first_cnp_fraction`` × the
current rate (ConnectX's default is 0, whose meaning NVIDIA does not document; with the fraction at its
default 1.0 we read it as "keep the current rate", HPCC's ``RateOnFirstCnp`` = 1.0), and two periodic
clocks start at that instant: the α clock (period ``dce_tcp_rtt``) and the rate-reduce monitor clock
(period ``rate_reduce_monitor_period``). Each later CNP sets two flags. At each α tick:
``α ← (1−g)α + g`` if the α flag is set, else ``α ← (1−g)α``, with ``g = (1024 − G)/1024``,
G = ``dce_tcp_g`` — in ConnectX's 1/1024 units ``α ← G·α/1024 + (1024 − G)`` / ``α ← G·α/1024``; the flag
clears. ``alpha_rounding`` says what happens to the result: ``exact`` keeps it (the documented geometric
decay, half-life ≈ 142 µs at G = 1019), ``floor`` / ``nearest`` round it to a whole 1/1024 capped at
1023 (a 10-bit register; with ``floor`` a small α loses at least 1/1024 per tick and reaches 0, with
``nearest`` it stops decaying near 102/1024). At each monitor tick with the decrease flag set: clamp ``R_T ← R_C`` if
``clamp_tgt_rate``, or a byte-counter increase happened since the last cut, or
(``clamp_tgt_rate_after_time_inc`` and a timer increase happened since the last cut), then cut by ``min(R_C·α_1024 / 2^rpg_gd, R_C·(100 − rpg_min_dec_fac)/100)``, reset the
stages and the byte counter and restart the increase timer (period ``rpg_time_reset``). So however many
CNPs arrive within one monitor period, they produce one cut. The first CNP sets the two flags only with
``first_cnp_cuts`` (HPCC leaves them set, so it cuts at the first check; isekai clears them). α ticks are replayed lazily on
the next input; at equal times α ticks run before a monitor tick, and a monitor tick before an increase
tick.

Clocks are integer nanoseconds; timers due at ``t`` run before an input stamped ``t``.
"""

from __future__ import annotations

from emulator.pacing.base import RateState, slotted_copy
from emulator.pacing.params import DcqcnFirmwareParams, DcqcnPaperParams

_MBPS = 1e6


def _us_to_ns(us: float) -> int:
    return max(1, round(us * 1000))


class _DcqcnCommon:
    """Rates, stage counters, the increase timer and tracing shared by both forms.

    Slotted (no instance dict: attributes at fixed offsets, methods looked up on the type); :meth:`copy` is an
    independent controller in the same state (a queue pair's controller is a copy of one made per config)."""

    __slots__ = ("line_rate_bps", "max_rate_bps", "min_rate_bps", "_rc", "_rt", "_increase_period_ns",
                 "_byte_period_bytes", "_active", "_inc_next_ns", "_time_stage", "_byte_stage", "_byte_acc", "_t_ns",
                 "_cnps", "_cuts", "_increases", "params", "_g", "_alpha_period_ns", "_ai_bps", "_hai_bps", "_f")
    name = "dcqcn"
    #: until its first CNP a controller's only change is its clock ``_t_ns`` (``on_bytes_sent``; read by
    #: :meth:`state` alone, set to the CNP's time by that CNP): a sender may let one such idle controller stand for
    #: every queue pair that has had no CNP, and give a queue pair a :meth:`copy` of it at its first CNP
    shared_while_idle = True

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.copy = slotted_copy(cls)  # type: ignore[method-assign]

    def copy(self) -> _DcqcnCommon:  # replaced in every subclass by its slots' copy
        raise NotImplementedError

    def __init__(self, line_rate_bps: float, min_rate_bps: float, max_rate_bps: float, increase_period_ns: int,
                 byte_period_bytes: int) -> None:
        if line_rate_bps <= 0:
            raise ValueError(f"line_rate_bps must be positive, got {line_rate_bps}")
        self.line_rate_bps = float(line_rate_bps)
        self.max_rate_bps = float(max_rate_bps) if max_rate_bps > 0 else self.line_rate_bps
        self.max_rate_bps = min(self.max_rate_bps, self.line_rate_bps)
        self.min_rate_bps = min(float(min_rate_bps), self.max_rate_bps)
        self._rc = self.max_rate_bps
        self._rt = self.max_rate_bps
        self._increase_period_ns = increase_period_ns
        self._byte_period_bytes = byte_period_bytes
        self._active = False            # armed by the first CNP
        self._inc_next_ns: int | None = None
        self._time_stage = 0
        self._byte_stage = 0
        self._byte_acc = 0
        self._t_ns = 0
        self._cnps = 0
        self._cuts = 0
        self._increases = 0

    # -- public surface -------------------------------------------------------------------------------
    @property
    def rate_bps(self) -> float:
        return self._rc

    @property
    def target_rate_bps(self) -> float:
        return self._rt

    def on_bytes_sent(self, n_bytes: int, now_ns: int) -> bool | None:
        """Count ``n_bytes`` sent (the byte counter); False before the first CNP: the rate is the initial one
        and no timer is set (all ``_advance`` would do is move the time)."""
        if not self._active:
            if now_ns > self._t_ns:
                self._t_ns = now_ns
            return False
        self._advance(now_ns)
        if self._byte_period_bytes <= 0:
            return None
        self._byte_acc += n_bytes
        while self._byte_acc >= self._byte_period_bytes:
            self._byte_acc -= self._byte_period_bytes
            self._increase(timer=False)

    def on_timer(self, now_ns: int) -> None:
        self._advance(now_ns)

    def state(self) -> RateState:
        return RateState(self._t_ns, self._rc, self._rt, self.alpha, self._time_stage, self._byte_stage,
                         self._cnps, self._cuts, self._increases)

    @property
    def alpha(self) -> float:  # pragma: no cover - overridden
        raise NotImplementedError

    # -- shared mechanics -----------------------------------------------------------------------------
    def _advance(self, now_ns: int) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _at_max(self) -> bool:
        return self._rc >= self._max_snap() and self._rt >= self._max_snap()

    def _max_snap(self) -> float:
        return self.max_rate_bps * (1.0 - 1e-12)  # within 1e-12 (relative) counts as the maximum

    def _restart_increase(self, t_ns: int) -> None:
        self._time_stage = 0
        self._byte_stage = 0
        self._byte_acc = 0
        self._inc_next_ns = None if self._at_max() else t_ns + self._increase_period_ns

    def _run_increase_timer(self) -> None:
        assert self._inc_next_ns is not None
        t = self._inc_next_ns
        self._increase(timer=True)
        self._inc_next_ns = None if self._at_max() else t + self._increase_period_ns

    def _stage_delta_bps(self, t_stage: int, b_stage: int) -> float:  # pragma: no cover - overridden
        raise NotImplementedError

    def _increase(self, *, timer: bool) -> None:
        self._rt = min(self.max_rate_bps, self._rt + self._stage_delta_bps(self._time_stage, self._byte_stage))
        self._rc = min(self.max_rate_bps, max(self.min_rate_bps, (self._rt + self._rc) / 2))
        if self._at_max():
            self._rc = self._rt = self.max_rate_bps
        if timer:
            self._time_stage += 1
        else:
            self._byte_stage += 1
        self._increases += 1

    def _cut_to(self, new_rate_bps: float) -> None:
        self._rc = min(self.max_rate_bps, max(self.min_rate_bps, new_rate_bps))
        self._cuts += 1


class DcqcnPaper(_DcqcnCommon):
    """Paper-form DCQCN (SIGCOMM 2015): cut on every CNP, α timer K, increase timer T and byte counter B."""

    __slots__ = ("_alpha_base", "_alpha_anchor_ns")
    name = "dcqcn-paper"

    def __init__(self, line_rate_bps: float, params: DcqcnPaperParams | None = None) -> None:
        p = params or DcqcnPaperParams()
        self.params = p
        super().__init__(line_rate_bps, p.min_rate_mbps * _MBPS, p.max_rate_mbps * _MBPS,
                         _us_to_ns(p.rate_increase_timer_us), p.byte_counter_bytes)
        self._g = p.g
        self._alpha_period_ns = _us_to_ns(p.alpha_timer_us)
        self._alpha_base = p.initial_alpha
        self._alpha_anchor_ns: int | None = None
        self._ai_bps = p.rate_ai_mbps * _MBPS
        self._hai_bps = p.rate_hai_mbps * _MBPS
        self._f = p.fast_recovery_steps

    @property
    def alpha(self) -> float:
        return self._alpha_at(self._t_ns)

    def _alpha_at(self, t_ns: int) -> float:
        if self._alpha_anchor_ns is None:
            return self._alpha_base
        periods = (t_ns - self._alpha_anchor_ns) // self._alpha_period_ns
        return self._alpha_base * (1.0 - self._g) ** periods if periods > 0 else self._alpha_base

    def next_timer_ns(self) -> int | None:
        return self._inc_next_ns

    def _advance(self, now_ns: int) -> None:
        while self._inc_next_ns is not None and self._inc_next_ns <= now_ns:
            self._run_increase_timer()
        self._t_ns = max(self._t_ns, now_ns)

    def on_cnp(self, now_ns: int) -> None:
        self._advance(now_ns)
        self._cnps += 1
        self._active = True
        g = self._g
        alpha = self._alpha_at(now_ns)
        updated = (1.0 - g) * alpha + g
        cut_alpha = updated if self.params.alpha_update_before_cut else alpha
        if self.params.clamp_target_rate:
            self._rt = self._rc
        self._cut_to(self._rc * (1.0 - cut_alpha / 2.0))
        self._alpha_base = updated
        self._alpha_anchor_ns = now_ns
        self._restart_increase(now_ns)

    def _stage_delta_bps(self, t_stage: int, b_stage: int) -> float:
        f = self._f
        if max(t_stage, b_stage) < f:
            return 0.0
        low = min(t_stage, b_stage)
        if low < f:
            return self._ai_bps
        return (low - f + 1) * self._hai_bps


class DcqcnFirmware(_DcqcnCommon):
    """Firmware-form DCQCN (ConnectX / HPCC ns-3 / isekai): α, cut and increase on independent clocks."""

    __slots__ = ("_G", "_rounding", "_monitor_period_ns", "_alpha", "_alpha_flag", "_alpha_next_ns", "_anchor_ns",
                 "_decrease_flag", "_monitor_next_ns")
    name = "dcqcn-firmware"

    def __init__(self, line_rate_bps: float, params: DcqcnFirmwareParams | None = None) -> None:
        p = params or DcqcnFirmwareParams()
        self.params = p
        super().__init__(line_rate_bps, p.rpg_min_rate_mbps * _MBPS, p.rpg_max_rate_mbps * _MBPS,
                         _us_to_ns(p.rpg_time_reset_us), p.rpg_byte_reset * p.rpg_byte_unit_bytes)
        self._G = p.dce_tcp_g
        self._g = p.g
        self._rounding = p.alpha_rounding
        self._alpha_period_ns = _us_to_ns(p.dce_tcp_rtt_us)
        self._monitor_period_ns = _us_to_ns(p.rate_reduce_monitor_period_us)
        self._alpha: float = p.initial_alpha_value / 1024     # a fraction; a whole 1/1024 when rounded
        self._alpha_flag = False
        self._alpha_next_ns: int | None = None
        self._anchor_ns = 0
        self._decrease_flag = False
        self._monitor_next_ns: int | None = None
        self._ai_bps = p.rpg_ai_rate_mbps * _MBPS
        self._hai_bps = p.rpg_hai_rate_mbps * _MBPS
        self._f = p.rpg_threshold

    @property
    def alpha(self) -> float:
        return self._alpha

    def next_timer_ns(self) -> int | None:
        monitor = self._monitor_next_ns if self._decrease_flag else None
        if monitor is None:
            return self._inc_next_ns
        if self._inc_next_ns is None:
            return monitor
        return min(monitor, self._inc_next_ns)

    # -- clocks ---------------------------------------------------------------------------------------
    def _alpha_step(self, cnp_seen: bool) -> None:
        if self._rounding == "exact":
            a = (1.0 - self._g) * self._alpha
            self._alpha = a + self._g if cnp_seen else a
            return
        scaled = self._G * round(self._alpha * 1024) / 1024
        a_1024 = int(scaled) if self._rounding == "floor" else round(scaled)
        if cnp_seen:
            a_1024 += 1024 - self._G
        self._alpha = min(1023, a_1024) / 1024

    def _advance_alpha(self, t_ns: int) -> None:
        nxt = self._alpha_next_ns
        if nxt is None or nxt > t_ns:
            return
        ticks = (t_ns - nxt) // self._alpha_period_ns + 1
        self._alpha_step(self._alpha_flag)
        self._alpha_flag = False
        rest = ticks - 1
        if rest > 0:
            if self._rounding == "exact":
                self._alpha *= (1.0 - self._g) ** rest
            else:                          # step until done or α stops moving (0, or the rounding's floor)
                while rest > 0:
                    before = self._alpha
                    self._alpha_step(False)
                    rest -= 1
                    if self._alpha == before:
                        break
        self._alpha_next_ns = nxt + ticks * self._alpha_period_ns

    def _advance(self, now_ns: int) -> None:
        inc = self._inc_next_ns
        monitor = self._monitor_next_ns
        alpha_t = self._alpha_next_ns
        if (inc is None or inc > now_ns) and (monitor is None or monitor > now_ns or not self._decrease_flag) and (
                alpha_t is None or alpha_t > now_ns):  # nothing due (the common case: one call per batch sent)
            if now_ns > self._t_ns:
                self._t_ns = now_ns
            return
        while True:
            monitor = self._monitor_next_ns if self._decrease_flag else None
            inc = self._inc_next_ns
            if monitor is not None and monitor <= now_ns and (inc is None or monitor <= inc):
                self._advance_alpha(monitor)
                self._cut(monitor)
            elif inc is not None and inc <= now_ns:
                self._advance_alpha(inc)
                self._run_increase_timer()
            else:
                break
        self._advance_alpha(now_ns)
        self._t_ns = max(self._t_ns, now_ns)

    def _next_grid_after(self, t_ns: int) -> int:
        k = (t_ns - self._anchor_ns) // self._monitor_period_ns + 1
        return self._anchor_ns + k * self._monitor_period_ns

    # -- inputs and actions ---------------------------------------------------------------------------
    def on_cnp(self, now_ns: int) -> None:
        self._advance(now_ns)
        self._cnps += 1
        p = self.params
        if not self._active:
            self._active = True
            self._anchor_ns = now_ns
            self._alpha = p.initial_alpha_value / 1024
            self._alpha_flag = p.first_cnp_cuts
            self._alpha_next_ns = now_ns + self._alpha_period_ns
            if p.rate_to_set_on_first_cnp_mbps > 0:
                first = p.rate_to_set_on_first_cnp_mbps * _MBPS
            else:
                first = self._rc * p.rate_on_first_cnp_fraction
            self._rc = self._rt = min(self.max_rate_bps, max(self.min_rate_bps, first))
            self._decrease_flag = p.first_cnp_cuts
            self._monitor_next_ns = now_ns + self._monitor_period_ns
            self._restart_increase(now_ns)
            return
        self._alpha_flag = True
        if not self._decrease_flag:
            self._decrease_flag = True
            self._monitor_next_ns = self._next_grid_after(now_ns)

    def _cut(self, t_ns: int) -> None:
        p = self.params
        if p.clamp_tgt_rate or self._byte_stage > 0 or (p.clamp_tgt_rate_after_time_inc and self._time_stage > 0):
            self._rt = self._rc
        cut = self._rc * (self._alpha * 1024) / (1 << p.rpg_gd)
        cut = min(cut, self._rc * (100.0 - p.rpg_min_dec_fac_pct) / 100.0)
        self._cut_to(self._rc - cut)
        self._decrease_flag = False
        self._monitor_next_ns = t_ns + self._monitor_period_ns
        self._restart_increase(t_ns)

    def _stage_delta_bps(self, t_stage: int, b_stage: int) -> float:
        if self._byte_period_bytes > 0:  # the byte counter runs (rpg_byte_reset > 0)
            low, high = min(t_stage, b_stage), max(t_stage, b_stage)
        else:
            low = high = t_stage
        if high < self._f:
            return 0.0
        if low > self._f:
            return self._hai_bps
        return self._ai_bps
