"""The loopback's model-time service and its timers: a rate controller's timer acts at its own (model) time
however late the worker ran it, and a service polled past a due timer runs the timer first (a post it makes
joins the round robin at its time, as in the sim). In-process endpoints, no real clock."""

from __future__ import annotations

from support.endpoint import make_schedule, recv, send

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.qpn import sender_qpn
from emulator.wire import build_cnp

MTU = 1024
RATE = 1e9
PKT_NS = (MTU + 100) * 8  # about one packet at 1 Gbps


def _serve(ep: RankEndpoint, until_ns: int) -> list:
    out = []
    for _ in range(1000):
        txs = ep.poll_transmit(until_ns)
        if not txs:
            break
        out.extend(txs)
    return out


def test_a_late_rate_increase_timer_acts_at_its_model_time_on_the_model_time_service():
    cfg = EndpointConfig(mtu_bytes=MTU, cc="paper", line_rate_bps=RATE, delivery_stamps=True,
                         model_time_service=True)
    ep = RankEndpoint(0, make_schedule(2, [(0, 1, 4096 * MTU, 0)], {0: [send(0)]}), cfg)
    ep.start(0)
    _serve(ep, 1_000_000)
    t_cnp = ep._tx.served_ns + 1
    ep.receive(build_cnp(sender_qpn(0), stamp_ns=t_cnp), 0, t_cnp + 1)
    cut_rate = ep.records.rate_bps[-1]
    assert cut_rate < RATE
    t_timer = ep.next_timer_ns(transmit=False)
    assert t_timer is not None and t_timer > t_cnp
    late = t_timer + 5_000_000  # the worker woke 5 ms late
    ep.handle_timer(late)
    times = list(ep.records.rate_t_ns)
    # each increase at its own time on the controller's grid (before: one change at the late wake-up)
    assert t_timer in times
    assert late not in times
    assert ep.records.rate_bps[times.index(t_timer)] > cut_rate


def _two_flows() -> RankEndpoint:
    cfg = EndpointConfig(mtu_bytes=MTU, cc="none", line_rate_bps=RATE, model_time_service=True)
    sched = make_schedule(3, [(0, 1, 400 * MTU, 0), (0, 2, 400 * MTU, 1)], {0: [send(0), send(1, nb=NB)]})
    ep = RankEndpoint(0, sched, cfg)
    ep.start(0)
    _serve(ep, NB - 50_000)  # served up to before the second op's time
    return ep


NB = 200_000


def test_a_poll_past_a_due_not_before_timer_posts_the_op_at_its_time_first():
    on_time = _two_flows()
    on_time.handle_timer(NB)  # the worker ran the timer when it was due
    want = [(tx.dst_rank, tx.t_ns) for tx in _serve(on_time, NB + 40 * PKT_NS)]
    assert any(dst == 2 for dst, _ in want)
    late = _two_flows()
    got = [(tx.dst_rank, tx.t_ns) for tx in _serve(late, NB + 40 * PKT_NS)]  # no handle_timer call before
    assert got == want  # the same packets, order and stamps (before: the second flow missing)


def test_a_send_whose_delivery_is_read_after_the_service_passed_its_time_counts_as_posted_late():
    from emulator.endpoint.qpn import receiver_qpn
    from emulator.wire import build_write_batch

    cfg = EndpointConfig(mtu_bytes=MTU, cc="none", line_rate_bps=RATE, model_time_service=True,
                         delivery_stamps=True, feedback_lag_bound_ns=PKT_NS)
    flows = [(0, 1, MTU, 0), (1, 2, 400 * MTU, 1), (1, 3, 4 * MTU, 2)]
    ops = {1: [recv(0), send(1), send(2, deps=(0,))]}  # the second SEND waits for the RECV
    ep = RankEndpoint(1, make_schedule(4, flows, ops), cfg)
    ep.start(0)
    _serve(ep, 1_000_000)
    served = ep._tx.served_ns
    delivered = served - 5 * PKT_NS  # delivered 5 packet times before the service's time, read only now
    wb = build_write_batch(0, 1, dest_qp=receiver_qpn(0), message_bytes=MTU, mtu_bytes=MTU, packet_index=0,
                           stamp_ns=delivered)
    ep.receive(bytes(wb.buffer), 0, served + 1)
    c = ep.records.counters
    assert c["posts_timed"] == 2
    assert c["posts_passed"] == 1 and c["posts_late"] == 1
    assert c["post_lag_max_ns"] == served - delivered


def test_more_than_one_percent_of_sends_posted_late_is_not_timing_faithful():
    from emulator.instruments.fidelity import timing_fidelity, with_post_lag

    fid = timing_fidelity({"p50": 0, "p99": 0}, {"p50": 0, "p99": 0}, 100_000)
    assert with_post_lag(fid, 1000, 10, 500_000)["faithful"]
    out = with_post_lag(fid, 1000, 11, 500_000)
    assert not out["faithful"] and "11 of 1000 sends posted" in out["verdict"]
    assert not with_post_lag(fid, 1000, 2, 500_000, congested=True)["faithful"]
