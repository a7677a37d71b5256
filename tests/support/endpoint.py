"""Helpers for endpoint tests: hand-built schedules and a tiny in-memory wire between endpoints."""

from __future__ import annotations

import heapq

import numpy as np
from hypothesis import strategies as st

from emulator.drivers.sockets.workers import socket_endpoint_config
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.events import OpEventKind, TransmitRun, expand_runs
from emulator.schedule.model import OP_DELAY, OP_RECV, OP_SEND, Schedule, dependencies, op_layout
from emulator.wire import parse_header


def make_schedule(world: int, flows: list[tuple[int, int, int, int]], ops: dict[int, list[tuple]]) -> Schedule:
    """``flows``: (src, dst, size_bytes, qp); ``ops[rank]``: (kind, flow, duration_ns, not_before_ns, deps)
    with deps as local op indices of that rank."""
    rank, kind, flow, dur, nb, child, parent, counts = [], [], [], [], [], [], [], []
    for r in range(world):
        base = len(rank)
        for k, f, d, b, deps in ops.get(r, []):
            child.extend([len(rank)] * len(deps))
            parent.extend(base + x for x in deps)
            rank.append(r)
            kind.append(k)
            flow.append(f)
            dur.append(d)
            nb.append(b)
        counts.append(len(rank) - base)
    op_rank, rank_op_ptr = op_layout(np.array(counts))
    dep_ptr, dep_idx = dependencies(np.array(child, np.int64), np.array(parent, np.int64), len(rank))
    f = np.array(flows, dtype=np.int64).reshape(-1, 4)
    i32 = np.int32
    return Schedule(
        world_size=world, flow_src=f[:, 0].astype(i32), flow_dst=f[:, 1].astype(i32), flow_size_bytes=f[:, 2],
        flow_qp=f[:, 3].astype(i32), flow_coll=np.full(len(f), -1, i32), flow_step=np.zeros(len(f), i32),
        flow_chunk=np.zeros(len(f), i32), op_rank=op_rank, op_kind=np.array(kind, np.int8),
        op_flow=np.array(flow, i32), op_duration_ns=np.array(dur, np.int64), op_not_before_ns=np.array(nb, np.int64),
        op_node=np.full(len(rank), -1, np.int64), dep_ptr=dep_ptr, dep_idx=dep_idx, rank_op_ptr=rank_op_ptr,
        coll_type=np.zeros(0, np.int8), coll_group=np.zeros(0, i32),
        coll_seq=np.zeros(0, i32), coll_size_bytes=np.zeros(0, np.int64), coll_algorithm=np.zeros(0, np.int16),
        coll_rank_ptr=np.zeros(1, np.int64), coll_rank_idx=np.zeros(0, i32),
    )  # fmt: skip


def send(flow, deps=(), nb=-1):
    return (OP_SEND, flow, 0, nb, tuple(deps))


def recv(flow, deps=(), nb=-1):
    return (OP_RECV, flow, 0, nb, tuple(deps))


def delay(ns, deps=(), nb=-1):
    return (OP_DELAY, -1, ns, nb, tuple(deps))


def drop_first(match):
    """A ``Wire`` drop function that drops the first datagram whose ``parse_header`` tuple ``match``
    accepts, and the list that datagram is appended to."""
    dropped = []

    def drop(pkt):
        if not dropped and match(parse_header(pkt)):
            dropped.append(pkt)
            return True
        return False

    return drop, dropped


