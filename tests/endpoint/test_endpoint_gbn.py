"""Go-back-N, ACK/NAK, duplicates and the NP, on two endpoints driven by hand over an in-memory wire."""

from __future__ import annotations

import pytest
from support.endpoint import Wire, drop_first, make_schedule, recv, segments, send

from emulator.endpoint import EndpointConfig, RankEndpoint, Transmit
from emulator.endpoint.qpn import receiver_qpn, sender_qpn
from emulator.errors import ConfigError
from emulator.pacing.notification import NpParams
from emulator.wire import parse_aeth, parse_header

MTU = 4096


def pair(size=10 * MTU, **cfg):
    s = make_schedule(2, [(0, 1, size, 0)], {0: [send(0)], 1: [recv(0)]})
    config = EndpointConfig(**{"cc": "none", "max_segments": 4, **cfg})
    return [RankEndpoint(r, s, config) for r in range(2)]


def test_clean_transfer_bytes_packets_and_psns():
    eps = pair()
    w = Wire(eps)
    w.run()
    assert all(ep.done for ep in eps)
    data = [parse_header(p) for _, src, _, p in w.log if src == 0]
    assert [h[0] for h in data] == [0x06] + [0x07] * 8 + [0x08]
    assert [h[2] for h in data] == list(range(10))
    assert {h[1] for h in data} == {receiver_qpn(0)}
    assert data[-1][3]  # AckReq on the message's last packet
    acks = [p for _, src, _, p in w.log if src == 1]
    assert all(parse_header(a)[1] == sender_qpn(0) for a in acks)
    assert parse_header(acks[-1])[2] == 9 and parse_aeth(acks[-1]) == (0x1F, 1)
    s, r = eps[0].records, eps[1].records
    assert s.counters["bytes_sent"] == r.counters["bytes_received"] == 10 * MTU
    assert s.retx_packets[0] == 0 and s.packets[0] == 10 and r.packets[0] == 10
    assert r.end_ns[0] < s.end_ns[0]  # RECV when bytes held, SEND when the ACK came back


def test_dropped_packet_nak_then_go_back_n():
    drop, dropped = drop_first(lambda h: h[0] in (0x06, 0x07, 0x08) and h[2] == 3)

    eps = pair()
    w = Wire(eps, drop=drop)
    w.run()
    assert dropped and all(ep.done for ep in eps)
    s, r = eps[0].records, eps[1].records
    assert r.counters["naks_sent"] == 1 and r.naks[0] == 1  # one NAK per gap
    assert s.counters["naks_received"] == 1
    psns = [parse_header(p)[2] for _, src, _, p in w.log if src == 0]
    # everything from the lost PSN again, in order (go-back-N), after the NAK
    first_retx = psns.index(3, 4)
    assert psns[first_retx:] == list(range(3, 10))
    assert s.retx_packets[0] == s.counters["retransmits"] == len(psns) - 10
    assert r.counters["bytes_received"] == 10 * MTU and r.packets[0] == 10
    assert s.timeouts[0] == 0


def test_dropped_last_packet_recovers_by_timeout():
    drop, dropped = drop_first(lambda h: h[0] == 0x08)

    rto = 200_000
    eps = pair(retransmit_timeout_ns=rto)
    w = Wire(eps, drop=drop)
    w.run()
    assert all(ep.done for ep in eps)
    s, r = eps[0].records, eps[1].records
    assert s.timeouts[0] == 1 == s.counters["timeouts"]
    assert s.retx_packets[0] >= 1
    assert r.counters["naks_sent"] == 0  # nothing arrived after the gap: only the timer can tell
    assert s.end_ns[0] >= rto
    assert r.counters["bytes_received"] == 10 * MTU


def test_duplicate_is_dropped_and_reacked():
    eps = pair(size=MTU)
    eps[0].start(0)
    eps[1].start(0)
    (tx,) = eps[0].poll_transmit(0)
    pkt = segments(tx)[0]
    eps[1].receive(pkt, 2, 1000)
    first = eps[1].poll_transmit(1000)
    assert len(first) == 1 and parse_aeth(first[0].data)[0] == 0x1F
    eps[1].receive(pkt, 2, 2000)
    (again,) = eps[1].poll_transmit(2000)
    assert parse_header(again.data)[2] == 0 and parse_aeth(again.data) == (0x1F, 1)  # re-ACK of PSN 0
    r = eps[1].records
    assert r.dup_packets[0] == 1 and r.counters["bytes_received"] == MTU and r.packets[0] == 1
    eps[0].receive(again.data, 0, 3000)
    assert eps[0].done and eps[1].done


def test_ce_marks_make_cnps_spaced_by_min_time():
    interval = 4_000
    eps = pair(size=200 * MTU, cc="paper", np=NpParams(min_time_between_cnps_ns=interval), max_segments=16)
    w = Wire(eps, ce=lambda pkt: parse_header(pkt)[0] in (0x06, 0x07, 0x08))
    w.run()
    assert all(ep.done for ep in eps)
    cnp_times = [t for t, src, _, p in w.log if src == 1 and parse_header(p)[0] == 0x81]
    assert len(cnp_times) >= 2
    assert all(b - a >= interval for a, b in zip(cnp_times, cnp_times[1:], strict=False))
    cnps = [p for t, src, _, p in w.log if src == 1 and parse_header(p)[0] == 0x81]
    assert all(parse_header(c)[1] == sender_qpn(0) and parse_header(c)[4] for c in cnps)  # BECN, sender QPN
    s, r = eps[0].records, eps[1].records
    assert r.counters["cnps_sent"] == len(cnps) == r.cnps[0]
    assert s.counters["cnps_received"] == len(cnps) == s.cnps[0]
    assert r.ce_marks[0] == 200
    assert min(s.rate_bps) < 25e9  # the controller cut the rate


