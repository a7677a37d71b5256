"""Packets are attributed to the flow whose message they belong to, on one time base, whatever the wire does.

The regression behind these tests (loopback/direct runs): a worker process woke up milliseconds after the
run's common "go"; its ranks took their own start as time origin, so their records were shifted against
every other rank's and a receive appeared to complete before its send started ("inconsistent times");
meanwhile the senders' retransmit timers had fired and whole messages were resent (go-back-N), so the
duplicates arrived at a receiver that had already completed the message. Drivers now pass the run's
origin to ``RankEndpoint.start``; the receiver must also never take a packet that does not fit the
message state (MIDDLE/LAST with no message open, FIRST while one is) as data of another flow.
"""

from __future__ import annotations

import heapq
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import HeldSpy, make_schedule, recv, segments, send

from emulator.endpoint import EndpointConfig, RankEndpoint
from emulator.endpoint.qpn import receiver_qpn
from emulator.errors import ConfigError
from emulator.schedule.model import OP_RECV, OP_SEND
from emulator.wire import build_write_batch, parse_aeth, parse_header

MTU = 1024
_NAK_PSN = 0x60


class LateStartNet:
    """A minimal driver: ranks start at their own times on one common origin (0); datagrams for a rank
    that has not started wait in its "socket"; per-datagram extra latency reorders; consecutive
    equal-size datagrams arriving together for one rank are handed over as one GRO batch."""

    def __init__(self, eps, starts, latency_ns=1000, jitter=None, drops=(), dups=(), ce=(), gro=16):
        self.eps = eps
        self.starts = starts
        self.latency = latency_ns
        self.jitter = jitter or (lambda i: 0)
        self.drops, self.dups, self.ce = set(drops), set(dups), set(ce)
        self.gro = gro
        self.inflight: list[tuple[int, int, int, bytes, int]] = []
        self.backlog: list[list[tuple[bytes, int]]] = [[] for _ in eps]
        self.n = 0
        self.seq = 0
        self.first_send: dict[int, int] = {}
        self.notified: list[tuple[int, int, int]] = []  # (rank, RECV op, t)
        for r, ep in enumerate(eps):
            HeldSpy(ep, r, self.notified)  # sees every event of the rank

    def _put(self, t, dst, pkt, ecn):
        self.seq += 1
        heapq.heappush(self.inflight, (t, self.seq, dst, pkt, ecn))

    def pump(self, r, now):
        for tx in self.eps[r].poll_transmit(now):
            for pkt in segments(tx):
                i = self.n
                self.n += 1
                if i in self.drops:
                    continue
                ecn = 3 if i in self.ce else 2
                t = now + self.latency + self.jitter(i)
                self._put(t, tx.dst_rank, pkt, ecn)
                if i in self.dups:
                    self._put(t + 3 * self.latency + self.jitter(i + 1), tx.dst_rank, pkt, ecn)

    def deliver(self, r, items, now):
        """Hand ``items`` [(pkt, ecn)] to rank ``r``, coalescing runs of equal-size datagrams (GRO)."""
        ep = self.eps[r]
        i = 0
        while i < len(items):
            pkt, ecn = items[i]
            j = i + 1
            while (j < len(items) and j - i < self.gro and len(items[j][0]) == len(pkt)
                   and items[j][1] == ecn):  # fmt: skip
                j += 1
            if j - i > 1:
                ep.receive(b"".join(p for p, _ in items[i:j]), ecn, now, segment_size=len(pkt))
            else:
                ep.receive(pkt, ecn, now)
            i = j

    def run(self, until_ns=10**10):
        eps, starts = self.eps, self.starts
        now = 0
        while now <= until_ns and not all(ep.done for ep in eps):
            for r, ep in enumerate(eps):
                if ep.started:
                    self.pump(r, now)
            cands = [t for ep in eps if ep.started and (t := ep.next_timer_ns()) is not None]
            cands += [s for r, s in enumerate(starts) if not eps[r].started]
            if self.inflight:
                cands.append(self.inflight[0][0])
            if not cands:
                break
            now = max(now, min(cands))
            for r, ep in enumerate(eps):
                if not ep.started and starts[r] <= now:
                    ep.start(now, t0_ns=0)
                    self.deliver(r, self.backlog[r], now)
                    self.backlog[r] = []
            due: dict[int, list[tuple[bytes, int]]] = {}
            while self.inflight and self.inflight[0][0] <= now:
                _, _, dst, pkt, ecn = heapq.heappop(self.inflight)
                (due.setdefault(dst, []) if eps[dst].started else self.backlog[dst]).append((pkt, ecn))
            for r, items in due.items():
                self.deliver(r, items, now)
            for ep in eps:
                if ep.started:
                    ep.handle_timer(now)
        return now


def _flow_ops(s, kind):
    """flow -> (rank, local op) of its SEND or RECV."""
    out = {}
    for r in range(s.world_size):
        a, b = int(s.rank_op_ptr[r]), int(s.rank_op_ptr[r + 1])
        for i in range(b - a):
            if int(s.op_kind[a + i]) == kind:
                out[int(s.op_flow[a + i])] = (r, i)
    return out


