"""Compiled pieces of the fluid fabric's slice that replace runs of small numpy calls (:mod:`emulator.fabric.fluid`,
:mod:`emulator.fabric.fluid_view`): the view's index arrays, the NICs' shares and the order of a queue pair's
flows at a port, the FIFO tails of a level, the notification point's draw and CNPs.

Each kernel gives bit for bit what the numpy expressions or the Python function it stands for give (named in
its docstring; tests/fabric/test_fluid_step_kernels.py pins each on random inputs): sums run in the order
:func:`numpy.bincount` and :func:`numpy.cumsum` add, sorts are stable where numpy's are. Compiled by numba once
and cached on disk (``cache=True``); sans-IO like the fabric.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from emulator.fabric.fluid_kernels import np_cnps, packet_phase


@njit(cache=True)
def view_levels(a: np.ndarray, path: np.ndarray) -> tuple:
    """Per switch level 1–3 of the flows ``a``: ``rows`` (positions in ``a`` whose path has a port at that
    level), the ports ``ph`` and the flows there — :class:`~emulator.fabric.fluid_view._View`'s
    ``flatnonzero(path[a, lv] >= 0)``, ``path[a, lv][rows]``, ``a[rows]`` — as nine arrays in level order."""
    n = a.size
    rows = np.empty((3, n), np.int64)
    ph = np.empty((3, n), np.int64)
    fl = np.empty((3, n), np.int64)
    k = np.zeros(3, np.int64)
    for i in range(n):
        f = a[i]
        for j in range(3):
            p = path[f, j + 1]
            if p >= 0:
                m = k[j]
                rows[j, m], ph[j, m], fl[j, m] = i, p, f
                k[j] = m + 1
    return (rows[0, :k[0]].copy(), ph[0, :k[0]].copy(), fl[0, :k[0]].copy(),
            rows[1, :k[1]].copy(), ph[1, :k[1]].copy(), fl[1, :k[1]].copy(),
            rows[2, :k[2]].copy(), ph[2, :k[2]].copy(), fl[2, :k[2]].copy())  # fmt: skip


@njit(cache=True)
def _left(keys: np.ndarray, v: int) -> int:
    """``np.searchsorted(keys, v)`` (side ``left``) of ascending int64 ``keys``: compiled here in a few lines
    instead of numba's generic searchsorted."""
    lo, hi = 0, keys.size
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _pair_twice(rows: np.ndarray, ph: np.ndarray, qa: np.ndarray, inv: np.ndarray, count: np.ndarray,
                n_q: int) -> bool:  # fmt: skip
    """Whether two of ``rows`` (of a level, at ports ``ph``) hold one queue pair at one port; only rows whose
    queue pair has more than one flow (``count`` per queue pair of ``inv``) can."""
    m = 0
    for i in range(rows.size):
        if count[inv[rows[i]]] > 1:
            m += 1
    if m < 2:
        return False
    key = np.empty(m, np.int64)
    m = 0
    for i in range(rows.size):
        r = rows[i]
        if count[inv[r]] > 1:
            key[m] = ph[i] * n_q + qa[r]
            m += 1
    key.sort()
    for i in range(1, m):
        if key[i] == key[i - 1]:
            return True
    return False


@njit(cache=True)
def qp_index(qa: np.ndarray, order: np.ndarray, a: np.ndarray, fb_delay_ns: np.ndarray, rows1: np.ndarray,
             ph1: np.ndarray, rows2: np.ndarray, ph2: np.ndarray, rows3: np.ndarray, ph3: np.ndarray) -> tuple:  # fmt: skip
    """The view's queue pairs: ``qps, first, inv = np.unique(qa, return_index=True, return_inverse=True)``,
    ``qp_fb_ns = fb_delay_ns[a[first]]`` (``order``: ``np.argsort(qa, kind="stable")``) and per level whether
    some queue pair has two flows at one of its ports (rows and ports of each level as :func:`view_levels`
    gives them)."""
    n = qa.size
    inv = np.empty(n, np.int64)
    qps = np.empty(n, np.int64)
    fb = np.empty(n)
    count = np.zeros(n, np.int64)
    g = -1
    for j in range(n):
        i = order[j]
        if g < 0 or qa[i] != qps[g]:
            g += 1
            qps[g] = qa[i]
            fb[g] = fb_delay_ns[a[i]]  # the first occurrence: the stable sort keeps positions in order
        inv[i] = g
        count[g] += 1
    n_g = g + 1
    io = np.zeros(3, np.bool_)
    if n_g < n:
        n_q = qps[n_g - 1] + 1
        io[0] = _pair_twice(rows1, ph1, qa, inv, count, n_q)
        io[1] = _pair_twice(rows2, ph2, qa, inv, count, n_q)
        io[2] = _pair_twice(rows3, ph3, qa, inv, count, n_q)
    return qps[:n_g].copy(), inv, fb[:n_g].copy(), io


