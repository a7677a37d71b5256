"""The sender in a socket driver's mode (``EndpointConfig.socket_sends``): MIDDLE runs written into reused
buffers, a visit per queue pair's burst, a cheap immutable ``Transmit``.

* :class:`~emulator.endpoint.middles.MiddleArena` writes the bytes :class:`MiddleWriter` writes, and the rows
  handed out between two resets never overlap;
* a ``poll_transmit``'s batches are distinct buffers, reused by the next call;
* a visit to a constant-rate queue pair sends the whole burst its tokens allow while other queue pairs
  are due, the queue pairs take turns burst by burst, and the pacers' bounds hold (QP and NIC);
* end to end, with losses, duplicates and CE marks, the socket mode delivers every byte; without losses
  each queue pair puts the same packets on the wire in the same order as one batch per visit.
"""

from __future__ import annotations

import heapq
import pickle
import random
import struct
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import flows_2_to_3_ranks as _flows
from support.endpoint import make_schedule, perturb, recv, send

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.events import Transmit
from emulator.endpoint.middles import MiddleArena, MiddleWriter
from emulator.wire.psn import PSN_MASK

_SOCKET = {"pace_full_batches": True, "defer_acks": True, "socket_sends": True}


def _row_bytes(mtu: int) -> int:
    return mtu + 16


@settings(max_examples=60, deadline=None)
@given(mtu=st.sampled_from([256, 1024, 4096]),
       runs=st.lists(st.tuples(st.integers(0, (1 << 24) - 1), st.integers(0, (1 << 26)), st.integers(1, 70),
                               st.integers(-1, 10**12), st.sampled_from([0, 0, 7, 3300]), st.sets(st.integers(0, 69)),
                               st.booleans()),
                     min_size=1, max_size=12))  # fmt: skip
def test_the_arena_writes_the_middle_writers_bytes_and_never_overlaps_within_a_reset(mtu, runs):
    row = _row_bytes(mtu)
    arena = MiddleArena(row, chunk_rows=32)
    one = MiddleWriter(row).write
    live: list[tuple[memoryview, bytes]] = []
    for dqpn, psn, n, stamp, step, acks, reset in runs:
        if reset:
            arena.reset()
            live.clear()
        rows = sorted(r for r in acks if r < n)
        view = arena.write(dqpn, psn, n, stamp, step, rows)
        want = b"".join(one(dqpn, (psn + j) & PSN_MASK, 1, j in rows, stamp + j * step) for j in range(n))
        assert bytes(view) == want
        live.append((view, want))
        for v, w in live:  # rows handed out since the reset are left as they were written
            assert bytes(v) == w


def _parse(data: bytes | memoryview, seg: int) -> list[tuple[int, int, int, int]]:
    """(opcode, dest QP, PSN with AckReq bit, length) of every datagram of a batch."""
    data = bytes(data)
    seg = seg or len(data)
    out = []
    for o in range(0, len(data), seg):
        w0, dq, w2 = struct.unpack_from("!III", data, o)
        out.append((w0 >> 24, dq & 0xFFFFFF, w2, min(seg, len(data) - o)))
    return out


def _one_flow_over_qps(qps: int, size: int, rate: float, **kw):
    sched = make_schedule(2, [(0, 1, size, 0)], {0: [send(0)], 1: [recv(0)]})
    cfg = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=rate, qps_per_peer=qps,
                         retransmit_timeout_ns=10**12, **kw)  # fmt: skip
    return sched, cfg


def test_a_polls_batches_are_distinct_buffers_that_the_next_poll_reuses():
    sched, cfg = _one_flow_over_qps(1, 8 << 20, 100e9, **_SOCKET)
    a = RankEndpoint(0, sched, cfg)
    a.start(0)
    first = a.poll_transmit(200_000)  # a late poll: the bucket's whole burst
    assert len(first) >= 3
    rows = [p for tx in first for p in _parse(tx.data, tx.segment_size)]
    psns = [w2 & PSN_MASK for _, _, w2, _ in rows]
    assert psns == list(range(len(psns)))  # every batch kept its own packets: no two share rows
    owners = {id(tx.data.obj) for tx in first if isinstance(tx.data, memoryview)}
    later = a.poll_transmit(400_000)
    assert later and {id(tx.data.obj) for tx in later if isinstance(tx.data, memoryview)} & owners


