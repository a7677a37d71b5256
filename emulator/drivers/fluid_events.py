"""The fluid driver's events (:mod:`emulator.drivers.fluid`): their handling, and those that only record held
past the fabric's next cut.

An event is *quiet* when, handled in heap order after the events held before it, it starts no part and
pushes no event: it only records (ends of ops, flows arrived, SENDs readied behind a busy queue pair). The
driver holds the quiet events of the next step, advances the fabric to the first event that is not, and
handles the held ones before the time reached at their own times.
"""

from __future__ import annotations

import heapq

from emulator.schedule.model import OP_DELAY, OP_SEND

_RELEASE, _DONE, _ARRIVE, _ACKED = 0, 1, 2, 3
#: what a dry run changes: pending parents per op, unacknowledged parts per flow, flows arrived, RECVs ready
_State = tuple[dict, dict, set, set]


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
            for f in x:
                self.arrived[f] = 1
                r = self.recv_op_l[f]
                if r >= 0 and self.recv_ready[f]:
                    self.complete(r, t)
        else:  # parts' last acknowledgements; a SEND completes with its flow's last part
            self.events += len(x) - 1
            fab_cnps = self.fab.cc.cnps
            for i, q in enumerate(x):
                f = self.part_flow[q]
                op = self.send_op_l[f]
                cnps = cnps_now[i] if cnps_now is not None else int(fab_cnps[self.part_qp[q]])
                self.cnps[op] += cnps - self.cnp0[q]
                self.to_ack[f] -= 1
                if not self.to_ack[f]:
                    self.complete(op, t)

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
