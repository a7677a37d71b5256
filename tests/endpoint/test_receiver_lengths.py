"""The receiver refuses a FIRST or MIDDLE packet that does not carry exactly one path MTU of payload.

Such a packet is a datagram cut short on the way (a GSO segment size applied to a longer datagram cuts it
into two): accepting it would complete the message with bytes missing and nothing re-sent. Refused, it is
counted (``bad_packets``) and go-back-N re-sends it.
"""

from __future__ import annotations

from support.endpoint import Wire, make_schedule, recv, segments, send

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint

_FIRST, _MIDDLE = 0x06, 0x07


class _CutWire(Wire):
    """Cuts the first packet with opcode ``opcode`` into two datagrams, its last 16 bytes apart, once."""

    def __init__(self, eps, opcode: int) -> None:
        super().__init__(eps)
        self.opcode = opcode
        self.cut: list[bytes] = []

    def pump(self, r, now):
        for tx in self.eps[r].poll_transmit(now):
            for pkt in segments(tx):
                pkt = bytes(pkt)
                parts = [pkt]
                if not self.cut and pkt[0] == self.opcode:
                    self.cut.append(pkt)
                    parts = [pkt[:-16], pkt[-16:]]
                for p in parts:
                    self.seq += 1
                    self.inflight.append((now + self.latency, self.seq, tx.dst_rank, p, 2))


def test_a_first_or_middle_packet_cut_short_is_refused_and_sent_again():
    size = 40 * 1024
    for opcode in (_FIRST, _MIDDLE):
        sched = make_schedule(2, [(0, 1, size, 0)], {0: [send(0)], 1: [recv(0)]})
        cfg = EndpointConfig(mtu_bytes=1024, cc="none", line_rate_bps=1e9, retransmit_timeout_ns=100_000)
        eps = [RankEndpoint(r, sched, cfg) for r in range(2)]
        wire = _CutWire(eps, opcode)
        wire.run(until_ns=10**9)
        assert wire.cut and all(ep.done for ep in eps)
        c = eps[1].records.counters
        assert c["bytes_received"] == size, (opcode, dict(c))
        assert c["bad_packets"] + c["malformed"] >= 1 and eps[0].records.counters["retx_bytes"] > 0
