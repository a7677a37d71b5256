"""DCQCN reaction points of many queue pairs as numpy arrays: the fluid fabric's rate state.

Theory of operation
-------------------
The rules are those of :mod:`emulator.pacing.dcqcn` (same parameter dataclasses, same knobs, so a profile
means the same thing on the fluid and the packet fabric), applied to index arrays of queue pairs at once
instead of one controller object per queue pair. Per queue pair: current rate ``rc``, target rate ``rt``,
``alpha``, the two stage counters, the byte counter and the increase-timer deadline (``inc_next_ns``,
``inf`` = none); the firmware form adds the α and decrease flags and the rate-reduce monitor clock.

Differences from the per-packet controllers, all from stepping time in slices of ``dt``:

* firmware α: the α clock is not replayed tick by tick; over a slice α decays by ``(1 − g)^(dt/period)``
  and gains ``g`` once if a CNP set the α flag (``alpha_rounding`` other than ``exact`` is not modelled);
* at most one timer increase and one byte-counter increase per queue pair per slice (the fluid fabric
  keeps slices shorter than the increase period and the byte period);
* increase and cut happen at the end of the slice in which their deadline falls.

``cc`` ``none`` and ``fixed`` keep a constant rate and ignore CNPs.

From ``_COMPILED_FROM_QPS`` queue pairs a call, and for any number once a call did or the caller asked for them
(:meth:`FluidDcqcn.use_compiled`: the fluid fabric does when it steps a view of compiled size), the per-slice
methods run as the compiled loops of :mod:`emulator.fabric.fluid_cc_kernels` (same results bit for bit);
before, as numpy (a small run loads no compiled loop).
"""

from __future__ import annotations

import math

import numpy as np

from emulator.pacing.params import DcqcnFirmwareParams, DcqcnPaperParams, DcqcnParams

_MBPS = 1e6
_INF = np.inf
#: queue pairs in a call from which the compiled loops run (as emulator.fabric.fluid's flows threshold)
_COMPILED_FROM_QPS = 50_000


def _kernels():
    """:mod:`emulator.fabric.fluid_cc_kernels` (numba and its cached loops load at the first use)."""
    from emulator.fabric import fluid_cc_kernels

    return fluid_cc_kernels


def _libm_pow(base: float, exponents: np.ndarray) -> np.ndarray:
    """``base ** exponents`` through the C library's ``pow``, as the compiled loops compute it.

    numpy's vectorised ``power`` (SVML on AVX-512 machines) can differ from ``pow`` in the last bit, which
    would make a small run's numpy path and a large run's compiled path disagree.
    """
    if exponents.size == 0:
        return np.empty(exponents.shape)
    first = float(exponents.flat[0])
    if (exponents == first).all():  # a slice's queue pairs mostly share dt: one pow
        return np.full(exponents.shape, math.pow(base, first))
    unique, where = np.unique(exponents, return_inverse=True)
    powers = np.fromiter(map(math.pow, [base] * unique.size, unique.tolist()), float, unique.size)
    return powers[where].reshape(exponents.shape)


def _us_to_ns(us: float) -> float:
    return float(max(1, round(us * 1000)))


