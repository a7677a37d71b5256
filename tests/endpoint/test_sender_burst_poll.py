"""A socket driver's constant-rate sender polls by :meth:`~emulator.endpoint.burst.BurstVisit.poll_bursts`:
the same datagrams, byte for byte and in order, and the same records as the general ``SenderSide.poll``,
in virtual time (sans-IO), with fewer interpreter calls per GSO batch."""

from __future__ import annotations

import heapq
import random
import sys
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import (
    assert_same_run,
    make_schedule,
    poll_endpoints,
    recv,
    run_endpoints,
    send,
    socket_mode_config,
)
from support.endpoint import flows_2_to_3_ranks as _flows

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.events import expand_runs
from emulator.wire.kernels import warm


@settings(max_examples=40, deadline=None)
@given(case=_flows(), seed=st.integers(0, 10**6), qps=st.sampled_from([1, 3]),
       psn=st.sampled_from([0, (1 << 24) - 50]), cc=st.sampled_from(["none", "fixed"]),
       poll=st.sampled_from([7_000, 40_000, 150_000]), ack_every=st.sampled_from([1 << 20, 40, 7]),
       window=st.sampled_from([0, 20_000, 200_000]), rate=st.sampled_from([25e9, 100e9]),
       burst=st.sampled_from([0, 8]))  # fmt: skip
def test_the_burst_poll_puts_the_general_polls_bytes_on_the_wire_and_keeps_its_records(case, seed, qps, psn, cc, poll,
                                                                                      ack_every, window, rate, burst):
    """Lossy wire (segments dropped, duplicated, CE-marked: go-back-N, timeouts), PSNs at the wrap, windows, one
    or three QPs per peer, cc none (line rate) and fixed (below it: deficit pacers), polls finer and coarser
    than a batch time: the wire and every rank's records and counters are the general path's."""
    world, flows, ops = case
    sched = make_schedule(world, flows, ops)
    fixed = (("rate_bps", 7e9),) if cc == "fixed" else ()  # below the line rate: deficit pacers, gates
    cfg = socket_mode_config(cc=cc, cc_overrides=fixed, qps_per_peer=qps, initial_psn=psn, retransmit_timeout_ns=400_000, ack_every_packets=ack_every,
               max_outstanding_bytes=window, line_rate_bps=rate, line_rate_burst_batches=burst)
    got = []
    for general in (True, False):
        eps = poll_endpoints(sched, cfg, world, general)
        runs: list[int] = []
        got.append((*run_endpoints(eps, random.Random(seed), poll, runs), runs))
    (wire_g, rec_g, done_g, _), (wire_b, rec_b, done_b, _) = got
    assert done_g and done_b
    assert_same_run(wire_b, rec_b, wire_g, rec_g, flows)


def _alltoall(world: int, size: int):
    flows, ops = [], {r: [] for r in range(world)}
    for s in range(world):
        for d in range(world):
            if s != d:
                ops[s].append(send(len(flows)))
                ops[d].append(recv(len(flows)))
                flows.append((s, d, size, s * world + d))
    return flows, make_schedule(world, flows, ops)


def _drive(eps, poll_ns: int, count: bool) -> tuple[list, int, int]:
    """Every rank polled every ``poll_ns``, datagrams due 2 µs later, no loss: the wire, the interpreter's
    calls (Python and C functions) inside ``poll_transmit`` when ``count``, and the GSO batches sent."""
    calls = [0]

    def hook(_frame, event, _arg):
        if event == "call" or event == "c_call":
            calls[0] += 1

    for ep in eps:
        ep.start(0)
    wire: list = []
    inflight: list = []
    now = seq = 0
    while now < 10**9 and not all(ep.done for ep in eps):
        for ep in eps:
            if count:
                sys.setprofile(hook)
            txs = ep.poll_transmit(now)
            sys.setprofile(None)
            for tx in expand_runs(txs):
                data = bytes(tx.data)
                seq += 1
                wire.append((now, tx.dst_rank, data, tx.segment_size, tx.t_ns))
                heapq.heappush(inflight, (now + 2000, seq, tx.dst_rank, data, tx.segment_size))
        now += poll_ns
        while inflight and inflight[0][0] <= now:
            _, _, dst, data, seg = heapq.heappop(inflight)
            eps[dst].receive(memoryview(bytearray(data)), 0, now, seg if seg < len(data) else 0)
        for ep in eps:
            ep.handle_timer(now)
    assert all(ep.done for ep in eps)
    batches = sum(ep.records.counters["bytes_sent"] for ep in eps) // 61_440
    return wire, calls[0], batches


def test_the_burst_poll_makes_fewer_calls_per_batch_for_the_same_wire(no_gc):
    """The collectives bench's All-to-All in small (4 ranks, 1 MiB a pair, the direct driver's window and ACK
    spacing): the burst poll's wire is the general poll's, for at most 85 % of its interpreter calls per GSO
    batch inside ``poll_transmit`` (measured: 73 % at this poll interval)."""
    warm()
    flows, sched = _alltoall(4, 1 << 20)
    share = (16 << 20) // 4 // 3
    cfg = replace(socket_mode_config(max_outstanding_bytes=share), ack_every_packets=-(-share // 4096) // 2)
    out = {}
    for general in (True, False):
        _drive(poll_endpoints(sched, cfg, 4, general), 40_000, False)  # first use (caches, numba dispatch) uncounted
        out[general] = _drive(poll_endpoints(sched, cfg, 4, general), 40_000, True)
    (wire_g, calls_g, n_g), (wire_b, calls_b, n_b) = out[True], out[False]
    assert wire_b == wire_g and n_b == n_g > 100
    assert calls_b <= 0.85 * calls_g, (calls_b / n_b, calls_g / n_g)


def test_only_a_socket_drivers_constant_rate_sender_polls_by_bursts():
    """DCQCN, a stamp spread (loopback), per-batch transmits, computed ICRCs and the sim's per-packet pacing
    keep the general poll."""
    sched = make_schedule(2, [(0, 1, 1 << 20, 0)], {0: [send(0)], 1: [recv(0)]})

    def bursts(cfg: EndpointConfig) -> bool:
        return RankEndpoint(0, sched, cfg)._tx.burst_polls()

    assert bursts(socket_mode_config()) and bursts(socket_mode_config(cc="fixed", cc_overrides=(("rate_bps", 7e9),)))
    assert not bursts(socket_mode_config(cc="connectx"))
    assert not bursts(socket_mode_config(stamp_spread_ns=5_000))
    assert not bursts(socket_mode_config(run_transmits=False))
    assert not bursts(socket_mode_config(icrc="compute", rank_addresses=("10.0.0.1", "10.0.0.2")))
    assert not bursts(EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=25e9))
