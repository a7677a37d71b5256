"""The sim's header-only MIDDLE packets: a one-packet visit writes a full-MTU MIDDLE packet's BTH, stamp and ICRC
without the zero payload between (``emulator.endpoint.visit.SHORT_MIDDLE``); the sim's ports serialise it and its
receivers take it as the full packet, so every result is that of full packets."""

from __future__ import annotations

from support.endpoint import Wire, make_schedule, recv, segments, send
from support.sim import collective_schedule

from emulator.drivers.sim import SimConfig, _Sim
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.middles import ACK_REQ, W0_MIDDLE, MiddleWriter
from emulator.endpoint.visit import SHORT_MIDDLE, SHORT_MIDDLE_BYTES
from emulator.trace.model import CollectiveType
from emulator.wire.packets import unpack_bth
from emulator.wire.stamp import read_stamp

_MIDDLE = 0x07


def test_a_header_only_middle_decodes_with_the_full_packets_fields():
    full = MiddleWriter(4096 + 16).one(W0_MIDDLE, 0x123457, 0xABCDEF | ACK_REQ, 987_654_321)
    short = SHORT_MIDDLE.pack(W0_MIDDLE, 0x123457, 0xABCDEF | ACK_REQ, 987_654_321)
    assert len(short) == SHORT_MIDDLE_BYTES == 24 and len(full) == 4112
    assert unpack_bth(short) == unpack_bth(full)
    assert short[:20] == full[:20] and short[-4:] == full[-4:]  # BTH, stamp; the zero ICRC
    assert read_stamp(short) == read_stamp(full) == 987_654_320


class _ShortWire(Wire):
    """Puts every full MIDDLE packet on the wire header-only (its first 20 and last 4 bytes)."""

    def pump(self, r, now):
        for tx in self.eps[r].poll_transmit(now):
            for pkt in segments(tx):
                pkt = bytes(pkt)
                if pkt[0] == _MIDDLE:
                    pkt = pkt[:20] + pkt[-4:]
                self.seq += 1
                self.inflight.append((now + self.latency, self.seq, tx.dst_rank, pkt, 2))


def _short_run(short_middle: bool):
    size = 40 * 1024
    sched = make_schedule(2, [(0, 1, size, 0)], {0: [send(0)], 1: [recv(0)]})
    cfg = EndpointConfig(mtu_bytes=1024, cc="none", line_rate_bps=1e9, retransmit_timeout_ns=100_000)
    eps = [RankEndpoint(r, sched, cfg) for r in range(2)]
    if short_middle:
        eps[1]._rx.short_middle = SHORT_MIDDLE_BYTES
    _ShortWire(eps).run(until_ns=10**9)
    return size, eps


def test_a_receiver_takes_a_header_only_middle_for_the_full_packet_only_when_told():
    size, eps = _short_run(True)
    c = eps[1].records.counters
    assert all(ep.done for ep in eps)
    assert c["bytes_received"] == size and c["packets_received"] == 40 and c["bad_packets"] == 0
    assert eps[0].records.counters["retx_bytes"] == 0
    _, eps = _short_run(False)  # any other receiver: a MIDDLE cut short, refused
    assert eps[1].records.counters["bad_packets"] > 0 and eps[1].records.counters["bytes_received"] < size


def _run(sim: _Sim):
    reason, end_ns = sim.run(10_000_000_000, None)
    assert reason == "complete"
    recs = tuple((k, v.tobytes()) for rec in sim.recorders for k, v in sorted(rec.records.to_arrays().items()))
    counters = tuple(tuple(sorted(rec.records.counters.items())) for rec in sim.recorders)
    fabric = tuple(tuple(p.to_dict().items()) for p in sim.fabric(end_ns).ports)
    return end_ns, sim.events, sim.packets, sim.hops, recs, counters, fabric, tuple(sim.samples_t), \
        tuple(map(tuple, sim.samples_q))


def test_the_sims_middle_packets_are_header_only_and_change_no_result(monkeypatch):
    """On an 8-rank All-to-All of 4-packet messages (FIRST, two MIDDLEs, LAST) the one-packet visits' MIDDLE
    packets reach the NIC ports header-only, serialised as long as full ones; the results equal a run in
    which the senders write them full."""
    s = collective_schedule(8, CollectiveType.ALL_TO_ALL, 128 << 10)
    scfg, ecfg = SimConfig(), EndpointConfig(mtu_bytes=4096, cc="connectx")
    sizes: dict[int, set] = {}
    orig = _Sim.inject

    def inject(self, r, tx, t):
        if tx.data[0] == _MIDDLE and not tx.segment_size:
            sizes.setdefault(len(tx.data), set())
        orig(self, r, tx, t)

    monkeypatch.setattr(_Sim, "inject", inject)
    short = _Sim(s, scfg, ecfg, 3)
    short_result = _run(short)
    assert set(sizes) == {SHORT_MIDDLE_BYTES}
    monkeypatch.undo()
    full = _Sim(s, scfg, ecfg, 3)
    for ep in full.eps:
        ep._tx.middle_one = MiddleWriter(ep._tx.mid_row).one
    assert _run(full) == short_result
    received = sum(rec.records.counters["bytes_received"] for rec in short.recorders)
    assert received == int(s.flow_size_bytes.sum())
