"""The fluid fabric's view of its active flows (:class:`~emulator.fabric.fluid_view._View`) brought up to date
by one compiled loop: the last view's rows still active merged with the flows started since, instead of built
afresh from every active flow.

:func:`view_update` gives bit for bit the arrays :class:`~emulator.fabric.fluid_view._View` builds from the
same active flows (tests/fabric/test_fluid_view_kernels.py pins it on random sequences of starts and ends); it
reads the fabric's per-flow arrays (path, queue pair, feedback delay) only for the started flows. Compiled by
numba once and cached on disk (``cache=True``); sans-IO like the fabric.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from emulator.fabric.fluid_step_kernels import _left, _pair_twice


@njit(cache=True)
def _merge_level(pr: np.ndarray, pp: np.ndarray, pf: np.ndarray, keep: np.ndarray, newpos: np.ndarray,
                 new: np.ndarray, nrow: np.ndarray, path: np.ndarray, lv: int) -> tuple:  # fmt: skip
    """One switch level's rows, ports and flows of the updated view: the last view's (``pr``, ``pp``, ``pf``)
    whose flow is kept (``keep`` per old row; ``newpos``: its new row) merged by row with the started flows
    ``new`` (new rows ``nrow``) that have a port at level ``lv``."""
    cap = pr.size + new.size
    rows = np.empty(cap, np.int64)
    ph = np.empty(cap, np.int64)
    fl = np.empty(cap, np.int64)
    i = j = k = 0
    while True:
        while i < pr.size and not keep[pr[i]]:
            i += 1
        while j < new.size and path[new[j], lv] < 0:
            j += 1
        if i >= pr.size and j >= new.size:
            break
        if j >= new.size or (i < pr.size and newpos[pr[i]] < nrow[j]):
            rows[k], ph[k], fl[k] = newpos[pr[i]], pp[i], pf[i]
            i += 1
        else:
            f = new[j]
            rows[k], ph[k], fl[k] = nrow[j], path[f, lv], f
            j += 1
        k += 1
    return rows[:k].copy(), ph[:k].copy(), fl[:k].copy()


@njit(cache=True)
def view_update(pa: np.ndarray, pqa: np.ndarray, phost: np.ndarray, pinv: np.ndarray, pqps: np.ndarray,
                is_active: np.ndarray, new: np.ndarray, path: np.ndarray, flow_qp: np.ndarray,
                fb_delay_ns: np.ndarray, qp_shared: bool, r1: np.ndarray, p1: np.ndarray, f1: np.ndarray,
                r2: np.ndarray, p2: np.ndarray, f2: np.ndarray, r3: np.ndarray, p3: np.ndarray,
                f3: np.ndarray) -> tuple:  # fmt: skip
    """The view of the last view's flows ``pa`` still active (``is_active`` per flow) and the flows ``new``
    (ascending) started since: ``(ok, ints, sizes, qp_fb_ns, in_order)``, ``ints`` the int64 arrays ``a, qa,
    host, rows1, ph1, fl1, rows2, ph2, fl2, rows3, ph3, fl3, qps, inv`` one after the other (``sizes``) as :class:`~emulator.fabric.fluid_view._View` builds them from the same flows
    (``pqa``, ``phost``, ``pinv``, ``pqps`` and the level arrays ``r``/``p``/``f``: the last view's). With
    ``qp_shared`` false ``qps``, ``inv`` and ``qp_fb_ns`` are left empty (one flow per queue pair: the caller's
    identities). ``ok`` false (and the arrays empty) where a started flow is already among the kept ones or
    started twice: the two are then not distinct flows and the view is to be built afresh."""
    n0, m = pa.size, new.size
    keep = np.empty(n0, np.bool_)
    kept = 0
    for i in range(n0):
        keep[i] = is_active[pa[i]]
        kept += keep[i]
    n = kept + m
    a = np.empty(n, np.int64)
    qa = np.empty(n, np.int64)
    host = np.empty(n, np.int64)
    newpos = np.empty(n0, np.int64)  # per kept old row: its row in the new view
    nrow = np.empty(m, np.int64)  # per started flow: its row
    e = np.zeros(0, np.int64)
    i = j = k = 0
    while k < n:
        if i < n0 and not keep[i]:
            i += 1
            continue
        if j >= m or (i < n0 and pa[i] < new[j]):
            a[k], qa[k], host[k] = pa[i], pqa[i], phost[i]
            newpos[i] = k
            i += 1
        else:
            f = new[j]
            if (i < n0 and pa[i] == f) or (j > 0 and new[j - 1] == f):
                return False, e, e, np.zeros(0), np.zeros(3, np.bool_)
            a[k], qa[k], host[k] = f, flow_qp[f], path[f, 0]
            nrow[j] = k
            j += 1
        k += 1
    lv = np.int64(1)  # a typed level, not a literal: one compiled _merge_level for the three levels
    rows1, ph1, fl1 = _merge_level(r1, p1, f1, keep, newpos, new, nrow, path, lv)
    rows2, ph2, fl2 = _merge_level(r2, p2, f2, keep, newpos, new, nrow, path, lv + 1)
    rows3, ph3, fl3 = _merge_level(r3, p3, f3, keep, newpos, new, nrow, path, lv + 2)
    io = np.zeros(3, np.bool_)
    if not qp_shared:
        ints, sizes = _packed((a, qa, host, rows1, ph1, fl1, rows2, ph2, fl2, rows3, ph3, fl3, e, e))
        return True, ints, sizes, np.zeros(0), io
    # queue pairs: the last view's (ascending) with their kept rows counted, merged with the started flows'
    n_g0 = pqps.size
    cnt0 = np.zeros(n_g0, np.int64)
    for i in range(n0):
        if keep[i]:
            cnt0[pinv[i]] += 1
    nq = np.empty(m, np.int64)
    for j in range(m):
        nq[j] = qa[nrow[j]]
    nqs = np.sort(nq)
    qps = np.empty(n_g0 + m, np.int64)
    cnt = np.empty(n_g0 + m, np.int64)
    remap = np.full(n_g0, -1, np.int64)
    g = i = j = 0
    while i < n_g0 or j < m:
        if j >= m or (i < n_g0 and pqps[i] <= nqs[j]):
            v, c, old = pqps[i], cnt0[i], i
            i += 1
        else:
            v, c, old = nqs[j], 0, -1
        while j < m and nqs[j] == v:
            c += 1
            j += 1
        if c > 0:
            qps[g], cnt[g] = v, c
            if old >= 0:
                remap[old] = g
            g += 1
    n_g = g
    qps = qps[:n_g].copy()
    inv = np.empty(n, np.int64)
    for i in range(n0):
        if keep[i]:
            inv[newpos[i]] = remap[pinv[i]]
    for j in range(m):
        inv[nrow[j]] = _left(qps, nq[j])
    fb = np.empty(n_g)
    seen = np.zeros(n_g, np.bool_)
    for r in range(n):  # a queue pair's feedback delay: its first flow's (the lowest row)
        gg = inv[r]
        if not seen[gg]:
            seen[gg] = True
            fb[gg] = fb_delay_ns[a[r]]
    if n_g < n:
        n_q = qps[n_g - 1] + 1
        io[0] = _pair_twice(rows1, ph1, qa, inv, cnt, n_q)
        io[1] = _pair_twice(rows2, ph2, qa, inv, cnt, n_q)
        io[2] = _pair_twice(rows3, ph3, qa, inv, cnt, n_q)
    ints, sizes = _packed((a, qa, host, rows1, ph1, fl1, rows2, ph2, fl2, rows3, ph3, fl3, qps, inv))
    return True, ints, sizes, fb, io


@njit(cache=True)
def _packed(arrays: tuple) -> tuple:
    """``arrays`` (int64) one after the other in one array, and their sizes: each array handed back to Python
    costs a microsecond, one array and views of it a fraction of that."""
    sizes = np.empty(len(arrays), np.int64)
    total = 0
    for i, x in enumerate(arrays):
        sizes[i] = x.size
        total += x.size
    out = np.empty(total, np.int64)
    at = 0
    for x in arrays:  # element by element: a slice assignment compiles numba's shape-error formatting
        for i in range(x.size):
            out[at + i] = x[i]
        at += x.size
    return out, sizes

