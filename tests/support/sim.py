"""Shared helpers for the sim-driver tests: compiled collectives and hand-built schedules."""

from __future__ import annotations

import numpy as np

from emulator.schedule.compiler import CompileOptions, compile_trace
from emulator.trace.generators.collective import CollectiveOptions, collective_trace
from emulator.trace.model import CollectiveType, RankGraph, Trace
from support.endpoint import delay, make_schedule, recv, send  # noqa: F401


def collective_schedule(n: int, coll: CollectiveType, size_bytes: int, algorithm: str | None = None, **kw):
    """Generate a one-collective trace for ``n`` ranks and compile it (emulator.schedule.compiler)."""
    g = collective_trace(CollectiveOptions(ranks=n, collectives=(coll,), size_bytes=size_bytes, **kw))
    t = Trace(ranks={r: RankGraph(r, list(g.nodes(r))) for r in range(n)}, groups=dict(g.groups))
    return compile_trace(t, CompileOptions(algorithms={coll: algorithm} if algorithm else {}))


def incast(n_senders: int, size_bytes: int):
    """``n_senders`` ranks each send one flow to the last rank, all at t0."""
    flows = [(i, n_senders, size_bytes, i) for i in range(n_senders)]
    ops = {i: [send(i)] for i in range(n_senders)}
    ops[n_senders] = [recv(i) for i in range(n_senders)]
    return make_schedule(n_senders + 1, flows, ops)


def assert_conserved(schedule, result):
    """Every flow delivered exactly once: per rank, bytes sent (new) and received (accepted in order) equal
    the scheduled bytes, every op complete, every RECV accepted exactly its flow's packets."""
    size = schedule.flow_size_bytes
    for r, rec in result.records.items():
        assert rec.counters["bytes_received"] == int(size[schedule.flow_dst == r].sum()), r
        assert rec.counters["bytes_sent"] == int(size[schedule.flow_src == r].sum()), r
        assert np.all(rec.end_ns >= 0), r
        ops = schedule.rank_ops(r)
        kinds = schedule.op_kind[ops.start : ops.stop]
        flows = schedule.op_flow[ops.start : ops.stop]
        recv_sel = kinds == 1
        mtu = 4096
        expect = np.maximum(1, -(-size[flows[recv_sel]] // mtu))
        assert np.array_equal(rec.packets[recv_sel], expect), r
    total = sum(rec.counters["bytes_received"] for rec in result.records.values())
    assert total == int(size.sum())


def jain(values):
    v = np.asarray(values, dtype=float)
    return float(v.sum() ** 2 / (len(v) * (v * v).sum()))


def mean_rate_bps(rec, qp: int, lo_ns: float, hi_ns: float) -> float:
    """Time-average of a QP's sampled controller rate (a step function) over [lo, hi]."""
    sel = np.asarray(rec.rate_qp) == qp
    t = np.asarray(rec.rate_t_ns)[sel]
    r = np.asarray(rec.rate_bps, dtype=float)[sel]
    grid = np.linspace(lo_ns, hi_ns, 400)
    idx = np.clip(np.searchsorted(t, grid, side="right") - 1, 0, None)
    return float(r[idx].mean())


def count_services(sim) -> list[int]:
    """Count the services of a sim (``emulator.drivers.sim._Sim``) from now on, a wake's one-packet visit
    (``RankEndpoint.visit_one``) included: returns a one-item list that ``sim.run`` increments."""
    calls = [0]
    served = sim.served

    def counted(r, t, txs, top=False):
        calls[0] += 1
        served(r, t, txs, top)

    sim.served = counted
    return calls


def sim_digest(sim, end_ns: int) -> tuple:
    """Everything a packet-sim run (``emulator.drivers.sim._Sim``) leaves: end time, counts, every rank's records and
    counters, the ports' statistics and the queue samples — equal tuples mean the same run."""
    recs = tuple((k, v.tobytes()) for rec in sim.recorders for k, v in sorted(rec.records.to_arrays().items()))
    counters = tuple(tuple(sorted(rec.records.counters.items())) for rec in sim.recorders)
    fabric = tuple(tuple(p.to_dict().items()) for p in sim.fabric(end_ns).ports)
    return (end_ns, sim.events, sim.packets, sim.hops, recs, counters, fabric, tuple(sim.samples_t),
            tuple(map(tuple, sim.samples_q)))


def run_digest(sim) -> tuple:
    """Run ``sim`` to completion (asserted) and return :func:`sim_digest`."""
    reason, end_ns = sim.run(10_000_000_000, None)
    assert reason == "complete"
    return sim_digest(sim, end_ns)
