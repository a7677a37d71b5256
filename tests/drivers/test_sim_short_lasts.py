"""The sim's header-only LAST packets: a one-packet visit writes a message's LAST packet as its BTH, send-time stamp
and the full packet's length (``emulator.endpoint.visit.SHORT_LAST``, 22 bytes, a length no RoCEv2 packet has);
the sim's ports serialise it as long as the full packet and its receivers count the full packet's payload, so
every result is that of full packets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import Wire, make_schedule, recv, segments, send
from support.sim import collective_schedule, run_digest

from emulator.drivers.sim import SimConfig, _Sim
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.middles import ACK_REQ, BatchWriter
from emulator.endpoint.visit import SHORT_LAST, SHORT_LAST_BYTES, W0_LAST
from emulator.trace.model import CollectiveType
from emulator.wire.packets import unpack_bth
from emulator.wire.stamp import read_stamp

_LAST = 0x08


@settings(max_examples=200, deadline=None)
@given(mtu=st.sampled_from([256, 1024, 4096]), packets=st.integers(2, 9), data=st.data(),
       psn=st.integers(0, (1 << 24) - 1), ack_req=st.booleans(), stamp=st.integers(0, 1 << 60))
def test_a_header_only_last_carries_the_full_packets_bth_stamp_and_length(mtu, packets, data, psn, ack_req, stamp):
    """For any message whose LAST packet is stamped (8 payload bytes or more), the header-only LAST has the full
    LAST's BTH (its pad count too), its stamp, and the full packet's length after the stamp."""
    last_payload = data.draw(st.integers(8, mtu))
    size = (packets - 1) * mtu + last_payload
    full, sends = BatchWriter(mtu).write(0x123457, psn, size, packets - 1, 1, 0xBEEF, ack_req, stamp)
    pad = -last_payload & 3
    word = psn & 0xFFFFFF | (ACK_REQ if ack_req else 0)
    short = SHORT_LAST.pack(W0_LAST[pad], 0x123457, word, stamp + 1, 16 + last_payload + pad)
    assert len(short) == SHORT_LAST_BYTES == 22 and len(full) % 4 == 0
    assert unpack_bth(short) == unpack_bth(full) and short[:12] == full[:12]
    assert short[12:20] == full[12:20] and read_stamp(full) == stamp
    assert (short[20] << 8) | short[21] == len(full) == sends[0][1]


class _ShortLastWire(Wire):
    """Puts every stamped LAST packet on the wire header-only (BTH, stamp, the full packet's length)."""

    def pump(self, r, now):
        for tx in self.eps[r].poll_transmit(now):
            for pkt in segments(tx):
                pkt = bytes(pkt)
                if pkt[0] == _LAST and len(pkt) >= 24:
                    pkt = pkt[:20] + len(pkt).to_bytes(2, "big")
                self.seq += 1
                self.inflight.append((now + self.latency, self.seq, tx.dst_rank, pkt, 2))


@pytest.mark.parametrize("size", [40 * 1024, 40 * 1024 - 1021])
def test_a_receiver_takes_a_header_only_last_for_the_full_packet_only_when_told(size):
    def run(told: bool):
        sched = make_schedule(2, [(0, 1, size, 0)], {0: [send(0)], 1: [recv(0)]})
        cfg = EndpointConfig(mtu_bytes=1024, cc="none", line_rate_bps=1e9, retransmit_timeout_ns=100_000,
                             max_message_bytes=8 * 1024)  # five messages: five LASTs
        eps = [RankEndpoint(r, sched, cfg) for r in range(2)]
        if told:  # what the sim sets
            eps[1]._rx.short_payload = 8
        _ShortLastWire(eps).run(until_ns=10**9)
        assert all(ep.done for ep in eps)
        return eps[1].records.counters

    c = run(True)
    assert c["bytes_received"] == size and c["packets_received"] == 40 and c["bad_packets"] == 0
    assert run(False)["bytes_received"] < size  # any other receiver counts the 22 bytes' payload


@pytest.mark.parametrize("size", [128 << 10, (128 << 10) + 8 * 1021])
def test_the_sims_last_packets_are_header_only_and_change_no_result(monkeypatch, size):
    """On an 8-rank All-to-All of 4- or 5-packet messages (a full-MTU LAST, or one of 1,021 bytes: pad 3) the
    one-packet visits' LAST packets reach the NIC ports header-only, serialised as long as full ones; the results
    equal a run in which the senders write them full."""
    s = collective_schedule(8, CollectiveType.ALL_TO_ALL, size)
    scfg, ecfg = SimConfig(), EndpointConfig(mtu_bytes=4096, cc="connectx")
    sizes: dict[int, int] = {}  # LAST length -> datagrams
    orig = _Sim.inject

    def inject(self, r, tx, t):
        if tx.data[0] == _LAST and not tx.segment_size:
            sizes[len(tx.data)] = sizes.get(len(tx.data), 0) + 1
        orig(self, r, tx, t)

    monkeypatch.setattr(_Sim, "inject", inject)
    short = _Sim(s, scfg, ecfg, 3)
    short_result = run_digest(short)
    last = size // 8 % 4096 or 4096
    assert set(sizes) <= {SHORT_LAST_BYTES, 16 + last + (-last & 3)}
    assert sizes[SHORT_LAST_BYTES] > 4 * sizes.get(16 + last + (-last & 3), 0)
    monkeypatch.undo()
    full = _Sim(s, scfg, ecfg, 3)
    for ep in full.eps:
        ep._tx.last_one = None
    assert run_digest(full) == short_result
    received = sum(rec.records.counters["bytes_received"] for rec in short.recorders)
    assert received == int(s.flow_size_bytes.sum())
