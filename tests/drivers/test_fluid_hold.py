"""The fluid driver holds events that only record past the fabric's slice: an acknowledgement that starts
nothing (a ring's SEND has no children), an arrival whose next SEND queues behind a busy queue pair. They
cut no slice, and their records keep their exact times and the CNP counts of their time."""

from __future__ import annotations

import numpy as np
import pytest
from support.sim import collective_schedule

from emulator.drivers import fluid as fluid_driver
from emulator.drivers.sim_types import SimConfig
from emulator.endpoint import EndpointConfig
from emulator.fabric.fluid import FluidConfig
from emulator.fabric.topology import TopologyConfig
from emulator.pacing.red import RedParams
from emulator.trace.model import CollectiveType


class _Spy(fluid_driver._Run):
    """The driver, noting every advance's limit and end, every acknowledgement's exact time, and the times
    CNPs reach queue pairs."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.limits: list[float] = []
        self.spans: list[tuple[float, float]] = []
        self.ack_ns: dict[int, float] = {}
        self.arrive_ns: set[float] = set()
        self.cnp_log: list[tuple[float, np.ndarray]] = []  # (time, queue pairs) of each CNP landing
        #: (time, queue pair, CNP count read, read before the fabric reached its time) per acknowledgement
        self.ack_cnps: list[tuple[float, int, int, bool]] = []
        fab, advance, on_cnp = self.fab, self.fab.advance, self.fab.cc.on_cnp

        def spy_advance(now_ns, limit_ns):
            self.limits.append(limit_ns)
            out = advance(now_ns, limit_ns)
            self.spans.append((now_ns, out[0]))
            return out

        def spy_on_cnp(idx, now_ns):
            if idx.size:
                self.cnp_log.append((now_ns, np.array(idx)))
            return on_cnp(idx, now_ns)

        fab.advance, fab.cc.on_cnp = spy_advance, spy_on_cnp

    def handle(self, kind, x, t, cnps_now=None) -> None:
        if kind == fluid_driver._ACKED:
            for i, q in enumerate(x):
                qp = self.part_qp[q]
                got = cnps_now[i] if cnps_now is not None else int(self.fab.cc.cnps[qp])
                # held, or handled ahead of the fabric's time (inside the congested step it runs next)
                self.ack_cnps.append((t, qp, got, cnps_now is not None or t > self.fab.now_ns))
        super().handle(kind, x, t, cnps_now)

    def push_batch(self, t, kind, x) -> None:
        for t_ns, k, p in zip(t.tolist(), kind.tolist(), x.tolist(), strict=True):
            if k == fluid_driver._ACKED:
                self.ack_ns[self.part_flow[p]] = t_ns
            else:
                self.arrive_ns.add(t_ns)
        super().push_batch(t, kind, x)


def _ring(n: int = 16, seed: int | None = 1) -> tuple:
    s = collective_schedule(n, CollectiveType.ALL_REDUCE, 4 << 20)
    cfg = SimConfig(topology=TopologyConfig(kind="leaf_spine", leaves=n // 4, spines=2, hosts_per_leaf=4),
                    port_rate_bps=400e9, buffer_bytes=1 << 20, latency_ns=1000, red=RedParams())
    ecfg = EndpointConfig(mtu_bytes=4096, cc="connectx", line_rate_bps=400e9)
    run = _Spy(s, cfg, ecfg, FluidConfig(), seed)
    reason, _, _ = run.run(10**10, None)
    assert reason == "complete"
    return s, run


@pytest.fixture(scope="module")
def ring():
    return _ring()


def test_an_acknowledgement_that_starts_nothing_cuts_no_slice(ring):
    s, run = ring
    # a ring's SEND starts nothing (its only child is the rank's last op): its acknowledgement may be a limit
    # of the fabric's advance only where an event that starts something falls at the same time (an arrival)
    assert len(run.ack_ns) == s.n_flows
    end = run.op_array("end")
    # a SEND that is the last parent of an op to end makes that op ready: its acknowledgement starts something
    last = {int(s.parents(c)[np.argmax(end[s.parents(c)])]) for c in range(s.n_ops) if s.parents(c).size}
    starting = {t for f, t in run.ack_ns.items() if int(run.send_op_l[f]) in last}  # same-time acks share an entry
    acks = {t for f, t in run.ack_ns.items() if int(run.send_op_l[f]) not in last} - run.arrive_ns - starting
    step_ns = FluidConfig().step_ns
    cut = [(t0, lim) for (t0, _), lim in zip(run.spans, run.limits, strict=True) if lim in acks]
    # held when within one step of the advance's start (the fabric would end its slice there when congested)
    # (up to the float rounding of t0 + step_ns: an acknowledgement 1 ulp after the window's end is its limit)
    assert all(lim - t0 >= step_ns - 1e-6 for t0, lim in cut), [c for c in cut if c[1] - c[0] < step_ns][:5]
    assert len(cut) < s.n_flows // 3  # 329 of 480 when every acknowledgement cut a slice


def test_held_events_keep_their_exact_times(ring):
    s, run = ring
    end = run.op_array("end")
    sends = np.flatnonzero(s.op_kind == fluid_driver.OP_SEND)
    want = np.array([round(run.ack_ns[int(f)]) for f in s.op_flow[sends]])
    # every SEND ends at its acknowledgement, not at a slice's end (a slice is at least 1 ns: an event less than
    # 1 ns after the fabric's time is handled at that time)
    assert np.abs(end[sends] - want).max() <= 1
    recvs = np.asarray(run.recv_op_l)[s.op_flow[sends]]
    # a ring's RECV is ready from the start: it ends when its flow arrives, one path's latency before the ack
    assert np.abs(end[recvs] - (end[sends] - np.asarray(run.lat)[s.op_flow[sends]])).max() <= 1


def test_an_acknowledgement_counts_the_cnps_its_queue_pair_had_at_its_time(ring):
    _, run = ring
    times = np.array([t for t, idx in run.cnp_log for _ in range(idx.size)])
    qps = np.concatenate([idx for _, idx in run.cnp_log])
    assert times.size
    assert sum(held for *_, held in run.ack_cnps) > len(run.ack_cnps) // 2  # most were held past a cut
    for t, qp, got, _ in run.ack_cnps:
        assert got == int(((qps == qp) & (times <= t)).sum()), (t, qp)
