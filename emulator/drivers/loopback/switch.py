"""The software switch process of the loopback driver: real UDP in, the fabric port model, real UDP out.

Theory of operation
-------------------
One switch with one egress port per rank (port ``r`` leads to rank ``r``), each a
:class:`~emulator.drivers.loopback.model_port.ModelPort` (a ``BatchPort``: the semantics of the sim driver's
:class:`~emulator.fabric.port.EgressPort` — serialization at the port rate, tail-drop buffer, strict
priorities, RED/ECN decided at dequeue — computed per GRO batch instead of per packet object), run on
*model time* by one loop::

    recvmsg burst (GRO batches + TOS) ─▶ route each batch by its BTH dest QP (qpn.py; every segment
    checked with strided slices) ─▶ arrivals heap at its model arrival time ─▶ release every arrival
    up to the model clock into its port (port.enqueue(t)) ─▶ every port advanced to the model clock ─▶
    pending runs whose delivery (departure + latency) has come: per port, runs of equal TOS (CE set for
    marked ECT packets) and size ─▶ one sendmsg each with UDP_SEGMENT + IP_TOS cmsgs (zero-copy slices
    of the received buffers) ─▶ select() until the model clock reaches the next arrival, departure or
    delivery, or the next datagram

**Model time.** Time is emulated ns: ``(CLOCK_MONOTONIC − t0) / time_dilation``, the endpoints' clock too. Every data
packet carries the time its sender's pacer meant it to leave (:mod:`emulator.wire.stamp`); a batch reaches its egress
port from that time packet by packet at the sender's NIC rate (``nic_rate_bps``, one NIC model per rank: a burst the
sender handed over at once arrives spread out, as a NIC would serialise it), or further apart when its stamps are (a
sender pacing a queue pair below the line rate stamps packet ``j`` of a batch ``j`` packet times of that rate after
the first: evenly spaced stamps keep the batch one entry; uneven ones go packet by packet). On the way out each
forwarded data packet's stamp is rewritten to its model delivery time (departure + latency), which the receiving
endpoint uses to time its CNPs and message arrivals (:mod:`emulator.endpoint.receiver`); stamped batches are copied
into a writable buffer on arrival for that. The model clock runs a *horizon* (``egress_slack_ns`` of real time) behind
the real one, so a batch whose sender woke up late, or whose datagram waited for the switch's CPU, by less than the
horizon is modelled exactly as if it had been on time; a batch arriving later is served from its model time where its
port sat idle (its sender's later batches behind it), else behind its queue, tainting a port that went busy after it
(:mod:`~emulator.drivers.loopback.model_port`; its lateness, ``switch_ingress_lag_ns``, is the senders' lag the model
could not absorb; beyond ``late_threshold_ns`` it counts in ``switch_late_arrivals``). An ACK joins when the packet it
acknowledges was delivered and leaves with its delivery time in its MSN, a NAK or CNP at the time its receiver stamped
in it (:mod:`~emulator.drivers.loopback.ack_times`).

A packet's *intended* delivery is the model's departure time plus the port latency; the switch *lag* is the model
clock at its send minus that (the horizon, which also lets departures gather into GSO sends, included), recorded for
every packet in a histogram, and packets beyond ``horizon + late_threshold_ns`` are counted as late. Datagrams the
kernel dropped before the switch read them (its receive buffer overflowed) are read from the socket's drop counter. A
rank whose socket is over half full gets nothing until it drains (back-pressure, lossless: the wait is switch lag;
``switch_backpressure_holds`` counts held flushes). These figures travel with the fabric counters, so a slow machine
shows as lag, never as a silent change of the emulated rates. No object per packet is made (a batch is one queue entry
whichever way it is cut); 1 ns timer slack ends short sleeps on time. Packets carry their wire size to the port model:
UDP payload + ``wire_overhead_bytes`` (Ethernet, IP, UDP, FCS, preamble and gap), like the endpoints' pacers. DSCPs in
``high_priority_dscps`` (CNPs, ACKs by default) go to priority 6, the rest to 0. Queue depth of every non-empty port
(and of one that just emptied) is sampled every ``sample_interval_ns``, bounded in count (``max_samples`` over the
whole run).

Messages to the parent (every ``snapshot_interval_ns`` and once at the end)::

    ("snapshot" | "final", -1, fabric, health)

``fabric`` holds the counters so far plus ``queue_samples_new``: only the samples taken since the previous message,
per port (``{"t_ns": [[...] per port], "queue_bytes": [[...] per port]}``), after which the switch forgets them. A
snapshot thus costs the same at minute 30 as at second 1 (8 ports, 1 ms sampling, 0.5 s snapshots: 0.1–0.25 ms and ≤
34 kB each); the parent appends the pieces per port (:class:`emulator.drivers.loopback.SampleTap`), so a run's samples
are the concatenation of what the messages delivered, and a switch that dies mid-run loses only those since its last
snapshot."""