def perturb(rng, data: bytes, seg: int, tos: int) -> tuple[bytes, int, int]:
    """What a lossy wire does to one GSO batch, drawn from ``rng``: lose one full segment (5 %, the rest is
    delivered as one GRO batch) or CE-mark it (3 %), then deliver it twice (3 %). Returns (data, ECN, copies)."""
    ecn = tos & 3
    u = rng.random()
    if seg and u < 0.05 and len(data) > 2 * seg:
        i = rng.randrange(len(data) // seg)
        data = data[: i * seg] + data[(i + 1) * seg :]
    elif u < 0.08:
        ecn = 3
    return data, ecn, 2 if rng.random() < 0.03 else 1


def transmit_round(eps, now: int, rng, wire: list, inflight: list, seq: int, runs: list | None = None) -> int:
    """Every rank's transmits at ``now``: onto ``wire`` as sent ``(now, rank, dst, bytes, segment_size, tos,
    t_ns)``, and into the heap ``inflight`` as the seeded ``rng`` perturbs them (:func:`perturb`: dropped,
    duplicated, CE-marked), due 2 µs later: ``(due_ns, seq, dst, bytes, tos, ecn, segment_size)``. A
    ``TransmitRun`` counts as its sends (each appended to ``runs`` when given). Returns the last ``seq``."""
    for r, ep in enumerate(eps):
        txs = ep.poll_transmit(now)
        if runs is not None:
            runs.extend(tx.sends for tx in txs if type(tx) is TransmitRun)
        for tx in expand_runs(txs):
            data = bytes(tx.data)
            wire.append((now, r, tx.dst_rank, data, tx.segment_size, tx.tos, tx.t_ns))
            data, ecn, copies = perturb(rng, data, tx.segment_size, tx.tos)
            for _ in range(copies):
                seq += 1
                heapq.heappush(inflight, (now + 2000, seq, tx.dst_rank, data, tx.tos, ecn, tx.segment_size))
    return seq


def run_endpoints(eps, rng, poll_ns: int, runs: list | None = None) -> tuple[list, list, bool]:
    """Start ``eps`` at 0 and poll them in turn every ``poll_ns`` (:func:`transmit_round`), each datagram
    received when due, every rank's timers served, until all are done or 1 s: the wire, the ``(arrays,
    counters)`` records per rank, and whether all finished."""
    for ep in eps:
        ep.start(0)
    wire: list = []
    inflight: list = []
    seq = now = 0
    while now < 10**9 and not all(ep.done for ep in eps):
        seq = transmit_round(eps, now, rng, wire, inflight, seq, runs)
        now += poll_ns
        while inflight and inflight[0][0] <= now:
            _, _, dst, data, _tos, ecn, seg = heapq.heappop(inflight)
            eps[dst].receive(memoryview(bytearray(data)), ecn, now, seg if seg < len(data) else 0)
        for ep in eps:
            ep.handle_timer(now)
    return wire, [(ep.records.to_arrays(), dict(ep.records.counters)) for ep in eps], all(ep.done for ep in eps)


def assert_same_run(wire_a: list, rec_a: list, wire_b: list, rec_b: list, flows) -> None:
    """Two runs of :func:`transmit_round`'s harness put the same bytes on the wire, kept the same records and
    counters per rank, and delivered every byte of ``flows``."""
    assert wire_a == wire_b
    assert_same_records(rec_a, rec_b)
    assert sum(c["bytes_received"] for _, c in rec_a) == sum(size for _, _, size, _ in flows)


def assert_same_records(rec_a: list, rec_b: list) -> None:
    """Per rank, the same counters and the same record arrays (``(arrays, counters)`` pairs in rank order)."""
    for (arr_a, cnt_a), (arr_b, cnt_b) in zip(rec_a, rec_b, strict=True):
        assert cnt_a == cnt_b
        assert arr_a.keys() == arr_b.keys()
        for k in arr_b:
            assert np.array_equal(arr_a[k], arr_b[k]), k


def segments(tx):
    """The datagrams of one Transmit (a GSO batch cut into its segments)."""
    data = bytes(tx.data)
    if not tx.segment_size:
        return [data]
    return [data[i : i + tx.segment_size] for i in range(0, len(data), tx.segment_size)]


class Wire:
    """Deliver every datagram after ``latency_ns``; ``drop(pkt_bytes) -> bool`` and ``ce(pkt) -> bool``
    decide per datagram. Runs endpoints to completion in virtual time (a minimal driver)."""

    def __init__(self, eps, latency_ns=1000, drop=None, ce=None):
        self.eps = eps
        self.latency = latency_ns
        self.drop = drop or (lambda pkt: False)
        self.ce = ce or (lambda pkt: False)
        self.inflight = []  # (t, seq, dst, pkt, ecn)
        self.seq = 0
        self.log = []  # (t, src, dst, pkt)

    def pump(self, r, now):
        for tx in self.eps[r].poll_transmit(now):
            for pkt in segments(tx):
                self.log.append((now, r, tx.dst_rank, pkt))
                if self.drop(pkt):
                    continue
                self.seq += 1
                self.inflight.append((now + self.latency, self.seq, tx.dst_rank, pkt, 3 if self.ce(pkt) else 2))

    def run(self, until_ns=10**9, start=0):
        import heapq

        for ep in self.eps:
            ep.start(start)
        heapq.heapify(self.inflight)
        now = start
        while now <= until_ns and not all(ep.done for ep in self.eps):
            for r in range(len(self.eps)):
                self.pump(r, now)
            heapq.heapify(self.inflight)
            cands = [t for ep in self.eps if (t := ep.next_timer_ns()) is not None]
            if self.inflight:
                cands.append(self.inflight[0][0])
            if not cands:
                break
            now = max(now, min(cands))
            while self.inflight and self.inflight[0][0] <= now:
                _, _, dst, pkt, ecn = heapq.heappop(self.inflight)
                self.eps[dst].receive(pkt, ecn, now)
            for ep in self.eps:
                ep.handle_timer(now)
        return now


class HeldSpy:
    """A recorder in front of an endpoint's own: notes each FLOW_HELD event as (rank, RECV op, t_ns)."""

    def __init__(self, ep, rank: int, notified: list) -> None:
        self.inner, self.rank, self.notified = ep.recorder, rank, notified
        self.records = ep.recorder.records
        ep.recorder = self

    def consume(self, events) -> None:
        for ev in events:
            if ev.kind == OpEventKind.FLOW_HELD:
                self.notified.append((self.rank, ev.op, ev.t_ns))
            self.inner.on_event(ev)



@st.composite
def flows_2_to_3_ranks(draw, sizes: tuple[int, ...] = (1, 4096, 20_000, 65_536, 300_001, 1 << 20)):
    """(world, flows, ops) for :func:`make_schedule`: 2-3 ranks, 1-5 flows of ``sizes`` (by default one byte to
    1 MiB) between random distinct ranks, each on one of three queue pairs."""
    world = draw(st.integers(2, 3))
    flows, ops = [], {r: [] for r in range(world)}
    for f in range(draw(st.integers(1, 5))):
        src = draw(st.integers(0, world - 1))
        dst = draw(st.integers(0, world - 2))
        dst = dst + 1 if dst >= src else dst
        size = draw(st.sampled_from(sizes))
        flows.append((src, dst, size, (draw(st.integers(0, 2)) * world + src) * world + dst))
        ops[src].append(send(f))
        ops[dst].append(recv(f))
    return world, flows, ops


def socket_mode_config(**kw) -> EndpointConfig:
    """The direct driver's socket mode: runs as one transmit, the arena's compiled writes, an 8-batch line burst."""
    base = dict(mtu_bytes=4096, cc="none", line_rate_bps=25e9, compiled_core=True, run_transmits=True,
                line_rate_burst_batches=8)
    base.update(kw)
    return socket_endpoint_config(EndpointConfig(**base))


def poll_endpoints(sched, cfg, world: int, general: bool) -> list[RankEndpoint]:
    """The ranks' endpoints polling by the general poll (the class's) or by the burst poll."""
    eps = [RankEndpoint(r, sched, cfg) for r in range(world)]
    for ep in eps:
        if general:
            ep._tx.__dict__.pop("poll", None)
        else:
            assert ep._tx.poll == ep._tx.poll_bursts
    return eps

