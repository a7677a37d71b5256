"""A small deterministic closed loop in virtual time: N senders → one bottleneck port → NP → CNP → RP.

Theory of operation
-------------------
Each of ``n_flows`` senders has an endless backlog, its own rate controller (a preset from
``emulator.pacing``), a token-bucket pacer at the controller's rate and a NIC that serializes at the line
rate. A packet leaves the sender, crosses a link of ``link_latency_ns`` and reaches a one-port
:class:`~emulator.fabric.switch.Switch` (the bottleneck egress port with RED marking and a tail-drop
buffer); after departure it crosses another link to the receivers, whose NP (one ``CnpGenerator`` per
receiver, keyed by flow) decides on CNPs; a CNP reaches its sender ``cnp_latency_ns`` later (CNPs travel
at high priority, so they do not queue). Sender transmissions, controller timers, port departures, NP
timers and sampling ticks are events on one heap ordered by (time, sequence): the run is a pure function
of the configuration and the seed.

The result holds per-flow delivered bytes per sampling bin, the queue length and each flow's rate at
each bin boundary, and the bottleneck's counters, enough to check fairness (Jain's index) and the queue
band. It is the reference behaviour of the DCQCN paper (fair share, bounded queue) and the test bed of
the fabric model that the run's virtual-time fabric reuses.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from collections.abc import Mapping
from typing import Any

from emulator.fabric.port import PortConfig, PortCounters, SimPacket
from emulator.fabric.switch import Switch
from emulator.pacing import TokenBucketPacer, get_controller, np_params
from emulator.pacing.notification import CnpGenerator, NpParams
from emulator.pacing.red import RedParams

_TX, _CTRL, _ARRIVE, _DEPART, _RX, _CNP, _NP_TIMER, _SAMPLE = range(8)


@dataclasses.dataclass(frozen=True, slots=True)
class IncastConfig:
    n_flows: int
    cc: str = "paper"
    cc_overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    line_rate_bps: float = 25e9
    bottleneck_rate_bps: float = 0.0          # 0 = line rate
    packet_bytes: int = 4096
    buffer_bytes: int = 2_000_000
    red: RedParams | None = dataclasses.field(default_factory=RedParams)
    np: NpParams | None = None                 # None = the preset's NP
    link_latency_ns: int = 1_000
    cnp_latency_ns: int = 2_000
    burst_bytes: int = 0                       # 0 = one packet
    duration_ns: int = 20_000_000
    sample_interval_ns: int = 100_000
    start_offsets_ns: tuple[int, ...] = ()     # per flow, default all start at 0
    seed: int = 1


@dataclasses.dataclass(frozen=True, slots=True)
class IncastResult:
    config: IncastConfig
    delivered_bytes: tuple[tuple[int, ...], ...]   # [flow][bin]
    queue_bytes: tuple[int, ...]                   # at the end of each bin
    rates_bps: tuple[tuple[float, ...], ...]       # [flow][bin], controller rate at the end of each bin
    cnps: tuple[int, ...]                          # CNPs received per flow
    bottleneck: PortCounters

    def throughput_bps(self, flow: int, from_ns: int, to_ns: int) -> float:
        """Mean delivered rate of one flow over whole bins within [from_ns, to_ns)."""
        step = self.config.sample_interval_ns
        lo, hi = from_ns // step, min(len(self.queue_bytes), to_ns // step)
        if hi <= lo:
            return 0.0
        return sum(self.delivered_bytes[flow][lo:hi]) * 8e9 / ((hi - lo) * step)

    def jain_index(self, from_ns: int, to_ns: int) -> float:
        return jain_index([self.throughput_bps(f, from_ns, to_ns) for f in range(self.config.n_flows)])


def jain_index(values: list[float]) -> float:
    """(Σx)² / (n·Σx²): 1 for equal shares, 1/n when one value takes all."""
    if not values:
        return 0.0
    s2 = sum(v * v for v in values)
    return (sum(values) ** 2) / (len(values) * s2) if s2 > 0 else 0.0


class _Sender:
    __slots__ = ("ctrl", "pacer", "nic_free_ns", "tx_ns", "tx_ver", "timer_ns", "timer_ver", "seq", "cnps")

    def __init__(self, ctrl: Any, pacer: TokenBucketPacer, start_ns: int) -> None:
        self.ctrl, self.pacer = ctrl, pacer
        self.nic_free_ns = start_ns
        self.tx_ns: int | None = None
        self.tx_ver = 0
        self.timer_ns: int | None = None
        self.timer_ver = 0
        self.seq = 0
        self.cnps = 0


def run_incast(cfg: IncastConfig) -> IncastResult:
    """Run the closed loop for ``cfg.duration_ns`` of virtual time."""
    rng = random.Random(cfg.seed)
    bottleneck = cfg.bottleneck_rate_bps or cfg.line_rate_bps
    switch = Switch([PortConfig(bottleneck, cfg.buffer_bytes, cfg.red, None, cfg.link_latency_ns)],
                    lambda pkt: 0, rng)
    np_gen = CnpGenerator(cfg.np if cfg.np is not None else np_params(cfg.cc))
    size = cfg.packet_bytes
    line_ser_ns = -(-size * 8 * 10**9 // int(cfg.line_rate_bps))
    burst = max(size, cfg.burst_bytes)
    offsets = list(cfg.start_offsets_ns) + [0] * (cfg.n_flows - len(cfg.start_offsets_ns))
    senders = []
    for i in range(cfg.n_flows):
        ctrl = get_controller(cfg.cc, cfg.line_rate_bps, **dict(cfg.cc_overrides))
        senders.append(_Sender(ctrl, TokenBucketPacer(ctrl.rate_bps, burst, offsets[i]), offsets[i]))
    n_bins = cfg.duration_ns // cfg.sample_interval_ns
    delivered = [[0] * n_bins for _ in range(cfg.n_flows)]
    rates = [[0.0] * n_bins for _ in range(cfg.n_flows)]
    queue: list[int] = []
    heap: list[tuple[int, int, int, Any, int]] = []
    seq = 0
    np_timer_ns: int | None = None

    def push(t: int, kind: int, a: Any = None, b: int = 0) -> None:
        nonlocal seq
        heapq.heappush(heap, (t, seq, kind, a, b))
        seq += 1

    def resched(i: int, now: int) -> None:
        s = senders[i]
        s.pacer.set_rate(s.ctrl.rate_bps, now)
        ready = s.pacer.ready_ns(size, now)
        if ready is not None:
            ready = max(ready, s.nic_free_ns)
        if ready is not None and ready != s.tx_ns:
            s.tx_ns = ready
            s.tx_ver += 1
            push(ready, _TX, i, s.tx_ver)
        nt = s.ctrl.next_timer_ns()
        if nt is not None and nt != s.timer_ns:
            s.timer_ns = nt
            s.timer_ver += 1
            push(max(nt, now), _CTRL, i, s.timer_ver)

    def note_departure(now: int) -> None:
        t = switch.next_departure_ns(0)
        if t is not None:
            push(t, _DEPART)

    for i in range(cfg.n_flows):
        resched(i, offsets[i])
    for k in range(1, n_bins + 1):
        push(k * cfg.sample_interval_ns, _SAMPLE, None, k - 1)

    end = cfg.duration_ns
    while heap:
        t, _, kind, a, b = heapq.heappop(heap)
        if t > end:
            break
        if kind == _TX:
            s = senders[a]
            if b != s.tx_ver:
                continue
            s.tx_ns = None
            if s.pacer.try_send(size, t):
                pkt = SimPacket(size, flow=a, src=a, seq=s.seq, sent_ns=t)
                s.seq += 1
                s.nic_free_ns = t + line_ser_ns
                push(t + line_ser_ns + cfg.link_latency_ns, _ARRIVE, pkt)
                s.ctrl.on_bytes_sent(size, t)
            resched(a, t)
        elif kind == _CTRL:
            s = senders[a]
            if b != s.timer_ver:
                continue
            s.timer_ns = None
            s.ctrl.on_timer(t)
            resched(a, t)
        elif kind == _ARRIVE:
            before = switch.next_departure_ns(0)
            switch.enqueue(0, a, t)
            if switch.next_departure_ns(0) != before:
                note_departure(t)
        elif kind == _DEPART:
            if switch.next_departure_ns(0) != t:
                continue
            pkt, ce = switch.dequeue(0, t)
            push(t + cfg.link_latency_ns, _RX, pkt, int(ce))
            note_departure(t)
        elif kind == _RX:
            flow = a.flow
            bin_i = t // cfg.sample_interval_ns
            if bin_i < n_bins:
                delivered[flow][bin_i] += a.size_bytes
            if np_gen.on_packet(flow, bool(b), t):
                push(t + cfg.cnp_latency_ns, _CNP, flow)
            nt = np_gen.next_timer_ns()
            if nt is not None and nt != np_timer_ns:
                np_timer_ns = nt
                push(nt, _NP_TIMER)
        elif kind == _NP_TIMER:
            if np_timer_ns != t:
                continue
            np_timer_ns = None
            for flow in np_gen.on_timer(t):
                push(t + cfg.cnp_latency_ns, _CNP, flow)
            nt = np_gen.next_timer_ns()
            if nt is not None:
                np_timer_ns = nt
                push(nt, _NP_TIMER)
        elif kind == _CNP:
            s = senders[a]
            s.cnps += 1
            s.ctrl.on_cnp(t)
            resched(a, t)
        else:  # _SAMPLE
            queue.append(switch.ports[0].queue_bytes)
            for i, s in enumerate(senders):
                rates[i][b] = s.ctrl.rate_bps
    return IncastResult(
        cfg, tuple(tuple(d) for d in delivered), tuple(queue), tuple(tuple(r) for r in rates),
        tuple(s.cnps for s in senders), switch.counters(end)[0],
    )
