"""Compiled forms of the fluid NIC's own batch (:class:`emulator.fabric.fluid_nic.NicBatch`): the heads handed out
when flows start (:func:`nic_give`) and the rates with the heads first (:func:`nic_first`), each one loop where
the numpy form makes ~20 calls.

Each gives bit for bit what the numpy method it stands for gives (tests/fabric/test_fluid_nic_kernels.py pins
them on random inputs): the order is numpy's stable sort by host (a counting sort, :func:`by_host`: the one stable
order of the keys, without numba's generic merge sort to compile), running sums add in the order :func:`numpy.cumsum` and
:func:`numpy.bincount` add, minima and maxima pick as :func:`numpy.minimum`, :func:`numpy.maximum` and
:func:`numpy.clip` do. Compiled by numba once and cached on disk (``cache=True``); sans-IO like the fabric.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from emulator.fabric.fluid_step_kernels import nic_max_min


@njit(cache=True)
def by_host(hosts: np.ndarray, n_hosts: int) -> np.ndarray:
    """``np.argsort(hosts, kind="stable")`` for ``hosts`` in ``[0, n_hosts)``: a counting sort."""
    start = np.zeros(n_hosts + 1, np.int64)
    for i in range(hosts.size):
        start[hosts[i] + 1] += 1
    for h in range(n_hosts):
        start[h + 1] += start[h]
    order = np.empty(hosts.size, np.int64)
    for i in range(hosts.size):
        h = hosts[i]
        order[start[h]] = i
        start[h] += 1
    return order


@njit(cache=True)
def nic_give(level: np.ndarray, t_ns: np.ndarray, seen: np.ndarray, head_sent: np.ndarray, line: np.ndarray,
             tx: np.ndarray, head: np.ndarray, batch: float, flows: np.ndarray, hosts: np.ndarray,
             credit: np.ndarray, now: np.ndarray, ahead: np.ndarray, ahead_seen: np.ndarray) -> np.ndarray:  # fmt: skip
    """:meth:`NicBatch.give`'s numpy form on the bucket's arrays (``level``, ``t_ns``, ``seen``, ``head_sent``,
    ``line``, ``head``, ``ahead_seen`` updated in place; ``ahead``: each NIC's bytes taken ahead of the wire;
    ``tx``: the ports' sent bytes); returns the heads handed out, in the order of the stable sort by host (the
    order the numpy form sums them in)."""
    n = flows.size
    order = by_host(hosts, level.size)
    give = np.empty(n)
    run = 0.0  # cumsum of the credits in sorted order
    k = 0
    while k < n:
        j = order[k]
        h = hosts[j]
        other = tx[h] - head_sent[h]
        charge = other - seen[h] + (ahead[h] - ahead_seen[h])
        d = now[j] - t_ns[h]
        lv = level[h] + line[h] * (d if d >= 0.0 else 0.0) - charge
        lv = lv if lv > 0.0 else 0.0
        lv = lv if lv < batch else batch
        base = 0.0  # before the group's first flow
        given = 0.0
        g = k
        while g < n and hosts[order[g]] == h:
            i = order[g]
            w = credit[i]
            run = w if g == 0 else run + w
            before = run - w
            if g == k:
                base = before
            y = lv - (before - base)
            y = y if y > 0.0 else 0.0
            y = y if y < w else w
            give[g] = y
            head[flows[i]] = y
            given += y
            g += 1
        level[h] = lv - given
        t_ns[h] = now[j] if now[j] >= t_ns[h] else t_ns[h]
        seen[h] = other
        ahead_seen[h] = ahead[h]
        k = g
    return give


@njit(cache=True)
def nic_first(x: np.ndarray, want: np.ndarray, left: np.ndarray, head: np.ndarray, a: np.ndarray, host: np.ndarray,
              rate_bps: np.ndarray, paused: np.ndarray, slice_bytes_per_bps: float) -> np.ndarray:  # fmt: skip
    """:meth:`NicBatch.first`'s numpy form once a head is pending (``slice_bytes_per_bps``: ``dt_ns`` × bytes per
    bit-ns, the divisor it takes): rates ``x`` with the heads first, the others max-min fair in what is left
    (:func:`~emulator.fabric.fluid_step_kernels.nic_max_min`); ``x`` itself if no row with a head has bytes left."""
    m_all = 0
    for r in range(a.size):
        if head[a[r]] >= 1.0 and left[r] > 0:
            m_all += 1
    if m_all == 0:
        return x
    rows0 = np.empty(m_all, np.int64)
    c = 0
    for r in range(a.size):
        if head[a[r]] >= 1.0 and left[r] > 0:
            rows0[c] = r
            c += 1
    n_ports = rate_bps.size
    keys = np.empty(m_all, np.int64)
    for k in range(m_all):
        keys[k] = host[rows0[k]]
    order = by_host(keys, n_ports)
    rows = np.empty(m_all, np.int64)
    for k in range(m_all):
        rows[k] = rows0[order[k]]
    xh = np.empty(m_all)
    more = np.empty(m_all)
    used = np.zeros(n_ports)
    run = 0.0
    base = 0.0
    for k in range(m_all):
        r = rows[k]
        h = host[r]
        w, lr, hd = want[r], left[r], head[a[r]]
        b = hd if hd <= lr else lr
        b = b / slice_bytes_per_bps
        need = w if w <= b else b
        run = need if k == 0 else run + need
        ahead = run - need
        if k == 0 or host[rows[k - 1]] != h:
            base = ahead
        ahead -= base
        room = (0.0 if paused[h] else rate_bps[h]) - ahead
        room = room if room >= 0.0 else 0.0
        took = room if room <= need else need
        if lr <= hd and took >= need and need < w:
            xh[k] = w if w <= room else room
        else:
            xh[k] = took
        used[h] += took
        more[k] = w - xh[k] if lr > hd else 0.0
    is_row = np.zeros(x.size, np.bool_)
    for k in range(m_all):
        is_row[rows[k]] = True
    n_o = 0
    for r in range(x.size):
        if not is_row[r] and used[host[r]] > 0:
            n_o += 1
    n_m = 0
    for k in range(m_all):
        if more[k] > 0:
            n_m += 1
    w2 = np.empty(n_o + n_m)
    h2 = np.empty(n_o + n_m, host.dtype)
    o = np.empty(n_o, np.int64)
    c = 0
    for r in range(x.size):
        if not is_row[r] and used[host[r]] > 0:
            o[c] = r
            w2[c] = want[r]
            h2[c] = host[r]
            c += 1
    for k in range(m_all):
        if more[k] > 0:
            w2[c] = more[k]
            h2[c] = host[rows[k]]
            c += 1
    left_bps = np.empty(n_ports)
    for p in range(n_ports):
        v = rate_bps[p] - used[p]
        left_bps[p] = v if v >= 0.0 else 0.0
    rest = nic_max_min(w2, h2, left_bps, paused)[0]
    out = x.copy()
    for c in range(n_o):
        out[o[c]] = rest[c]
    for k in range(m_all):
        out[rows[k]] = xh[k]
    c = n_o
    for k in range(m_all):
        if more[k] > 0:
            out[rows[k]] += rest[c]
            c += 1
    return out


@njit(cache=True)
def nic_sent(head: np.ndarray, took: np.ndarray, head_sent: np.ndarray, ahead: np.ndarray, a: np.ndarray,
             host: np.ndarray, sent: np.ndarray, left: np.ndarray, credit: np.ndarray, rc: np.ndarray,
             slice_bytes_per_bps: float, batch: float) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """:meth:`NicBatch.sent`'s numpy form on the NIC's arrays (``head``, ``took``, ``head_sent``, ``ahead``, updated
    in place); returns the head bytes each row sent and each NIC's change of bytes ahead (the caller sums them as
    numpy does)."""
    m = a.size
    n = head_sent.size
    hs = np.empty(m)
    by_nic = np.zeros(n)
    for i in range(m):
        hd = head[a[i]]
        s = sent[i]
        h = s if s <= hd else hd
        hs[i] = h
        by_nic[host[i]] += h
    for p in range(n):
        head_sent[p] += by_nic[p]
    tk = np.empty(m)
    new = np.empty(m)
    want = np.zeros(n)
    for i in range(m):
        f = a[i]
        hd = head[f]
        t = took[f] - (sent[i] - hs[i])
        tk[i] = t if t > 0.0 else 0.0
        c = credit[i] + rc[i] * slice_bytes_per_bps - sent[i]
        c = c if c > 0.0 else 0.0
        c = c if c < batch else batch
        rest = left[i] - sent[i]
        g = (c if c <= rest else rest) - (hd - hs[i])
        d = g - tk[i]
        v = (d if d > 0.0 else 0.0) if by_nic[host[i]] > 0 else 0.0
        new[i] = v
        want[host[i]] += v
    change = np.zeros(n)
    for i in range(m):
        f = a[i]
        p = host[i]
        sc = by_nic[p] / want[p] if want[p] > by_nic[p] else 1.0
        t = tk[i] + new[i] * sc
        old = took[f]
        head[f] = head[f] - hs[i]
        took[f] = t
        change[p] += t - old
    for p in range(n):
        ahead[p] += change[p]
    return hs, change
