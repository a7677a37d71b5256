"""Property: whatever datagrams the wire drops, duplicates or marks, every flow is delivered exactly once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import Wire, make_schedule, recv, segments, send

from emulator.endpoint import EndpointConfig, RankEndpoint

MTU = 1024


@st.composite
def scenario(draw):
    world = draw(st.integers(2, 3))
    n_flows = draw(st.integers(1, 6))
    flows, ops = [], {r: [] for r in range(world)}
    qp_of: dict[tuple[int, int], int] = {}
    for f in range(n_flows):
        src = draw(st.integers(0, world - 1))
        dst = draw(st.integers(0, world - 2))
        dst = dst + 1 if dst >= src else dst
        size = draw(st.sampled_from([0, 1, 100, MTU, MTU + 1, 5 * MTU, 17 * MTU + 3]))
        qp = qp_of.setdefault((src, dst), len(qp_of))
        flows.append((src, dst, size, qp))
        ops[src].append(send(f))
        ops[dst].append(recv(f))
    drops = draw(st.sets(st.integers(0, 150), max_size=12))
    dups = draw(st.sets(st.integers(0, 150), max_size=6))
    ce = draw(st.sets(st.integers(0, 150), max_size=20))
    segs = draw(st.sampled_from([1, 4, 16]))
    return make_schedule(world, flows, ops), drops, dups, ce, segs


@settings(max_examples=60, deadline=None)
@given(scenario())
def test_every_flow_delivered_exactly_once(case):
    s, drops, dups, ce, segs = case
    cfg = EndpointConfig(cc="paper", mtu_bytes=MTU, max_segments=segs, retransmit_timeout_ns=50_000,
                         ack_every_packets=4)  # fmt: skip
    eps = [RankEndpoint(r, s, cfg) for r in range(s.world_size)]
    wire = Wire(eps)
    n = [0]

    def pump(r, now):
        """Like Wire.pump, with the i-th datagram on the wire dropped / duplicated / CE-marked as drawn."""
        for tx in eps[r].poll_transmit(now):
            for pkt in segments(tx):
                i = n[0]
                n[0] += 1
                wire.log.append((now, r, tx.dst_rank, pkt))
                if i in drops:
                    continue
                ecn = 3 if i in ce else 2
                wire.seq += 1
                wire.inflight.append((now + wire.latency, wire.seq, tx.dst_rank, pkt, ecn))
                if i in dups:  # a late copy, after whatever follows it
                    wire.seq += 1
                    wire.inflight.append((now + 5 * wire.latency, wire.seq, tx.dst_rank, pkt, ecn))

    wire.pump = pump
    wire.run(until_ns=10**10)
    assert all(ep.done for ep in eps)
    for r, ep in enumerate(eps):
        c = ep.records.counters
        assert c["bytes_received"] == int(s.flow_size_bytes[s.flow_dst == r].sum())
        assert c["bytes_sent"] == int(s.flow_size_bytes[s.flow_src == r].sum())
    sent = sum(ep.records.counters["packets_sent"] for ep in eps)
    needed = sum(max(1, -(-int(x) // MTU)) for x in s.flow_size_bytes)
    retx = sum(ep.records.counters["retransmits"] for ep in eps)
    assert sent == needed + retx