from __future__ import annotations

import heapq
import os
import random
import select
import socket
import struct
import time
from typing import Any

import numpy as np

from emulator.drivers.contract import PortReport
from emulator.drivers.loopback.ack_times import AckTimes
from emulator.drivers.loopback.model_port import ModelPort
from emulator.drivers.loopback.priority import fine_timer_slack, raise_priority
from emulator.drivers.loopback.spec import SwitchSpec
from emulator.drivers.sockets.udp import MAX_UDP_PAYLOAD, UdpPort
from emulator.drivers.sockets.workers import child_setup, run_profiled
from emulator.instruments.histogram import LogLinearHistogram
from emulator.wire.stamp import CNP_STAMP_AT, DATA_OPCODES, payload_offset, read_stamp

_MAX_WAIT_S = 0.01
_RECV_BURST = 64
_CHECK_EVERY_NS = 20_000_000
_MAX_GSO_SEGMENTS = 64
_MAX_PENDING_RUNS = 512
_HOLD_RETRY_S = 50e-6
_SO_MEMINFO = 55  # Linux: u32 array, [0] bytes held in the receive queue, [1] receive buffer size
#: the stamp's offset (the payload) in a stamped data packet, by opcode
_PUT_STAMP = struct.Struct("!Q").pack_into
_PAYLOAD_AT = [payload_offset(o) if o in DATA_OPCODES else 0 for o in range(256)]


def switch_main(spec: SwitchSpec, uport: UdpPort, conn: Any, stop: Any, hard_deadline_mono_ns: int) -> None:
    """Entry point of the switch process."""
    child_setup()
    try:
        sw = _SoftwareSwitch(spec, uport, conn, stop, hard_deadline_mono_ns)
        conn.send(("ready", -1, os.getpid()))
        deadline = time.monotonic() + spec.start_timeout_s
        while not conn.poll(0.05):
            if stop.is_set() or time.monotonic() > deadline:  # the run ended before it started
                conn.send(sw.message("final", 0))
                return
        msg = conn.recv()
        if msg[0] != "go":
            conn.send(sw.message("final", 0))
            return
        run_profiled("switch", sw.run, int(msg[1]))  # EMULATOR_WORKER_PROFILE=DIR: DIR/switch.prof
    except Exception as exc:
        import traceback
        try:
            conn.send(("error", -1, f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=8)))
        except OSError:
            pass
        os._exit(3)


