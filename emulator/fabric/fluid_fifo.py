"""A fluid port's service in one slice: a FIFO of arrival epochs, so departures follow arrivals one queueing delay later.

Theory of operation
-------------------
A port serves at most ``cap`` bytes in a slice. Serving every flow in proportion to its backlog is the fluid
limit of a FIFO only while the arrival mix holds still: a flow whose arrival rate rises gets its new bytes
served at once (a first-order lag of time constant Q/C), where a FIFO serves them one queueing delay later,
behind what was queued before them; a flow whose input stops keeps a shrinking share and drains only when
the others do, where behind a FIFO its bytes leave within one queueing delay.

So each switch port keeps its queue as a ring of a few *arrival epochs*
(:func:`emulator.fabric.fluid_kernels.fifo_epochs`): what arrives in a slice joins the newest epoch; a new
epoch opens once the newest holds ``1 / (K − 1)`` of the port's queue and one of the ``K`` slots is free
(the oldest frees its slot when served out), so a queue spans about ``K − 1`` epochs. The port serves its
epochs oldest first, each epoch's flows in proportion to what they brought in it: the share of a flow in the
service at ``t`` is its share of the arrivals at about ``t − Q/C``, at the resolution of ``Q / (K − 1)``
bytes. Per flow and switch level the fabric keeps ``K`` byte counts (scaled to the flow's backlog each slice,
so tail drop and in-order service within a queue pair, which change the backlog, stay consistent); per port
the ring's head, its slots in use and their bytes. Memory is ``K × 3`` floats per flow, bounded.

Sans-IO: :func:`stopped_flows` finds the flows whose input to a port stopped (the fabric dates their last
queued bytes, one queueing delay on, and the driver the store-and-forward of a part from the levels where
they queued).
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
