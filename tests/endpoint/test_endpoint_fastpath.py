"""The endpoint's steady-state fast paths give exactly what the general paths give.

* sender: :meth:`SenderSide.middles` writes the same bytes as ``build_write_batch`` for a MIDDLE-only batch;
* end to end: a run with both fast paths on and one with both off (``EndpointConfig.batch_fast_paths``) put the
  same datagrams on the wire at the same times and end with identical records, also with GRO batches that
  lose a segment, arrive twice or carry CE marks, with PSNs wrapping at 2^24, and with flows cut into
  several messages (a small ``max_message_bytes``).
"""

from __future__ import annotations

import heapq
import random
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import assert_same_records, make_schedule, perturb, recv, send

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.wire import build_write_batch, max_batch_packets


@settings(max_examples=150, deadline=None)
@given(mtu=st.sampled_from([256, 512, 1024, 2048, 4096]), psn=st.integers(0, (1 << 24) - 1),
       k=st.integers(1, 64), ack=st.booleans(), dqpn=st.integers(0, (1 << 24) - 1))  # fmt: skip
def test_middles_are_the_planners_bytes(mtu, psn, k, ack, dqpn):
    k = min(k, max_batch_packets(mtu))
    ep = RankEndpoint(0, make_schedule(1, [], {}), EndpointConfig(mtu_bytes=mtu, cc="none"))
    fast = ep._tx.middles(dqpn, psn, k, ack)
    ref = build_write_batch(psn, k, dest_qp=dqpn, message_bytes=mtu * (k + 2), mtu_bytes=mtu, packet_index=1,
                            ack_req_last=ack)  # fmt: skip
    assert len(ref.sends) == 1 and ref.sends[0] == (0, len(fast), mtu + 16)
    assert bytes(fast) == bytes(ref.buffer)


def _run(sched, cfg, fast: bool, seed: int, world: int, defer: bool = False, spread_ns: int = 0):
    """Virtual-time run delivering whole GSO batches as GRO batches (latency 2 µs); per batch the seeded
    RNG may drop one segment, deliver it twice, or CE-mark it. Returns the wire log and the records.
    ``spread_ns``: socket-driver pacing (whole batches) with stamps spread at the QP rate."""
    rng = random.Random(seed)
    cfg = replace(cfg, batch_fast_paths=fast, defer_acks=defer)
    if spread_ns:
        cfg = replace(cfg, pace_full_batches=True, stamp_spread_ns=spread_ns)
    eps = [RankEndpoint(r, sched, cfg) for r in range(world)]
    for ep in eps:
        ep.start(0)
    log, inflight, seq, now = [], [], 0, 0
    while now < 10**9 and not all(ep.done for ep in eps):
        for r, ep in enumerate(eps):
            for tx in ep.poll_transmit(now):
                data = bytes(tx.data)
                log.append((now, r, tx.dst_rank, data, tx.segment_size, tx.tos))
                seg = tx.segment_size
                data, ecn, copies = perturb(rng, data, seg, tx.tos)
                for _ in range(copies):
                    seq += 1
                    heapq.heappush(inflight, (now + 2000, seq, tx.dst_rank, data, ecn, seg))
        cands = [t for ep in eps if (t := ep.next_timer_ns()) is not None]
        if inflight:
            cands.append(inflight[0][0])
        if not cands:
            break
        now = max(now, min(cands))
        while inflight and inflight[0][0] <= now:
            _, _, dst, data, ecn, seg = heapq.heappop(inflight)
            eps[dst].receive(data, ecn, now, seg if seg < len(data) else 0)
        for ep in eps:
            ep.handle_timer(now)
    return log, [(ep.records.to_arrays(), dict(ep.records.counters)) for ep in eps], all(ep.done for ep in eps)


@st.composite
def _scenario(draw):
    world = draw(st.integers(2, 3))
    n = draw(st.integers(1, 4))
    flows, ops = [], {r: [] for r in range(world)}
    for f in range(n):
        src = draw(st.integers(0, world - 1))
        dst = draw(st.integers(0, world - 2))
        dst = dst + 1 if dst >= src else dst
        size = draw(st.sampled_from([0, 1, 1024, 4097, 20_000, 65_536, 70_000, 150_001]))
        flows.append((src, dst, size, (draw(st.integers(0, 1)) * world + src) * world + dst))  # QP: one (src, dst)
        ops[src].append(send(f))
        ops[dst].append(recv(f))
    return world, flows, ops


