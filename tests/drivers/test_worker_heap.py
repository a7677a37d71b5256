"""A forked worker's heap: what it inherited and built is frozen before its clock starts.

A worker's first full collection of the ~10^5 objects it inherited from the parent took 175–630 ms on a
2-core VM; run after the clock started, it put a paced flow that far behind (bench/pacing_burst.py's first
100 ms window at +25 %). The parent forks with its objects frozen and the worker freezes its own before the
clock, so a collection during the run scans only what the run allocates.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import random

from emulator.drivers.direct import DirectConfig, run_direct
from emulator.drivers.sockets.supervisor import Supervisor
from emulator.drivers.sockets.workers import SLOTS, gc_tracked_objects, settle_heap
from emulator.endpoint.config import EndpointConfig
from emulator.schedule.model import Schedule

#: objects the parent holds in the tests: far more than a worker's own (a few thousand)
BALLAST = 200_000
FEW = 20_000
#: objects a settled worker allocates between "ready" and reading its clock (5 measured; its own endpoints
#: of the small run below were 187 more unfrozen)
SETTLED = 64


def _ballast() -> list:
    return [[i] for i in range(BALLAST)]  # each inner list is tracked by the collector


def _report_tracked(conn) -> None:
    conn.send(gc_tracked_objects())
    conn.close()


def test_a_child_of_spawn_does_not_scan_what_it_inherited_and_the_parent_is_unfrozen_after():
    held = _ballast()
    ctx = mp.get_context("fork")
    sup = Supervisor(ctx, ctx.RawArray("q", SLOTS), ctx.Event(), (0,), timeout_s=5, hang_timeout_s=5,
                     stall_timeout_s=5, progress=None)
    try:
        child = sup.spawn("probe", _report_tracked, (), (), ())
        assert child.conn.poll(20)
        tracked = child.conn.recv()
    finally:
        sup.close(grace_s=2.0)
    assert tracked < FEW, f"the child would scan {tracked} objects it inherited"
    assert gc.get_freeze_count() == 0  # the parent's own collections see its objects again
    assert gc_tracked_objects() >= BALLAST
    del held


def test_settle_heap_collects_then_freezes_and_keeps_what_is_alive():
    def run(conn) -> None:
        kept = _ballast()
        cycle: list = []
        cycle.append(cycle)  # garbage only a collection frees
        del cycle
        left = settle_heap()
        conn.send((left, gc.get_freeze_count() >= BALLAST, len(kept)))
        conn.close()

    ctx = mp.get_context("fork")
    a, b = ctx.Pipe()
    p = ctx.Process(target=run, args=(b,), daemon=True)
    p.start()
    assert a.poll(20)
    left, frozen, kept = a.recv()
    p.join(5)
    assert left < 100 and frozen and kept == BALLAST


def _p2p_schedule(size_bytes: int) -> Schedule:
    from emulator.schedule.compiler import compile_trace
    from emulator.trace.generators.common import p2p_node
    from emulator.trace.model import NodeType, RankGraph, Trace

    send = p2p_node(0, "send", NodeType.COMM_SEND_NODE, size_bytes, 0, 1, 0, (None,))
    recv = p2p_node(0, "recv", NodeType.COMM_RECV_NODE, size_bytes, 0, 1, 0)
    return compile_trace(Trace(ranks={0: RankGraph(0, [send]), 1: RankGraph(1, [recv])}))


def test_a_direct_worker_starts_its_clock_with_nothing_to_scan_but_the_run_s_own_objects():
    held = _ballast()
    port = random.Random(os.getpid()).randrange(30000, 40000)
    cfg = DirectConfig(addresses=("127.0.0.61", "127.0.0.62"), udp_port=port, ranks_per_worker=1, linger_s=0.1)
    res = run_direct(_p2p_schedule(1 << 20), cfg, EndpointConfig(line_rate_bps=2e9), timeout_s=30)
    assert res.errors == [] and res.complete, res.errors
    sockets = res.health["sockets"]
    assert sorted(sockets) == [0, 1]
    for r, st in sockets.items():
        assert 0 <= st["worker_gc_tracked_at_start"] < SETTLED, (r, st["worker_gc_tracked_at_start"])
        assert st["worker_gc_full_collections"] >= 0
    del held


def test_a_worker_builds_its_loop_before_the_common_start_time(monkeypatch):
    """Its receive buffers and compiled drains (0.6–20 ms measured) are made before "ready", not after t0,
    where they delayed every endpoint's start and its pacers began that far behind."""
    import time

    from emulator.drivers.sockets import supervisor, workers

    built = mp.get_context("fork").Array("q", 4)  # the forked workers write the time they built their loop
    init, start = workers._Loop.__init__, supervisor.Supervisor.start

    def recording_init(self, spec, *args) -> None:
        built[spec.index] = time.monotonic_ns()
        init(self, spec, *args)

    t0: list[int] = []

    def recording_start(self) -> bool:
        ok = start(self)
        t0.append(self.t0_ns)
        return ok

    monkeypatch.setattr(workers._Loop, "__init__", recording_init)
    monkeypatch.setattr(supervisor.Supervisor, "start", recording_start)
    port = random.Random(os.getpid() + 1).randrange(30000, 40000)
    cfg = DirectConfig(addresses=("127.0.0.63", "127.0.0.64"), udp_port=port, ranks_per_worker=1, linger_s=0.1)
    res = run_direct(_p2p_schedule(1 << 20), cfg, EndpointConfig(line_rate_bps=2e9), timeout_s=30)
    assert res.errors == [] and res.complete, res.errors
    assert len(t0) == 1
    assert 0 < built[0] < t0[0] and 0 < built[1] < t0[0], (list(built[:2]), t0)