@njit(cache=True)
def nic_share(want: np.ndarray, host: np.ndarray, rate: np.ndarray, paused: np.ndarray) -> np.ndarray:
    """Each flow's rate once its NIC shares its line rate in proportion to what its flows want:
    ``load = bincount(host, want, n_ports)``, ``share = minimum(1, rate / load)`` (1 where nothing is
    offered), ``where(paused[host], 0, want * share[host])``."""
    n_ports = rate.size
    load = np.zeros(n_ports)
    for i in range(host.size):
        load[host[i]] += want[i]
    x = np.empty(want.size)
    for i in range(want.size):
        h = host[i]
        if paused[h]:
            x[i] = 0.0
        else:
            share = min(1.0, rate[h] / load[h]) if load[h] > 0 else 1.0
            x[i] = want[i] * share
    return x


@njit(cache=True)
def nic_max_min(want: np.ndarray, host: np.ndarray, rate: np.ndarray, paused: np.ndarray) -> tuple:
    """:func:`emulator.fabric.fluid_nic.max_min_share`: each NIC's line rate shared max-min fair in what its flows
    want (water-filling from the equal share, per NIC until no flow joins those below the level; the same
    sums in the same order), 0 at a paused NIC; and per NIC whether it is offered more than its rate."""
    n_ports = rate.size
    load = np.zeros(n_ports)
    n = np.zeros(n_ports)
    low = np.full(n_ports, np.inf)  # per NIC its least want: none below the equal share, no round to make
    for i in range(host.size):
        h = host[i]
        load[h] += want[i]
        n[h] += 1.0
        low[h] = min(low[h], want[i])
    level = np.full(n_ports, np.inf)
    over = load > rate
    rounds = False
    for p in range(n_ports):
        if over[p]:
            level[p] = rate[p] / n[p]
            rounds |= low[p] < level[p]
    if rounds:
        sat_n = np.zeros(n_ports)
        while True:
            cnt = np.zeros(n_ports)
            sat = np.zeros(n_ports)
            for i in range(host.size):
                h = host[i]
                if want[i] < level[h]:
                    cnt[h] += 1.0
                    sat[h] += want[i]
            same = True
            for p in range(n_ports):
                if cnt[p] != sat_n[p]:
                    same = False
            if same:
                break
            for p in range(n_ports):
                sat_n[p] = cnt[p]
                level[p] = (rate[p] - sat[p]) / (n[p] - cnt[p]) if over[p] and cnt[p] < n[p] else np.inf
    x = np.empty(want.size)
    for i in range(want.size):
        h = host[i]
        x[i] = 0.0 if paused[h] else min(want[i], level[h])
    return x, over