def test_without_socket_sends_every_batch_keeps_its_own_bytes():
    """The sim's mode: transmits kept across polls (the sim holds views of datagrams in flight) stay as they
    were handed out."""
    sched, cfg = _one_flow_over_qps(1, 8 << 20, 100e9, pace_full_batches=True)
    a = RankEndpoint(0, sched, cfg)
    a.start(0)
    kept = [(tx, bytes(tx.data)) for now in (200_000, 400_000, 600_000) for tx in a.poll_transmit(now)]
    assert len(kept) > 6
    assert all(bytes(tx.data) == b for tx, b in kept)


def _drive(sched, cfg, poll_ns: int, until_ns: int):
    """Sender alone (nothing ACKed: cc none needs no feedback), polled every ``poll_ns``: per poll, the
    (QP, payload bytes, wire cost) of each batch in order."""
    a = RankEndpoint(0, sched, cfg)
    a.start(0)
    polls = []
    for now in range(poll_ns, until_ns, poll_ns):
        polls.append((now, [(pk[0][1], len(tx.data) - 20 * len(pk), len(tx.data) + len(pk) * cfg.wire_overhead_bytes)
                            for tx in a.poll_transmit(now) for pk in [_parse(tx.data, tx.segment_size)]]))
    return a, polls


def test_a_visit_sends_a_queue_pairs_whole_burst_while_others_are_due_and_the_pacers_bounds_hold():
    rate = 100e9
    sched, cfg = _one_flow_over_qps(4, 64 << 20, rate, **_SOCKET)  # four QPs of one flow
    poll_ns = 50_000  # a busy driver: every QP and the NIC have their whole bucket at each poll
    a, polls = _drive(sched, cfg, poll_ns, 2_000_000)
    tx = a._tx
    qp_burst = next(iter(tx.qps.values())).pacer.burst_bytes
    nic_burst = tx.nic.burst_bytes
    assert nic_burst >= 3 * tx.burst  # several batches per poll at 100 Gbit/s
    runs = []  # consecutive batches of one QP within a poll
    for _, batches in polls:
        for q, _, cost in batches:
            if runs and runs[-1][0] == q and runs[-1][2] is batches:
                runs[-1][1] += cost
            else:
                runs.append([q, cost, batches])
    assert nic_burst % tx.burst == 0 and qp_burst % tx.burst == 0  # bursts of whole batches: none left behind
    # after each QP's first visit (whose FIRST packet goes in a send of its own): the NIC's burst, whole batches
    assert max(len(b) for _, b in polls[4:]) == nic_burst // tx.burst
    assert all(len({q for q, _, _ in b}) == 1 for _, b in polls if b)  # the NIC's burst went to one QP
    assert sum(1 for r in runs if r[1] > tx.burst) >= len(runs) // 2  # visits of several batches
    # turns: while all four are backlogged, each QP gets the NIC in turn (one burst each)
    order = [r[0] for r in runs[4:40]]
    assert all(order[i] != order[i + 1] for i in range(len(order) - 1))
    assert len(set(order[:4])) == 4
    # token-bucket bounds over every window of polls: per QP ≤ its burst + rate·W, NIC ≤ its burst + line·W
    per_poll = [(t, sum(c for _, _, c in b), {q: sum(c for qq, _, c in b if qq == q) for q, _, _ in b}) for t, b in polls]
    for i in range(len(per_poll)):
        nic_sum, qp_sum = 0, {}
        for j in range(i, min(len(per_poll), i + 10)):
            nic_sum += per_poll[j][1]
            for q, c in per_poll[j][2].items():
                qp_sum[q] = qp_sum.get(q, 0) + c
            w_ns = per_poll[j][0] - per_poll[i][0]
            assert nic_sum <= nic_burst + rate * w_ns / 8e9 + 1
            assert all(v <= qp_burst + rate * w_ns / 8e9 + 1 for v in qp_sum.values())


def test_one_batch_per_visit_without_socket_sends():
    """The same queue pairs without ``socket_sends`` (the sim's trains): visits of one batch, the QPs in turn
    batch by batch — the burst grain is the socket drivers' mode only."""
    sched, cfg = _one_flow_over_qps(4, 64 << 20, 100e9, pace_full_batches=True)
    _, polls = _drive(sched, cfg, 50_000, 600_000)
    for _, b in polls[3:]:  # after every QP's first message batch (its FIRST packet is a send of its own)
        qs = [q for q, _, _ in b]
        assert all(qs[i] != qs[i + 1] for i in range(len(qs) - 1))


