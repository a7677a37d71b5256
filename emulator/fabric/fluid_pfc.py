"""PFC of the fluid fabric (:mod:`emulator.fabric.fluid`): a switch port's XOFF and XON at the end of a slice."""

from __future__ import annotations

import numpy as np


def pfc_update(fab, dt: float) -> None:
    """Count the slice's XOFF and pause time of ``fab`` (a :class:`~emulator.fabric.fluid.FluidFabric`), then XOFF
    above the XOFF threshold and XON at or below XON."""
    fab.xoff_time_ns += np.where(fab.xoff, dt, 0.0)
    fab.paused_time_ns += np.where(fab.paused, dt, 0.0)
    q = fab.queue
    on = fab.pfc_port & ~fab.xoff & (q >= fab.pfc.xoff_bytes)
    off = fab.xoff & (q <= fab.pfc.xon_bytes)
    if not (on.any() or off.any()):
        return
    fab.xoff_count += on
    fab.xoff = (fab.xoff | on) & ~off
    at_node = np.bincount(fab.owner[fab.xoff], minlength=int(max(fab.owner.max(), fab.peer.max())) + 1)
    fab.paused = at_node[fab.peer] > 0
