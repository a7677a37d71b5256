"""The fluid driver's events (:mod:`emulator.drivers.fluid`): their handling, and those that only record held
past the fabric's next cut.

An event is *quiet* when, handled in heap order after the events held before it, it starts no part and
pushes no event: it only records (ends of ops, flows arrived, SENDs readied behind a busy queue pair). The
driver holds the quiet events of the next step, advances the fabric to the first event that is not, and
handles the held ones before the time reached at their own times.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from emulator.schedule.model import OP_DELAY, OP_SEND

_RELEASE, _DONE, _ARRIVE, _ACKED = 0, 1, 2, 3
#: a heap entry of at least this many arrivals or acknowledgements is handled as arrays
BATCH_FROM = 32
#: what a dry run changes: pending parents per op, unacknowledged parts per flow, flows arrived, RECVs ready
_State = tuple[dict, dict, set, set]


def _occurrence(a: np.ndarray, pos: np.ndarray | None = None) -> np.ndarray:
    """Per position of ``a``, how many times its value came up so far, that position included (1, 2, ...);
    ``pos``: a work array indexed by ``a``'s values, for the common case of distinct values."""
    if pos is not None and _distinct(a, pos):
        return np.ones(a.size, np.int64)
    order = np.argsort(a, kind="stable")
    sa = a[order]
    start = np.flatnonzero(np.concatenate(([True], sa[1:] != sa[:-1])))
    occ = np.empty(sa.size, np.int64)
    occ[order] = np.arange(sa.size) - np.repeat(start, np.diff(np.concatenate((start, [sa.size])))) + 1
    return occ


def _distinct(a: np.ndarray, pos: np.ndarray) -> bool:
    """Whether the values of ``a`` (indices into ``pos``, a work array whose entries it overwrites) are
    distinct: written with their positions, a repeated value keeps at most one of them."""
    at = np.arange(a.size)
    pos[a] = at
    return bool((pos[a] == at).all())


def _last_each(a: np.ndarray, pos: np.ndarray | None = None) -> np.ndarray:
    """Mask of the positions of ``a`` that hold each value's last occurrence (``pos``: a work array indexed
    by ``a``'s values, for the common case of distinct values)."""
    if pos is not None and _distinct(a, pos):
        return np.ones(a.size, bool)
    last = np.zeros(a.size, bool)
    last[a.size - 1 - np.unique(a[::-1], return_index=True)[1]] = True
    return last