class FluidDcqcn:
    """Rate state of ``n`` queue pairs (see module docstring); times are float ns."""

    def __init__(self, n: int, line_rate_bps: float, params: DcqcnParams | None, fixed_rate_bps: float | None = None,
                 ticks_first: bool = False):
        self.n = n
        self.ticks_first = ticks_first  # a CNP at t after the clocks due by t (FluidConfig.cnp_after_ticks)
        self.params = params
        self.paper = isinstance(params, DcqcnPaperParams)
        self.firmware = isinstance(params, DcqcnFirmwareParams)
        self.enabled = params is not None
        line = float(line_rate_bps)
        start = min(float(fixed_rate_bps), line) if fixed_rate_bps else line
        self.min_rate_bps = 0.0
        if self.enabled:
            p = params
            if self.paper:  # the two forms name the same quantities differently
                knobs = (p.max_rate_mbps, p.min_rate_mbps, p.rate_increase_timer_us, p.byte_counter_bytes,
                         p.alpha_timer_us, p.rate_ai_mbps, p.rate_hai_mbps, p.fast_recovery_steps, p.initial_alpha)
            else:
                knobs = (p.rpg_max_rate_mbps, p.rpg_min_rate_mbps, p.rpg_time_reset_us,
                         p.rpg_byte_reset * p.rpg_byte_unit_bytes, p.dce_tcp_rtt_us, p.rpg_ai_rate_mbps,
                         p.rpg_hai_rate_mbps, p.rpg_threshold, p.initial_alpha_value / 1024)
                self.monitor_period_ns = _us_to_ns(p.rate_reduce_monitor_period_us)
            cap_mbps, min_mbps, inc_us, byte_period, alpha_us, ai_mbps, hai_mbps, self.f, alpha0 = knobs
            self.max_rate_bps = min(cap_mbps * _MBPS, line) if cap_mbps > 0 else line
            self.min_rate_bps = min(min_mbps * _MBPS, self.max_rate_bps)
            self.g = p.g
            self.inc_period_ns = _us_to_ns(inc_us)
            self.byte_period = float(byte_period)
            self.alpha_period_ns = _us_to_ns(alpha_us)
            self.ai_bps, self.hai_bps = ai_mbps * _MBPS, hai_mbps * _MBPS
        else:
            self.max_rate_bps = start
            alpha0 = 0.0
            self.inc_period_ns = self.byte_period = 0.0
        self.rc = np.full(n, self.max_rate_bps)
        self.rt = np.full(n, self.max_rate_bps)
        self.alpha = np.full(n, float(alpha0))
        self.anchor_ns = np.zeros(n)  # paper: last CNP (α anchor); firmware: the monitor grid origin
        self.t_stage = np.zeros(n, np.int64)
        self.b_stage = np.zeros(n, np.int64)
        self.byte_acc = np.zeros(n)
        self.inc_next_ns = np.full(n, _INF)
        self.armed = np.zeros(n, bool)
        self.alpha_flag = np.zeros(n, bool)
        self.dec_flag = np.zeros(n, bool)
        self.mon_next_ns = np.full(n, _INF)
        self.cnps = np.zeros(n, np.int64)
        self.cuts = np.zeros(n, np.int64)
        self.t_last_ns = np.zeros(n)  # when advance last ran for the queue pair
        self._c: np.ndarray | None = None  # constants of the compiled loops (built at their first use)

    def _compiled(self, idx: np.ndarray) -> bool:
        """Whether a call on ``idx`` runs the compiled loop (see module docstring)."""
        return idx.size >= _COMPILED_FROM_QPS or self._c is not None

    def use_compiled(self) -> None:
        """Run every later per-slice call as the compiled loops (same results; loads them now)."""
        if self.enabled:
            self._constants()

    def _constants(self) -> np.ndarray:
        """The knobs as the compiled loops read them (:mod:`emulator.fabric.fluid_cc_kernels`, ``C_*``)."""
        if self._c is None:
            ck, p = _kernels(), self.params
            c = np.zeros(ck.N_CONSTANTS)
            c[[ck.C_G, ck.C_INC, ck.C_BYTE, ck.C_ALPHA, ck.C_AI, ck.C_HAI, ck.C_MAX, ck.C_MIN, ck.C_F, ck.C_SNAP]] = (
                self.g, self.inc_period_ns, self.byte_period, self.alpha_period_ns, self.ai_bps, self.hai_bps,
                self.max_rate_bps, self.min_rate_bps, self.f, self.max_rate_bps * (1.0 - 1e-12))
            if self.paper:
                c[ck.C_BEFORE_CUT], c[ck.C_CLAMP_PAPER] = p.alpha_update_before_cut, p.clamp_target_rate
            else:
                c[ck.C_MON] = self.monitor_period_ns
                c[ck.C_CLAMP], c[ck.C_CLAMP_AFTER_T] = p.clamp_tgt_rate, p.clamp_tgt_rate_after_time_inc
                c[ck.C_GD], c[ck.C_DEC_KEEP] = 1 << p.rpg_gd, 100.0 - p.rpg_min_dec_fac_pct
                c[ck.C_ALPHA0], c[ck.C_FIRST_CUTS] = p.initial_alpha_value / 1024, p.first_cnp_cuts
                c[ck.C_FIRST_RATE] = p.rate_to_set_on_first_cnp_mbps * _MBPS
                c[ck.C_FIRST_FRAC] = p.rate_on_first_cnp_fraction
            self._c = c
        return self._c

    # -- queries ------------------------------------------------------------------------------------
    def paper_alpha(self, idx: np.ndarray, now_ns: float) -> np.ndarray:
        """Paper-form α at ``now_ns``: decayed once per full α period since the last CNP."""
        periods = np.floor((now_ns - self.anchor_ns[idx]) / self.alpha_period_ns)
        a = self.alpha[idx]
        return np.where(self.armed[idx] & (periods > 0), a * _libm_pow(1.0 - self.g, np.maximum(periods, 0)), a)

    def next_deadline_ns(self, idx: np.ndarray) -> float:
        """Earliest increase or cut deadline of the queue pairs ``idx`` (``inf`` = none)."""
        if not self.enabled or idx.size == 0:
            return _INF
        if self._compiled(idx):
            return float(_kernels().next_deadline_ns(idx, self.firmware, self.inc_next_ns, self.dec_flag,
                                                     self.mon_next_ns))  # fmt: skip
        t = float(self.inc_next_ns[idx].min())
        if self.firmware:
            mon = self.mon_next_ns[idx][self.dec_flag[idx]]
            if mon.size:
                t = min(t, float(mon.min()))
        return t

    def idle(self, idx: np.ndarray) -> bool:
        """No queue pair of ``idx`` has an increase or a cut pending: their rates stay as they are."""
        if not self.enabled or idx.size == 0:
            return True
        if self._compiled(idx):
            return bool(_kernels().idle(idx, self.firmware, self.inc_next_ns, self.dec_flag))
        if np.isfinite(self.inc_next_ns[idx]).any():
            return False
        return not (self.firmware and self.dec_flag[idx].any())

    def bytes_to_next_increase(self, idx: np.ndarray) -> np.ndarray:
        """Bytes each queue pair may send before its byte counter fires (``inf`` when it cannot)."""
        if not self.enabled or self.byte_period <= 0:
            return np.full(idx.size, _INF)
        if self._compiled(idx):
            return _kernels().bytes_to_next_increase(idx, self.byte_period, self.byte_acc, self.armed, self.inc_next_ns)
        left = self.byte_period - self.byte_acc[idx]
        return np.where(self.armed[idx] & (self.inc_next_ns[idx] < _INF), left, _INF)

    # -- inputs -------------------------------------------------------------------------------------
    def on_cnp(self, idx: np.ndarray, now_ns: float) -> None:
        """One CNP reaches each queue pair of ``idx`` (distinct) at ``now_ns``, after their clocks due by then
        (a rate-reduce monitor tick at ``now_ns`` cuts for the CNPs before it; this one waits for the next)."""
        if not self.enabled or idx.size == 0:
            return
        if self.ticks_first:
            self.advance(idx, np.zeros(idx.size), now_ns)
        if self._compiled(idx):
            _kernels().on_cnp(idx, float(now_ns), self._constants(), self.paper, self.rc, self.rt, self.alpha,
                              self.anchor_ns, self.t_stage, self.b_stage, self.byte_acc, self.inc_next_ns, self.armed,
                              self.alpha_flag, self.dec_flag, self.mon_next_ns, self.cnps, self.cuts, self.t_last_ns)
            return
        self.cnps[idx] += 1
        if self.paper:
            p = self.params
            alpha = self.paper_alpha(idx, now_ns)
            updated = (1.0 - self.g) * alpha + self.g
            cut_alpha = updated if p.alpha_update_before_cut else alpha
            if p.clamp_target_rate:
                self.rt[idx] = self.rc[idx]
            self._cut_to(idx, self.rc[idx] * (1.0 - cut_alpha / 2.0))
            self.alpha[idx] = updated
            self.anchor_ns[idx] = now_ns
            self.armed[idx] = True
            self._restart_increase(idx, now_ns)
            return
        p = self.params
        first = idx[~self.armed[idx]]
        rest = idx[self.armed[idx]]
        if first.size:
            self.armed[first] = True
            self.anchor_ns[first] = now_ns
            self.t_last_ns[first] = now_ns
            self.alpha[first] = p.initial_alpha_value / 1024
            self.alpha_flag[first] = p.first_cnp_cuts
            if p.rate_to_set_on_first_cnp_mbps > 0:
                rate = np.full(first.size, p.rate_to_set_on_first_cnp_mbps * _MBPS)
            else:
                rate = self.rc[first] * p.rate_on_first_cnp_fraction
            rate = np.clip(rate, self.min_rate_bps, self.max_rate_bps)
            self.rc[first] = rate
            self.rt[first] = rate
            self.dec_flag[first] = p.first_cnp_cuts
            self.mon_next_ns[first] = now_ns + self.monitor_period_ns
            self._restart_increase(first, now_ns)
        if rest.size:
            self.alpha_flag[rest] = True
            newly = rest[~self.dec_flag[rest]]
            self.dec_flag[newly] = True
            k = np.floor((now_ns - self.anchor_ns[newly]) / self.monitor_period_ns) + 1
            self.mon_next_ns[newly] = self.anchor_ns[newly] + k * self.monitor_period_ns

    def advance(self, idx: np.ndarray, sent_bytes: np.ndarray, now_ns: float) -> None:
        """Run the clocks of queue pairs ``idx`` (distinct) to ``now_ns``; ``sent_bytes[i]`` went out since."""
        if not self.enabled or idx.size == 0:
            return
        if self._compiled(idx):
            _kernels().advance(idx, sent_bytes, float(now_ns), self._constants(), self.paper, self.firmware, self.rc,
                               self.rt, self.alpha, self.t_stage, self.b_stage, self.byte_acc, self.inc_next_ns,
                               self.armed, self.alpha_flag, self.dec_flag, self.mon_next_ns, self.cuts, self.t_last_ns)
            return
        dt = np.maximum(now_ns - self.t_last_ns[idx], 0.0)
        self.t_last_ns[idx] = now_ns
        armed = self.armed[idx]
        if self.firmware:
            a = idx[armed]
            if a.size:
                decay = _libm_pow(1.0 - self.g, dt[armed] / self.alpha_period_ns)
                self.alpha[a] = self.alpha[a] * decay + self.g * self.alpha_flag[a]
                self.alpha_flag[a] = False
                due = a[self.dec_flag[a] & (self.mon_next_ns[a] <= now_ns)]
                if due.size:
                    self._firmware_cut(due, now_ns)
        for _ in range(64):  # an idle queue pair replays the increases it missed (bounded)
            due = idx[self.inc_next_ns[idx] <= now_ns]
            if not due.size:
                break
            self._increase(due, timer=True)
            self.inc_next_ns[due] = np.where(self._at_max(due), _INF, self.inc_next_ns[due] + self.inc_period_ns)
        else:
            due = idx[self.inc_next_ns[idx] <= now_ns]
            self.inc_next_ns[due] = now_ns + self.inc_period_ns
        if self.byte_period > 0:
            counting = armed & (self.inc_next_ns[idx] < _INF)
            b = idx[counting]
            if b.size:
                self.byte_acc[b] += sent_bytes[counting]
                fire = b[self.byte_acc[b] >= self.byte_period]
                if fire.size:
                    self.byte_acc[fire] -= self.byte_period
                    self._increase(fire, timer=False)
                    self.inc_next_ns[fire] = np.where(self._at_max(fire), _INF, self.inc_next_ns[fire])

    # -- mechanics ----------------------------------------------------------------------------------
    def _at_max(self, idx: np.ndarray) -> np.ndarray:
        snap = self.max_rate_bps * (1.0 - 1e-12)
        return (self.rc[idx] >= snap) & (self.rt[idx] >= snap)

    def _restart_increase(self, idx: np.ndarray, t_ns: float) -> None:
        self.t_stage[idx] = 0
        self.b_stage[idx] = 0
        self.byte_acc[idx] = 0.0
        self.inc_next_ns[idx] = np.where(self._at_max(idx), _INF, t_ns + self.inc_period_ns)

    def _cut_to(self, idx: np.ndarray, rate_bps: np.ndarray) -> None:
        self.rc[idx] = np.clip(rate_bps, self.min_rate_bps, self.max_rate_bps)
        self.cuts[idx] += 1

    def _firmware_cut(self, idx: np.ndarray, now_ns: float) -> None:
        p = self.params
        clamp = np.full(idx.size, p.clamp_tgt_rate) | (self.b_stage[idx] > 0)
        if p.clamp_tgt_rate_after_time_inc:
            clamp |= self.t_stage[idx] > 0
        self.rt[idx] = np.where(clamp, self.rc[idx], self.rt[idx])
        rc = self.rc[idx]
        cut = np.minimum(rc * (self.alpha[idx] * 1024) / (1 << p.rpg_gd), rc * (100.0 - p.rpg_min_dec_fac_pct) / 100)
        self._cut_to(idx, rc - cut)
        self.dec_flag[idx] = False
        t_cut = self.mon_next_ns[idx]
        self.mon_next_ns[idx] = t_cut + self.monitor_period_ns
        self.t_stage[idx] = 0
        self.b_stage[idx] = 0
        self.byte_acc[idx] = 0.0
        self.inc_next_ns[idx] = np.where(self._at_max(idx), _INF, np.minimum(t_cut, now_ns) + self.inc_period_ns)

    def _stage_delta_bps(self, t_stage: np.ndarray, b_stage: np.ndarray) -> np.ndarray:
        f = self.f
        if self.paper:
            low, high = np.minimum(t_stage, b_stage), np.maximum(t_stage, b_stage)
            return np.where(high < f, 0.0, np.where(low < f, self.ai_bps, (low - f + 1) * self.hai_bps))
        if self.byte_period > 0:
            low, high = np.minimum(t_stage, b_stage), np.maximum(t_stage, b_stage)
        else:
            low = high = t_stage
        return np.where(high < f, 0.0, np.where(low > f, self.hai_bps, self.ai_bps))

    def _increase(self, idx: np.ndarray, *, timer: bool) -> None:
        delta = self._stage_delta_bps(self.t_stage[idx], self.b_stage[idx])
        rt = np.minimum(self.max_rate_bps, self.rt[idx] + delta)
        rc = np.clip((rt + self.rc[idx]) / 2, self.min_rate_bps, self.max_rate_bps)
        self.rt[idx] = rt
        self.rc[idx] = rc
        top = self._at_max(idx)
        self.rc[idx[top]] = self.max_rate_bps
        self.rt[idx[top]] = self.max_rate_bps
        if timer:
            self.t_stage[idx] += 1
        else:
            self.b_stage[idx] += 1