@settings(max_examples=40, deadline=None)
@given(case=_scenario(), mtu=st.sampled_from([1024, 4096]), seed=st.integers(0, 10**6),
       psn=st.sampled_from([0, (1 << 24) - 40]), seg=st.sampled_from([1, 4, 16]),
       cc=st.sampled_from(["paper", "none"]), max_msg=st.sampled_from([(1 << 31) - 1, 20_000, 3000]))  # fmt: skip
def test_fast_and_general_paths_agree_end_to_end(case, mtu, seed, psn, seg, cc, max_msg):
    world, flows, ops = case
    sched = make_schedule(world, flows, ops)
    # cc none at 100 Gbit/s: constant-rate pacers hold several batches, so the multi-batch visit is taken
    cfg = EndpointConfig(mtu_bytes=mtu, cc=cc, line_rate_bps=25e9 if cc == "paper" else 100e9, max_segments=seg,
                         initial_psn=psn, retransmit_timeout_ns=200_000, max_message_bytes=max_msg)  # fmt: skip
    log_f, rec_f, done_f = _run(sched, cfg, True, seed, world)
    log_g, rec_g, done_g = _run(sched, cfg, False, seed, world)
    assert done_f and done_g
    assert len(log_f) == len(log_g)
    assert log_f == log_g
    assert_same_records(rec_f, rec_g)


def test_fast_paths_are_taken():
    """The comparison above is not vacuous: a long message goes through both fast paths."""
    sched = make_schedule(2, [(0, 1, 1 << 20, 0)], {0: [send(0)], 1: [recv(0)]})
    cfg = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9)
    calls = {"tx": 0, "rx": 0, "multi": 0}
    log, recs, done = _run(sched, cfg, True, 1, 2)
    assert done
    eps = [RankEndpoint(r, sched, cfg) for r in range(2)]
    mid = eps[0]._tx.middles
    on_batch = eps[1]._rx.on_batch

    def count_tx(*a):
        calls["tx"] += 1
        return mid(*a)

    def count_rx(*a):
        n = on_batch(*a)
        calls["rx"] += n > 0
        return n

    eps[0]._tx.middles = count_tx
    eps[1]._rx.on_batch = count_rx
    for ep in eps:
        ep.start(0)
    now = 0
    while not all(ep.done for ep in eps) and now < 10**9:
        now += 1000 if now < 50_000 else 20_000  # later: 20 µs between polls, tokens for several batches
        for r in (0, 1):
            txs = eps[r].poll_transmit(now)
            calls["multi"] += r == 0 and len(txs) > 1
            for tx in txs:
                eps[tx.dst_rank].receive(tx.data, 2, now, tx.segment_size)
            eps[r].handle_timer(now)
    assert all(ep.done for ep in eps)
    assert calls["tx"] > 10 and calls["rx"] > 10 and calls["multi"] > 0
    assert eps[1].records.counters["bytes_received"] == 1 << 20


@settings(max_examples=25, deadline=None)
@given(case=_scenario(), seed=st.integers(0, 10**6), cc=st.sampled_from(["paper", "none"]),
       max_msg=st.sampled_from([(1 << 31) - 1, 5000]))
def test_deferred_acks_deliver_the_same_bytes(case, seed, cc, max_msg):
    """``defer_acks`` (socket drivers: one ACK per QP per poll_transmit) changes only ACK timing."""
    world, flows, ops = case
    sched = make_schedule(world, flows, ops)
    cfg = EndpointConfig(mtu_bytes=1024, cc=cc, line_rate_bps=100e9, max_segments=8, retransmit_timeout_ns=200_000,
                         max_message_bytes=max_msg)  # fmt: skip
    _, rec_d, done_d = _run(sched, cfg, True, seed, world, defer=True)
    _, rec_n, done_n = _run(sched, cfg, True, seed, world, defer=False)
    assert done_d and done_n
    for (arr_d, cnt_d), (_, cnt_n) in zip(rec_d, rec_n, strict=True):
        assert cnt_d["bytes_received"] == cnt_n["bytes_received"]
        assert cnt_d["bytes_sent"] == cnt_n["bytes_sent"]
        assert np.all(arr_d["end_ns"] >= 0)
    expected = sum(size for _, _, size, _ in flows)
    assert sum(c["bytes_received"] for _, c in rec_d) == expected


