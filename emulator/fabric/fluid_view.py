"""The fluid fabric's view of its active flows (:mod:`emulator.fabric.fluid`): index arrays per path level
and per queue pair, rebuilt only when a flow starts or is delivered. From :data:`COMPILED_FROM` active flows
they are built by compiled loops (:mod:`emulator.fabric.fluid_step_kernels`, the same arrays)."""

from __future__ import annotations

from itertools import accumulate, islice

import numpy as np

#: active flows from which the view's arrays come from the compiled loops (a few small runs need not load them)
COMPILED_FROM = 256
#: views of up to this many flows are brought up to date from the last one (:func:`updated`); larger ones (the
#: 1,024-rank All-to-All's million flows) are built afresh or cut by numpy (:meth:`_View.without`), which was
#: faster there (the update: 11.6 against 4.3 ms a view)
UPDATE_UP_TO = 50_000


def active_sorted(prev: np.ndarray, is_active: np.ndarray, active: dict[int, None]) -> np.ndarray:
    """The flows of ``active`` (which keeps insertion order; ``is_active``: its mask), ascending: those of the
    last view (``prev``) still active and the flows started since, the last entries of ``active`` — or, where
    the two are not ``len(active)`` distinct flows (a flow ended and started again), all of ``active`` sorted."""
    k = len(active)
    kept = prev[is_active[prev]]
    m = k - kept.size
    if m >= 0:
        a = np.concatenate((kept, np.fromiter(islice(reversed(active), m), np.int64, m)))
        a.sort()
        if (a[1:] > a[:-1]).all():
            return a
    return np.sort(np.fromiter(active, np.int64, k))


def updated(prev: _View, is_active: np.ndarray, active: dict[int, None], path: np.ndarray, flow_qp: np.ndarray,
            fb_delay_ns: np.ndarray, qp_shared: bool) -> _View | None:  # fmt: skip
    """The view of ``active`` (``is_active``: its mask) from the last view ``prev``: its flows still active
    merged with those started since — the last entries of ``active`` (:func:`active_sorted`) — by one compiled
    loop (:func:`~emulator.fabric.fluid_view_kernels.view_update`), the arrays :class:`_View` would build
    afresh; None where that does not apply (a view below compiled size or above :data:`UPDATE_UP_TO`, the two
    not ``len(active)`` distinct flows), to build afresh."""
    k = len(active)
    if not (COMPILED_FROM <= prev.a.size <= UPDATE_UP_TO and COMPILED_FROM <= k <= UPDATE_UP_TO) or path.dtype != np.int64:
        return None
    from emulator.fabric.fluid_view_kernels import view_update

    kept = int(np.count_nonzero(is_active[prev.a]))
    m = k - kept
    if m < 0:
        return None
    new = np.sort(np.fromiter(islice(reversed(active), m), np.int64, m))
    lv = {x[0]: x[1:] for x in prev.levels}
    empty = (np.zeros(0, np.int64),) * 3
    got = view_update(prev.a, prev.qa, prev.host, prev.inv, prev.qps, is_active, new, path, flow_qp, fb_delay_ns,
                      qp_shared, *(x for i in (1, 2, 3) for x in lv.get(i, empty)))  # fmt: skip
    ok, ints, sizes, fb, io = got
    if not ok:
        return None
    at = list(accumulate(sizes.tolist(), initial=0))
    x = [ints[at[i]:at[i + 1]] for i in range(14)]
    v = _View.__new__(_View)
    v.a, v.qa, v.host = x[0], x[1], x[2]
    v.levels = [(i, *x[3 * i:3 + 3 * i]) for i in (1, 2, 3) if x[3 * i].size]
    if qp_shared:
        v.qps, v.inv, v.qp_fb_ns = x[12], x[13], fb
        v.in_order = [bool(io[i - 1]) for i, *_ in v.levels]
    else:  # one flow per queue pair: as _index_qps
        v.qps, v.inv, v.qp_fb_ns = v.qa, np.arange(v.a.size), fb_delay_ns[v.a]
        v.in_order = [False] * len(v.levels)
    return v


class _View:
    """Index arrays of the active flows, rebuilt only when a flow starts or is delivered."""

    __slots__ = ("a", "qa", "host", "levels", "qps", "inv", "qp_fb_ns", "in_order")

    def __init__(self, a: np.ndarray, path: np.ndarray, flow_qp: np.ndarray, fb_delay_ns: np.ndarray,
                 qp_shared: bool = True) -> None:  # fmt: skip
        self.a = a
        self.qa = flow_qp[a]
        self.host = path[a, 0]
        self.levels = []
        if a.size >= COMPILED_FROM:
            from emulator.fabric.fluid_step_kernels import view_levels

            got = view_levels(a, path)
            self.levels = [(lv, *got[3 * i:3 * i + 3]) for i, lv in enumerate((1, 2, 3)) if got[3 * i].size]
            self._index_qps(fb_delay_ns, qp_shared)
            return
        for lv in (1, 2, 3):
            p = path[a, lv]
            rows = np.flatnonzero(p >= 0)
            if rows.size:
                self.levels.append((lv, rows, p[rows], a[rows]))
        self._index_qps(fb_delay_ns, qp_shared)

    def without(self, gone: np.ndarray, fb_delay_ns: np.ndarray, qp_shared: bool) -> _View:
        """The view without rows ``gone`` (delivered flows): the arrays a view built afresh would hold."""
        keep = np.ones(self.a.size, bool)
        keep[gone] = False
        v = _View.__new__(_View)
        v.a, v.qa, v.host = self.a[keep], self.qa[keep], self.host[keep]
        renumber = np.cumsum(keep) - 1
        v.levels = []
        for lv, rows, ph, flows in self.levels:
            k = keep[rows]
            if k.any():
                v.levels.append((lv, renumber[rows[k]], ph[k], flows[k]))
        v._index_qps(fb_delay_ns, qp_shared)
        return v

    def _index_qps(self, fb_delay_ns: np.ndarray, qp_shared: bool) -> None:
        a = self.a
        if qp_shared and a.size >= COMPILED_FROM:
            from emulator.fabric.fluid_step_kernels import qp_index

            by_level = {lv: (rows, ph) for lv, rows, ph, _ in self.levels}
            empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
            self.qps, self.inv, self.qp_fb_ns, io = qp_index(self.qa, np.argsort(self.qa, kind="stable"), a, fb_delay_ns,
                                                             *(x for lv in (1, 2, 3) for x in by_level.get(lv, empty)))
            self.in_order = [bool(io[lv - 1]) for lv, _, _, _ in self.levels]
            return
        if qp_shared:
            self.qps, first, self.inv = np.unique(self.qa, return_index=True, return_inverse=True)
            self.qp_fb_ns = fb_delay_ns[a[first]]
        else:  # one flow per queue pair (a is sorted by flow, not by queue pair: keep the pairing)
            self.qps, self.inv, self.qp_fb_ns = self.qa, np.arange(a.size), fb_delay_ns[a]
        #: per level: some queue pair has two flows at one port (only then is there an order to keep)
        self.in_order = [False] * len(self.levels)
        if self.qps.size < a.size:
            multi = np.bincount(self.inv)[self.inv] > 1
            for i, (_, rows, ph, _) in enumerate(self.levels):
                m = multi[rows]
                key = ph[m] * (int(self.qa.max()) + 1) + self.qa[rows][m]
                self.in_order[i] = np.unique(key).size < key.size