def test_no_cnp_without_ce_and_tos_values():
    eps = pair(cc="paper")
    w = Wire(eps)
    eps[0].start(0)
    eps[1].start(0)
    txs = eps[0].poll_transmit(0)
    assert all(isinstance(t, Transmit) and t.tos == (26 << 2 | 2) and t.dst_rank == 1 for t in txs)
    w.run()
    assert eps[1].records.counters["cnps_sent"] == 0
    acks = [p for _, src, _, p in w.log if src == 1]
    assert acks


def test_gro_batch_receive_equals_packet_by_packet():
    eps_a = pair(size=40 * MTU, max_segments=16)
    eps_b = pair(size=40 * MTU, max_segments=16)
    for ep in eps_a + eps_b:
        ep.start(0)
    txs = eps_a[0].poll_transmit(0) + eps_a[0].poll_transmit(10**6) + eps_a[0].poll_transmit(2 * 10**6)
    for tx in txs:
        eps_a[1].receive(tx.data, 2, 5000, tx.segment_size)
        for pkt in segments(tx):
            eps_b[1].receive(pkt, 2, 5000)
    ra, rb = eps_a[1].records, eps_b[1].records
    assert ra.counters["bytes_received"] == rb.counters["bytes_received"] == 40 * MTU
    assert ra.packets.tolist() == rb.packets.tolist() == [40]
    assert eps_a[1].done and eps_b[1].done


def test_malformed_and_foreign_packets_are_counted_not_raised():
    (ep,) = pair()[1:]
    ep.start(0)
    ep.receive(b"\x01\x02", 0, 10)
    ep.receive(bytes(12) + bytes(4), 0, 10)  # opcode 0 (SEND_FIRST), unknown here
    from emulator.wire import build_ack

    ep.receive(build_ack(999, 0, 0), 0, 10)
    c = ep.records.counters
    assert c["malformed"] == 1 and c["unknown_opcode"] == 1 and c["unknown_qp"] == 1


def test_psn_wraps_at_2_24():
    eps = pair(size=8 * MTU)
    eps[0].start(0)
    eps[1].start(0)
    # place the QP near the wrap point on both sides
    tx = eps[0]._tx.qp_state(0, 1, 0)
    start = (1 << 24) - 3
    tx.una = tx.nxt = tx.max_sent = start
    rx = eps[1]._rx._qp(0)
    rx.epsn = start
    w = Wire(eps)
    w.run()
    psns = [parse_header(p)[2] for _, src, _, p in w.log if src == 0]
    assert psns[:5] == [(1 << 24) - 3, (1 << 24) - 2, (1 << 24) - 1, 0, 1]
    assert all(ep.done for ep in eps)


def test_config_validation():
    with pytest.raises(ConfigError, match="mtu_bytes"):
        EndpointConfig(mtu_bytes=3000)
    with pytest.raises(ConfigError, match="cc"):
        EndpointConfig(cc="cubic")
    with pytest.raises(ConfigError, match="rate_ai"):
        EndpointConfig(cc="paper", cc_overrides=(("rate_ai", 1),))
    with pytest.raises(ConfigError, match="rank_addresses"):
        RankEndpoint(0, make_schedule(2, [], {}), EndpointConfig(icrc="compute"))
    with pytest.raises(ConfigError, match="lists 1 for 2 ranks"):
        RankEndpoint(0, make_schedule(2, [], {}), EndpointConfig(icrc="compute", rank_addresses=("10.0.0.1",)))
    with pytest.raises(ConfigError, match="not an IP address"):
        EndpointConfig(icrc="compute", rank_addresses=("10.0.0.1", "host-b"))
    two = ("10.0.0.1", "10.0.0.2")
    with pytest.raises(ConfigError, match="'dest_endpoints' lists 1 for 2"):
        RankEndpoint(0, make_schedule(2, [], {}), EndpointConfig(icrc="compute", rank_addresses=two,
                                                                 dest_endpoints=(("10.0.0.9", 4791),)))
    with pytest.raises(ConfigError, match="rank_udp_ports"):
        EndpointConfig(rank_addresses=two, rank_udp_ports=(4791,))
    with pytest.raises(ConfigError, match="1..65535"):
        EndpointConfig(rank_addresses=two, rank_udp_ports=(4791, 0))
    assert EndpointConfig(max_segments=64).batch_packets == 15


def test_icrc_compute_mode_produces_valid_icrcs():
    """Every datagram carries the ICRC of the IP header it will travel in (GSO segment k: IPv4 ID k)."""
    from emulator.wire import IcrcContext, udp_source_port

    addrs = ("10.0.0.1", "10.0.0.2")
    eps = pair(size=3 * MTU, icrc="compute", rank_addresses=addrs)
    sport = udp_source_port(sender_qpn(0), receiver_qpn(0))
    checked = 0
    for ep in eps:
        ep.start(0)
    for t in range(0, 50_000, 1_000):
        for src, ep in enumerate(eps):
            for tx in ep.poll_transmit(t):
                for k, pkt in enumerate(segments(tx)):
                    assert IcrcContext(addrs[src], addrs[tx.dst_rank], ip_id=k).check(sport, 4791, pkt)
                    eps[tx.dst_rank].receive(pkt, 2, t)
                    checked += 1
    assert all(ep.done for ep in eps) and checked >= 4