def _batches_of_one_flow(full: bool, size: int = 1 << 20, step_ns: int = 500):
    """Sender alone at 25 Gbit/s polled every ``step_ns`` (every packet ACKed at once): packets per batch
    and the virtual time of the last send."""
    sched = make_schedule(2, [(0, 1, size, 0)], {0: [send(0)], 1: [recv(0)]})
    cfg = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=25e9)
    a, b = RankEndpoint(0, sched, replace(cfg, pace_full_batches=full)), RankEndpoint(1, sched, cfg)
    a.start(0)
    b.start(0)
    sizes, now, last = [], 0, 0
    while not a.done and now < 10**9:
        now += step_ns
        for tx in a.poll_transmit(now):
            seg = tx.segment_size or len(tx.data)
            sizes.append(-(-len(tx.data) // seg))
            last = now
            b.receive(tx.data, 2, now, tx.segment_size)
        for tx in b.poll_transmit(now):
            a.receive(tx.data, 0, now, tx.segment_size)
    assert a.done and b.records.counters["bytes_received"] == size
    return sizes, last


def test_full_batch_pacing_sends_whole_batches_at_the_same_rate():
    sizes, last = _batches_of_one_flow(True)
    assert sizes[0] == 1  # FIRST alone (longer than a MIDDLE), then what the initial full bucket still holds
    assert all(n == 15 for n in sizes[2:-1]) and len(sizes) <= 20
    small, last_small = _batches_of_one_flow(False)
    assert len(small) > 2 * len(sizes)  # per-packet readiness: a 500 ns poll sends 1-2 packets at a time
    # the rate is the same: at most one batch time (15 × 4.2 kB at 25 Gbit/s ≈ 20 µs) later at the end
    assert last <= last_small + 21_000


@settings(max_examples=60, deadline=None)
@given(mtu=st.sampled_from([256, 4096]), psn=st.integers(0, (1 << 24) - 1), k=st.integers(1, 15),
       t_ns=st.integers(0, 2**62))  # fmt: skip
def test_stamped_middles_are_the_planners_stamped_bytes(mtu, psn, k, t_ns):
    k = min(k, max_batch_packets(mtu))
    ep = RankEndpoint(0, make_schedule(1, [], {}), EndpointConfig(mtu_bytes=mtu, cc="none"))
    fast = ep._tx.middles(7, psn, k, True, t_ns)
    ref = build_write_batch(psn, k, dest_qp=7, message_bytes=mtu * (k + 2), mtu_bytes=mtu, packet_index=1,
                            stamp_ns=t_ns)
    assert bytes(fast) == bytes(ref.buffer)


@settings(max_examples=25, deadline=None)
@given(case=_scenario(), seed=st.integers(0, 10**6), seg=st.sampled_from([4, 16]),
       cc=st.sampled_from(["paper", "none"]), spread=st.sampled_from([1_000, 5_000, 50_000]))  # fmt: skip
def test_fast_and_general_paths_agree_with_spread_stamps(case, seed, seg, cc, spread):
    """Stamps spread at the QP rate and batches capped by the spread: both paths still write the same bytes."""
    world, flows, ops = case
    sched = make_schedule(world, flows, ops)
    cfg = EndpointConfig(mtu_bytes=1024, cc=cc, line_rate_bps=25e9 if cc == "paper" else 100e9, max_segments=seg,
                         retransmit_timeout_ns=200_000)  # fmt: skip
    log_f, rec_f, done_f = _run(sched, cfg, True, seed, world, spread_ns=spread)
    log_g, rec_g, done_g = _run(sched, cfg, False, seed, world, spread_ns=spread)
    assert done_f and done_g
    assert log_f == log_g
    assert_same_records(rec_f, rec_g)


@settings(max_examples=60, deadline=None)
@given(mtu=st.sampled_from([256, 4096]), psn=st.integers(0, (1 << 24) - 1), k=st.integers(1, 15),
       t_ns=st.integers(0, 2**60), step=st.integers(0, 10**6))  # fmt: skip
def test_spread_stamped_middles_are_the_planners_bytes(mtu, psn, k, t_ns, step):
    k = min(k, max_batch_packets(mtu))
    ep = RankEndpoint(0, make_schedule(1, [], {}), EndpointConfig(mtu_bytes=mtu, cc="none"))
    fast = ep._tx.middles(7, psn, k, True, t_ns, step)
    ref = build_write_batch(psn, k, dest_qp=7, message_bytes=mtu * (k + 2), mtu_bytes=mtu, packet_index=1,
                            stamp_ns=t_ns, stamp_step_ns=step)
    assert bytes(fast) == bytes(ref.buffer)


def _first_poll(size: int, fast: bool) -> tuple[RankEndpoint, list]:
    """One flow of ``size`` bytes from rank 0 to rank 1 (cc none, 100 Gbit/s, fast paths on or off): the
    receiver and the sender's first transmits (10 µs of tokens)."""
    sched = make_schedule(2, [(0, 1, size, 0)], {0: [send(0)], 1: [recv(0)]})
    cfg = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, batch_fast_paths=fast)
    a, b = RankEndpoint(0, sched, cfg), RankEndpoint(1, sched, cfg)
    a.start(0)
    b.start(0)
    return b, a.poll_transmit(10_000)


def test_a_gro_run_of_duplicates_is_dropped_as_one_block_with_one_re_ack():
    """A go-back-N sender re-sends what the receiver holds: a GRO batch wholly behind ePSN is counted as
    duplicates in one step (``on_batch`` consumes it) and answered by one re-ACK, as packet by packet."""
    results = []
    for fast in (True, False):
        b, txs = _first_poll(1 << 20, fast)
        middles = txs[2]  # FIRST alone, then its batch, then a batch of MIDDLE packets only
        assert middles.segment_size and len(middles.data) == 15 * middles.segment_size
        for tx in txs:
            b.receive(tx.data, 2, 20_000, tx.segment_size)
        b.poll_transmit(20_000)
        before = dict(b.records.counters)
        consumed = b._rx.on_batch(memoryview(middles.data), middles.segment_size, False, 30_000) if fast else 0
        if not consumed:
            b.receive(middles.data, 2, 30_000, middles.segment_size)
        acks = b.poll_transmit(30_000)
        k = len(middles.data) // middles.segment_size
        after = dict(b.records.counters)
        results.append((consumed, after.get("dup_packets", 0) - before.get("dup_packets", 0), len(acks),
                        [bytes(t.data) for t in acks]))
    (consumed, dups, n_acks, acks_f), (_, dups_g, n_acks_g, acks_g) = results
    assert consumed == len(middles.data)
    assert dups == dups_g == k and n_acks == n_acks_g == 1 and acks_f == acks_g


def test_a_gro_batch_ending_with_a_full_size_last_takes_its_middle_run_as_one_block():
    """A message whose length is a multiple of the MTU ends with a full-size LAST in the same GRO batch as
    the MIDDLE packets before it: those are accepted as one block (``on_batch`` consumes all rows but the
    LAST), the LAST packet by packet, with the same records and ACKs as packet by packet throughout."""
    size = 30 * 4096  # FIRST + 14 MIDDLE, then 14 MIDDLE + a full-size LAST
    results = []
    for fast in (True, False):
        b, txs = _first_poll(size, fast)
        last = txs[-1]
        seg = last.segment_size
        assert seg and len(last.data) == 15 * seg and last.data[-seg] == 0x08  # RC RDMA WRITE LAST, full size
        for tx in txs[:-1]:
            b.receive(tx.data, 2, 20_000, tx.segment_size)
        consumed = b._rx.on_batch(memoryview(last.data), seg, False, 30_000) if fast else 0
        b.receive(memoryview(last.data)[consumed:], 2, 30_000, seg)
        acks = b.poll_transmit(30_000)
        results.append((consumed, b.done, dict(b.records.counters), [bytes(t.data) for t in acks]))
    (consumed, done, counters, acks), (_, done_g, counters_g, acks_g) = results
    assert consumed == 14 * seg
    assert done and done_g and counters == counters_g and acks == acks_g
