"""The retransmit timer during go-back-N recovery: a resend whose head is lost again brings no second NAK
(the receiver NAKs once per sequence error), so the sender that keeps sending must time out anyway."""

from __future__ import annotations

import pytest
from support.endpoint import Wire, make_schedule, recv, send

from emulator.endpoint import EndpointConfig, RankEndpoint
from emulator.wire import parse_header

MTU = 4096
RTO_NS = 100_000
PACKETS = 400  # ~525 µs at 25 Gbit/s: the sender is still sending long after the NAK plus one RTO


def drop_psn(psn: int, times: int):
    """Drop the first ``times`` data packets carrying ``psn`` (the original and its resends)."""
    seen = []

    def drop(pkt):
        h = parse_header(pkt)
        if h[0] in (0x06, 0x07, 0x08) and h[2] == psn and len(seen) < times:
            seen.append(pkt)
            return True
        return False

    return drop


@pytest.mark.parametrize("losses", [2, 3])
def test_a_resend_lost_again_times_out_an_rto_after_the_go_back_while_the_qp_keeps_sending(losses):
    s = make_schedule(2, [(0, 1, PACKETS * MTU, 0)], {0: [send(0)], 1: [recv(0)]})
    config = EndpointConfig(cc="none", max_segments=4, retransmit_timeout_ns=RTO_NS)
    eps = [RankEndpoint(r, s, config) for r in range(2)]
    w = Wire(eps, drop=drop_psn(3, losses))
    w.run()
    assert all(ep.done for ep in eps)
    sent = [(t, parse_header(p)[2]) for t, src, _, p in w.log if src == 0]
    t3 = [t for t, psn in sent if psn == 3]  # original, NAK resend, timeout resend(s)
    assert len(t3) == losses + 1
    first_pass_end = next(t for t, psn in sent if psn == PACKETS - 1)
    sender, receiver = eps[0].records, eps[1].records
    assert receiver.counters["naks_sent"] == 1 and sender.counters["timeouts"] == losses - 1
    # the first timeout: one RTO after the resend's batch that owes an ACK (ack_every_packets = 16 packets past the
    # go-back, ~21 µs at 25 Gbit/s), not one RTO after the sending stops
    assert RTO_NS <= t3[2] - t3[1] <= RTO_NS + 30_000
    assert t3[2] < first_pass_end
    if losses == 3:  # the timeout's own resend lost: the next one 2 × RTO after its owing batch (backoff)
        assert 2 * RTO_NS <= t3[3] - t3[2] <= 2 * RTO_NS + 30_000
        assert t3[3] < first_pass_end
    assert receiver.counters["bytes_received"] == PACKETS * MTU and receiver.packets[0] == PACKETS


def test_a_slow_qp_in_recovery_with_acks_sparser_than_the_rto_does_not_time_out():
    # 1 Gbit/s: 16 packets (one ACK) take ~530 µs, five RTOs; the resend gets through, so no timeout is due
    s = make_schedule(2, [(0, 1, 64 * MTU, 0)], {0: [send(0)], 1: [recv(0)]})
    config = EndpointConfig(cc="fixed", cc_overrides=(("rate_bps", 1e9),), max_segments=1, retransmit_timeout_ns=RTO_NS)
    eps = [RankEndpoint(r, s, config) for r in range(2)]
    w = Wire(eps, drop=drop_psn(3, 1))
    w.run()
    assert all(ep.done for ep in eps)
    sender, receiver = eps[0].records, eps[1].records
    assert receiver.counters["naks_sent"] == 1 and sender.counters["timeouts"] == 0
    assert receiver.counters["bytes_received"] == 64 * MTU
