"""A fluid port's service in one slice: by backlog share with stopped tails first, or a FIFO of arrival epochs.

Theory of operation
-------------------
A port serves at most ``cap`` bytes in a slice. Serving every flow in proportion to its backlog is the fluid
limit of a FIFO only while the arrival mix holds still. A flow whose input stops keeps a shrinking share and
drains only when the others do, where behind a FIFO its bytes leave within one queueing delay (the queue
its last byte came behind, at the port's rate); so by default (:func:`fifo_service`, compiled as
:func:`emulator.fabric.fluid_kernels.serve`) a stopped flow's tail is served first, at its backlog at the
stop ÷ that delay (all of it once the delay is over), the arriving flows share what is left, and capacity
they leave unused goes to the tails. A flow whose arrival rate rises still gets its new bytes served at once
(a first-order lag of time constant Q/C), where a FIFO serves them one queueing delay later.

With ``FluidConfig.fifo_epochs`` = K each switch port keeps its queue as a ring of *arrival epochs*
(:func:`emulator.fabric.fluid_kernels.fifo_epochs`): what arrives in a slice joins the newest epoch; a new
epoch opens once the newest holds ``1 / (K − 1)`` of the port's queue and one of the ``K`` slots is free
(the oldest frees its slot when served out), so a queue spans about ``K − 1`` epochs. The port serves its
epochs oldest first, each epoch's flows in proportion to what they brought in it: a flow's share of the
service at ``t`` is its share of the arrivals at about ``t − Q/C``, at the resolution of ``Q / (K − 1)``
bytes. Per flow and switch level ``K`` float32 weights (scaled to the flow's backlog each slice, so tail
drop and in-order service within a queue pair, which change the backlog, stay consistent); per port the
ring's head, its slots in use and their bytes: memory bounded by ``12 K`` bytes per flow.

*Marks* (``FluidConfig.mark_epochs`` = K; 3 by default): the packet sim marks a packet as it leaves, on the
queue left behind it, so behind a FIFO the marks of a busy port fall on what arrived one queueing delay
earlier. With the service by backlog share the port's marks (``p(queue)`` of what it serves, unchanged) are
split among its flows as the epochs' FIFO would serve them (:func:`marked_fraction`): the same epoch state as
``fifo_epochs``, kept beside the backlog (its weights scaled to each flow's backlog every slice), serving
nothing itself; K may be fractional (epochs of ``1 / (K − 1)`` of the queue, ``ceil(K)`` slots). A flow that joins a busy port then meets the marks when its bytes would reach the head,
not at once in proportion to its backlog (bench/RESULTS.md, fmix14).

Sans-IO array functions. :class:`~emulator.fabric.fluid.FluidFabric` keeps the per-flow stop times and
drain rates and finds the stopped flows with :func:`stopped_flows`; :func:`qp_in_order` keeps a queue pair's flows
in order at a port.
"""

from __future__ import annotations

import numpy as np


def stopped_flows(inflow: np.ndarray, content: np.ndarray, key: np.ndarray | None = None,
                  arriving_keys: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """Which flows hold bytes at their ports while none arrive for them in this slice; with ``key`` (each
    flow's queue pair × port) a flow whose key is among ``arriving_keys`` (those of the flows bringing bytes)
    has not stopped: its queue pair's next flow goes on behind it."""
    stopped = (inflow <= 0) & (content > 0)
    if key is not None and stopped.any():
        stopped[stopped] = ~np.isin(key[stopped], arriving_keys)
    return stopped


def fifo_service(ph: np.ndarray, content: np.ndarray, stopped: np.ndarray, drain_ns: np.ndarray,
                 drain_bpns: np.ndarray, t_end: float, dt: float, cap: np.ndarray, n_ports: int) -> np.ndarray:  # fmt: skip
    """What each flow leaves its port ``ph`` with in the slice ``[t_end - dt, t_end)`` of its ``content``:
    stopped flows their tails first (``drain_bpns`` bytes per ns, all once ``drain_ns`` has come), the
    others in proportion to their content, the tails again with what those leave; at most ``cap[port]``."""
    if not stopped.any():
        total = np.bincount(ph, content, n_ports)
        return content * _share(cap, total)[ph]
    tail = np.where(stopped, np.where(drain_ns <= t_end, content, np.minimum(content, drain_bpns * dt)), 0.0)
    first = np.bincount(ph, tail, n_ports)
    tail *= _share(cap, first)[ph]
    room = np.maximum(cap - np.bincount(ph, tail, n_ports), 0.0)
    arriving = np.where(stopped, 0.0, content)
    total = np.bincount(ph, arriving, n_ports)
    out = tail + arriving * _share(room, total)[ph]
    spare = np.maximum(room - total, 0.0)  # capacity the arriving flows leave unused
    if (spare > 0).any():
        more = np.where(stopped, content - tail, 0.0)
        held = np.bincount(ph, more, n_ports)
        out += more * _share(spare, held)[ph]
    return out


def marked_fraction(p_mark: np.ndarray, ph: np.ndarray, fifo_out: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Per row the fraction of ``out`` (what the port ``ph`` serves the flow) CE-marked when the port's marks,
    ``p_mark[port]`` of what it serves, fall on ``fifo_out`` (what a FIFO would serve the flow): at most 1;
    ``p_mark`` where nothing is served."""
    ratio = np.divide(fifo_out, out, out=np.ones_like(out), where=out > 0)
    return np.minimum(p_mark[ph] * ratio, 1.0)


def _share(give: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per port, the fraction of ``want`` that ``give`` covers: ``min(1, give / want)``, 1 where nothing is
    wanted (as a quotient ≤ 1 of ``max(want, give)``, so a subnormal ``want`` does not overflow)."""
    return np.divide(give, np.maximum(want, give), out=np.ones_like(want), where=want > 0)


def qp_in_order(qp: np.ndarray, flows: np.ndarray, ph: np.ndarray, content: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A queue pair's flows leave a port in order (FIFO within the queue pair): what the port serves of the
    queue pair's flows goes to its earliest flow (lowest id: the driver posts a queue pair's flows in id
    order) first, up to what each holds."""
    order = np.lexsort((flows, qp, ph))
    p, q = ph[order], qp[order]
    new = np.r_[True, (p[1:] != p[:-1]) | (q[1:] != q[:-1])]
    if new.all():  # one flow per queue pair and port
        return out
    c = content[order]
    gid = np.cumsum(new) - 1
    served = np.bincount(gid, out[order])
    ahead = np.cumsum(c) - c
    ahead -= ahead[np.flatnonzero(new)][gid]
    res = np.empty_like(out)
    res[order] = np.clip(served[gid] - ahead, 0.0, c)
    return res

