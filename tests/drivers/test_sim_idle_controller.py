"""One idle DCQCN controller per sender stands for every queue pair that has had no CNP; a queue pair's first CNP
gives it a copy of its own. Results are those of a controller per queue pair from its start."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.sim import make_schedule, recv, run_digest, send

from emulator.drivers.sim import SimConfig, _Sim
from emulator.endpoint.config import EndpointConfig

_STEP = st.tuples(st.sampled_from(("cnp", "bytes", "timer")), st.integers(0, 200_000), st.integers(1, 70_000))


@settings(max_examples=60, deadline=None)
@given(cc=st.sampled_from(("connectx", "paper", "hpcc-ns3")), own=st.lists(st.integers(0, 50_000), max_size=8),
       others=st.lists(st.integers(0, 50_000), max_size=8), cnp_dt=st.integers(0, 50_000),
       steps=st.lists(_STEP, max_size=30))
def test_a_copy_of_the_shared_idle_controller_at_the_first_cnp_runs_as_the_queue_pairs_own(cc, own, others, cnp_dt,
                                                                                          steps):
    """A queue pair's own controller sees its sends, then a CNP and more; the shared idle one sees the sends of
    every queue pair (its own among them, in time order) until that CNP, which goes to a copy of it: the copy's
    rates, timers and state equal the own controller's from the CNP on, and the idle one stays idle."""
    cfg = EndpointConfig(cc=cc, line_rate_bps=25e9)
    mine, idle = cfg.make_controller(), cfg.make_controller()
    assert type(mine).shared_while_idle
    times = sorted([(t, True) for t in own] + [(t, False) for t in others])
    for t, is_own in times:
        if is_own:
            assert mine.on_bytes_sent(4096, t) is False
        assert idle.on_bytes_sent(4096, t) is False
    t = (times[-1][0] if times else 0) + cnp_dt
    copy = idle.copy()
    for c in (mine, copy):
        c.on_cnp(t)
    assert copy.state() == mine.state() and copy.next_timer_ns() == mine.next_timer_ns()
    for kind, dt, n_bytes in steps:
        t += dt
        for c in (mine, copy):
            if kind == "bytes":
                c.on_bytes_sent(n_bytes, t)
            else:
                (c.on_cnp if kind == "cnp" else c.on_timer)(t)
        assert copy.state() == mine.state() and copy.next_timer_ns() == mine.next_timer_ns()
    assert idle.rate_bps == cfg.make_controller().rate_bps and idle.next_timer_ns() is None
    assert idle.state().cnps_received == 0


def test_queue_pairs_share_their_senders_idle_controller_until_their_first_cnp():
    """A 6-to-1 incast beside a flow alone on its path (ECN marks: the incast's queue pairs get CNPs, the lone
    one none): a queue pair without a CNP holds its sender's idle controller, one with a CNP a controller of its
    own, and the results equal a run in which every queue pair has its own from the start."""
    flows = [(i, 6, 256 << 10, i) for i in range(6)] + [(7, 8, 256 << 10, 6)]
    ops = {i: [send(i)] for i in range(6)} | {6: [recv(i) for i in range(6)], 7: [send(6)], 8: [recv(6)]}
    s = make_schedule(9, flows, ops)
    ecfg = EndpointConfig(mtu_bytes=4096, cc="connectx")
    shared = _Sim(s, SimConfig(), ecfg, 3)
    result = run_digest(shared)
    own = _Sim(s, SimConfig(), ecfg, 3)
    for ep in own.eps:
        ep._tx.idle_ctrl = None
    assert run_digest(own) == result
    held, cnps = 0, 0
    for ep in shared.eps:
        tx = ep._tx
        assert tx.idle_ctrl is not None and tx.idle_ctrl.state().cnps_received == 0
        for qs in tx.qps.values():
            if qs.ctrl is tx.idle_ctrl:
                held += 1
            else:
                cnps += 1
                assert qs.ctrl.state().cnps_received > 0
    assert held and cnps


def test_a_one_packet_visit_moves_the_idle_controllers_clock_as_its_on_bytes_sent_would(monkeypatch):
    """The one-packet visit of a queue pair holding its sender's idle controller moves that controller's clock
    inline, without calling ``on_bytes_sent``: in an incast (CNPs) the run, and every sender's idle controller at
    its end, equal a run whose visits all take the general path (which calls it per batch); the idle controllers
    see a tenth of those calls or fewer."""
    from support.sim import incast

    from emulator.pacing.dcqcn import _DcqcnCommon

    calls = [0]
    orig = _DcqcnCommon.on_bytes_sent

    def counted(self, n_bytes, now_ns):
        calls[0] += self._cnps == 0
        return orig(self, n_bytes, now_ns)

    s = incast(7, 1 << 18)
    runs = []
    for visits in (True, False):
        sim = _Sim(s, SimConfig(), EndpointConfig(cc="connectx", mtu_bytes=4096), 1)
        sim.one_visits = visits
        calls[0] = 0
        monkeypatch.setattr(_DcqcnCommon, "on_bytes_sent", counted)
        assert sim.run(10_000_000_000, None)[0] == "complete"
        monkeypatch.undo()
        recs = [tuple((k, v.tobytes()) for k, v in sorted(rec.records.to_arrays().items())) for rec in sim.recorders]
        cnps = sum(rec.records.counters["cnps_received"] for rec in sim.recorders)
        runs.append(((sim.events, sim.packets, recs, [ep._tx.idle_ctrl.state() for ep in sim.eps], cnps), calls[0]))
    (fast, fast_calls), (slow, slow_calls) = runs
    assert fast == slow and fast[4] > 0  # the same run, with CNPs
    assert 10 * fast_calls <= slow_calls
