"""The sim's header-only FIRST and MIDDLE packets: a one-packet visit writes a full-MTU packet's headers (BTH, RETH
of a FIRST), stamp and ICRC without the zero payload between (``emulator.endpoint.visit.SHORT_FIRST``,
``SHORT_MIDDLE``); the sim's ports serialise it as long as the full packet and its receivers take it for one, so
every result is that of full packets."""

from __future__ import annotations

from support.endpoint import Wire, make_schedule, recv, segments, send
from support.sim import collective_schedule, run_digest

from emulator.drivers.sim import SimConfig, _Sim
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.middles import ACK_REQ, W0_MIDDLE, BatchWriter, MiddleWriter
from emulator.endpoint.visit import SHORT_FIRST, SHORT_MIDDLE, SHORT_MIDDLE_BYTES, W0_FIRST, first_packer
from emulator.trace.model import CollectiveType
from emulator.wire.packets import unpack_bth
from emulator.wire.stamp import read_stamp

_FIRST, _MIDDLE = 0x06, 0x07


def test_a_header_only_middle_decodes_with_the_full_packets_fields():
    full = MiddleWriter(4096 + 16).one(W0_MIDDLE, 0x123457, 0xABCDEF | ACK_REQ, 987_654_321)
    short = SHORT_MIDDLE.pack(W0_MIDDLE, 0x123457, 0xABCDEF | ACK_REQ, 987_654_321)
    assert len(short) == SHORT_MIDDLE_BYTES == 24 and len(full) == 4112
    assert unpack_bth(short) == unpack_bth(full)
    assert short[:20] == full[:20] and short[-4:] == full[-4:]  # BTH, stamp; the zero ICRC
    assert read_stamp(short) == read_stamp(full) == 987_654_320


def test_a_first_packet_alone_and_header_only_decode_as_the_batch_writers():
    """The one-packet visit's FIRST packet: the bytes ``BatchWriter`` writes for it; header-only, the same headers,
    stamp and ICRC (40 bytes)."""
    args = (0x123457, 0xABCDEF, 3 << 20, 0, 1, 0xDEAD_BEEF_0042, True, 987_654_320)
    batch, sends = BatchWriter(4096).write(*args)
    word = 0xABCDEF | ACK_REQ
    full = first_packer(4096)(W0_FIRST, 0x123457, word, 0xDEAD_BEEF_0042, 0, 3 << 20, 987_654_321)
    short = SHORT_FIRST.pack(W0_FIRST, 0x123457, word, 0xDEAD_BEEF_0042, 0, 3 << 20, 987_654_321)
    assert full == batch and sends == ((0, 4096 + 32, 4096 + 32),)
    assert len(short) == 40 and short[:36] == full[:36] and short[-4:] == full[-4:]
    assert unpack_bth(short) == unpack_bth(full) and read_stamp(short) == read_stamp(full) == 987_654_320


class _ShortWire(Wire):
    """Puts every full FIRST or MIDDLE packet on the wire header-only (its headers and stamp, and its ICRC)."""

    def pump(self, r, now):
        for tx in self.eps[r].poll_transmit(now):
            for pkt in segments(tx):
                pkt = bytes(pkt)
                if pkt[0] in (_FIRST, _MIDDLE):
                    pkt = pkt[: 36 if pkt[0] == _FIRST else 20] + pkt[-4:]
                self.seq += 1
                self.inflight.append((now + self.latency, self.seq, tx.dst_rank, pkt, 2))


def _short_run(told: bool):
    size = 40 * 1024
    sched = make_schedule(2, [(0, 1, size, 0)], {0: [send(0)], 1: [recv(0)]})
    cfg = EndpointConfig(mtu_bytes=1024, cc="none", line_rate_bps=1e9, retransmit_timeout_ns=100_000)
    eps = [RankEndpoint(r, sched, cfg) for r in range(2)]
    if told:  # the stamp alone stands for a full payload (what the sim sets)
        eps[1]._rx.short_payload = 8
    _ShortWire(eps).run(until_ns=10**9)
    return size, eps


def test_a_receiver_takes_a_header_only_first_or_middle_for_the_full_packet_only_when_told():
    size, eps = _short_run(True)
    c = eps[1].records.counters
    assert all(ep.done for ep in eps)
    assert c["bytes_received"] == size and c["packets_received"] == 40 and c["bad_packets"] == 0
    assert eps[0].records.counters["retx_bytes"] == 0
    _, eps = _short_run(False)  # any other receiver: a FIRST or MIDDLE cut short, refused
    assert eps[1].records.counters["bad_packets"] > 0 and eps[1].records.counters["bytes_received"] < size


def test_the_sims_first_and_middle_packets_are_header_only_and_change_no_result(monkeypatch):
    """On an 8-rank All-to-All of 4-packet messages (FIRST, two MIDDLEs, LAST) the one-packet visits' FIRST and
    MIDDLE packets reach the NIC ports header-only, serialised as long as full ones; the results equal a run
    in which the senders write them full."""
    s = collective_schedule(8, CollectiveType.ALL_TO_ALL, 128 << 10)
    scfg, ecfg = SimConfig(), EndpointConfig(mtu_bytes=4096, cc="connectx")
    sizes: dict[tuple[int, int], int] = {}  # (opcode, length) -> datagrams
    orig = _Sim.inject

    def inject(self, r, tx, t):
        if tx.data[0] in (_FIRST, _MIDDLE) and not tx.segment_size:
            key = (tx.data[0], len(tx.data))
            sizes[key] = sizes.get(key, 0) + 1
        orig(self, r, tx, t)

    monkeypatch.setattr(_Sim, "inject", inject)
    short = _Sim(s, scfg, ecfg, 3)
    short_result = run_digest(short)
    # (a visit that sends more than one packet, a message's start at t = 0 among them, takes the general path)
    assert set(sizes) <= {(_FIRST, SHORT_FIRST.size), (_FIRST, 4096 + 32), (_MIDDLE, SHORT_MIDDLE_BYTES), (_MIDDLE, 4096 + 16)}
    assert sizes[_FIRST, SHORT_FIRST.size] > 0
    assert sizes[_MIDDLE, SHORT_MIDDLE_BYTES] > 4 * sizes.get((_MIDDLE, 4096 + 16), 0)
    monkeypatch.undo()
    full = _Sim(s, scfg, ecfg, 3)
    for ep in full.eps:
        ep._tx.middle_one = MiddleWriter(ep._tx.mid_row).one
        ep._tx.first_one = first_packer(ep._tx.mtu)
    assert run_digest(full) == short_result
    received = sum(rec.records.counters["bytes_received"] for rec in short.recorders)
    assert received == int(s.flow_size_bytes.sum())
