"""A fluid port's service in one slice: the flows still arriving share it, a stopped queue pair drains as FIFO.

Theory of operation
-------------------
A port serves at most ``cap`` bytes in a slice. The flows whose queue pairs still bring bytes to it share
that in proportion to their backlogs (queued + arrived): the fluid limit of a FIFO whose input mix holds
still. Once a queue pair's input stops, that limit is wrong: under proportional service its backlog's share
shrinks as the others' backlogs grow, and its tail drains only when theirs does. Behind a FIFO its bytes
are interleaved with what was queued with them, so they leave evenly over one queueing delay (the queue
the last byte came behind, at the port's rate), the last one at its end, whatever arrives behind them
meanwhile. So a stopped flow's tail is served first, at its backlog at the stop ÷ that delay (all of it once
the delay is over), the arriving flows share what is left, and capacity they leave unused goes to the tails.

Sans-IO array functions. :class:`~emulator.fabric.fluid.FluidFabric` keeps the per-flow stop times and
drain rates, finds the stopped flows with :func:`stopped_flows` and serves each level with
:func:`emulator.fabric.fluid_kernels.serve`, the compiled form of :func:`fifo_service` (bit for bit, tested)
on the rows that can hold a tail.
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


def _share(give: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per port, the fraction of ``want`` that ``give`` covers: ``min(1, give / want)``, 1 where nothing is
    wanted (as a quotient ≤ 1 of ``max(want, give)``, so a subnormal ``want`` does not overflow)."""
    return np.divide(give, np.maximum(want, give), out=np.ones_like(want), where=want > 0)