@njit(cache=True)
def stable_order(key: np.ndarray) -> np.ndarray:
    """``np.argsort(key, kind="stable")``: a bottom-up merge sort (ties keep their order), a few loops where
    numba's generic merge sort compiles for about a CPU-second."""
    n = key.size
    a = np.arange(n)
    b = np.empty(n, np.int64)
    w = 1
    while w < n:
        lo = 0
        while lo < n:
            mid, hi = min(lo + w, n), min(lo + 2 * w, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if key[a[j]] < key[a[i]]:
                    b[k] = a[j]
                    j += 1
                else:
                    b[k] = a[i]
                    i += 1
                k += 1
            while i < mid:
                b[k] = a[i]
                i += 1
                k += 1
            while j < hi:
                b[k] = a[j]
                j += 1
                k += 1
            lo = hi
        a, b = b, a
        w *= 2
    return a


@njit(cache=True)
def qp_in_order(qp: np.ndarray, flows: np.ndarray, ph: np.ndarray, content: np.ndarray, out: np.ndarray) -> np.ndarray:
    """:func:`emulator.fabric.fluid_fifo.qp_in_order`: what a port serves of a queue pair's flows goes to its lowest
    flow id first, up to what each holds (same sort, same sums in the same order)."""
    n = qp.size
    if n == 0:
        return out
    ascending = True  # the view's flows are (its rows are in flow id order): no sort by flow to make
    for j in range(1, n):
        if flows[j] <= flows[j - 1]:
            ascending = False
            break
    by_flow = np.arange(n) if ascending else stable_order(flows)
    qp_top = ph_top = 0  # qp.max(), ph.max() (non-negative): loops, not numba's generic reductions
    for j in range(n):
        qp_top = max(qp_top, qp[j])
        ph_top = max(ph_top, ph[j])
    n_q = qp_top + 1
    key = np.empty(n, np.int64)  # loops, not array expressions and fancy indexing (each compiles code of its own)
    for j in range(n):
        b = by_flow[j]
        key[j] = ph[b] * n_q + qp[b]
    order = np.empty(n, np.int64)
    if n < 1 << 21 and (ph_top + 1) * n_q < 1 << 42:  # the stable sort of the keys as a sort of distinct ones
        for j in range(n):
            key[j] = (key[j] << 21) | j
        key.sort()
        for j in range(n):
            order[j] = by_flow[key[j] & ((1 << 21) - 1)]
    else:
        by_key = stable_order(key)  # np.lexsort((flows, qp, ph))
        for j in range(n):
            order[j] = by_flow[by_key[j]]
    new = np.empty(n, np.bool_)
    new[0] = True
    every = True
    for j in range(1, n):
        i, h = order[j], order[j - 1]
        new[j] = ph[i] != ph[h] or qp[i] != qp[h]
        every = every and new[j]
    if every:  # one flow per queue pair and port
        return out
    gid = np.empty(n, np.int64)
    g = -1
    for j in range(n):
        if new[j]:
            g += 1
        gid[j] = g
    served = np.zeros(g + 1)
    for j in range(n):
        served[gid[j]] += out[order[j]]
    ahead = np.empty(n)
    s = 0.0
    for j in range(n):
        c = content[order[j]]
        s += c
        ahead[j] = s - c
    first = np.empty(g + 1, np.int64)
    for j in range(n):
        if new[j]:
            first[gid[j]] = j
    res = np.empty_like(out)
    for j in range(n):
        c = content[order[j]]
        v = served[gid[j]] - (ahead[j] - ahead[first[gid[j]]])
        res[order[j]] = min(max(v, 0.0), c)
    return res


@njit(cache=True)
def port_account(total: np.ndarray, queue: np.ndarray, buffer_bytes: float, port_queue: np.ndarray,
                 tx_bytes: np.ndarray, marked_packets: np.ndarray, pkt_bytes: float, p_mark: np.ndarray) -> None:  # fmt: skip
    """A level's ports after its service, in place: ``served = total − queue``; where the port held bytes its
    queue becomes ``minimum(queue, buffer_bytes)`` (tail drop keeps at most the buffer); ``tx_bytes += served``;
    ``marked_packets += served / pkt_bytes * p_mark``."""
    for i in range(total.size):
        s = total[i] - queue[i]
        if total[i] > 0:
            port_queue[i] = min(queue[i], buffer_bytes)
        tx_bytes[i] += s
        marked_packets[i] += s / pkt_bytes * p_mark[i]


@njit(cache=True)
def fifo_tail(at: np.ndarray, flows: np.ndarray, rows: np.ndarray, ph: np.ndarray, inflow: np.ndarray,
              content: np.ndarray, qp: np.ndarray, in_order: bool, drain: np.ndarray, drain_bpns: np.ndarray,
              queue: np.ndarray, rate: np.ndarray, t_end: float, dt: float) -> tuple:  # fmt: skip
    """:meth:`emulator.fabric.fluid.FluidFabric._fifo_tail` of a level's rows ``at`` (flows ``flows``, their
    ``rows`` in the slice, ports ``ph``; ``inflow`` per row of the slice, ``content`` per row of the level):
    which have stopped (input 0, bytes held; with ``in_order``, no flow of the same queue pair × port key
    ``qp[flow] * ports + port`` brings bytes), drain times and rates set at the stop (``drain``, ``drain_bpns``:
    the level's per-flow rows, updated in place), cleared where not stopped. Returns (stopped, drain, bpns)
    per row of ``at``."""
    n_ports = rate.size
    n = at.size
    stopped = np.empty(n, np.bool_)
    dl = np.empty(n)
    bpns = np.empty(n, np.float32)
    any_stopped = False
    for j in range(n):
        i = at[j]
        s = inflow[rows[i]] <= 0 and content[i] > 0
        stopped[j] = s
        any_stopped = any_stopped or s
    if in_order and any_stopped:  # np.isin(key[stopped], keys of the rows bringing bytes)
        m = 0
        for i in range(rows.size):
            if inflow[rows[i]] > 0:
                m += 1
        keys = np.empty(m, np.int64)
        m = 0
        for i in range(rows.size):
            if inflow[rows[i]] > 0:
                keys[m] = qp[flows[i]] * n_ports + ph[i]
                m += 1
        keys.sort()
        for j in range(n):
            if stopped[j]:
                i = at[j]
                k = qp[flows[i]] * n_ports + ph[i]
                h = _left(keys, k)
                if h < m and keys[h] == k:
                    stopped[j] = False
    for j in range(n):
        i = at[j]
        f = flows[i]
        if stopped[j]:
            d = drain[f]
            b = drain_bpns[f]
            if d == np.inf:  # its last byte came behind the port's queue: it leaves one queueing delay later
                p = ph[i]
                wait = queue[p] * 8e9 / rate[p]
                d = t_end - dt + wait
                b = np.float32(content[i] / (wait if wait >= dt or wait != wait else dt))  # np.maximum
        else:
            d = np.inf
            b = np.float32(0.0)
        dl[j] = d
        bpns[j] = b
        drain[f] = d
        drain_bpns[f] = b
    return stopped, dl, bpns


@njit(cache=True)
def to_draw(phase: np.ndarray, qps: np.ndarray, marked: np.ndarray, arrived: np.ndarray) -> tuple:
    """:meth:`emulator.fabric.fluid.FluidFabric._notify`'s draw: the paced stream's whole packets
    (:func:`~emulator.fabric.fluid_kernels.packet_phase`, ``phase`` in place), then the rows ``hit`` where
    whole packets came and marks are expected, their packets (int64) and marked fraction
    ``clip(marked / maximum(arrived, 1e-12), 0, 1)``."""
    whole = packet_phase(phase, qps, marked, arrived)
    k = 0
    for i in range(qps.size):
        if whole[i] > 0 and marked[i] > 0:
            k += 1
    hit = np.empty(k, np.int64)
    n = np.empty(k, np.int64)
    p = np.empty(k)
    k = 0
    for i in range(qps.size):
        if whole[i] > 0 and marked[i] > 0:
            a = arrived[i]
            x = marked[i] / (a if a >= 1e-12 or a != a else 1e-12)
            hit[k], n[k] = i, np.int64(whole[i])
            p[k] = x if (x >= 0.0 and x <= 1.0) or x != x else (0.0 if x < 0.0 else 1.0)
            k += 1
    return hit, n, p


@njit(cache=True)
def np_fire(mark_acc: np.ndarray, last_cnp_ns: np.ndarray, qps: np.ndarray, marked: np.ndarray, t_end: float,
            tau: float, defer: bool, np_marks: np.ndarray, cnps_sent: np.ndarray, cnp_due_ns: np.ndarray,
            qp_fb_ns: np.ndarray, cnp_next_ns: np.ndarray, behind: bool) -> None:  # fmt: skip
    """:meth:`emulator.fabric.fluid.FluidFabric._notify`'s CNPs, in place: the NP's CNPs per queue pair
    (:func:`~emulator.fabric.fluid_kernels.np_cnps`) counted, the last CNP's time set, and a CNP due at the
    reaction point ``qp_fb_ns`` later where none is on its way; with ``behind``, where one is, behind it
    (``cnp_next_ns``, a second CNP in flight) unless one is there already."""
    n = np_cnps(mark_acc, last_cnp_ns, qps, marked, t_end, tau, defer, np_marks)
    for i in range(qps.size):
        if n[i] > 0:
            q = qps[i]
            cnps_sent[q] += np.int64(n[i])
            last_cnp_ns[q] = t_end
            if not np.isfinite(cnp_due_ns[q]):
                cnp_due_ns[q] = t_end + qp_fb_ns[i]
            elif behind and not np.isfinite(cnp_next_ns[q]):
                cnp_next_ns[q] = t_end + qp_fb_ns[i]
