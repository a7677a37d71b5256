"""Model-time service (``model_time_service``, the loopback driver's mode): a rank serves its queue pairs, and
stamps their packets, as the sim's driver would call it — whatever the wake-ups of the driver that polls it.
The reference is the endpoint of the sim driver (no model time, woken exactly when it asks): the same
batches to the same peers in the same order, a full batch first from an idle NIC, then the NIC's line rate."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import make_schedule, recv, send

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.qpn import receiver_qpn, sender_qpn
from emulator.wire import build_ack, build_write_batch
from emulator.wire.stamp import read_stamp

RATE_BPS = 200e6
MTU = 4096
PEERS = 7
#: one full MIDDLE packet (BTH + payload + ICRC + wire overhead) at the line rate
GAP_NS = -(-(MTU + 16 + 66) * 8 * 10**9 // int(RATE_BPS))


def _endpoint(model_time: bool, spread_ns: int = 0) -> RankEndpoint:
    """Rank 0 of an All-to-All: one 64 KiB flow to each of 7 peers on its own QP, DCQCN at the line rate,
    configured as a socket worker runs it on the loopback fabric (model time) or as the sim driver does."""
    flows = [(0, d, 64 * 1024, d - 1) for d in range(1, PEERS + 1)]
    cfg = EndpointConfig(cc="paper", line_rate_bps=RATE_BPS, mtu_bytes=MTU, retransmit_timeout_ns=10**12,
                         pace_full_batches=model_time, defer_acks=model_time, stamp_spread_ns=spread_ns,
                         delivery_stamps=model_time, model_time_service=model_time)
    ep = RankEndpoint(0, make_schedule(PEERS + 1, flows, {0: [send(f) for f in range(PEERS)]}), cfg)
    ep.start(0)
    return ep


def _transmits(ep: RankEndpoint, lateness_ns: list[int]) -> list:
    """Drive ``ep`` as a worker does (timers, then a poll) waking up ``lateness_ns[i]`` after its i-th timer
    (the list repeats); returns every data transmit, in send order."""
    out = []
    now = 0
    i = 0
    while i < 10_000:
        t = ep.next_timer_ns()
        if t is None or t > 10**9:  # no ACKs come: stop before the retransmit timeout
            break
        now = max(now, t + lateness_ns[i % len(lateness_ns)])
        i += 1
        ep.handle_timer(now)
        out.extend(tx for tx in ep.poll_transmit(now) if tx.t_ns >= 0)
    return out


def _batches(ep: RankEndpoint, lateness_ns: list[int]) -> list[tuple[int, int, int]]:
    """As :func:`_transmits`, every data batch as (destination, packets, first stamp)."""
    out = []
    for tx in _transmits(ep, lateness_ns):
        seg = tx.segment_size or len(tx.data)
        out.append((tx.dst_rank, -(-len(tx.data) // seg), read_stamp(memoryview(tx.data)[:seg])))
    return out


def _packets(ep: RankEndpoint, lateness_ns: list[int]) -> list[tuple[int, int]]:
    """As :func:`_transmits`, every data packet as (destination, stamp)."""
    out = []
    for tx in _transmits(ep, lateness_ns):
        seg = tx.segment_size or len(tx.data)
        mv = memoryview(tx.data)
        out.extend((tx.dst_rank, read_stamp(mv[o : o + seg])) for o in range(0, len(mv), seg))
    return out


def test_model_time_serves_the_batches_of_the_sim_driver():
    """Same peers, same batch sizes, same order as the sim's endpoint woken on time; the stamps are when
    the NIC starts each batch (back to back at the line rate once it is busy)."""
    sim = _batches(_endpoint(False), [0])
    model = _batches(_endpoint(True), [0])
    assert [(d, k) for d, k, _ in model] == [(d, k) for d, k, _ in sim]
    assert sum(k for _, k, _ in model) == PEERS * 16
    # an idle NIC's bucket holds one full batch: the first QP sends it at once (FIRST packet + 14 MIDDLE)
    assert [(d, k) for d, k, _ in model[:2]] == [(1, 1), (1, 14)]
    stamps = [t for _, _, t in model]
    assert stamps == sorted(stamps)  # handed to the NIC in order, never before the sim's pacers allowed it
    assert all(t >= sim_t for t, (_, _, sim_t) in zip(stamps, sim, strict=True))
    assert stamps[2] >= 15 * (GAP_NS - 100)  # the next waits for the NIC: the batch goes at the line rate


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3_000_000), min_size=1, max_size=40))
def test_late_wake_ups_change_neither_the_order_nor_the_stamps(lateness_ns):
    assert _packets(_endpoint(True), lateness_ns) == _packets(_endpoint(True), [0])


def test_without_model_time_late_wake_ups_bunch_the_stamps():
    """The contrast: an endpoint serving at its driver's wake-ups stamps several queue pairs' packets
    closer than the NIC could send them after a late wake-up (and differently from an on-time driver)."""
    on_time = _packets(_endpoint(False), [0])
    late = _packets(_endpoint(False), [0, 900_000, 50_000, 1_700_000])
    assert late != on_time
    stamps = sorted(t for _, t in late)
    assert sum(b - a < GAP_NS - 1 for a, b in zip(stamps, stamps[1:], strict=False)) > PEERS


def _relay_rank(lag_ns: int) -> RankEndpoint:
    """Rank 1 of a ring step next to an All-to-All: it keeps its NIC busy with a long flow to rank 3 and
    forwards (SEND flow 1 to rank 2) what it receives from rank 0 (RECV flow 0), served on model time
    ``lag_ns`` behind its driver's clock."""
    flows = [(0, 1, 8 * MTU, 0), (1, 2, 8 * MTU, 1), (1, 3, 400 * MTU, 2)]
    cfg = EndpointConfig(cc="paper", line_rate_bps=RATE_BPS, mtu_bytes=MTU, retransmit_timeout_ns=10**12,
                         pace_full_batches=True, defer_acks=True, delivery_stamps=True, model_time_service=True,
                         service_lag_ns=lag_ns)
    ep = RankEndpoint(1, make_schedule(4, flows, {1: [recv(0), send(1, deps=(0,)), send(2)]}), cfg)
    ep.start(0)
    return ep


