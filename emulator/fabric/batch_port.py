"""The egress port model of :mod:`emulator.fabric.port` at batch granularity: the semantics of
:class:`~emulator.fabric.port.EgressPort` (one model, two granularities; tests feed both the same arrivals
and compare departures, marks and drops), one call per GRO batch instead of one object per packet. The
loopback software switch (:mod:`emulator.drivers.loopback.switch`) runs it.

Theory of operation
-------------------
The software switch receives GRO batches (one sender's GSO send: consecutive packets of one flow, equal
payload size, the last possibly shorter) and must forward them packet by packet at the port rate. Making
one Python object per packet caps a Python switch near 100,000 packets/s, so this port keeps each
admitted batch as one *entry* (buffer, offset, packets left, payload size, last payload size, TOS) and
does the per-packet arithmetic in closed form:

* **Admission** (``enqueue``): per packet tail drop exactly like ``EgressPort``: the packets that fit the
  buffer (queued bytes + the one on the wire) are admitted — the longest prefix of full-size packets, and
  the shorter last packet on its own if it still fits — the rest are dropped and counted. A batch whose
  packets arrive spread out holds room for all of them from its first arrival, which is exact while
  everything fits; when a batch does not fit, a caller that passes ``requeue`` gets the per-packet
  decision: the room held for packets not arrived yet is given back (those packets are handed back to be
  offered again when they arrive), the new batch takes what fits of its arrived packet(s) — its first is
  dropped if it does not fit — and hands back the rest the same way. Without ``requeue`` the rest is
  dropped at once.
* **Service**: strict priority between entries, FIFO *by packet arrival* within a priority (each
  priority a heap of entries keyed by their next packet's arrival, then order of enqueue), non-preemptive
  per *packet*: the packet on the wire finishes, then the earliest-arrived packet of the highest non-empty
  priority is served. An entry gives up the wire when a higher priority waits or another entry's packet
  arrived before its own next one (several senders' spread-out batches interleave packet by packet, as
  in ``EgressPort``, instead of leaving batch after batch), and a port waiting for an entry's next packet
  serves one that arrives before it. A packet of ``w`` wire bytes takes ``⌈w·8/rate⌉`` ns; the first
  packet of an idle port starts on arrival, the rest back to back.
* **Departure** (``advance(now, out)``): every packet whose serialization ended by ``now`` leaves. A
  run of ``m`` equal packets of one entry departs in one step (times ``d0 + j·s``), the queue it leaves
  behind after packet ``j`` is ``B − (j+1)·w``, and RED/ECN (``emulator.pacing.red``) decides CE per
  packet on that length (no draw at all when the first one is at or below Kmin). Each run of equal
  marking is appended to ``out`` as ``(port, buffer, offset, packets, payload size, tos, first
  departure ns, spacing ns)`` with CE already set in the TOS of marked ECT packets.
* **Order**: ``enqueue(now)`` first advances the port to ``now`` (a packet that arrives at ``now``
  cannot change departures before ``now``), so the caller never has to order arrivals and departures.
* **Arrival spacing**: a batch may arrive spread out, packet ``j`` at ``t + j·gap`` (the sender's NIC
  serialises it, ``gap`` = one packet at the NIC rate). It is admitted whole at ``t`` when it fits (see
  Admission), but a packet not arrived yet does not count in the queue RED sees, in the peak or in the
  time-weighted mean (:meth:`BatchPort.unarrived_bytes`), and no packet leaves before it arrived.
* **Counters**: the :class:`~emulator.fabric.port.PortCounters` of ``EgressPort`` (packets/bytes
  enqueued, dequeued, marked, dropped; peak and time-weighted mean queue), in wire bytes.

Sans-IO: no clock, no socket; randomness from the seeded generator passed in.
"""

from __future__ import annotations

import heapq
from typing import Any

from emulator.fabric.port import N_PRIORITIES, PortConfig, PortCounters, serialization_ns
from emulator.pacing.red import UniformSource

