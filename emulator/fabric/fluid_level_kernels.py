"""One switch level of the fluid fabric's slice (:meth:`emulator.fabric.fluid.FluidFabric._step`) as one compiled
call: the level's content, FIFO tails, port service, the marks' epoch FIFO (``FluidConfig.mark_epochs``), a queue
pair's flows in order, then its backlogs, marks and port accounts — the same compiled loops the slice calls one by
one at a level of compiled size, called here in the same order on the same arrays, so the results are the same bit
for bit (no fast-math). Python makes one call a level instead of six to ten; a level whose queues go over the
buffer is handed back before its backlogs are written (the tail drop is Python's). Compiled by numba once and
cached on disk (``cache=True``); sans-IO."""

from __future__ import annotations

import numpy as np
from numba import njit

from emulator.fabric.fluid_kernels import fifo_epochs, level_in, level_out, level_out_marks, remainder, serve
from emulator.fabric.fluid_step_kernels import fifo_tail, port_account, qp_in_order


@njit(cache=True)
def level_step(backlog: np.ndarray, drain: np.ndarray, drain_bpns: np.ndarray, flows: np.ndarray, rows: np.ndarray,
               ph: np.ndarray, in_order: bool, inflow: np.ndarray, qp: np.ndarray, queue: np.ndarray,
               rate: np.ndarray, t_end: float, dt: float, cap: np.ndarray, buffer_bytes: float, tx_bytes: np.ndarray,
               marked_packets: np.ndarray, pkt_bytes: float, p_mark: np.ndarray, unmarked: np.ndarray,
               ep: np.ndarray, ep_head: np.ndarray, ep_used: np.ndarray, ep_tot: np.ndarray, q_before: np.ndarray,
               spans: float) -> tuple:  # fmt: skip
    """A level (its flows, their rows in the slice, their ports ``ph``; ``backlog``, ``drain``, ``drain_bpns``
    the level's per-flow rows) served for the slice ending at ``t_end``: ``(over, out, rest, total, queue,
    fifo_out)`` as the slice's own calls give them. With ``spans`` > 0 (``mark_epochs − 1``) the port's marks fall
    as the FIFO of arrival epochs (``ep``, ``ep_head``, ``ep_used``, ``ep_tot``: the level's weights and the
    ports' rings, updated in place; ``q_before``: the ports' queues at the slice's start) serves ``fifo_out``;
    otherwise ``fifo_out`` is empty and the epoch arrays are not read. Unless ``over`` (a port's queue above
    ``buffer_bytes``), the level's backlogs, ``inflow`` and ``unmarked`` (per row), the ports' ``queue``,
    ``tx_bytes`` and ``marked_packets`` are updated in place as well; with ``over`` only the FIFO tails'
    ``drain``/``drain_bpns`` and the epochs are."""
    n_ports = rate.size
    content, at = level_in(backlog, drain, flows, rows, inflow)
    if at.size:
        stop, dl, bpns = fifo_tail(at, flows, rows, ph, inflow, content, qp, in_order, drain, drain_bpns, queue, rate,
                                   t_end, dt)  # fmt: skip
    else:
        stop, dl, bpns = np.zeros(0, np.bool_), np.zeros(0), np.zeros(0, np.float32)
    out, rest, total, q = serve(ph, content, at, stop, dl, bpns, t_end, dt, cap, n_ports)
    if spans > 0:  # the marks' FIFO of arrival epochs, beside the service (serving nothing itself)
        fo = fifo_epochs(ph, flows, rows, content, inflow, ep, ep_head, ep_used, ep_tot, q_before, cap, n_ports,
                         spans)[0]  # fmt: skip
    else:
        fo = np.zeros(0)
    if in_order:  # some queue pair has more than one flow at a port of this level
        out = qp_in_order(qp[flows], flows, ph, content, out)
        rest, q = remainder(ph, content, out, n_ports)
    top = 0.0  # queue.max(initial=0.0), a NaN included
    for p in range(n_ports):
        if q[p] != q[p] or top != top:
            top = np.nan
        elif q[p] > top:
            top = q[p]
    over = top > buffer_bytes
    if not over:
        if spans > 0:
            level_out_marks(backlog, flows, rows, ph, rest, out, inflow, unmarked, p_mark, fo)
        else:
            level_out(backlog, flows, rows, ph, rest, out, inflow, unmarked, p_mark)
        port_account(total, q, buffer_bytes, queue, tx_bytes, marked_packets, pkt_bytes, p_mark)
    return over, out, rest, total, q, fo
