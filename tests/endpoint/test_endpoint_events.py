"""The endpoint's event log: CNPs, NAKs, go-back-N rewinds and timeouts with their real times, bounded."""

from __future__ import annotations

import numpy as np
import pytest
from support.endpoint import Wire, drop_first, make_schedule, recv, send

from emulator.endpoint import EndpointConfig, RankEndpoint
from emulator.endpoint.records import (
    EV_CNP_RECEIVED,
    EV_CNP_SENT,
    EV_NAK_RECEIVED,
    EV_NAK_SENT,
    EV_RETRANSMIT,
    EV_TIMEOUT,
    EVENT_COLUMNS,
    RankRecords,
)
from emulator.errors import ConfigError
from emulator.pacing.notification import NpParams
from emulator.results.events import EVENT_KINDS
from emulator.wire import parse_aeth, parse_header

MTU = 4096
LAT = 1000
DATA = (0x06, 0x07, 0x08, 0x0A)


def pair(size=10 * MTU, qp=3, **cfg):
    s = make_schedule(2, [(0, 1, size, qp)], {0: [send(0)], 1: [recv(0)]})
    config = EndpointConfig(**{"cc": "none", "max_segments": 4, **cfg})
    return [RankEndpoint(r, s, config) for r in range(2)]


def events(rec: RankRecords, kind: int | None = None) -> list[tuple[int, int, int, int, int]]:
    """(t_ns, qp, psn, packets, op) of every event (of one kind)."""
    rows = zip(rec.event_t_ns, rec.event_kind, rec.event_qp, rec.event_psn, rec.event_packets, rec.event_op,
               strict=True)
    return [(t, q, p, n, o) for t, k, q, p, n, o in rows if kind is None or k == kind]


def kinds(rec: RankRecords) -> list[str]:
    return [EVENT_KINDS[k] for k in rec.event_kind]


def test_clean_transfer_logs_nothing():
    eps = pair()
    Wire(eps, latency_ns=LAT).run()
    assert all(ep.done for ep in eps)
    assert all(ep.records.event_t_ns == [] for ep in eps)
    assert all(ep.records.counters["events_dropped"] == 0 for ep in eps)


def test_ce_mark_gives_cnp_sent_then_cnp_received_at_their_times():
    marked = []

    def ce(pkt):
        h = parse_header(pkt)
        if h[0] in DATA and h[2] == 2 and not marked:
            marked.append(pkt)
            return True
        return False

    eps = pair(cc="paper", np=NpParams(min_time_between_cnps_ns=4_000))
    w = Wire(eps, latency_ns=LAT, ce=ce)
    w.run()
    assert all(ep.done for ep in eps)
    t_marked = next(t for t, src, _, p in w.log if src == 0 and p is marked[0])
    t_cnp = next(t for t, src, _, p in w.log if src == 1 and parse_header(p)[0] == 0x81)
    s, r = eps[0].records, eps[1].records
    # receiver: the CE-marked packet (PSN 2) arrived one latency after it left; the NP answered at once
    assert events(r) == [(t_marked + LAT, 3, 3, 0, 0)]  # expected PSN 3 after accepting 2; RECV op 0
    assert kinds(r) == ["cnp_sent"] and t_cnp == t_marked + LAT
    # sender: the CNP arrived one latency later, charged to SEND op 0, at the PSN it was about to send
    (cnp_rx,) = events(s, EV_CNP_RECEIVED)
    assert cnp_rx[:2] == (t_cnp + LAT, 3) and cnp_rx[4] == 0
    sent_before = [parse_header(p)[2] for t, src, _, p in w.log if src == 0 and t < t_cnp + LAT]
    assert cnp_rx[2] == (max(sent_before) + 1 if sent_before else 0)
    assert kinds(s) == ["cnp_received"]
    assert s.counters["cnps_received"] == 1 == r.counters["cnps_sent"]


