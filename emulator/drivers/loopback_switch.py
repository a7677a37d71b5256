"""The software switch process of the loopback driver: real UDP in, the fabric port model, real UDP out.

Theory of operation
-------------------
One switch with one egress port per rank (port ``r`` leads to rank ``r``), each an
:class:`~emulator.fabric.port.EgressPort` (the same model the sim driver uses: serialization at the port
rate, tail-drop buffer, strict priorities, RED/ECN decided at dequeue), run in real time::

    recvmsg (GRO batch, TOS) ─▶ split into packets ─▶ route by BTH dest QP (qpn.py) ─▶ enqueue(now)
    ─▶ departures due by now (heap of busy ports) ─▶ [+ link latency] ─▶ CE into the TOS when marked ─▶ group consecutive
    packets of one port with equal TOS and size ─▶ sendmsg with UDP_SEGMENT + IP_TOS cmsgs to the rank

Time is ``CLOCK_MONOTONIC − t0``. A packet's *intended* departure is the model's departure time plus the
port latency; the switch *lag* is the real send time minus that, recorded for every packet in a
histogram, and packets beyond ``late_threshold_ns`` are counted as late. Datagrams the kernel dropped
before the switch read them (its receive buffer overflowed) are read from the socket's drop counter.
These figures travel with the fabric counters, so a slow machine shows as lag, never as a silent
change of the emulated rates.

Packets carry their wire size to the port model: UDP payload + ``wire_overhead_bytes`` (Ethernet, IP,
UDP, FCS, preamble and gap), like the endpoints' pacers. DSCPs listed in ``high_priority_dscps`` (CNPs,
ACKs by default) go to priority 6, the rest to 0. Queue depth of every non-empty port (and of a port
that just emptied) is sampled every ``sample_interval_ns``, bounded in count.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
import select
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from emulator.drivers.udp import MAX_UDP_PAYLOAD, UdpPort
from emulator.drivers.workers import child_setup
from emulator.fabric.port import EgressPort, PortConfig
from emulator.stats.histogram import LogLinearHistogram

_MAX_WAIT_S = 0.01
_RECV_BURST = 64
_CHECK_EVERY_NS = 20_000_000
_MAX_GSO_SEGMENTS = 64


@dataclass(frozen=True, slots=True)
class SwitchSpec:
    """Everything the switch process needs (inherited through fork, never pickled)."""

    port: PortConfig
    rank_addresses: tuple[tuple[str, int], ...]
    qp_src: tuple[int, ...]
    qp_dst: tuple[int, ...]
    seed: int
    wire_overhead_bytes: int = 66
    high_priority_dscps: tuple[int, ...] = (48,)
    late_threshold_ns: int = 500_000
    sample_interval_ns: int = 1_000_000
    max_samples: int = 200_000
    snapshot_interval_ns: int = 500_000_000
    start_timeout_s: float = 60.0
    #: ingress reading stops for departures overdue by this much (more = fewer, larger GSO sends)
    egress_slack_ns: int = 100_000


def switch_main(spec: SwitchSpec, uport: UdpPort, conn: Any, stop: Any, hard_deadline_mono_ns: int) -> None:
    """Entry point of the switch process."""
    child_setup()
    try:
        sw = _SoftwareSwitch(spec, uport, conn, stop, hard_deadline_mono_ns)
        conn.send(("ready", -1, __import__("os").getpid()))
        if not conn.poll(spec.start_timeout_s):
            return
        msg = conn.recv()
        if msg[0] != "go":
            return
        prof_dir = __import__("os").environ.get("EMULATOR_WORKER_PROFILE")
        if not prof_dir:
            sw.run(int(msg[1]))
            return
        import cProfile  # EMULATOR_WORKER_PROFILE=DIR also profiles the switch into DIR/switch.prof

        prof = cProfile.Profile()
        try:
            prof.runcall(sw.run, int(msg[1]))
        finally:
            prof.dump_stats(__import__("os").path.join(prof_dir, "switch.prof"))
    except Exception as exc:
        import os
        import traceback

        try:
            conn.send(("error", -1, f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=8)))
        except OSError:
            pass
        os._exit(3)


class _Pkt:
    """A packet as the port model sees it (plain slots class: one is made per forwarded packet)."""

    __slots__ = ("size_bytes", "ect", "priority", "payload")

    def __init__(self, size_bytes: int, ect: bool, priority: int, payload: tuple) -> None:
        self.size_bytes = size_bytes
        self.ect = ect
        self.priority = priority
        self.payload = payload


class _SoftwareSwitch:
    def __init__(self, spec: SwitchSpec, uport: UdpPort, conn: Any, stop: Any, hard_ns: int) -> None:
        self.spec = spec
        self.uport = uport
        self.conn = conn
        self.stop = stop
        self.hard_ns = hard_ns
        n = len(spec.rank_addresses)
        self.n_ports = n
        rng = random.Random(spec.seed)
        self.ports = [EgressPort(spec.port, rng, i) for i in range(n)]
        #: (departure ns, port): one entry per busy port (no PFC here, so a departure time never moves)
        self.heap: list[tuple[int, int]] = []
        self.qp_src = list(spec.qp_src)
        self.qp_dst = list(spec.qp_dst)
        self.unroutable = 0
        self.malformed = 0
        self.received_packets = 0
        self.forwarded_packets = 0
        self.forwarded_sends = 0
        self.late_packets = 0
        self.lag_hist = LogLinearHistogram()
        self.lags: list[int] = []
        self.delay_line: deque = deque()
        self.samples_t: list[list[int]] = [[] for _ in range(n)]
        self.samples_q: list[list[int]] = [[] for _ in range(n)]
        self.n_samples = 0
        self.samples_dropped = 0
        self._nonzero: set[int] = set()
        self.t0 = 0
        self.now = 0
        prio = [0] * 64
        for d in spec.high_priority_dscps:
            prio[d & 63] = 6
        self.prio = prio

    # -- the loop -------------------------------------------------------------------------------------
    def run(self, t0: int) -> None:
        self.t0 = t0
        mono = time.monotonic_ns
        while mono() < t0:
            time.sleep(min((t0 - mono()) / 1e9, 0.05))
        spec = self.spec
        uport = self.uport
        heap = self.heap
        slack = spec.egress_slack_ns
        fd = uport.fileno
        sel = select.select
        stop = self.stop
        hard = self.hard_ns - t0
        latency = spec.port.latency_ns
        dl = self.delay_line
        next_check = 0
        next_sample = 0
        next_snap = spec.snapshot_interval_ns
        while True:
            now = mono() - t0
            self.now = now
            for _ in range(_RECV_BURST):
                data, tos, seg = uport.recv()
                if data is None:
                    break
                self._ingress(data, tos, seg, now)
                now = mono() - t0
                if heap and heap[0][0] + slack <= now:
                    break  # a departure is overdue: serve it before reading more
            now = mono() - t0
            if heap and heap[0][0] <= now:
                deps = self._departures(now)
                if latency:
                    dl.extend(deps)
                else:
                    self._egress(deps, now)
            if dl and dl[0][0] <= now:
                due = []
                while dl and dl[0][0] <= now:
                    due.append(dl.popleft())
                self._egress(due, now)
            if now >= next_sample:
                next_sample = now + spec.sample_interval_ns
                self._sample(now)
            if now >= next_check:
                next_check = now + _CHECK_EVERY_NS
                if len(self.lags) > 4096:
                    self._fold()
                if stop.is_set() or now >= hard:
                    break
                if now >= next_snap:
                    next_snap = now + spec.snapshot_interval_ns
                    self.conn.send(("snapshot", -1, self.fabric(now), self.health()))
            wake = heap[0][0] if heap else None
            if dl and (wake is None or dl[0][0] < wake):
                wake = dl[0][0]
            now = mono() - t0
            timeout = _MAX_WAIT_S if wake is None else min(_MAX_WAIT_S, max(0.0, (wake - now) / 1e9))
            if timeout > 0:
                sel([fd], (), (), timeout)
        now = mono() - t0
        self._fold()
        self.conn.send(("final", -1, self.fabric(now), self.health()))

    def _departures(self, now: int) -> list[tuple[int, int, tuple, bool]]:
        """Every packet whose serialization ended by ``now``: (intended delivery ns, port, payload, CE)."""
        heap, ports = self.heap, self.ports
        latency = self.spec.port.latency_ns
        out = []
        while heap and heap[0][0] <= now:
            t, i = heapq.heappop(heap)
            p = ports[i]
            pkt, ce = p.dequeue(t)
            out.append((t + latency, i, pkt.payload, ce))
            nt = p.next_departure_ns()
            if nt is not None:
                heapq.heappush(heap, (nt, i))
        return out

    def _ingress(self, data: bytes, tos: int, seg: int, now: int) -> None:
        n = len(data)
        step = seg if 0 < seg < n else n
        mv = memoryview(data)
        qp_src, qp_dst = self.qp_src, self.qp_dst
        nq = len(qp_src)
        ect = (tos & 3) != 0
        prio = self.prio[tos >> 2]
        over = self.spec.wire_overhead_bytes
        ports = self.ports
        heap = self.heap
        for off in range(0, n, step):
            pkt = mv[off : off + step]
            self.received_packets += 1
            if len(pkt) < 12:
                self.malformed += 1
                continue
            v = ((pkt[5] << 16) | (pkt[6] << 8) | pkt[7]) - 2
            q = v >> 1
            if v < 0 or q >= nq:
                self.unroutable += 1
                continue
            dst = qp_src[q] if v & 1 else qp_dst[q]
            if dst < 0:
                self.unroutable += 1
                continue
            port = ports[dst]
            idle = port.next_departure_ns() is None
            if port.enqueue(_Pkt(len(pkt) + over, ect, prio, (pkt, tos)), now) and idle:
                heapq.heappush(heap, (port.next_departure_ns(), dst))

    def _egress(self, items: list, now: int) -> None:
        """Send departed packets: per port, runs of equal TOS and size become one GSO send."""
        by_port: dict[int, list] = {}
        lags = self.lags
        late = self.spec.late_threshold_ns
        for due, port, (pkt, tos), ce in items:
            lag = now - due
            lags.append(lag)
            if lag > late:
                self.late_packets += 1
            by_port.setdefault(port, []).append((pkt, (tos | 3) if ce else tos))
        send = self.uport.send
        addrs = self.spec.rank_addresses
        for port, pkts in by_port.items():
            addr = addrs[port]
            i, n = 0, len(pkts)
            while i < n:
                first, tos = pkts[i]
                seg = len(first)
                run = [first]
                total = seg
                j = i + 1
                while j < n and len(run) < _MAX_GSO_SEGMENTS:
                    p, t = pkts[j]
                    sz = len(p)
                    if t != tos or sz > seg or total + sz > MAX_UDP_PAYLOAD:
                        break
                    run.append(p)
                    total += sz
                    j += 1
                    if sz < seg:
                        break
                send(run, addr, seg if len(run) > 1 else 0, tos)
                self.forwarded_sends += 1
                self.forwarded_packets += len(run)
                i = j

    def _sample(self, now: int) -> None:
        if self.n_samples >= self.spec.max_samples:
            self.samples_dropped += 1
            return
        nz = self._nonzero
        for i, p in enumerate(self.ports):
            q = p.queue_bytes
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

    # -- results -------------------------------------------------------------------------------------
    def fabric(self, now: int) -> dict[str, Any]:
        """Per-port counters (port r = switch → rank r) and the sampled queue depths (DriverResult shape)."""
        rate = float(self.spec.port.rate_bps)
        ports = []
        for c in (p.counters(now) for p in self.ports):
            d = dataclasses.asdict(c)
            d["name"] = f"sw0->host{c.port}"
            d["kind"] = "down"
            d["rate_bps"] = rate
            d["utilisation"] = (c.dequeued_bytes * 8e9 / (rate * c.elapsed_ns)) if c.elapsed_ns > 0 else 0.0
            ports.append(d)
        t, port, q = [], [], []
        for i in range(self.n_ports):
            t.extend(self.samples_t[i])
            port.extend([i] * len(self.samples_t[i]))
            q.extend(self.samples_q[i])
        return {"kind": "loopback_switch", "ports": ports,
                "queue_samples": {"t_ns": t, "port": port, "queue_bytes": q},
                "queue_samples_dropped": self.samples_dropped, "unroutable_packets": self.unroutable,
                "malformed_packets": self.malformed}

    def health(self) -> dict[str, Any]:
        from emulator.drivers.supervisor import lag_summary

        hist = self.lag_hist.copy()
        if self.lags:
            hist.record_many(np.asarray(self.lags, dtype=np.int64))
        st = self.uport.stats()
        return {
            "switch_lag_ns": lag_summary(hist), "switch_late_packets": self.late_packets,
            "switch_received_packets": self.received_packets, "switch_forwarded_packets": self.forwarded_packets,
            "switch_forwarded_sends": self.forwarded_sends, "switch_socket_drops": st["socket_drops"],
            "switch_send_errors": st["send_errors"], "switch_send_waits": st["send_waits"],
            "switch_rcvbuf_bytes": st["rcvbuf_bytes"], "switch_recv_calls": st["recv_calls"],
        }  # fmt: skip