class DriverEvents:
    """Handling and holding of the driver's events, on its state (a mixin of the fluid driver's run)."""

    def handle(self, kind: int, x, t: float, cnps_now: list[int] | None = None) -> None:
        """Driver event ``kind`` of ``x`` at ``t``; ``cnps_now``: per part of an acknowledgement, the CNPs its
        queue pair had received at ``t`` (read from the fabric when None)."""
        if kind == _RELEASE:
            self.make_ready(x, t)
        elif kind == _DONE:
            self.complete(x, t)
        elif kind == _ARRIVE:
            self.events += len(x) - 1
            if len(x) >= BATCH_FROM:
                self._arrive_many(x, t)
                return
            for f in x:
                self.arrived[f] = 1
                r = self.recv_op_l[f]
                if r >= 0 and self.recv_ready[f]:
                    self.complete(r, t)
        else:  # parts' last acknowledgements; a SEND completes with its flow's last part
            self.events += len(x) - 1
            if len(x) >= BATCH_FROM:
                self._acked_many(x, t, cnps_now)
                return
            fab_cnps = self.fab.cc.cnps
            for i, q in enumerate(x):
                f = self.part_flow[q]
                op = self.send_op_l[f]
                qp = self.part_qp[q]
                cnps = cnps_now[i] if cnps_now is not None else int(fab_cnps[qp])
                self.cnps[op] += cnps - self.rp_given[qp]  # its queue pair's CNPs since its last acknowledgement
                self.rp_given[qp] = cnps
                self.to_ack[f] -= 1
                if not self.to_ack[f]:
                    self.complete(op, t)

    # -- what a slice delivers and finishes sending: events and next parts as arrays ------------------------
    def delivered(self, dl: list[int], t: float) -> None:
        """Parts ``dl`` are delivered by ``t`` (the fabric's time): a flow arrives with its last part; each part
        is acknowledged.

        Per part, its last byte reaches the receiver ``hops × latency`` after the fluid delivered it (its last
        bytes left its last port: the fabric's ``delivered_ns``, in the order of ``dl``), plus the
        store-and-forward of the levels after the last one where its bytes queued, and no earlier than ``t``;
        its acknowledgement as long again after that."""
        from emulator.drivers.fluid_event_kernels import delivered_events

        fab = self.fab
        times, kinds, ids = delivered_events(
            np.asarray(dl, np.int64), float(t), self.grid_ns, fab.drain_ns, fab.delivered_ns, self.hop_ser_ns,
            np.asarray(self.lat), np.asarray(self.part_flow), np.asarray(self.part_qp), np.asarray(self.to_arrive),
            np.asarray(self.recv_op_l), fab.cnps_sent, fab.np_marks, np.asarray(self.np_given),
            np.asarray(self.ce_given), self.op_array("cnps"), self.op_array("ce"), self.work, _ACKED, _ARRIVE)  # fmt: skip
        self.push_batch(times, kinds, ids)

    def sent_done_many(self, ps: list[int], t: float) -> None:
        """:meth:`sent_done` of parts ``ps`` (on distinct queue pairs) in order: the next parts start as arrays."""
        sending, fifo, part_qp = self.sending, self.fifo, self.part_qp
        nxt = []
        for p in ps:
            qp = part_qp[p]
            if sending.get(qp) == p:
                del sending[qp]
            q = fifo.get(qp)
            if q:
                nxt.append(q.popleft())
                if not q:
                    del fifo[qp]
        self.start_parts(np.array(nxt, np.int64), t)

    # -- a run of events as arrays: what handling them one by one gives ----------------------------------
    def _acked_many(self, x: list[int], t: float, cnps_now: list[int] | None) -> None:
        """The acknowledgements of parts ``x`` at ``t``: CNP counts and unacknowledged parts as arrays, then
        the SENDs whose last part this is complete in the order of their last parts. Completing a SEND changes
        no acknowledgement's counts, so only the completions' order matters."""
        q = np.asarray(x, np.int64)
        f = np.asarray(self.part_flow)[q]
        self._complete_many(np.asarray(self.send_op_l)[f[self._acks_counted(q, f, cnps_now)]], t)

    def _acks_counted(self, q: np.ndarray, f: np.ndarray, cnps_now: list[int] | None) -> np.ndarray:
        """The CNP shares and unacknowledged counts of acknowledged parts ``q`` (of flows ``f``); the positions
        whose SEND completes (its flow's last part acknowledged), in order."""
        from emulator.drivers.fluid_event_kernels import acks_counted

        part_qp = np.asarray(self.part_qp)
        now = np.asarray(cnps_now, np.int64) if cnps_now is not None else self.fab.cc.cnps[part_qp[q]].astype(np.int64)
        return acks_counted(q, f, now, part_qp, np.asarray(self.send_op_l), self.op_array("cnps"),
                            np.asarray(self.rp_given), np.asarray(self.to_ack), self.work)  # fmt: skip

    def _arrive_many(self, x: list[int], t: float) -> None:
        """Flows ``x`` arrive at ``t``: as one by one, a flow's RECV completes at its turn when it is ready.
        Runs of RECVs whose completions make nothing ready are done as arrays; an op that makes a child ready
        completes on its own (its child's handling may ready a RECV of a later flow of ``x``)."""
        fs = np.asarray(x, np.int64)
        arrived = np.asarray(self.arrived)
        recv_op = np.asarray(self.recv_op_l)
        ready = np.asarray(self.recv_ready)
        ops = recv_op[fs]
        if self._complete_plain(ops[(ops >= 0) & (ready[fs] == 1)], t, fs):
            arrived[fs] = 1
            return
        while True:
            on = (recv_op[fs] >= 0) & (ready[fs] == 1)
            at = np.flatnonzero(on)  # the flows of ``fs`` whose RECV completes at its turn
            ops = recv_op[fs[at]]
            pos = 0  # the flows of ``fs`` before ``pos`` have arrived
            for j0, j in self._runs(ops):
                self._finish_ops(ops[j0:j], t)
                if j == ops.size:
                    arrived[fs[pos:]] = 1
                    return
                k = int(at[j])
                arrived[fs[pos:k + 1]] = 1
                pos = k + 1
                done = self.n_done
                self.complete(int(ops[j]), t)
                rest = fs[pos:]
                if self.n_done != done + 1 or not np.array_equal(on[pos:], (recv_op[rest] >= 0) & (ready[rest] == 1)):
                    break  # the child's handling completed ops or readied RECVs: look again
            fs = fs[pos:]

    def _complete_many(self, ops: np.ndarray, t: float) -> None:
        """:meth:`complete` of ``ops`` in order at ``t``: runs that make no child ready as arrays."""
        if self._complete_plain(ops, t, None):
            return
        while True:
            for j0, j in self._runs(ops):
                self._finish_ops(ops[j0:j], t)
                if j == ops.size:
                    return
                done = self.n_done
                self.complete(int(ops[j]), t)
                if self.n_done != done + 1:  # the child's handling completed ops: look again
                    break
            ops = ops[j + 1:]

    def _complete_plain(self, ops: np.ndarray, t: float | np.ndarray, arriving: np.ndarray | None) -> bool:
        """:meth:`complete` of ``ops`` in order at ``t`` (one time, or each op's, ascending) as arrays, where
        every child they make ready is plain: a SEND released by then whose parts use queue pairs no other
        such part uses (each starts, or queues behind its busy queue pair), or a RECV whose flow has not
        arrived and is not among ``arriving``. Such children push no event and ready nothing, so their order
        (and time) is their last parent's. False (nothing done) where a child is not plain."""
        if not ops.size:
            return True
        from emulator.drivers.fluid_event_kernels import plain_children

        t_ops = np.full(ops.size, float(t)) if np.ndim(t) == 0 else np.asarray(t, float)
        buf = self._buffers()
        empty = np.zeros(0, np.int64)
        plain, ch, now, t_now, recv, parts, qp, t_parts = plain_children(
            ops, t_ops, buf["child_ptr"], buf["child_idx"], buf["pending"], buf["kind"], buf["not_before"],
            buf["op_flow"], buf["arrived"], arriving if arriving is not None else empty, arriving is not None,
            buf["part_ptr"], buf["part_qp"], self.work)  # fmt: skip
        if not plain:
            return False
        self._finish_ops(ops, t, ch)
        self.op_array("ready")[now] = np.rint(t_now)
        np.asarray(self.recv_ready)[recv] = 1
        sending = self.sending
        busy = np.fromiter((q in sending for q in qp.tolist()), bool, qp.size) if sending else np.zeros(qp.size, bool)
        for q, p in zip(qp[busy].tolist(), parts[busy].tolist(), strict=True):
            self.fifo.setdefault(q, deque()).append(p)
        self.start_parts(parts[~busy], t if np.ndim(t) == 0 else t_parts[~busy])
        return True

    def _buffers(self) -> dict[str, np.ndarray]:
        """The per-op, per-flow and per-part fields the compiled checks read (memoryviews over the records of
        :mod:`emulator.drivers.fluid_layout`), as numpy views (made once: the records keep their size)."""
        buf = self.__dict__.get("_np_buffers")
        if buf is None:
            names = ("child_ptr", "child_idx", "pending", "kind", "not_before", "op_flow", "part_ptr", "part_qp")
            buf = {k: np.asarray(getattr(self, k)) for k in names}
            buf["arrived"] = np.asarray(self.arrived)
            self._np_buffers = buf
        return buf

    def _runs(self, ops: np.ndarray):
        """(start, end) of the runs of ``ops`` that make no child ready, each but the last (``end`` =
        ``ops.size``) followed by the op at ``end`` that does — while nothing else changes the counts."""
        j0 = 0
        for j in self._readying(ops).tolist():
            yield j0, j
            j0 = j + 1
        yield j0, ops.size

    def _children(self, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The children of ``ops`` in order, and per child the index in ``ops`` of its parent."""
        ptr = np.asarray(self.child_ptr)
        lo, n = ptr[ops], ptr[ops + 1] - ptr[ops]
        ends = np.cumsum(n)
        at = np.repeat(lo - (ends - n), n) + np.arange(int(ends[-1]) if n.size else 0, dtype=np.int64)
        return np.asarray(self.child_idx)[at], np.repeat(np.arange(ops.size), n)

    def _readying(self, ops: np.ndarray) -> np.ndarray:
        """Indices in ``ops`` (ascending) of the ops whose completion, after those before it, brings a child's
        pending parents to 0."""
        ch, owner = self._children(ops)
        if not ch.size:
            return np.zeros(0, np.int64)
        return np.unique(owner[np.asarray(self.pending)[ch] == _occurrence(ch, self.work)])

    def _among(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Whether a value of ``a`` is among ``b`` (flow ids): the work array cleared at ``a``, set at ``b``."""
        work = self.work
        work[a] = 0
        work[b] = 1
        return bool(work[a].any())

    def _finish_ops(self, ops: np.ndarray, t: float | np.ndarray, ch: np.ndarray | None = None) -> None:
        """:meth:`complete` of ``ops`` (at ``t``: one time or each op's), none of which makes a child ready: end
        times and children's counts (``ch``: their children, where known)."""
        if not ops.size:
            return
        self.op_array("end")[ops] = np.rint(t)
        self.n_done += int(ops.size)
        if ch is None:
            ch, _ = self._children(ops)
        np.subtract.at(np.asarray(self.pending), ch, 1)

    def handle_within(self, until_ns: float) -> None:
        """Handle the events before ``until_ns`` at their own times, in heap order (with those they push):
        the fabric's next slice is a step to ``until_ns`` and the flows they start begin part-way into it.
        What they read of the fabric is as at their times: a CNP reaches a queue pair only at a slice's end."""
        heap = self.heap
        while heap and heap[0][0] < until_ns:
            ev_t, _, kind, x = heapq.heappop(heap)
            self.events += 1
            if kind >= _ARRIVE and heap and heap[0][0] < until_ns and heap[0][2] >= _ARRIVE:
                run = [(ev_t, kind, x)]  # the next entries of arrivals and acknowledgements, up to another kind
                while heap and heap[0][0] < until_ns and heap[0][2] >= _ARRIVE:
                    ev = heapq.heappop(heap)
                    self.events += 1
                    run.append((ev[0], ev[2], ev[3]))
                self._handle_run(run)
            else:
                self.handle(kind, x, ev_t)

    def _handle_run(self, run: list[tuple[float, int, list[int]]]) -> None:
        """Heap entries (time, kind, ids) of arrivals and acknowledgements, in heap order with nothing between
        them, as :meth:`handle` of each in turn: where every child their completions make ready is plain (no
        arriving flow's RECV among them), the completions as arrays, each at its own time, in turn, and the
        acknowledgements' counts (which no completion reads); else, or where the entries are large enough to
        be handled as arrays on their own, entry by entry."""
        n_ev = [len(x) for _, _, x in run]
        if sum(n_ev) < BATCH_FROM or sum(n_ev) >= BATCH_FROM * len(run):  # few events, or entries arrays alone
            for t, kind, x in run:
                self.handle(kind, x, t)
            return
        ts = np.repeat(np.array([t for t, _, _ in run]), n_ev)
        kinds = np.repeat(np.array([k for _, k, _ in run], np.int8), n_ev)
        ids = np.array([i for _, _, x in run for i in x], np.int64)
        ack, arr = np.flatnonzero(kinds == _ACKED), np.flatnonzero(kinds == _ARRIVE)
        done = np.zeros(ids.size, bool)
        op = np.full(ids.size, -1, np.int64)
        f = np.asarray(self.part_flow)[ids[ack]]
        last = np.asarray(self.to_ack)[f] == _occurrence(f, self.work)  # the flow's last part
        done[ack[last]] = True
        op[ack[last]] = np.asarray(self.send_op_l)[f[last]]
        fl = ids[arr]
        r = np.asarray(self.recv_op_l)[fl]
        on = (r >= 0) & (np.asarray(self.recv_ready)[fl] == 1)
        done[arr[on]] = True
        op[arr[on]] = r[on]
        if not self._complete_plain(op[done], ts[done], fl):
            for t, kind, x in run:
                self.handle(kind, x, t)
            return
        self.events += sum(n_ev) - len(run)
        np.asarray(self.arrived)[fl] = 1
        if ack.size:
            self._acks_counted(ids[ack], f, None)

    def hold(self, t: float, window_ns: float) -> list[tuple[tuple, list[int] | None]]:
        """Pop the heap's next events before ``window_ns`` while each, handled in turn, would only record
        (:meth:`_quiet`): they need not cut the fabric's slice. With each acknowledgement, the CNP counts of
        its parts' queue pairs at ``t``."""
        heap, held = self.heap, []
        st: _State = ({}, {}, set(), set())
        cnps = self.fab.cc.cnps
        while heap and heap[0][0] < window_ns:
            ev = heap[0]
            if not self._quiet(ev[2], ev[3], ev[0], st):
                break
            heapq.heappop(heap)
            held.append((ev, [int(cnps[self.part_qp[q]]) for q in ev[3]] if ev[2] == _ACKED else None))
        return held

    def release(self, held: list[tuple[tuple, list[int] | None]], t: float) -> None:
        """Handle the held events before ``t`` (where the fabric now is) at their own times, in heap order;
        those from ``t`` on go back to the heap as they were."""
        for i, (ev, cnps_now) in enumerate(held):
            if ev[0] >= t:
                for back, _ in held[i:]:
                    heapq.heappush(self.heap, back)
                return
            self.events += 1
            self.handle(ev[2], ev[3], ev[0], cnps_now)

    def _quiet(self, kind: int, x, t: float, st: _State) -> bool:
        """Whether event ``kind`` of ``x`` at ``t``, after the held events whose effects ``st`` holds (pending
        parents per op, unacknowledged parts per flow, flows arrived, RECVs ready), starts no part and
        pushes no event: it only records (ends of ops, ready times of SENDs that queue behind a busy QP)."""
        if kind == _ACKED:
            acks = st[1]
            for q in x:
                f = self.part_flow[q]
                n = acks[f] = acks.get(f, self.to_ack[f]) - 1
                if not n and not self._quiet_complete(self.send_op_l[f], t, st):
                    return False
            return True
        if kind == _ARRIVE:
            for f in x:
                st[2].add(f)
                r = self.recv_op_l[f]
                if r >= 0 and (self.recv_ready[f] or f in st[3]) and not self._quiet_complete(r, t, st):
                    return False
            return True
        if kind == _DONE:
            return self._quiet_complete(x, t, st)
        return self._quiet_ready(x, t, st)

    def _quiet_complete(self, op: int, t: float, st: _State) -> bool:
        pending = st[0]
        for i in range(self.child_ptr[op], self.child_ptr[op + 1]):
            c = self.child_idx[i]
            n = pending[c] = pending.get(c, self.pending[c]) - 1
            if not n and (self.not_before[c] > t or not self._quiet_ready(c, t, st)):
                return False
        return True

    def _quiet_ready(self, op: int, t: float, st: _State) -> bool:
        k = self.kind[op]
        if k == OP_DELAY:
            return False
        f = self.op_flow[op]
        if k == OP_SEND:  # quiet only where every part queues behind a busy queue pair
            return all(self.part_qp[p] in self.sending for p in range(self.part_ptr[f], self.part_ptr[f + 1]))
        st[3].add(f)
        r = self.recv_op_l[f]
        return not (self.arrived[f] or f in st[2]) or self._quiet_complete(r, t, st)
