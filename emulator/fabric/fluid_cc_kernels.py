"""Compiled per-slice loops of the fluid DCQCN (:class:`emulator.fabric.fluid_cc.FluidDcqcn`): one pass over
the queue pairs where numpy makes several, with the same floating-point operations in the same order.

Each kernel runs one method of ``FluidDcqcn`` for queue pairs ``idx`` (distinct), queue pair by queue pair:
the rows are independent, so the order of the numpy stages across rows does not change a row's result,
and the results are bit for bit those of the numpy forms. The controller's knobs come as one float array
(``FluidDcqcn._constants``, indices ``C_*``), its state as its own arrays, changed in place. Compiled by
numba once and cached on disk (``cache=True``); sans-IO.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_INF = np.inf

# indices of the constants array
C_G, C_INC, C_BYTE, C_ALPHA, C_AI, C_HAI, C_MAX, C_MIN, C_F, C_SNAP, C_MON = range(11)
C_CLAMP, C_CLAMP_AFTER_T, C_GD, C_DEC_KEEP, C_ALPHA0, C_FIRST_CUTS, C_FIRST_RATE, C_FIRST_FRAC = range(11, 19)
C_BEFORE_CUT, C_CLAMP_PAPER = 19, 20
N_CONSTANTS = 21


@njit(cache=True, inline="always")
def _at_max(rc: np.ndarray, rt: np.ndarray, i: int, snap: float) -> bool:
    return rc[i] >= snap and rt[i] >= snap


@njit(cache=True, inline="always")
def _increase(i: int, timer: bool, c: np.ndarray, paper: bool, rc: np.ndarray, rt: np.ndarray,
              t_stage: np.ndarray, b_stage: np.ndarray) -> None:  # fmt: skip
    """``FluidDcqcn._increase`` (with ``_stage_delta_bps``) of row ``i``."""
    f = c[C_F]
    ts, bs = t_stage[i], b_stage[i]
    if paper or c[C_BYTE] > 0:
        low, high = min(ts, bs), max(ts, bs)
    else:
        low = high = ts
    if high < f:
        delta = 0.0
    elif paper:
        delta = c[C_AI] if low < f else (low - f + 1) * c[C_HAI]
    else:
        delta = c[C_HAI] if low > f else c[C_AI]
    hi, lo = c[C_MAX], c[C_MIN]
    r_t = min(hi, rt[i] + delta)
    r_c = min(max((r_t + rc[i]) / 2, lo), hi)
    rt[i] = r_t
    rc[i] = r_c
    if _at_max(rc, rt, i, c[C_SNAP]):
        rc[i] = hi
        rt[i] = hi
    if timer:
        t_stage[i] += 1
    else:
        b_stage[i] += 1


@njit(cache=True, inline="always")
def _restart(i: int, t_ns: float, c: np.ndarray, rc: np.ndarray, rt: np.ndarray, t_stage: np.ndarray,
             b_stage: np.ndarray, byte_acc: np.ndarray, inc_next: np.ndarray) -> None:  # fmt: skip
    """``FluidDcqcn._restart_increase`` of row ``i``."""
    t_stage[i] = 0
    b_stage[i] = 0
    byte_acc[i] = 0.0
    inc_next[i] = _INF if _at_max(rc, rt, i, c[C_SNAP]) else t_ns + c[C_INC]


@njit(cache=True)
def advance(idx: np.ndarray, sent: np.ndarray, now: float, c: np.ndarray, paper: bool, firmware: bool,
            rc: np.ndarray, rt: np.ndarray, alpha: np.ndarray, t_stage: np.ndarray, b_stage: np.ndarray,
            byte_acc: np.ndarray, inc_next: np.ndarray, armed: np.ndarray, alpha_flag: np.ndarray,
            dec_flag: np.ndarray, mon_next: np.ndarray, cuts: np.ndarray, t_last: np.ndarray) -> None:  # fmt: skip
    """``FluidDcqcn.advance``: the α clock and a due cut (firmware), the timer increases (at most 64 replayed,
    then the timer restarts from ``now``), the byte counter."""
    g, inc, byte_period, snap = c[C_G], c[C_INC], c[C_BYTE], c[C_SNAP]
    decay_base = 1.0 - g
    # the last α decay: the rows of a slice share their dt, so one pow serves them all
    periods, decay = np.nan, 1.0
    for j in range(idx.size):
        i = idx[j]
        dt = max(now - t_last[i], 0.0)
        t_last[i] = now
        arm = armed[i]
        if firmware and arm:
            x = dt / c[C_ALPHA]
            if x != periods:
                periods, decay = x, decay_base**x
            alpha[i] = alpha[i] * decay + g * (1.0 if alpha_flag[i] else 0.0)
            alpha_flag[i] = False
            if dec_flag[i] and mon_next[i] <= now:
                _firmware_cut(i, now, c, rc, rt, alpha, t_stage, b_stage, byte_acc, inc_next, dec_flag, mon_next,
                              cuts)  # fmt: skip
        n_inc = 0
        while inc_next[i] <= now and n_inc < 64:
            _increase(i, True, c, paper, rc, rt, t_stage, b_stage)
            inc_next[i] = _INF if _at_max(rc, rt, i, snap) else inc_next[i] + inc
            n_inc += 1
        if inc_next[i] <= now:
            inc_next[i] = now + inc
        if byte_period > 0 and arm and inc_next[i] < _INF:
            byte_acc[i] += sent[j]
            if byte_acc[i] >= byte_period:
                byte_acc[i] -= byte_period
                _increase(i, False, c, paper, rc, rt, t_stage, b_stage)
                if _at_max(rc, rt, i, snap):
                    inc_next[i] = _INF


@njit(cache=True, inline="always")
def _firmware_cut(i: int, now: float, c: np.ndarray, rc: np.ndarray, rt: np.ndarray, alpha: np.ndarray,
                  t_stage: np.ndarray, b_stage: np.ndarray, byte_acc: np.ndarray, inc_next: np.ndarray,
                  dec_flag: np.ndarray, mon_next: np.ndarray, cuts: np.ndarray) -> None:  # fmt: skip
    """``FluidDcqcn._firmware_cut`` of row ``i``."""
    clamp = c[C_CLAMP] != 0 or b_stage[i] > 0
    if c[C_CLAMP_AFTER_T] != 0:
        clamp = clamp or t_stage[i] > 0
    if clamp:
        rt[i] = rc[i]
    r = rc[i]
    cut = min(r * (alpha[i] * 1024) / c[C_GD], r * c[C_DEC_KEEP] / 100)
    rc[i] = min(max(r - cut, c[C_MIN]), c[C_MAX])
    cuts[i] += 1
    dec_flag[i] = False
    t_cut = mon_next[i]
    mon_next[i] = t_cut + c[C_MON]
    _restart(i, min(t_cut, now), c, rc, rt, t_stage, b_stage, byte_acc, inc_next)


@njit(cache=True)
def on_cnp(idx: np.ndarray, now: float, c: np.ndarray, paper: bool, rc: np.ndarray, rt: np.ndarray,
           alpha: np.ndarray, anchor: np.ndarray, t_stage: np.ndarray, b_stage: np.ndarray, byte_acc: np.ndarray,
           inc_next: np.ndarray, armed: np.ndarray, alpha_flag: np.ndarray, dec_flag: np.ndarray,
           mon_next: np.ndarray, cnps: np.ndarray, cuts: np.ndarray, t_last: np.ndarray) -> None:  # fmt: skip
    """``FluidDcqcn.on_cnp``: one CNP reaches each queue pair of ``idx``."""
    g, lo, hi = c[C_G], c[C_MIN], c[C_MAX]
    for j in range(idx.size):
        i = idx[j]
        cnps[i] += 1
        if paper:
            a = alpha[i]
            periods = np.floor((now - anchor[i]) / c[C_ALPHA])
            if armed[i] and periods > 0:
                a = a * (1.0 - g) ** max(periods, 0.0)
            updated = (1.0 - g) * a + g
            cut_alpha = updated if c[C_BEFORE_CUT] != 0 else a
            if c[C_CLAMP_PAPER] != 0:
                rt[i] = rc[i]
            rc[i] = min(max(rc[i] * (1.0 - cut_alpha / 2.0), lo), hi)
            cuts[i] += 1
            alpha[i] = updated
            anchor[i] = now
            armed[i] = True
            _restart(i, now, c, rc, rt, t_stage, b_stage, byte_acc, inc_next)
        elif not armed[i]:
            first_cuts = c[C_FIRST_CUTS] != 0
            armed[i] = True
            anchor[i] = now
            t_last[i] = now
            alpha[i] = c[C_ALPHA0]
            alpha_flag[i] = first_cuts
            rate = c[C_FIRST_RATE] if c[C_FIRST_RATE] > 0 else rc[i] * c[C_FIRST_FRAC]
            rate = min(max(rate, lo), hi)
            rc[i] = rate
            rt[i] = rate
            dec_flag[i] = first_cuts
            mon_next[i] = now + c[C_MON]
            _restart(i, now, c, rc, rt, t_stage, b_stage, byte_acc, inc_next)
        else:
            alpha_flag[i] = True
            if not dec_flag[i]:
                dec_flag[i] = True
                k = np.floor((now - anchor[i]) / c[C_MON]) + 1
                mon_next[i] = anchor[i] + k * c[C_MON]


@njit(cache=True)
def next_deadline_ns(idx: np.ndarray, firmware: bool, inc_next: np.ndarray, dec_flag: np.ndarray,
                     mon_next: np.ndarray) -> float:  # fmt: skip
    """``FluidDcqcn.next_deadline_ns``: the earliest timer deadline of ``idx`` and, firmware, the earliest
    cut of those with a decrease pending."""
    t = _INF
    for j in range(idx.size):
        i = idx[j]
        if inc_next[i] < t:
            t = inc_next[i]
        if firmware and dec_flag[i] and mon_next[i] < t:
            t = mon_next[i]
    return t


@njit(cache=True)
def bytes_to_next_increase(idx: np.ndarray, byte_period: float, byte_acc: np.ndarray, armed: np.ndarray,
                           inc_next: np.ndarray) -> np.ndarray:  # fmt: skip
    """``FluidDcqcn.bytes_to_next_increase``: ``byte_period − byte_acc`` where the byte counter counts, else ∞."""
    out = np.empty(idx.size)
    for j in range(idx.size):
        i = idx[j]
        out[j] = byte_period - byte_acc[i] if armed[i] and inc_next[i] < _INF else _INF
    return out


@njit(cache=True)
def idle(idx: np.ndarray, firmware: bool, inc_next: np.ndarray, dec_flag: np.ndarray) -> bool:
    """``FluidDcqcn.idle``: no queue pair of ``idx`` has a finite timer deadline or (firmware) a cut pending."""
    for j in range(idx.size):
        i = idx[j]
        if np.isfinite(inc_next[i]) or (firmware and dec_flag[i]):
            return False
    return True