class _SoftwareSwitch:
    def __init__(self, spec: SwitchSpec, uport: UdpPort, conn: Any, stop: Any, hard_ns: int) -> None:
        self.spec, self.uport, self.conn, self.stop, self.hard_ns = spec, uport, conn, stop, hard_ns
        n = len(spec.rank_addresses)
        self.n_ports = n
        rng = random.Random(spec.seed)
        self.ports = [ModelPort(spec.port, rng, i, wire_overhead_bytes=spec.wire_overhead_bytes) for i in range(n)]
        self.qp_src = list(spec.qp_src)
        self.qp_dst = list(spec.qp_dst)
        self.unroutable = self.malformed = 0
        self.received_packets = self.received_batches = 0
        self.forwarded_packets = self.forwarded_sends = 0
        self.late_packets = self.late_arrivals = 0
        self.loops = 0
        self.ingress_hist = LogLinearHistogram()
        self.ingress_lags: list[int] = []
        #: stamped batches not yet at their egress port: (model arrival, seq, port, buffer, packets, segment,
        #: last segment, tos, priority, arrival gap, offset in the buffer)
        self.arrivals: list[tuple] = []
        self._seq = 0
        self.released_ns = 0
        self.nic_free = [0] * n
        nic = spec.nic_rate_bps
        self._nic_gap: dict[int, int] = {}
        self._nic_rate = int(round(nic)) if nic > 0 else 0
        self.ack_times = AckTimes()
        k = float(spec.time_dilation)
        self.dilation = k
        #: the model runs this far (emulated ns) behind the clock: senders may be this late without effect
        self.horizon_ns = int(spec.egress_slack_ns / k)
        self.cpu0 = 0.0
        self.scheduling = "normal"
        self.lag_hist = LogLinearHistogram()
        self.lags: list[int] = []
        #: departed runs not sent yet: (port, buffer, offset, packets, payload size, tos, departure ns, spacing ns)
        self.pending: list[tuple] = []
        #: per port, the samples taken since the last message to the parent (sent, then forgotten)
        self.samples_t: list[list[int]] = [[] for _ in range(n)]
        self.samples_q: list[list[int]] = [[] for _ in range(n)]
        self.n_samples = 0
        self.samples_dropped = 0
        self._nonzero: set[int] = set()
        self.t0 = 0
        self.now = 0
        #: back-pressure on the ranks' sockets (module docstring)
        self.rank_socks = [socket.socket(fileno=os.dup(fd)) for fd in spec.rank_fds]
        self.holds, self.holding = 0, False  # flushes a full socket held back; whether the last one did
        prio = [0] * 64
        for d in spec.high_priority_dscps:
            prio[d & 63] = 6
        self.prio = prio

    # -- the loop -------------------------------------------------------------------------------------
    def model_now(self) -> int:
        """Emulated ns since t0: ``(CLOCK_MONOTONIC − t0) / time_dilation``."""
        d = time.monotonic_ns() - self.t0
        return d if self.dilation == 1.0 else int(d / self.dilation)

    def run(self, t0: int) -> None:
        self.t0 = t0
        self.cpu0 = time.process_time()
        fine_timer_slack()
        self.scheduling = raise_priority(self.spec.scheduling)
        mono = time.monotonic_ns
        while mono() < t0:
            time.sleep(min((t0 - mono()) / 1e9, 0.05))
        spec = self.spec
        recv = self.uport.recv
        ingress = self._ingress
        ports = self.ports
        pending = self.pending
        arrivals = self.arrivals
        horizon = self.horizon_ns
        latency = spec.port.latency_ns
        fd = self.uport.fileno
        sel = select.select
        stop = self.stop
        model_now = self.model_now
        k_real = self.dilation / 1e9  # emulated ns -> real seconds
        hard = self.hard_ns - t0
        next_check = 0
        next_sample = 0
        next_snap = spec.snapshot_interval_ns
        while True:
            self.loops += 1
            for _ in range(_RECV_BURST):
                data, tos, seg = recv()
                if data is None:
                    break
                ingress(data, tos, seg, model_now())
            mnow = model_now()
            horizon_t = mnow - horizon  # the model's clock: everything up to it is final
            self._release(horizon_t)
            nxt = None
            for p in ports:
                d = p.next_departure_ns
                if d is not None:
                    if d <= horizon_t:
                        p.advance(horizon_t, pending)
                        d = p.next_departure_ns
                        if d is None:
                            continue
                    if nxt is None or d < nxt:
                        nxt = d
            if pending and (pending[0][6] + latency <= horizon_t or len(pending) >= _MAX_PENDING_RUNS):
                self._flush(horizon_t, mnow)
            if horizon_t >= next_sample:
                next_sample = horizon_t + spec.sample_interval_ns
                self._sample(horizon_t)
            real = mono() - t0
            if real >= next_check:
                next_check = real + _CHECK_EVERY_NS
                if len(self.lags) > 8192 or len(self.ingress_lags) > 8192:
                    self._fold()
                if stop.is_set() or real >= hard:
                    break
                if real >= next_snap:
                    next_snap = real + spec.snapshot_interval_ns
                    self.conn.send(self.message("snapshot", horizon_t))
            # sleep until the model clock reaches the next arrival, departure or delivery, or a datagram comes
            wake = pending[0][6] + latency if pending else None
            if nxt is not None and (wake is None or nxt < wake):
                wake = nxt
            if arrivals and (wake is None or arrivals[0][0] < wake):
                wake = arrivals[0][0]
            timeout = _MAX_WAIT_S if wake is None else min(_MAX_WAIT_S, (wake + horizon - model_now()) * k_real)
            if self.holding and timeout < _HOLD_RETRY_S:  # a rank's socket is full: look again shortly
                timeout = _HOLD_RETRY_S
            if timeout > 0:
                sel([fd], (), (), timeout)
        mnow = model_now()
        self._release(mnow + (1 << 40))
        for p in ports:
            if p.next_departure_ns is not None:
                p.advance(mnow, pending)
        self._flush(mnow + (1 << 40), mnow, hold=False)
        self._fold()
        self.conn.send(self.message("final", mnow))

    def _release(self, horizon_t: int) -> None:
        """Batches whose model arrival is at or before ``horizon_t`` join their egress ports, in time order;
        the model's clock moves to ``horizon_t`` (a batch arriving later for an earlier time joins at it)."""
        arrivals = self.arrivals
        ports = self.ports
        pending = self.pending
        pop = heapq.heappop
        again: list[tuple] = []
        while arrivals and arrivals[0][0] <= horizon_t:
            t, key, dst, buf, k, seg, last, tos, prio, gap, off = pop(arrivals)
            if t < (floor := ports[dst].sender_floor_ns.get(key >> 40, t)):  # behind its sender's late batch (model_port.py)
                self._seq += 1
                heapq.heappush(arrivals, (floor, key >> 40 << 40 | self._seq, dst, buf, k, seg, last, tos, prio, gap, off))
                continue
            late = t < self.released_ns
            if late:  # served from its model time if the port sat idle (model_port.py)
                t = ports[dst].late_arrival_ns(t, k, seg, last, pending, key >> 40, gap)
            else:
                self.released_ns = t
            ports[dst].enqueue(buf, k, seg, last, tos, prio, t, pending, gap, None if late else again, off)
            if key >> 40 in (fl := ports[dst].sender_floor_ns):  # its next batch not before this one's last packet
                fl[key >> 40] = again[-1][0] - gap if again and again[-1][1] is buf else t + (k - 1) * gap
            for t2, *rest in again:  # packets offered when they arrive (batch_port.py, "Admission"), any sender's
                self._seq += 1
                heapq.heappush(arrivals, (t2, self._sender_key(rest[0], rest[-1]) | self._seq, dst, *rest))
            again.clear()
        if horizon_t > self.released_ns:
            self.released_ns = horizon_t

    def _sender_key(self, buf: Any, off: int) -> int:
        """The arrivals' order key of the packet at ``off``: its sender's rank + 1 (0: to a sender) << 40."""
        v = ((buf[off + 5] << 16) | (buf[off + 6] << 8) | buf[off + 7]) - 2
        return 0 if v < 0 or v & 1 or v >> 1 >= len(self.qp_src) else (self.qp_src[v >> 1] + 1) << 40

    def _ingress(self, data: bytes, tos: int, seg: int, now: int) -> None:
        """Route one received datagram or GRO batch (one sender's GSO send) to its egress port."""
        n = len(data)
        self.received_batches += 1
        if 0 < seg < n:
            k = -(-n // seg)
            last = n - (k - 1) * seg
        else:
            k, seg, last = 1, n, n
        self.received_packets += k
        if n < 12:
            self.malformed += 1
            return None
        if last < 12:
            return self._ingress_each(data, tos, seg, now)
        if k > 1:
            # a GSO batch is one flow by contract; check every segment's destination QP in C (strided slices)
            for i in (5, 6, 7):
                b = data[i::seg]
                if b.count(b[0]) != len(b):
                    return self._ingress_each(data, tos, seg, now)
        v = ((data[5] << 16) | (data[6] << 8) | data[7]) - 2
        q = v >> 1
        if v < 0 or q >= len(self.qp_src):
            self.unroutable += k
            return None
        dst = self.qp_src[q] if v & 1 else self.qp_dst[q]
        if dst < 0:
            self.unroutable += k
            return None
        mv = memoryview(data)
        if v & 1:  # to a sender: an ACK when the packet it acknowledges was delivered, a NAK/CNP at its stamp
            mv, t = self._control(mv, q, seg, now)
            self._arrive(mv, k, seg, last, tos, dst, -1, t, now)
            return None
        stamp = read_stamp(mv[:seg])
        step = 0
        if k > 1:  # one stamp for the batch, or stamps spread evenly at the sender's QP rate
            span = read_stamp(mv[(k - 1) * seg :]) - stamp
            step = span // (k - 1)
            if stamp < 0 or span < 0 or step * (k - 1) != span:
                return self._ingress_each(data, tos, seg, now)
        if stamp >= 0:  # writable: the stamps become the delivery times on the way out
            mv = memoryview(bytearray(data))
        self._arrive(mv, k, seg, last, tos, dst, self.qp_src[q], stamp, now, step)
        return None

    def _arrive(self, buf: Any, k: int, seg: int, last: int, tos: int, dst: int, src: int, stamp: int,
                now: int, step: int = 0) -> None:
        """A batch for port ``dst`` from rank ``src`` stamped ``stamp`` (-1: none; packet ``j`` stamped
        ``stamp + j·step``) reached the switch at model time ``now``: it joins the arrivals at its model
        arrival time (the stamps, spread out by the sender's NIC), or, unstamped, at the model's clock;
        lateness beyond the horizon is recorded."""
        horizon_t = now - self.horizon_ns
        gap = step
        if stamp < 0 or src < 0:  # a timed ACK (stamp ≥ 0 without a source) or the model clock
            t = horizon_t if stamp < 0 else stamp
        else:
            t = stamp
            if self._nic_rate:
                w = seg + self.spec.wire_overhead_bytes
                nic = self._nic_gap.get(w)
                if nic is None:
                    nic = self._nic_gap[w] = -(-w * 8 * 10**9 // self._nic_rate)
                if nic > gap:
                    gap = nic
                start = max(t, self.nic_free[src])
                t = start + nic
                self.nic_free[src] = start + (k - 1) * gap + nic
            late = max(horizon_t, self.released_ns) - t
            self.ingress_lags.append(late if late > 0 else 0)
            if late > self.spec.late_threshold_ns:
                self.late_arrivals += k
        self._seq += 1  # at equal times, senders in rank order (as the sim's NIC events), then order of receipt
        heapq.heappush(self.arrivals, (t, (src + 1) << 40 | self._seq, dst, buf, k, seg, last, tos, self.prio[tos >> 2], gap, 0))

    def _control(self, pkt: Any, q: int, size: int, now: int) -> tuple[Any, int]:
        """A packet to a sender of QP ``q`` (``size`` bytes each) reaching the switch at model time ``now``, made writable
        (it carries its delivery time on the way out), and when it joins the fabric: when its receiver sent it
        (ack_times.py) plus its NIC time, or -1: at the model clock."""
        if len(pkt) - (len(pkt) - 1) // size * size < (16 if pkt[0] == 0x11 else 20 if pkt[0] == 0x81 else 1 << 20):
            return pkt, -1  # not an ACK/NAK/CNP, or its last segment too short to be one: at the model clock
        t = self.ack_times.sent_ns(pkt, q, now)
        nic = -(-(size + self.spec.wire_overhead_bytes) * 8 * 10**9 // self._nic_rate) if self._nic_rate else 0
        return memoryview(bytearray(pkt)), -1 if t < 0 else t + nic

    def _ingress_each(self, data: bytes, tos: int, seg: int, now: int) -> None:
        """Slow path: a batch whose segments go to different ports (or are malformed), one by one."""
        mv = memoryview(data)
        for off in range(0, len(data), seg):
            pkt = mv[off : off + seg]
            if len(pkt) < 12:
                self.malformed += 1
                continue
            v = ((pkt[5] << 16) | (pkt[6] << 8) | pkt[7]) - 2
            q = v >> 1
            dst = -1 if v < 0 or q >= len(self.qp_src) else (self.qp_src[q] if v & 1 else self.qp_dst[q])
            if dst < 0:
                self.unroutable += 1
                continue
            src = -1 if v & 1 else self.qp_src[q]
            if v & 1:
                pkt, stamp = self._control(pkt, q, len(pkt), now)
            elif (stamp := read_stamp(pkt)) >= 0:
                pkt = memoryview(bytearray(pkt))
            self._arrive(pkt, 1, len(pkt), len(pkt), tos, dst, src, stamp, now)

    def _room(self, pid: int) -> int:
        """Bytes rank ``pid``'s receiving socket takes before it is half full (its worker is behind)."""
        if pid >= len(self.rank_socks):
            return 1 << 62
        rmem, rcvbuf = struct.unpack_from("2I", self.rank_socks[pid].getsockopt(socket.SOL_SOCKET, _SO_MEMINFO, 36))
        return rcvbuf // 2 - rmem

    def _flush(self, now: int, mnow: int, hold: bool = True) -> None:
        """Send every departed packet whose delivery time has come by model time ``now``: per port, consecutive
        runs of equal TOS and payload size (the last may be shorter) become one GSO ``sendmsg``; lag (the
        model clock ``mnow`` minus the intended delivery, the horizon included) is recorded per packet.
        With ``hold``, a port sends no more than its rank's socket has room for and keeps the rest."""
        latency = self.spec.port.latency_ns
        room: dict[int, int] = {}
        self.holding = False
        thr = self.spec.late_threshold_ns + self.horizon_ns
        lags = self.lags
        by_port: dict[int, list] = {}
        keep: list[tuple] = []
        late = fwd = 0
        for run in self.pending:
            pid, buf, off, m, seg, tos, d0, s = run
            first = d0 + latency
            if first > now:
                keep.append(run)
                continue
            k = m if not latency else min(m, (now - first) // s + 1)
            if hold:  # a packet's cost in the socket: its bytes and the kernel's overhead (< 1 KiB)
                r = room[pid] if pid in room else self._room(pid)
                fit = max(0, r) // (seg + 1024)
                if fit < k:
                    k, fit = fit, -1
                    self.holds += 1
                    self.holding = True
                room[pid] = r - k * (seg + 1024) if fit >= 0 else -1  # a FIFO: nothing passes a held packet
                if not k:
                    keep.append(run)
                    continue
            lag0 = mnow - first
            lags.extend(range(lag0, lag0 - k * s, -s))
            if lag0 > thr:
                late += min(k, -(-(lag0 - thr) // s))
            if not buf.readonly and buf[off] == 0x11:  # ACK/NAK: its MSN becomes its delivery time (mod 2^24)
                for j in range(k):
                    buf[off + j * seg + 13 : off + j * seg + 16] = ((first + j * s) & 0xFFFFFF).to_bytes(3, "big")
            elif not buf.readonly and buf[off] == 0x81:  # a stamped CNP: its stamp becomes its delivery time
                for j in range(k):
                    _PUT_STAMP(buf, off + j * seg + CNP_STAMP_AT, first + j * s + 1)
            elif not buf.readonly:  # stamped data: each stamp becomes the packet's delivery time
                self.ack_times.record((((buf[off + 5] << 16) | (buf[off + 6] << 8) | buf[off + 7]) - 2) >> 1,
                                      (buf[off + 9] << 16) | (buf[off + 10] << 8) | buf[off + 11], k, first, s)
                for j in range(k):
                    p = off + j * seg
                    _PUT_STAMP(buf, p + _PAYLOAD_AT[buf[p]], first + j * s + 1)
            lst = by_port.get(pid)
            if lst is None:
                by_port[pid] = lst = []
            lst.append((buf, off, k, seg, tos))
            fwd += k
            if k < m:
                keep.append((pid, buf, off + k * seg, m - k, seg, tos, d0 + k * s, s))
        self.pending.clear()
        self.pending.extend(keep)
        self.late_packets += late
        self.forwarded_packets += fwd
        send = self.uport.send
        addrs = self.spec.rank_addresses
        sends = 0
        for pid, items in by_port.items():
            addr = addrs[pid]
            iov: list = []
            g_seg = g_tos = g_bytes = g_n = 0
            closed = True
            for buf, off, k, seg, tos in items:
                while k:
                    if not closed and tos == g_tos and seg <= g_seg and g_n < _MAX_GSO_SEGMENTS \
                            and g_bytes + seg <= MAX_UDP_PAYLOAD:
                        take = 1 if seg < g_seg else min(k, _MAX_GSO_SEGMENTS - g_n,
                                                         (MAX_UDP_PAYLOAD - g_bytes) // seg)
                    else:
                        if iov:
                            send(iov, addr, g_seg if g_n > 1 else 0, g_tos)
                            sends += 1
                        iov = []
                        g_seg, g_tos, g_bytes, g_n = seg, tos, 0, 0
                        take = min(k, _MAX_GSO_SEGMENTS, MAX_UDP_PAYLOAD // seg)
                    iov.append(buf[off : off + take * seg])
                    g_bytes += take * seg
                    g_n += take
                    closed = seg < g_seg
                    off += take * seg
                    k -= take
            if iov:
                send(iov, addr, g_seg if g_n > 1 else 0, g_tos)
                sends += 1
        self.forwarded_sends += sends

    def _sample(self, now: int) -> None:
        if self.n_samples >= self.spec.max_samples:
            self.samples_dropped += 1
            return
        nz = self._nonzero
        for i, p in enumerate(self.ports):
            q = p.queue_bytes
            if q:
                q -= p.unarrived_bytes(now)
            if q or i in nz:
                self.samples_t[i].append(now)
                self.samples_q[i].append(q)
                self.n_samples += 1
                if q:
                    nz.add(i)
                else:
                    nz.discard(i)

    def _fold(self) -> None:
        if self.lags:
            self.lag_hist.record_many(np.asarray(self.lags, dtype=np.int64))
            self.lags.clear()
        if self.ingress_lags:
            self.ingress_hist.record_many(np.asarray(self.ingress_lags, dtype=np.int64))
            self.ingress_lags.clear()

    # -- results -------------------------------------------------------------------------------------
    def message(self, kind: str, now: int) -> tuple:
        """A "snapshot" or "final" message: counters, the samples new since the last message, health."""
        return (kind, -1, self.fabric(now), self.health())

    def take_samples(self) -> dict[str, list[list[int]]]:
        """The samples taken since the last call, per port (port r at index r); the switch forgets them."""
        n = self.n_ports
        out = {"t_ns": self.samples_t, "queue_bytes": self.samples_q}
        self.samples_t = [[] for _ in range(n)]
        self.samples_q = [[] for _ in range(n)]
        return out

    def fabric(self, now: int) -> dict[str, Any]:
        """Per-port reports (port r = switch → rank r), the queue samples new since the last call
        (``queue_samples_new``, see the module docstring; the parent gathers them) and scalar notes."""
        rate = float(self.spec.port.rate_bps)
        ports = tuple(PortReport.from_counters(p.counters(now), name=f"sw0->host{p.port_id}", kind="down",
                                               rate_bps=rate) for p in self.ports)
        return {"kind": "loopback_switch", "ports": ports, "queue_samples_new": self.take_samples(),
                "queue_samples_dropped": self.samples_dropped, "unroutable_packets": self.unroutable,
                "malformed_packets": self.malformed}

    def health(self) -> dict[str, Any]:
        from emulator.drivers.sockets.supervisor import lag_summary

        hist = self.lag_hist.copy()
        if self.lags:
            hist.record_many(np.asarray(self.lags, dtype=np.int64))
        ing = self.ingress_hist.copy()
        if self.ingress_lags:
            ing.record_many(np.asarray(self.ingress_lags, dtype=np.int64))
        st = self.uport.stats()
        return {
            "switch_lag_ns": lag_summary(hist), "switch_late_packets": self.late_packets,
            "switch_ingress_lag_ns": lag_summary(ing), "switch_late_arrivals": self.late_arrivals,
            "switch_horizon_ns": self.horizon_ns, "time_dilation": self.dilation,
            "switch_received_packets": self.received_packets, "switch_forwarded_packets": self.forwarded_packets,
            "switch_forwarded_sends": self.forwarded_sends, "switch_socket_drops": st["socket_drops"],
            "switch_send_errors": st["send_errors"], "switch_send_waits": st["send_waits"],
            "switch_rcvbuf_bytes": st["rcvbuf_bytes"], "switch_recv_calls": st["recv_calls"],
            "switch_egress_slack_ns": self.spec.egress_slack_ns, "switch_cpu_s": round(time.process_time() - self.cpu0, 3), "switch_scheduling": self.scheduling,
            "switch_received_batches": self.received_batches, "switch_loops": self.loops,
            "switch_backpressure_holds": self.holds,
            "switch_unplaced_late_batches": [p.unplaced_late_batches for p in self.ports], "switch_lag_marks": [p.lag_marks for p in self.ports],
            "switch_queued_packets": sum(p.queue_packets for p in self.ports),
            "switch_unsent_packets": sum(r[3] for r in self.pending) + sum(a[4] for a in self.arrivals),
            "switch_port_drops": sum(p.dropped_packets for p in self.ports),
            "switch_unroutable_packets": self.unroutable, "switch_malformed_packets": self.malformed,
        }  # fmt: skip