def _run(sched, cfg, seed: int, world: int, lossy: bool):
    """Virtual time, whole GSO batches delivered as GRO batches 2 µs later, every sender polled every 7 µs
    (a socket driver's loop; the datagrams are copied at once, as sendmsg does). With ``lossy`` the seeded
    RNG may drop one segment of a batch, deliver it twice or CE-mark it. Returns per QP the (opcode, PSN,
    length) sequence on the wire, the records and whether every rank completed."""
    rng = random.Random(seed)
    eps = [RankEndpoint(r, sched, cfg) for r in range(world)]
    for ep in eps:
        ep.start(0)
    wire: dict[tuple[int, int], list] = {}
    inflight, seq, now = [], 0, 0
    while now < 10**9 and not all(ep.done for ep in eps):
        for r, ep in enumerate(eps):
            for tx in ep.poll_transmit(now):
                data = bytes(tx.data)
                seg = tx.segment_size
                if tx.t_ns >= 0:
                    for op, dq, w2, n in _parse(data, seg):
                        wire.setdefault((r, dq), []).append((op, w2 & PSN_MASK, n))
                ecn, copies = tx.tos & 3, 1
                if lossy:
                    data, ecn, copies = perturb(rng, data, seg, tx.tos)
                for _ in range(copies):
                    seq += 1
                    heapq.heappush(inflight, (now + 2000, seq, tx.dst_rank, data, ecn, seg))
        cands = [now + 7000] + ([inflight[0][0]] if inflight else [])
        now = min(cands)
        while inflight and inflight[0][0] <= now:
            _, _, dst, data, ecn, seg = heapq.heappop(inflight)
            eps[dst].receive(data, ecn, now, seg if seg < len(data) else 0)
        for ep in eps:
            ep.handle_timer(now)
    return wire, [dict(ep.records.counters) for ep in eps], all(ep.done for ep in eps)


@settings(max_examples=30, deadline=None)
@given(case=_flows(), seed=st.integers(0, 10**6), qps=st.sampled_from([1, 3]), psn=st.sampled_from([0, (1 << 24) - 50]),
       rate=st.sampled_from([25e9, 100e9]), max_msg=st.sampled_from([(1 << 31) - 1, 70_000]))  # fmt: skip
def test_socket_sends_put_each_queue_pairs_packets_on_the_wire_as_one_batch_per_visit(case, seed, qps, psn, rate,
                                                                                       max_msg):
    world, flows, ops = case
    sched = make_schedule(world, flows, ops)
    cfg = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=rate, qps_per_peer=qps, initial_psn=psn,
                         retransmit_timeout_ns=10**8, max_message_bytes=max_msg, pace_full_batches=True,
                         defer_acks=True)  # fmt: skip
    wire_s, rec_s, done_s = _run(sched, replace(cfg, socket_sends=True), seed, world, lossy=False)
    wire_b, rec_b, done_b = _run(sched, cfg, seed, world, lossy=False)
    assert done_s and done_b
    assert wire_s == wire_b  # per QP: the same packets (opcode, PSN, length) in the same order
    for c_s, c_b in zip(rec_s, rec_b, strict=True):
        for key in ("bytes_sent", "bytes_received", "packets_sent", "retransmits"):
            assert c_s.get(key, 0) == c_b.get(key, 0), key
    assert sum(c["bytes_received"] for c in rec_s) == sum(size for _, _, size, _ in flows)


@settings(max_examples=25, deadline=None)
@given(case=_flows(), seed=st.integers(0, 10**6), qps=st.sampled_from([1, 3]), rate=st.sampled_from([25e9, 100e9]))
def test_socket_sends_deliver_every_byte_through_losses_duplicates_and_marks(case, seed, qps, rate):
    world, flows, ops = case
    sched = make_schedule(world, flows, ops)
    cfg = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=rate, qps_per_peer=qps,
                         retransmit_timeout_ns=200_000, **_SOCKET)  # fmt: skip
    _, rec, done = _run(sched, cfg, seed, world, lossy=True)
    assert done
    assert sum(c["bytes_received"] for c in rec) == sum(size for _, _, size, _ in flows)


def test_a_transmit_is_an_immutable_picklable_tuple():
    """A Transmit is made per batch on the hot path: a tuple (no instance dict, no frozen dataclass's
    ``object.__setattr__`` per field), fields by name, immutable, picklable to a worker."""
    tx = Transmit(3, b"abc", 0, 2, 7, 1)
    assert (tx.dst_rank, tx.data, tx.segment_size, tx.tos, tx.t_ns, tx.step_ns) == (3, b"abc", 0, 2, 7, 1)
    assert Transmit(1, b"x", 0, 0).t_ns == -1
    assert isinstance(tx, tuple) and tuple(tx) == (3, b"abc", 0, 2, 7, 1)
    assert not hasattr(tx, "__dict__")
    with pytest.raises(AttributeError):
        tx.tos = 3  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(tx)) == tx
