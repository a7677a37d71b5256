"""When a flow's last bytes leave the fluid fabric (:mod:`emulator.fabric.fluid`) within the slice that
delivers it, and which of the flows that start ahead of the fabric's time are still ahead of it.

A slice of ``dt`` serves each port's bytes as one fluid; a flow delivered in it left at a time inside it,
which the driver's arrival and acknowledgement times start from with ``FluidConfig.tail_delivery`` (off by
default: the slice's end). Its last byte leaves the NIC at the
finish time the slice computed (or before the slice, if it had finished sending already); at each switch
port after that, where its last bytes queued it leaves at the port's FIFO drain time for it (kept by the
fabric from the slice its input stopped), elsewhere once the port has served what it held at the slice's
start (a FIFO), never before it arrived there. An uncongested slice ends at a finish, so its flows are
delivered at its end as before; the calm regime delivers at its own exact times.
"""

from __future__ import annotations

import numpy as np


def tail_ns(path: np.ndarray, drain_ns: np.ndarray, a: np.ndarray, rows: np.ndarray,
            fin: tuple[np.ndarray, np.ndarray] | None, q_before: np.ndarray, cap: np.ndarray, t: float,
            dt: float) -> np.ndarray:  # fmt: skip
    """Per row of ``rows`` (flows ``a[rows]``, delivered in the slice ``[t, t + dt]``): when its last byte left
    its last port. ``path``: ports per flow and level; ``drain_ns``: per level and flow, the FIFO drain time
    where its last bytes queued (inf elsewhere); ``fin``: the rows (ascending) that finished sending in the
    slice and their NIC finish times; ``q_before``: each port's queue at ``t``, ``cap``: the bytes it serves
    in the slice (0 while paused)."""
    f = a[rows]
    k = rows.size
    out = np.full(k, float(t))
    here = np.zeros(k, bool)
    if fin is not None and fin[0].size:
        fr, ft = fin
        pos = np.minimum(np.searchsorted(fr, rows), fr.size - 1)
        here = fr[pos] == rows
        out[here] = ft[pos[here]]
    seen = here  # its bytes pass this level in the slice: it sent in it, or they queued here or upstream
    for lv in (1, 2, 3):
        p = path[f, lv]
        d = drain_ns[lv, f]
        queued = np.isfinite(d)
        seen = seen | queued
        on = seen & (p >= 0)
        if not on.any():
            continue
        pp = p[on]
        held = np.divide(q_before[pp], cap[pp], out=np.ones(pp.size), where=cap[pp] > 0)
        free = t + dt * np.minimum(1.0, held)
        out[on] = np.maximum(out[on], np.where(queued[on], d[on], free))
    return np.clip(out, t, t + dt)


def still_late(late: dict[int, None], start_ns: np.ndarray, a: np.ndarray,
               t: float) -> tuple[tuple[np.ndarray, np.ndarray] | None, dict[int, None]]:  # fmt: skip
    """Of the flows ``late`` (started ahead of the fabric's time), the rows in ``a`` (the view's sorted flows)
    and start times of those still after ``t`` (None if none), and those flows."""
    fl = np.fromiter(late, np.int64, len(late))
    t0 = start_ns[fl]
    ahead = t0 > t
    if not ahead.all():
        fl, t0 = fl[ahead], t0[ahead]
        late = dict.fromkeys(fl.tolist())
    return ((np.searchsorted(a, fl), t0) if fl.size else None), late
