"""A rate change keeps a backlogged queue pair's place in its NIC's round robin.

Eight backlogged QPs share a 200 Mbit/s NIC (4 KiB packets: one round of the eight is 1.34 ms); DCQCN with the
loopback profiles' timers (T = K = 1 ms, shorter than the round). One CNP cuts one QP: its rate is then raised
every millisecond, and each raise re-timed it at that moment, behind every QP due before it, so before the fix
it sent nothing for ~40 ms (until its rate was back at the line rate).
"""

from __future__ import annotations

from support.endpoint import make_schedule, recv, send

from emulator.endpoint import EndpointConfig, RankEndpoint
from emulator.endpoint.qpn import sender_qpn

_QPS = 8
_CUT_QP = 3
_CUT_NS = 5_000_000
_PACKET_NS = 167_000  # one 4 KiB packet (and its headers) at 200 Mbit/s, rounded down


def _send_times(end_ns: int) -> dict[int, list[int]]:
    """Per QP, the times its packets left rank 0 (ACKs never come back: the RTO is out of reach)."""
    flows = [(0, 1 + i, 64 << 20, i) for i in range(_QPS)]
    ops = {0: [send(i) for i in range(_QPS)], **{1 + i: [recv(i)] for i in range(_QPS)}}
    cfg = EndpointConfig(cc="paper", line_rate_bps=200e6, retransmit_timeout_ns=10**12,
                         cc_overrides=(("alpha_timer_us", 1000.0), ("rate_increase_timer_us", 1000.0),
                                       ("rate_ai_mbps", 1.0), ("rate_hai_mbps", 5.0), ("min_rate_mbps", 10.0)))
    ep = RankEndpoint(0, make_schedule(_QPS + 1, flows, ops), cfg)
    ep.start(0)
    sent: dict[int, list[int]] = {i: [] for i in range(_QPS)}
    now = 0
    cut = False
    while now < end_ns:
        if not cut and now >= _CUT_NS:
            ep._tx.on_cnp(sender_qpn(_CUT_QP), now)
            cut = True
        ep.handle_timer(now)
        for tx in ep.poll_transmit(now):
            sent[tx.dst_rank - 1].append(now)
        t = ep.next_timer_ns()
        now = t if t is not None and t > now else now + 1
        if not cut and now > _CUT_NS:
            now = _CUT_NS
    return sent


def test_a_qp_cut_once_keeps_its_turn_while_dcqcn_raises_its_rate():
    sent = _send_times(25_000_000)
    assert sent[_CUT_QP][0] < _CUT_NS  # it was sending before the cut
    cut_qp = [t for t in sent[_CUT_QP] if t >= _CUT_NS - 2 * _QPS * _PACKET_NS]
    gaps = [b - a for a, b in zip(cut_qp, cut_qp[1:], strict=False)]
    # one packet per round of the eight QPs, as before the cut (its cut rate, ≥ 1/2 of the line, is above its share)
    assert len(cut_qp) > 10 and max(gaps) < (_QPS + 1) * _PACKET_NS, [round(g / 1e6, 2) for g in gaps]
    after = [sum(t >= _CUT_NS for t in sent[q]) for q in range(_QPS)]
    assert max(after) - min(after) <= 1, after