# entry fields (a list, mutated in place as packets leave); _SEQ: its order of arrival among equal times
_BUF, _OFF, _N, _SEG, _LAST, _TOS, _ARR, _PRIO, _GAP, _SEQ = range(10)
_push, _pop = heapq.heappush, heapq.heappop


class BatchPort:
    """One switch egress port fed with packet batches (see the module docstring)."""

    def __init__(self, config: PortConfig, rng: UniformSource, port_id: int = 0, *,
                 wire_overhead_bytes: int = 66, start_ns: int = 0) -> None:
        self.config = config
        self.port_id = port_id
        self.over = wire_overhead_bytes
        self._rate = int(round(config.rate_bps))
        self._buffer = config.buffer_bytes
        red = config.red
        self._kmin = red.kmin_bytes if red is not None else None
        self._kmax = red.kmax_bytes if red is not None else 0
        self._pmax = red.pmax if red is not None else 0.0
        self._rng = rng
        #: per priority, a heap of (arrival of the entry's next packet, _SEQ, entry): FIFO by packet arrival
        self._queues: list[list[tuple[int, int, list]]] = [[] for _ in range(N_PRIORITIES)]
        self._seq = 0
        #: the latest time the port was brought to (a late batch may join at an earlier one)
        self._clock_ns = start_ns
        self._nonempty = 0                 # bit p set: queue p holds entries
        self._cur: list | None = None      # entry whose head packet is on the wire
        #: departure time of the packet on the wire (None: idle)
        self.next_departure_ns: int | None = None
        self.queue_bytes = 0               # wire bytes held, the packet on the wire included
        self.queue_packets = 0
        self._t0 = start_ns
        self._t_last = start_ns
        self._area = 0
        self.enqueued_packets = self.enqueued_bytes = 0
        self.dequeued_packets = self.dequeued_bytes = 0
        self.marked_packets = self.marked_bytes = 0
        self.dropped_packets = self.dropped_bytes = 0
        self.peak_queue_bytes = 0
        self._ser: dict[int, int] = {}
        #: entries whose packets arrive spread out (gap > 0) and may not all have arrived yet
        self._arriving: list[list] = []

    def serialization_ns(self, size_bytes: int) -> int:
        s = self._ser.get(size_bytes)
        if s is None:
            s = self._ser[size_bytes] = serialization_ns(size_bytes, self._rate)
        return s

    def unarrived_bytes(self, t_ns: int) -> int:
        """Wire bytes admitted but not arrived before ``t_ns`` (packets of spread-out batches still on the
        way; one arriving at ``t_ns`` exactly comes after a departure at ``t_ns``, as in ``EgressPort``)."""
        total = 0
        for e in self._arriving:
            n = e[_N]
            if n <= 0:
                continue
            got = (t_ns - e[_ARR] - 1) // e[_GAP] + 1 if t_ns > e[_ARR] else 0
            if got < n:  # the unarrived ones are the last n - got, the very last possibly shorter
                total += (n - max(got, 0) - 1) * (e[_SEG] + self.over) + e[_LAST] + self.over
        return total

    def _prune_arriving(self, t_ns: int) -> None:
        self._arriving = [e for e in self._arriving if e[_N] > 0 and e[_ARR] + (e[_N] - 1) * e[_GAP] > t_ns]

    # -- arrivals -------------------------------------------------------------------------------------
    def enqueue(self, buf: Any, n: int, seg: int, last: int, tos: int, prio: int, now_ns: int, out: list,
                gap_ns: int = 0, requeue: list | None = None, off: int = 0) -> int:
        """Offer ``n`` packets held back to back in ``buf`` from ``off`` (payload ``seg`` bytes each, the last
        ``last`` bytes), the first arriving at ``now_ns``, packet ``j`` at ``now_ns + j·gap_ns``; departures due
        by ``now_ns`` are appended to ``out`` first. Returns the number of packets tail-dropped now.

        With ``requeue`` (a list), tail drop is per packet at its arrival (module docstring, "Admission"):
        packets not admitted or dropped now are appended there as ``(arrival ns, buf, packets, seg, last,
        tos, prio, gap, off)``, for the caller to offer again at that time, in time order with the rest."""
        if self.next_departure_ns is not None and self.next_departure_ns <= now_ns:
            self.advance(now_ns, out)
        if now_ns > self._clock_ns:
            self._clock_ns = now_ns
        if now_ns > self._t_last:
            self._area += self.queue_bytes * (now_ns - self._t_last)
            self._t_last = now_ns
        over = self.over
        w = seg + over
        wl = last + over
        room = self._buffer - self.queue_bytes
        total = (n - 1) * w + wl
        entries: list[list] = []
        self._seq = seq = self._seq + 2
        if total > room and requeue is not None and (gap_ns > 0 or self._arriving):
            if self._arriving:  # packets not arrived yet hold no room: offered again when they arrive
                self._revoke(now_ns, requeue)
                room = self._buffer - self.queue_bytes
        if total <= room:
            entries.append([buf, off, n, seg, last, tos, now_ns, prio, gap_ns, seq])
            adm_pk, adm_b = n, total
        elif requeue is not None and gap_ns > 0:  # what fits now; the rest when it arrives
            a = min(n - 1, room // w)
            adm_pk, adm_b = a, a * w
            if a:
                entries.append([buf, off, a, seg, seg, tos, now_ns, prio, gap_ns, seq])
            else:  # the first packet does not fit: dropped
                a = 1
                self.dropped_packets += 1
                self.dropped_bytes += w if n > 1 else wl
            if a < n:
                requeue.append((now_ns + a * gap_ns, buf, n - a, seg, last, tos, prio, gap_ns, off + a * seg))
            n = adm_pk + (a > adm_pk)  # the packets decided now
        else:
            a = min(n - 1, room // w)
            adm_pk, adm_b = a, a * w
            if a:
                entries.append([buf, off, a, seg, seg, tos, now_ns, prio, gap_ns, seq])
            if a * w + wl <= room:  # the shorter last packet still fits behind the dropped ones
                entries.append([buf, off + (n - 1) * seg, 1, last, last, tos, now_ns + (n - 1) * gap_ns, prio, gap_ns,
                                seq + 1])
                adm_pk += 1
                adm_b += wl
            self.dropped_packets += n - adm_pk
            self.dropped_bytes += total - adm_b
        if adm_pk:
            self.queue_bytes += adm_b
            self.queue_packets += adm_pk
            self.enqueued_packets += adm_pk
            self.enqueued_bytes += adm_b
            if gap_ns > 0:
                for e in entries:
                    k = e[_N]
                    if k > 1:
                        self._arriving.append(e)
                        # the time-weighted queue counts packet j from its arrival, j·gap after the first
                        self._area -= gap_ns * ((e[_SEG] + over) * ((k - 2) * (k - 1) // 2) + (e[_LAST] + over) * (k - 1))
            level = self.queue_bytes - (self.unarrived_bytes(now_ns) if self._arriving else 0)
            if level > self.peak_queue_bytes:
                self.peak_queue_bytes = level
            q = self._queues[prio]
            for e in entries:
                _push(q, (e[_ARR], e[_SEQ], e))
            self._nonempty |= 1 << prio
            cur = self._cur
            if cur is None:
                self._start(now_ns)
            elif cur[_ARR] > self._clock_ns:  # the port waits for its next packet, which arrives after this one
                self._requeue(cur)
                self._start(now_ns)
        return n - adm_pk

    def _revoke(self, now_ns: int, requeue: list) -> None:
        """Give back the room held by admitted packets that arrive after ``now_ns``: each such run is appended
        to ``requeue`` (``enqueue``) and leaves the port; its entry keeps the packets arrived by then."""
        over = self.over
        cur_gone = False
        for e in self._arriving:
            n, arr, gap, seg, last = e[_N], e[_ARR], e[_GAP], e[_SEG], e[_LAST]
            got = 0 if arr > now_ns else min(n, (now_ns - arr) // gap + 1)
            rem = n - got
            if rem <= 0:
                continue
            w, wl = seg + over, last + over
            nbytes = (rem - 1) * w + wl
            self.queue_bytes -= nbytes
            self.queue_packets -= rem
            self.enqueued_packets -= rem
            self.enqueued_bytes -= nbytes
            # the time-weighted queue counted packet i from its arrival arr + i·gap: take that back
            lo, hi = got, n - 1  # full-size packets lo..hi-1, the last at hi
            self._area += w * ((hi - lo) * (arr - now_ns) + gap * ((hi - 1) * hi // 2 - (lo - 1) * lo // 2)) \
                + wl * (arr + hi * gap - now_ns)
            requeue.append((arr + got * gap, e[_BUF], rem, seg, last, e[_TOS], e[_PRIO], gap, e[_OFF] + got * seg))
            e[_N] = got
            e[_LAST] = seg
            if not got and e is self._cur:
                cur_gone = True
        self._prune_arriving(now_ns)
        for p, q in enumerate(self._queues):  # entries left without packets leave their queues
            if any(not x[2][_N] for x in q):
                q[:] = [x for x in q if x[2][_N]]
                heapq.heapify(q)
                if not q:
                    self._nonempty &= ~(1 << p)
        if cur_gone:
            self._start(now_ns)

    def _requeue(self, e: list) -> None:
        """Entry ``e`` gives up the wire: back in its queue at its next packet's arrival."""
        p = e[_PRIO]
        _push(self._queues[p], (e[_ARR], e[_SEQ], e))
        self._nonempty |= 1 << p

    def _start(self, t_ns: int) -> None:
        """Put the head packet of the highest non-empty priority on the wire at ``t_ns`` (or go idle)."""
        ne = self._nonempty
        if not ne:
            self._cur = None
            self.next_departure_ns = None
            return
        p = ne.bit_length() - 1
        q = self._queues[p]
        e = _pop(q)[2]
        if not q:
            self._nonempty = ne & ~(1 << p)
        self._cur = e
        size = (e[_SEG] if e[_N] > 1 else e[_LAST]) + self.over
        self.next_departure_ns = max(t_ns, e[_ARR]) + self.serialization_ns(size)

    # -- departures -----------------------------------------------------------------------------------
    def advance(self, now_ns: int, out: list) -> None:
        """Every packet whose serialization ended by ``now_ns`` leaves; runs appended to ``out``."""
        if now_ns > self._clock_ns:
            self._clock_ns = now_ns
        over = self.over
        pid = self.port_id
        while self._cur is not None and self.next_departure_ns <= now_ns:
            e = self._cur
            d0 = self.next_departure_ns
            n_left = e[_N]
            seg = e[_SEG]
            higher = self._nonempty >> (e[_PRIO] + 1)
            gap = e[_GAP]
            if n_left > 1 or e[_LAST] == seg:
                w = seg + over
                s = self.serialization_ns(w)
                n_full = n_left if e[_LAST] == seg else n_left - 1
                m = 1 if higher or gap > s else min(n_full, 1 + (now_ns - d0) // s)
                if m > 1 and self._queues[e[_PRIO]]:  # no further than a packet that arrived before its next one
                    h_arr, h_seq, _h = self._queues[e[_PRIO]][0]
                    if h_arr < e[_ARR] or (h_arr == e[_ARR] and h_seq < e[_SEQ]):
                        m = 1
                    elif gap:
                        m = min(m, 1 + (h_arr - e[_ARR] - (h_seq < e[_SEQ])) // gap)
                size_pl = seg
            else:  # the shorter last packet
                size_pl = e[_LAST]
                w = size_pl + over
                s = self.serialization_ns(w)
                m = 1
            b0 = self.queue_bytes
            unarr = self._arriving
            if unarr:
                level = b0 - self.unarrived_bytes(d0)
                if level > self.peak_queue_bytes:
                    self.peak_queue_bytes = level
            # time-weighted queue: level b0 until d0, then one packet less every s ns
            if d0 > self._t_last:
                self._area += b0 * (d0 - self._t_last)
            if m > 1:
                self._area += s * ((m - 1) * b0 - w * (m * (m - 1) // 2))
            d_last = d0 + (m - 1) * s
            self._t_last = max(self._t_last, d_last)
            self.queue_bytes = b0 - m * w
            self.queue_packets -= m
            self.dequeued_packets += m
            self.dequeued_bytes += m * w
            off = e[_OFF]
            tos = e[_TOS]
            kmin = self._kmin
            if kmin is None or not (tos & 3) or b0 - w <= kmin:
                out.append((pid, e[_BUF], off, m, size_pl, tos, d0, s))
            else:
                self._mark_runs(out, e[_BUF], off, m, size_pl, tos, d0, s, b0, w)
            e[_OFF] = off + m * size_pl
            e[_N] = n_left - m
            e[_ARR] += m * gap
            if unarr:
                self._prune_arriving(d_last)
            if e[_N] and not higher:
                q = self._queues[e[_PRIO]]
                if not q or q[0][0] > e[_ARR] or (q[0][0] == e[_ARR] and q[0][1] > e[_SEQ]):
                    size = (seg if e[_N] > 1 else e[_LAST]) + over
                    self.next_departure_ns = max(d_last, e[_ARR]) + self.serialization_ns(size)
                    continue
            if e[_N]:  # a higher priority, or a packet that arrived before its next one, goes first
                self._requeue(e)
            self._start(d_last)

    def _mark_runs(self, out: list, buf: Any, off: int, m: int, seg: int, tos: int, d0: int, s: int,
                   b0: int, w: int) -> None:
        """RED per packet on the queue each one leaves behind; one run per stretch of equal marking."""
        kmin, kmax, pmax = self._kmin, self._kmax, self._pmax
        rnd = self._rng.random
        ce_tos = tos | 3
        pid = self.port_id
        span = kmax - kmin
        start = 0
        cur_ce = False
        unarrived = self.unarrived_bytes if self._arriving else None
        for j in range(m):
            q = b0 - (j + 1) * w
            if unarrived is not None and q > kmin:
                q -= unarrived(d0 + j * s)
            if q <= kmin:
                ce = False
            elif q > kmax:
                ce = True
            else:
                p = pmax * (q - kmin) / span
                ce = p >= 1.0 or (p > 0.0 and rnd() < p)
            if ce:
                self.marked_packets += 1
                self.marked_bytes += w
            if ce != cur_ce and j > start:
                out.append((pid, buf, off + start * seg, j - start, seg, ce_tos if cur_ce else tos, d0 + start * s, s))
                start = j
            cur_ce = ce
        out.append((pid, buf, off + start * seg, m - start, seg, ce_tos if cur_ce else tos, d0 + start * s, s))

    # -- results --------------------------------------------------------------------------------------
    def counters(self, now_ns: int) -> PortCounters:
        if now_ns > self._t_last:
            self._area += self.queue_bytes * (now_ns - self._t_last)
            self._t_last = now_ns
        elapsed = self._t_last - self._t0
        return PortCounters(
            self.port_id, self.enqueued_packets, self.enqueued_bytes, self.dequeued_packets, self.dequeued_bytes,
            self.marked_packets, self.marked_bytes, self.dropped_packets, self.dropped_bytes, self.queue_bytes,
            self.peak_queue_bytes, self._area / elapsed if elapsed > 0 else float(self.queue_bytes), 0, 0, 0,
            elapsed,
        )