def test_deferred_np_logs_the_cnp_when_its_timer_sends_it():
    eps = pair(size=40 * MTU, cc="paper", np=NpParams(min_time_between_cnps_ns=50_000, defer=True))
    w = Wire(eps, latency_ns=LAT, ce=lambda pkt: parse_header(pkt)[0] in DATA)
    w.run()
    s, r = eps[0].records, eps[1].records
    cnp_times = [t for t, src, _, p in w.log if src == 1 and parse_header(p)[0] == 0x81]
    assert cnp_times and [e[0] for e in events(r, EV_CNP_SENT)] == cnp_times
    assert [e[0] for e in events(s, EV_CNP_RECEIVED)] == [t + LAT for t in cnp_times]


def test_drop_gives_nak_and_retransmit_events():
    drop, dropped = drop_first(lambda h: h[0] in DATA and h[2] == 3)

    eps = pair()
    w = Wire(eps, latency_ns=LAT, drop=drop)
    w.run()
    assert all(ep.done for ep in eps)
    s, r = eps[0].records, eps[1].records
    # the receiver NAKs ePSN 3 when PSN 4 arrives
    t4 = next(t for t, src, _, p in w.log if src == 0 and parse_header(p)[2] == 4)
    assert events(r) == [(t4 + LAT, 3, 3, 0, 0)] and kinds(r) == ["nak_sent"]
    t_nak = next(t for t, src, _, p in w.log if src == 1 and parse_header(p)[0] == 0x11
                 and parse_aeth(p)[0] >> 5 == 3)
    assert t_nak == t4 + LAT
    assert kinds(s) == ["nak_received", "retransmit"]
    (nak,) = events(s, EV_NAK_RECEIVED)
    (rw,) = events(s, EV_RETRANSMIT)
    psns = [parse_header(p)[2] for _, src, _, p in w.log if src == 0]
    sent_by_then = sum(1 for t, src, _, p in w.log if src == 0 and t < t_nak + LAT)
    assert nak == (t_nak + LAT, 3, 3, sent_by_then - 3, 0)
    # the rewind: from PSN 3, as many packets as went again (= the retransmit counter)
    assert rw[:3] == (t_nak + LAT, 3, 3) and rw[4] == 0
    assert rw[3] == s.counters["retransmits"] == len(psns) - 10 == s.retx_packets[0] > 0


def test_tail_drop_gives_timeout_and_retransmit():
    drop, dropped = drop_first(lambda h: h[0] == 0x08)

    rto = 200_000
    eps = pair(retransmit_timeout_ns=rto)
    w = Wire(eps, latency_ns=LAT, drop=drop)
    w.run()
    assert all(ep.done for ep in eps)
    s, r = eps[0].records, eps[1].records
    assert kinds(r) == []  # nothing arrived after the gap: no NAK
    assert kinds(s) == ["timeout", "retransmit"]
    (to,) = events(s, EV_TIMEOUT)
    (rw,) = events(s, EV_RETRANSMIT)
    t_last = next(t for t, src, _, p in w.log if src == 0 and p is dropped[0])
    assert to[0] == rw[0] >= t_last + rto  # the timer fired no earlier than one RTO after the last send
    t_resend = [t for t, src, _, p in w.log if src == 0 and parse_header(p)[2] == 9]
    assert len(t_resend) == 2 and t_resend[1] == to[0]  # the re-sent packet went out when the timer fired
    # no ACK came back (16 packets per ACK, the AckReq on the last packet was lost): PSN 0, 10 outstanding
    assert to[1:] == (3, 0, 10, 0)
    assert rw[1:] == (3, 0, s.counters["retransmits"], 0) and rw[3] >= 1


def test_event_times_are_relative_to_t0():
    drop, dropped = drop_first(lambda h: h[0] in DATA and h[2] == 1)

    base = pair(size=4 * MTU)
    Wire(base, latency_ns=LAT, drop=drop).run(start=0)
    dropped.clear()
    shifted = pair(size=4 * MTU)
    Wire(shifted, latency_ns=LAT, drop=drop).run(start=5_000_000)
    for a, b in zip(base, shifted, strict=True):
        assert a.records.event_t_ns and a.records.to_arrays().keys() == b.records.to_arrays().keys()
        for name in EVENT_COLUMNS:
            assert np.array_equal(a.records.to_arrays()[name], b.records.to_arrays()[name]), name