def check_attribution(s, eps, net, cfg):
    """Every flow complete, its packets accepted exactly once by its own RECV op, on one time base."""
    assert all(ep.done for ep in eps)
    for ep in eps:
        ep.recorder.consume(ep.events())
    sends, recvs = _flow_ops(s, OP_SEND), _flow_ops(s, OP_RECV)
    counts: dict[tuple[int, int], int] = {}
    for r, op, _ in net.notified:
        counts[(r, op)] = counts.get((r, op), 0) + 1
    for f in range(s.n_flows):
        size = int(s.flow_size_bytes[f])
        sr, so = sends[f]
        rr, ro = recvs[f]
        srec, rrec = eps[sr].records, eps[rr].records
        assert counts.get((rr, ro)) == 1, f"flow {f}: receive notified {counts.get((rr, ro), 0)} times"
        assert rrec.packets[ro] == max(1, -(-size // cfg.mtu_bytes)), f"flow {f}: packets of another flow"
        assert 0 <= srec.start_ns[so] <= rrec.start_ns[ro] <= rrec.end_ns[ro], f"flow {f}: times out of order"
        assert rrec.end_ns[ro] <= srec.end_ns[so]  # the last byte is held before its ACK comes back
    for r, ep in enumerate(eps):
        c = ep.records.counters
        assert c["bytes_received"] == int(s.flow_size_bytes[s.flow_dst == r].sum())
        assert c["opcode_errors"] == 0 and c["bad_packets"] == 0 and c["malformed"] == 0


# -- the regression: late receiver, timeout retransmission of whole messages, loss and reordering -----------
def test_late_receiver_with_go_back_n_duplicates_attributes_every_packet_to_its_own_flow():
    # rank 0 sends flows 0 and 1 back to back on one QP (PSNs 0..15, 16..31); rank 1's "worker" starts
    # 5 ms late, so the 1 ms retransmit timer resends both messages (twice) before anything is acknowledged
    size = 16 * MTU
    s = make_schedule(2, [(0, 1, size, 0), (0, 1, size, 0), (0, 1, 3 * MTU, 0)],
                      {0: [send(0), send(1), send(2, deps=[1])], 1: [recv(0), recv(1), recv(2)]})
    cfg = EndpointConfig(cc="none", mtu_bytes=MTU, line_rate_bps=1e9, retransmit_timeout_ns=1_000_000)
    eps = [RankEndpoint(r, s, cfg) for r in range(2)]
    # drop the original PSN 3, delay the first copy of flow 0's LAST behind flow 1's FIRST, duplicate some
    net = LateStartNet(eps, starts=[0, 5_000_000], drops={3}, dups={15, 20, 40},
                       jitter=lambda i: 30_000 if i == 15 else 0)
    net.run()
    check_attribution(s, eps, net, cfg)
    snd, rcv = eps[0].records, eps[1].records
    assert snd.counters["timeouts"] >= 2 and snd.retx_packets[0] >= 16  # the pattern did happen
    assert rcv.counters["dup_packets"] >= 16
    assert rcv.ready_ns[0] == 0 and rcv.end_ns[0] >= 5_000_000  # one time base: the late start shows
    assert snd.start_ns[2] >= rcv.end_ns[1]  # flow 2 waited for flow 1's ACK, which needed the receiver


def test_start_takes_the_runs_origin_and_refuses_one_in_the_future():
    s = make_schedule(2, [(0, 1, MTU, 0)], {0: [send(0)], 1: [recv(0)]})
    ep = RankEndpoint(0, s, EndpointConfig(cc="none", mtu_bytes=MTU))
    ep.start(2_000_000, t0_ns=0)
    assert ep.t0_ns == 0 and ep.records.ready_ns[0] == 0
    ep.poll_transmit(2_000_000)
    assert ep.records.start_ns[0] == 2_000_000  # the late start is generator lag, not a new origin
    assert ep.records.counters["late_ops"] == 1
    with pytest.raises(ValueError, match="origin"):
        RankEndpoint(0, s, EndpointConfig(cc="none")).start(5, t0_ns=10)


# -- packets whose opcode does not fit the message state -----------------------------------------------------
def _data(psn, index, count, flow, size=4 * MTU):
    wb = build_write_batch(psn, count, dest_qp=receiver_qpn(0), message_bytes=size, mtu_bytes=MTU,
                           packet_index=index, va=flow, ack_req_last=True)
    buf = bytes(wb.buffer)
    return [buf[o + k : o + min(k + seg, n)] for o, n, seg in wb.sends for k in range(0, n, seg)]


def _receiver():
    s = make_schedule(2, [(0, 1, 4 * MTU, 0), (0, 1, 4 * MTU, 0)],
                      {0: [send(0), send(1)], 1: [recv(0), recv(1)]})
    ep = RankEndpoint(1, s, EndpointConfig(cc="none", mtu_bytes=MTU))
    ep.start(0)
    return ep


def _naks(ep, now):
    return [(parse_header(t.data)[2], parse_aeth(t.data)[0]) for t in ep.poll_transmit(now)
            if parse_aeth(t.data)[0] == _NAK_PSN]  # fmt: skip


@pytest.mark.parametrize("index", [1, 3])  # a MIDDLE, the LAST
def test_middle_or_last_with_no_open_message_is_dropped_counted_and_naked(index):
    ep = _receiver()
    (pkt,) = _data(0, index, 1, flow=0)
    ep.receive(pkt, 2, 10)
    ep.receive(pkt, 2, 11)
    rec = ep.records
    assert rec.counters["opcode_errors"] == 2 and rec.counters["bytes_received"] == 0
    assert rec.packets.sum() == 0 and not ep.done
    assert _naks(ep, 12) == [(0, _NAK_PSN)]  # one NAK carrying ePSN for the error, not one per packet
    for p in _data(0, 0, 4, flow=0):  # the real message then goes through
        ep.receive(p, 2, 20)
    assert rec.packets[0] == 4 and rec.end_ns[0] == 20 and rec.counters["bytes_received"] == 4 * MTU


def test_first_while_a_message_is_open_and_first_of_a_held_flow_are_refused():
    ep = _receiver()
    msg0 = _data(0, 0, 4, flow=0)
    ep.receive(msg0[0], 2, 10)  # flow 0 open at ePSN 1
    (first1,) = _data(1, 0, 1, flow=1)
    ep.receive(first1, 2, 11)  # a FIRST at ePSN while flow 0 is open
    rec = ep.records
    assert rec.counters["opcode_errors"] == 1 and rec.packets[1] == 0
    assert _naks(ep, 12) == [(1, _NAK_PSN)]
    for p in msg0[1:]:
        ep.receive(p, 2, 20)
    assert rec.end_ns[0] == 20 and rec.packets[0] == 4
    (again,) = _data(4, 0, 1, flow=0)  # flow 0 again at ePSN: already held
    ep.receive(again, 2, 30)
    assert rec.counters["bad_packets"] == 1 and rec.packets[0] == 4 and rec.end_ns[1] < 0


def test_initial_psn_is_validated():
    with pytest.raises(ConfigError, match="initial_psn"):
        EndpointConfig(initial_psn=1 << 24)


# -- the property: reordering, loss, duplication, late starts, PSN wrap, GRO batches ------------------------------
@st.composite
def scenario(draw):
    world = draw(st.integers(2, 3))
    n_flows = draw(st.integers(1, 7))
    flows, ops = [], {r: [] for r in range(world)}
    qp_of: dict[tuple[int, int], int] = {}
    last_send: dict[int, int] = {}
    for f in range(n_flows):
        src = draw(st.integers(0, world - 1))
        dst = draw(st.integers(0, world - 2))
        dst = dst + 1 if dst >= src else dst
        size = draw(st.sampled_from([0, 1, MTU, MTU + 1, 3 * MTU, 9 * MTU + 5, 20 * MTU]))
        qp = qp_of.setdefault((src, dst), len(qp_of))
        flows.append((src, dst, size, qp))
        deps = [last_send[src]] if src in last_send and draw(st.booleans()) else []
        last_send[src] = len(ops[src])
        ops[src].append(send(f, deps=deps))
        ops[dst].append(recv(f))
    starts = [draw(st.sampled_from([0, 0, 20_000, 300_000])) for _ in range(world)]
    wire = {
        "drops": draw(st.sets(st.integers(0, 200), max_size=10)),
        "dups": draw(st.sets(st.integers(0, 200), max_size=8)),
        "ce": draw(st.sets(st.integers(0, 200), max_size=10)),
        "late": draw(st.sets(st.integers(0, 200), max_size=20)),  # datagrams overtaken by later ones
        "seed": draw(st.integers(0, 2**16)),
    }
    cfg = {"max_segments": draw(st.sampled_from([1, 4, 16])),
           "initial_psn": draw(st.sampled_from([0, (1 << 24) - 3, (1 << 24) - 40]))}
    return make_schedule(world, flows, ops), starts, wire, cfg


@settings(max_examples=150, deadline=None)
@given(scenario())
def test_every_flow_attributed_once_to_itself_and_never_completes_before_it_was_sent(case):
    s, starts, wire, extra = case
    cfg = EndpointConfig(cc="paper", mtu_bytes=MTU, retransmit_timeout_ns=100_000, ack_every_packets=4, **extra)
    eps = [RankEndpoint(r, s, cfg) for r in range(s.world_size)]
    rng = random.Random(wire["seed"])
    late = wire["late"]
    delays = {i: rng.randrange(500, 20_000) for i in late}
    net = LateStartNet(eps, starts, drops=wire["drops"], dups=wire["dups"], ce=wire["ce"],
                       jitter=lambda i: delays.get(i, 0))
    net.run()
    check_attribution(s, eps, net, cfg)