def _forwarded(lag_ns: int, late_ns: int) -> list[tuple[int, int]]:
    """Rank 1's data packets (destination, stamp) in send order, when the message of rank 0, delivered
    by the switch at 3 ms (its stamps), reaches the rank's driver ``late_ns`` after that."""
    ep = _relay_rank(lag_ns)
    wb = build_write_batch(0, 8, dest_qp=receiver_qpn(0), message_bytes=8 * MTU, mtu_bytes=MTU,
                           stamp_ns=3_000_000 - 7 * GAP_NS, stamp_step_ns=GAP_NS)
    data = bytes(wb.buffer)
    out: list[tuple[int, int]] = []
    now = 0
    pending = True
    while now < 20_000_000:
        t = ep.next_timer_ns()
        arrive = 3_000_000 + late_ns
        if pending and (t is None or t >= arrive):
            now = max(now, arrive)
            for off, length, seg in wb.sends:
                ep.receive(data[off : off + length], 0, now, 0 if length == seg else seg)
            pending = False
        elif t is None:
            break
        else:
            now = max(now, t)
        ep.handle_timer(now)
        for tx in ep.poll_transmit(now):
            if tx.t_ns >= 0:
                seg = tx.segment_size or len(tx.data)
                mv = memoryview(tx.data)
                out.extend((tx.dst_rank, read_stamp(mv[o : o + seg])) for o in range(0, len(mv), seg))
    return out


@settings(max_examples=25, deadline=None)
@given(st.integers(0, GAP_NS))
def test_a_send_made_ready_by_a_delivery_joins_at_the_delivery_time(late_ns):
    """The SEND a delivery releases joins the round-robin at the delivery time however late the driver
    hears of it, as long as that is within the service lag (here the switch's horizon is 0)."""
    lag = GAP_NS
    on_time = _forwarded(lag, 0)
    assert _forwarded(lag, late_ns) == on_time
    first = next(t for d, t in on_time if d == 2)
    assert first >= 3_000_000  # never before the delivery; the NIC then serialises what it holds before it


def test_without_a_service_lag_a_late_driver_delays_the_forwarded_send():
    """The contrast: serving at the driver's clock, the rank has already committed its NIC past the
    delivery time when it hears of the message, so the forwarded flow starts later."""
    late = GAP_NS
    assert _forwarded(0, late) != _forwarded(0, 0)
    assert next(t for d, t in _forwarded(0, late) if d == 2) >= 3_000_000 + late


def test_a_late_driver_does_not_time_out_packets_it_has_only_just_sent():
    """A rank served on model time sends, at a wake-up 5 ms late, packets stamped from 0: the retransmit
    timeout (1 ms) runs from the send, so the timer due right after finds nothing overdue."""
    flows = [(0, 1, 64 * 1024, 0)]
    cfg = EndpointConfig(cc="paper", line_rate_bps=RATE_BPS, mtu_bytes=MTU, retransmit_timeout_ns=1_000_000,
                         pace_full_batches=True, defer_acks=True, delivery_stamps=True, model_time_service=True)
    ep = RankEndpoint(0, make_schedule(2, flows, {0: [send(0)]}), cfg)
    ep.start(0)
    late = 5_000_000
    sent = ep.poll_transmit(late)
    assert sent and read_stamp(memoryview(sent[0].data)) == 0
    ep.handle_timer(late + 10_000)
    assert ep.records.counters["timeouts"] == 0
    ep.handle_timer(late + 1_100_000)  # no ACK for 1.1 ms after the send: now it is a timeout
    assert ep.records.counters["timeouts"] == 1


def test_a_timeout_found_late_waits_for_the_acks_the_driver_has_not_read_yet():
    """A worker that wakes 9 ms after a 1 ms retransmit deadline may hold the ACK unread in its socket: the
    timeout is looked at again an eighth of the RTO later, after the driver has handed the ACK over."""
    flows = [(0, 1, 4 * MTU, 0)]
    cfg = EndpointConfig(cc="paper", line_rate_bps=RATE_BPS, mtu_bytes=MTU, retransmit_timeout_ns=1_000_000,
                         pace_full_batches=True, defer_acks=True, delivery_stamps=True, model_time_service=True)

    def rank0() -> RankEndpoint:
        ep = RankEndpoint(0, make_schedule(2, flows, {0: [send(0)]}), cfg)
        ep.start(0)
        assert ep.poll_transmit(0)
        return ep

    ep = rank0()
    ep.handle_timer(10_000_000)
    assert ep.records.counters["timeouts"] == 0
    ep.receive(build_ack(sender_qpn(0), 3, 1), 0, 10_050_000)  # the ACK of all 4 packets, read after the timers
    ep.handle_timer(11_000_000)
    assert ep.records.counters["timeouts"] == 0 and ep.done
    lost = rank0()  # no ACK at all: the timeout is confirmed at the second look
    lost.handle_timer(10_000_000)
    lost.handle_timer(10_200_000)
    assert lost.records.counters["timeouts"] == 1