def test_log_is_capped_and_the_rest_counted():
    eps = pair(size=200 * MTU, cc="paper", np=NpParams(min_time_between_cnps_ns=0), max_events=5)
    w = Wire(eps, latency_ns=LAT, ce=lambda pkt: parse_header(pkt)[0] in DATA)
    w.run()
    assert all(ep.done for ep in eps)
    s, r = eps[0].records, eps[1].records
    assert r.counters["cnps_sent"] > 5
    assert len(r.event_t_ns) == 5 and r.counters["events_dropped"] == r.counters["cnps_sent"] - 5
    assert len(s.event_t_ns) == 5 and s.counters["events_dropped"] == s.counters["cnps_received"] - 5
    assert r.event_t_ns == sorted(r.event_t_ns)  # the first events are kept, in order
    for rec in (s, r):
        arrays = rec.to_arrays()
        assert all(arrays[name].shape == (5,) for name in EVENT_COLUMNS)


def test_zero_cap_logs_nothing_and_bad_cap_is_refused():
    eps = pair(size=20 * MTU, cc="paper", np=NpParams(min_time_between_cnps_ns=0), max_events=0)
    Wire(eps, latency_ns=LAT, ce=lambda pkt: parse_header(pkt)[0] in DATA).run()
    assert eps[1].records.event_t_ns == [] and eps[1].records.counters["events_dropped"] == 20
    with pytest.raises(ConfigError, match="max_events"):
        EndpointConfig(max_events=-1)


def test_events_survive_the_array_round_trip():
    eps = pair(size=30 * MTU, cc="paper", np=NpParams(min_time_between_cnps_ns=2_000))
    w = Wire(eps, latency_ns=LAT, ce=lambda pkt: parse_header(pkt)[0] in DATA and parse_header(pkt)[2] % 5 == 0,
             drop=lambda pkt: parse_header(pkt)[0] == 0x08 and parse_header(pkt)[2] == 29 and len(w.log) < 40)
    w.run()
    for ep in eps:
        rec = ep.records
        arrays = rec.to_arrays()
        assert arrays["event_kind"].dtype == np.int8 and arrays["event_t_ns"].dtype == np.int64
        back = RankRecords.from_arrays(rec.rank, arrays, rec.counters)
        for name in EVENT_COLUMNS:
            assert getattr(back, name) == getattr(rec, name), name
        assert back.to_arrays().keys() == arrays.keys()
    assert events(eps[1].records, EV_CNP_SENT) and events(eps[1].records, EV_NAK_SENT) == []


def test_records_without_events_still_load():
    rec = RankRecords(rank=2, n_ops=3)
    old = {k: v for k, v in rec.to_arrays().items() if not k.startswith("event_")}
    back = RankRecords.from_arrays(2, old, {"cnps_sent": 0})
    assert back.event_t_ns == [] and back.to_arrays()["event_kind"].shape == (0,)
    bad = {**rec.to_arrays(), "event_t_ns": np.array([5, 6])}
    with pytest.raises(ValueError, match="event column"):
        RankRecords.from_arrays(2, bad, {})


def test_nak_received_counts_equal_events():
    # several losses on a long message: every NAK counted is an event, every rewind re-sends what it says
    lost = set()

    def drop(pkt):
        h = parse_header(pkt)
        if h[0] in DATA and h[2] in (5, 17, 31) and h[2] not in lost:
            lost.add(h[2])
            return True
        return False

    eps = pair(size=40 * MTU)
    Wire(eps, latency_ns=LAT, drop=drop).run()
    s, r = eps[0].records, eps[1].records
    assert len(events(r, EV_NAK_SENT)) == r.counters["naks_sent"] == 3
    assert len(events(s, EV_NAK_RECEIVED)) == s.counters["naks_received"] == 3
    assert sum(e[3] for e in events(s, EV_RETRANSMIT)) == s.counters["retransmits"]
    assert [e[2] for e in events(r, EV_NAK_SENT)] == [5, 17, 31]
    assert s.event_t_ns == sorted(s.event_t_ns)
