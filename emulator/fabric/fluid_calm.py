"""The fluid fabric's calm regime: no queue, no overloaded port, no congestion-control activity.

Theory of operation
-------------------
While every switch queue is empty, no port is offered more than its rate, no CNP is in flight or due and
every active queue pair's DCQCN is idle (no increase or cut pending: at its maximum rate, or ``cc`` none
or fixed), the fluid equations have a closed form: each flow sends at a constant rate (its queue pair's
rate, or its NIC's share when the NIC is offered more than its line rate), nothing queues and nothing
is marked, so a flow finishes ``bytes left ÷ rate`` after its rate was last set, and is delivered then.
A NIC's batch does not go first while calm (``FluidConfig.nic_round_robin``: its flows' heads are sent as
the rest): the regime is entered when it would hold without them, as if they had been sent.

:class:`Calm` keeps that state event by event instead of slice by slice: a heap of finish times (stale
entries skipped by a version number), per NIC its sending flows, per switch port the offered load. A
flow that starts or finishes changes only the flows on its NIC (recomputed together at the next
:meth:`Calm.advance`) and the load of the ports on its path. When a port would be overloaded, or a
starting flow's queue pair is not idle, the regime ends: every flow's bytes left are brought up to date
and the fabric steps in slices again. Cost per event is a few heap operations, not a pass over every
active flow, so long runs of uncontended flows (ring collectives, pipelines) cost per flow, not per flow
× active flows.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import numpy as np

from emulator.fabric.fluid_nic import max_min_share, proportional_share, sent_last

if TYPE_CHECKING:
    from emulator.fabric.fluid import FluidFabric

_BYTES_PER_BIT_NS = 1e-9 / 8
_OVERLOAD = 1 + 1e-9
#: finish times closer than this (ns) are one event
_SAME_NS = 1e-3


class Calm:
    """Closed-form state of the calm regime of one :class:`~emulator.fabric.fluid.FluidFabric`."""

    def __init__(self, fab: FluidFabric) -> None:
        self.fab = fab
        n = fab.send_left.size
        self.x = np.zeros(n)  # bps of each flow while calm
        self.t0 = np.zeros(n)  # when its send_left was last brought up to date
        self.ver = np.zeros(n, np.int64)
        self.heap: list[tuple[float, int, int]] = []
        self.host_flows: dict[int, set[int]] = {}
        self.port_load = np.zeros(fab.n_ports)
        self.shared = np.zeros(fab.n_ports, bool)  # per NIC: offered more than its line rate
        self.dirty: set[int] = set()
        self.on = False
        self.events = 0
        self.entered_at = 0  # events when the regime was last entered
        self.wait = 0  # uncongested slices to step before entering again
        self.backoff = 0

    # -- entering and leaving -----------------------------------------------------------------------
    def qp_idle(self, qp: int) -> bool:
        """Queue pair ``qp`` neither expects a CNP nor has a rate change pending."""
        fab = self.fab
        if fab.cnp_due_ns[qp] != np.inf or (fab.np_defer and fab.mark_acc[qp] >= 1):
            return False
        cc = fab.cc
        return not cc.enabled or (cc.inc_next_ns[qp] == np.inf and not (cc.firmware and cc.dec_flag[qp]))

    def try_enter(self, a: np.ndarray, qps: np.ndarray, x: np.ndarray, t: float) -> bool:
        """Enter the regime at ``t`` with active flows ``a`` offering ``x`` bps, if it holds; True if entered."""
        fab = self.fab
        if fab.queue.max(initial=0.0) > 0 or np.isfinite(fab.cnp_due_ns[qps]).any() or not fab.cc.idle(qps):
            return False
        if fab.np_defer and (fab.mark_acc[qps] >= 1).any():
            return False
        if (fab.backlog[a] > 0).any():
            return False
        load = self._load(a, x)
        if (load > fab.rate * _OVERLOAD).any():
            return False
        host = fab.path[a, 0]
        want = np.bincount(host, np.where(fab.send_left[a] > 0, fab.cc.rc[fab.qp[a]], 0.0), fab.n_ports)
        fab.nic.drop(a)  # while calm a NIC's batch does not go first (module docstring)
        self.on = True
        self.entered_at = self.events
        self.port_load = load
        self.x[a] = x
        self.t0[a] = t
        self.shared = want > fab.rate
        self.host_flows = {}
        for f, h in zip(a.tolist(), host.tolist(), strict=True):
            self.host_flows.setdefault(h, set()).add(f)
        self.dirty = set()
        self.heap = []
        self._push(a, t)
        return True

    def leave(self, t: float) -> None:
        """Bring every flow's bytes left up to ``t`` and end the regime."""
        fab = self.fab
        a = np.array(sorted(f for fl in self.host_flows.values() for f in fl), np.int64)
        if a.size:
            self._catch_up(a, t)
        self.on = False
        self.heap = []
        self.host_flows = {}
        self.dirty = set()
        self.shared[:] = False
        fab._dirty = True
        # a regime that ended after few events costs more than it saved: wait longer before the next one
        self.backoff = 0 if self.events - self.entered_at >= 16 else min(2 * self.backoff + 1, 256)
        self.wait = self.backoff

    # -- caller's inputs ----------------------------------------------------------------------------
    def start(self, flow: int, now_ns: float) -> bool:
        """Flow ``flow`` (its bytes already set) starts at ``now_ns``; False if that ends the regime."""
        fab = self.fab
        if not self.qp_idle(int(fab.qp[flow])):
            return False
        host = int(fab.path[flow, 0])
        fab.nic.drop(np.array([flow]))
        self.x[flow] = 0.0
        self.t0[flow] = now_ns
        self.host_flows.setdefault(host, set()).add(flow)
        self.dirty.add(host)
        return True

    def advance(self, now_ns: float, limit_ns: float, sent_done: list[tuple[int, float]],
                delivered: list[int]) -> float:  # fmt: skip
        """Jump to the next finish time (or ``limit_ns``); returns the time reached. May end the regime."""
        if self.dirty and not self._settle(now_ns):
            return now_ns
        heap, ver = self.heap, self.ver
        while heap and heap[0][2] != ver[heap[0][1]]:
            heapq.heappop(heap)
        if not heap or heap[0][0] > limit_ns:
            return float(limit_ns)
        t = heap[0][0]
        fab = self.fab
        done = []
        while heap and heap[0][0] <= t + _SAME_NS:
            _, f, v = heapq.heappop(heap)
            if v == ver[f]:
                done.append(f)
        self._finish(np.array(done, np.int64), t)
        sent_last(fab.qp_idle_ns, fab.qp[done], t, fab.qp_sending)  # their queue pairs' pacers fill from here
        sent_done.extend((f, t) for f in done)
        delivered.extend(done)
        fab._dirty = True
        self.events += 1
        return t

    # -- mechanics ----------------------------------------------------------------------------------
    def _load(self, a: np.ndarray, x: np.ndarray) -> np.ndarray:
        fab = self.fab
        load = np.zeros(fab.n_ports)
        for lv in (1, 2, 3):
            p = fab.path[a, lv]
            on = p >= 0
            load += np.bincount(p[on], x[on], fab.n_ports)
        return load

    def _push(self, a: np.ndarray, t: float) -> None:
        x = self.x[a]
        sending = x > 0
        f = a[sending]
        self.ver[f] += 1
        t_fin = t + self.fab.send_left[f] / (x[sending] * _BYTES_PER_BIT_NS)
        entries = list(zip(t_fin.tolist(), f.tolist(), self.ver[f].tolist(), strict=True))
        if len(entries) > len(self.heap):
            self.heap.extend(entries)
            heapq.heapify(self.heap)
        else:
            for e in entries:
                heapq.heappush(self.heap, e)

    def _catch_up(self, a: np.ndarray, t: float) -> None:
        """``send_left`` of flows ``a`` at ``t``; what they sent counts on every port of their paths."""
        fab = self.fab
        sent = np.minimum(fab.send_left[a], self.x[a] * (t - self.t0[a]) * _BYTES_PER_BIT_NS)
        fab.send_left[a] -= sent
        self.t0[a] = t
        for lv in range(4):
            p = fab.path[a, lv]
            on = p >= 0
            fab.tx_bytes += np.bincount(p[on], sent[on], fab.n_ports)

    def _settle(self, t: float) -> bool:
        """New rates for the flows of the NICs whose set of flows changed; False (regime ended) on overload."""
        fab = self.fab
        hosts = sorted(self.dirty)
        self.dirty = set()
        a = np.array(sorted(f for h in hosts for f in self.host_flows.get(h, ())), np.int64)
        if not a.size:
            return True
        self._catch_up(a, t)
        left = fab.send_left[a]
        want = np.where(left > 0, fab.cc.rc[fab.qp[a]], 0.0)
        host = fab.path[a, 0]
        # as in a slice (fluid_nic), without a NIC's batch or last round while calm
        x, over = (max_min_share if fab.cfg.nic_round_robin else proportional_share)(want, host, fab.rate, fab.paused)
        self.shared[hosts] = False
        self.shared[host] = over[host]
        old = self.x[a]
        self.port_load += self._load(a, x - old)
        if (self.port_load > fab.rate * _OVERLOAD).any():
            self.x[a] = x
            self.leave(t)
            return False
        self.x[a] = x
        self._push(a, t)
        return True

    def _finish(self, fs: np.ndarray, t: float) -> None:
        """Flows ``fs`` have sent (and, nothing queued, delivered) their last byte at ``t``."""
        fab = self.fab
        sent = fab.send_left[fs]
        fab.send_left[fs] = 0.0
        x = self.x[fs]
        self.x[fs] = 0.0
        self.ver[fs] += 1
        for lv in range(4):
            p = fab.path[fs, lv]
            on = p >= 0
            np.add.at(fab.tx_bytes, p[on], sent[on])
            if lv:
                np.subtract.at(self.port_load, p[on], x[on])
        fab._is_active[fs] = False
        shared = self.shared
        for f, host in zip(fs.tolist(), fab.path[fs, 0].tolist(), strict=True):
            self.host_flows[host].discard(f)
            if shared[host]:  # the rest of the NIC's flows speed up
                self.dirty.add(host)
            del fab._active[f]
