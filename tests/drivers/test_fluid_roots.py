"""The fluid driver starts the ops without parents as arrays (:meth:`_Run.start_roots`): the same state as
taking them one by one with :meth:`_Run.eligible`, in op order."""

from __future__ import annotations

import numpy as np
import pytest
from support.endpoint import delay, make_schedule, recv, send
from support.sim import collective_schedule

from emulator.drivers import fluid as fluid_driver
from emulator.drivers.sim_types import SimConfig
from emulator.endpoint import EndpointConfig
from emulator.fabric.fluid import FluidConfig
from emulator.pacing.red import RedParams
from emulator.trace.model import CollectiveType


def _mixed():
    """Sends sharing queue pairs (0 and 1 on qp 0), a not-before time, a delay, a send behind a delay."""
    flows = [(0, 1, 9_000, 0), (0, 1, 5_000, 0), (1, 2, 7_000, 1), (2, 0, 3_000, 2), (1, 0, 4_000, 3)]
    ops = {0: [send(0), send(1), recv(3), recv(4)], 1: [recv(0), recv(1), send(2), delay(500), send(4, deps=(3,))],
           2: [recv(2), send(3, nb=2_000)]}  # fmt: skip
    return make_schedule(3, flows, ops)


def _state(run) -> dict:
    fab = run.fab
    return {"ready": run.op_array("ready").copy(), "start": run.op_array("start").copy(), "heap": sorted(run.heap),
            "seq": run.seq, "fifo": {q: list(d) for q, d in run.fifo.items()}, "sending": dict(run.sending),
            "recv_ready": bytes(run.recv_ready),
            "samples": run.rate_samples(),
            "left": fab.send_left.copy(), "credit": fab.credit.copy(), "active": list(fab._active),
            "is_active": fab._is_active.copy()}  # fmt: skip


def _delay_first():
    """No SEND among the ops without parents (a trace step that computes before it communicates)."""
    return make_schedule(2, [(0, 1, 9_000, 0)], {0: [delay(500), send(0, deps=(0,))], 1: [recv(0)]})


@pytest.mark.parametrize("case", ["mixed", "ring_qps2", "a2a", "delay_first"])
def test_start_roots_is_eligible_in_op_order(case: str) -> None:
    if case == "mixed":
        schedule, q = _mixed(), 1
    elif case == "delay_first":
        schedule, q = _delay_first(), 1
    elif case == "ring_qps2":
        schedule, q = collective_schedule(8, CollectiveType.ALL_REDUCE, 1 << 20), 2
    else:
        schedule, q = collective_schedule(8, CollectiveType.ALL_TO_ALL, 1 << 20), 1
    cfg = SimConfig(port_rate_bps=25e9, buffer_bytes=1 << 20, latency_ns=1000, red=RedParams())
    ecfg = EndpointConfig(mtu_bytes=4096, cc="connectx", line_rate_bps=25e9, qps_per_peer=q)
    runs = [fluid_driver._Run(schedule, cfg, ecfg, FluidConfig(), seed=1) for _ in range(2)]
    runs[0].start_roots(0.0)
    for op in range(schedule.n_ops):  # the loop start_roots stands for
        if runs[1].pending[op] == 0:
            runs[1].eligible(op, 0.0)
    a, b = (_state(r) for r in runs)
    assert a.keys() == b.keys()
    for k in a:
        va, vb = a[k], b[k]
        assert (np.array_equal(va, vb) if isinstance(va, np.ndarray) else va == vb), k
    assert bool(a["sending"]) == (case != "delay_first") and (case != "mixed" or a["fifo"] == {0: [1]})
