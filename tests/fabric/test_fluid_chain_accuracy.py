"""A queue pair's next message on the fluid fabric starts with what its pacer earned since the last one
(emulator.fabric.fluid_nic): sim_incast_7to1's pattern — seven ranks each sending 512 KiB messages back to
back to one sink, the next when the last one's ACK came — against the packet sim."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.sim import make_schedule, recv, send

from emulator.drivers.fluid import fluid_model, run_fluid
from emulator.drivers.sim import run_sim
from emulator.drivers.sim_types import SimConfig
from emulator.endpoint import EndpointConfig
from emulator.fabric.fluid import FluidConfig
from emulator.fabric.fluid_nic import sent_last, start_credit, start_credit_one
from emulator.pacing.red import RedParams

N = 7
CFG = SimConfig(red=RedParams(kmin_bytes=50_000, kmax_bytes=200_000, pmax=0.2), buffer_bytes=1 << 20)
ECFG = EndpointConfig(cc="connectx")


def _chains(messages: int, size: int):
    """Each of ranks 0..N-1 sends ``messages`` flows to rank N on its one queue pair, each after the last."""
    flows, ops = [], {}
    for i in range(N):
        ops[i] = []
        for m in range(messages):
            ops[i].append(send(len(flows), deps=(m - 1,)) if m else send(len(flows)))
            flows.append((i, N, size, i))
    ops[N] = [recv(f) for f in range(len(flows))]
    return make_schedule(N + 1, flows, ops)


def test_back_to_back_messages_keep_the_port_as_busy_as_on_the_packet_sim() -> None:
    """7 × 8 messages of 512 KiB into one 25 Gb/s port (sim_incast_7to1's RED, buffer, ConnectX DCQCN):
    packet sim 10,878 µs (seed 2; 10,878-11,116 over seeds 1-3). A queue pair restarting after its last
    message holds in its pacer only what it earned since that message's last byte (one queueing delay and an
    ACK at its cut rate); when every message started with a full batch at line rate, each congestion episode
    of the fluid peaked higher (550 vs 380 kB), cut the rates to 0.8-1.1 Gb/s instead of 1.4-1.9 and left the
    port idle after it: 11,828 µs (+8.7 %; utilisation 0.83 vs 0.89 on the profile), and the ranks' start
    skew grew instance by instance. Now 10,646 µs (-2.1 %)."""
    s = _chains(8, 512 << 10)
    packet = float(run_sim(s, CFG, ECFG, seed=2).records[N].end_ns.max())
    fluid = float(run_fluid(s, CFG, ECFG, seed=2).records[N].end_ns.max())
    assert fluid == pytest.approx(packet, rel=0.04)


def test_a_restarted_queue_pair_starts_with_what_its_pacer_earned() -> None:
    """On the fabric itself: a queue pair's first flow starts with a full batch, the next one posted when the
    first has sent its last byte with none, and one posted later with the rate × the idle time."""
    s = _chains(3, 64 << 10)
    fab = fluid_model(s, CFG, ECFG, FluidConfig())
    assert fluid_model(_chains(1, 64 << 10), CFG, ECFG, FluidConfig()).qp_idle_ns is None  # no queue pair restarts
    batch = fab.nic_batch
    flow0, flow1, flow2 = (int(np.flatnonzero(s.flow_src == 0)[k]) for k in range(3))
    fab.start(flow0, float(s.flow_size_bytes[flow0]), 0.0)
    assert fab.credit[flow0] == pytest.approx(batch)
    t, done = 0.0, []
    while not done:
        t, sent, _ = fab.advance(t + 1_000.0, 1e9)
        done = [tf for f, tf in sent if f == flow0]
    fab.start(flow1, float(s.flow_size_bytes[flow1]), done[0])
    assert fab.credit[flow1] == pytest.approx(0.0, abs=1.0)
    gap_ns = 5_000.0
    fab.qp_idle_ns[fab.qp[flow2]] = t - gap_ns  # as if the queue pair had been idle for gap_ns
    fab.start(flow2, float(s.flow_size_bytes[flow2]), t)
    assert fab.credit[flow2] == pytest.approx(min(batch, fab.cc.rc[fab.qp[flow2]] * gap_ns / 8e9))


@settings(max_examples=80, deadline=None)
@given(batch=st.floats(1.0, 1e6), wire=st.floats(1.0, 1e7), rate=st.floats(1e6, 4e11),
       idle=st.one_of(st.none(), st.just(-np.inf), st.floats(-1e9, 1e9)), now=st.floats(0.0, 1e9))  # fmt: skip
def test_start_credit_is_what_the_bucket_holds(batch, wire, rate, idle, now) -> None:
    """At most a batch and the flow's bytes; a full bucket (a batch or the flow) on a queue pair never used
    (or in a run without restarts: no clock); rate × idle time otherwise; never negative."""
    got = float(start_credit(batch, wire, np.array([rate]), None if idle is None else np.array([idle]), 0, now))
    cap = min(batch, wire)
    assert 0.0 <= got <= cap
    if idle is None or idle == -np.inf:
        assert got == cap
    else:
        assert got == pytest.approx(min(cap, rate * max(now - idle, 0.0) / 8e9), rel=1e-12, abs=1e-12)


def test_a_flow_the_bucket_holds_whole_leaves_the_rest_for_the_next() -> None:
    """The packet sim's pacer is a token bucket of one batch (15 packets of 4 KiB): a message of 4 packets goes
    out of a full bucket at line rate and leaves 11 packets' tokens, so the next message, posted when the first
    has sent its last byte, goes at line rate too (a ring step of 8 packets after the last: study_mixed's ring
    queue pairs send 77-95 % of their steps as one burst on the packet sim). The fluid emptied the bucket at
    every flow's last byte: the next message started at the controller's rate (credit 0)."""
    s = _chains(3, 16 << 10)
    fab = fluid_model(s, CFG, ECFG, FluidConfig())
    batch = fab.nic_batch
    flow0, flow1, flow2 = (int(np.flatnonzero(s.flow_src == 0)[k]) for k in range(3))
    wire = float(s.flow_size_bytes[flow0]) + 4 * 66
    fab.start(flow0, wire, 0.0)
    assert fab.credit[flow0] == pytest.approx(wire)
    t, done = 0.0, []
    while not done:
        t, sent, _ = fab.advance(t + 1_000.0, 1e9)
        done = [tf for f, tf in sent if f == flow0]
    fab.start(flow1, wire, done[0])
    assert fab.credit[flow1] == pytest.approx(wire)  # 11 packets' tokens left and more earned since
    fab.start(flow2, wire, done[0])  # at once behind it: what is left of the bucket
    rc = float(fab.cc.rc[fab.qp[flow0]])
    assert fab.credit[flow2] == pytest.approx(min(wire, batch - 2 * wire + rc * done[0] / 8e9), rel=1e-9)


@settings(max_examples=80, deadline=None)
@given(batch=st.floats(1e3, 1e5), wire=st.lists(st.floats(1.0, 2e5), min_size=1, max_size=4),
       rate=st.floats(1e6, 4e11), gap=st.floats(0.0, 1e6))  # fmt: skip
def test_flows_charged_to_the_bucket_in_order(batch, wire, rate, gap) -> None:
    """Flows of one queue pair started at one instant take a full bucket in order, each at most what is left;
    the first one longer than what is left empties it (+inf: paced) and the later ones get nothing, until its
    last byte; from there the bucket fills at the rate again."""
    idle = np.array([-np.inf])
    got = np.atleast_1d(start_credit(batch, np.array(wire), np.array([rate]), idle, np.zeros(len(wire), np.int64), 0.0))
    left, paced = batch, False
    for w, g in zip(wire, got, strict=True):
        assert g == pytest.approx(0.0 if paced else min(w, left), rel=1e-9, abs=1e-6)
        paced = paced or w > left
        left = max(left - w, 0.0)
    if paced:
        assert idle[0] == np.inf
        sent_last(idle, np.array([0]), 5.0)
        assert idle[0] == 5.0
        assert float(start_credit(batch, 1e12, np.array([rate]), idle, 0, 5.0 + gap)) == pytest.approx(
            min(batch, rate * gap / 8e9), rel=1e-9, abs=1e-6)


B = 15 * 4200.0  # one batch of wire bytes
RC = np.array([100e9, 100e9])


def test_the_bucket_fills_from_the_last_flow_of_its_queue_pair_still_sending() -> None:
    """Paced flows A and B of one queue pair overlap: A's last byte leaves the bucket empty (B still sends),
    B's starts it filling; a flow posted at B's last byte gets nothing. A small flow the bucket held whole
    ending while a paced one sends does not start it either."""
    idle, sending = np.array([-np.inf, -np.inf]), np.zeros(2, np.int64)
    assert start_credit_one(B, 1e6, RC, idle, 0, 0.0, sending) == B  # A: a full batch, then paced
    assert start_credit_one(B, 1e6, RC, idle, 0, 10_000.0, sending) == 0.0  # B behind it
    sent_last(idle, np.array([0]), 80_000.0, sending)  # A done, B sending
    assert idle[0] == np.inf and sending[0] == 1
    sent_last(idle, np.array([0]), 160_000.0, sending)
    assert idle[0] == 160_000.0 and sending[0] == 0
    assert start_credit_one(B, 1e6, RC, idle, 0, 160_000.0, sending) == 0.0
    idle, sending = np.array([-np.inf, -np.inf]), np.zeros(2, np.int64)
    assert start_credit_one(B, 8 * 4200.0, RC, idle, 1, 0.0, sending) == 8 * 4200.0  # held whole
    start_credit_one(B, 1e6, RC, idle, 1, 100.0, sending)  # paced: the rest, then empty
    sent_last(idle, np.array([1]), 3_000.0, sending)  # the small one done
    assert idle[1] == np.inf
    sent_last(idle, np.array([1]), 200_000.0, sending)
    assert start_credit_one(B, 1e6, RC, idle, 1, 200_000.0, sending) == 0.0


def test_flows_of_one_queue_pair_ending_together_start_the_bucket_at_the_later_end() -> None:
    idle, sending = np.array([np.inf, -np.inf]), np.array([2, 0])
    sent_last(idle, np.array([0, 0]), np.array([50_000.0, 90_000.0]), sending)
    assert idle[0] == 90_000.0 and sending[0] == 0


def test_a_queue_pair_at_rate_zero_starts_with_a_full_bucket_in_both_forms() -> None:
    """A never-used queue pair holds a full batch whatever its rate (no NaN from 0 × inf), in the scalar and the
    array form alike."""
    rc0 = np.zeros(2)
    one = start_credit_one(B, 1e6, rc0, np.array([-np.inf, -np.inf]), 0, 1000.0)
    with np.errstate(all="raise"):
        both = start_credit(B, np.array([1e6, 1e6]), rc0, np.array([-np.inf, -np.inf]), np.array([0, 1]), 1000.0)
    assert one == B and both.tolist() == [B, B]


def test_the_fabric_counts_the_flows_its_queue_pairs_are_sending() -> None:
    """The fabric keeps the counts :func:`sent_last` needs: two messages of one queue pair started together
    count two."""
    s = _chains(2, 64 << 10)
    fab = fluid_model(s, CFG, ECFG, FluidConfig())
    f0, f1 = (int(np.flatnonzero(s.flow_src == 0)[k]) for k in range(2))
    fab.start_many(np.array([f0, f1]), s.flow_size_bytes[[f0, f1]].astype(float), 0.0)
    assert fab.qp_sending[fab.qp[f0]] == 2
