"""The fluid fabric's notification points: CE marks per queue pair in a slice → CNPs on their way back.

Each queue pair's NP sees ``marked`` of its ``arrived`` packets in a slice (expected values; with a seed, the
paced stream's whole packets, each CE-marked with the slice's marked fraction, drawn). One CNP goes out when a
whole marked packet has come and the NP's quiet interval is over (:func:`~emulator.fabric.fluid_kernels.np_cnps`);
it reaches the reaction point the queue pair's feedback delay later (``cnp_due_ns``). A CNP fired while the
previous one is still on its way (a way back longer than the quiet interval: 7 µs across a spine at 1 µs per
link against ConnectX's 4 µs) follows it in ``cnp_next_ns`` with ``FluidConfig.cnps_behind``, as the packet
sim delivers both; without it, it is counted as sent and lost. Sans-IO: state in the
:class:`~emulator.fabric.fluid.FluidFabric`'s arrays, changed in place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from emulator.fabric.fluid import FluidFabric
    from emulator.fabric.fluid_view import _View


def notify(fab: FluidFabric, v: _View, marked: np.ndarray, arrived: np.ndarray, t_end: float,
           compiled: bool) -> None:  # fmt: skip
    """The NP of each queue pair of ``v.qps``: ``marked`` of its ``arrived`` packets came in the slice ending at
    ``t_end``; ``compiled``: the same as compiled loops (fluid_step_kernels.to_draw, np_fire)."""
    from emulator.fabric import fluid_kernels as K
    from emulator.fabric import fluid_step_kernels as SK

    qps, behind = v.qps, fab.cfg.cnps_behind
    if compiled:
        if fab.rng is not None:
            hit, whole, p = SK.to_draw(fab.pkt_phase, qps, marked, arrived)
            marked = np.zeros(qps.size)
            marked[hit] = fab.rng.binomial(whole, p) if hit.size else 0.0
        SK.np_fire(fab.mark_acc, fab.last_cnp_ns, qps, marked, t_end, fab.np_interval_ns, fab.np_defer, fab.np_marks,
                   fab.cnps_sent, fab.cnp_due_ns, v.qp_fb_ns, fab.cnp_next_ns, behind)  # fmt: skip
        return
    if fab.rng is not None:  # the paced stream's whole packets, each CE-marked with the slice's fraction
        # (the stream advances while marks are expected: the calm regime, which has none, need not track it)
        whole = K.packet_phase(fab.pkt_phase, qps, marked, arrived)
        hit = np.flatnonzero((whole > 0) & (marked > 0))  # no draw where none is expected
        drawn = np.zeros(qps.size)
        if hit.size:
            p = np.clip(marked[hit] / np.maximum(arrived[hit], 1e-12), 0.0, 1.0)
            drawn[hit] = fab.rng.binomial(whole[hit].astype(np.int64), p)
        marked = drawn
    # CNPs: per whole marked packet (interval 0); after the quiet interval (``defer``); or outside it (module doc)
    n = K.np_cnps(fab.mark_acc, fab.last_cnp_ns, qps, marked, t_end, fab.np_interval_ns, fab.np_defer, fab.np_marks)
    fire = n > 0
    if fire.any():
        qf = qps[fire]
        fab.cnps_sent[qf] += n[fire].astype(np.int64)
        fab.last_cnp_ns[qf] = t_end
        pending, due = fab.cnp_due_ns[qf], t_end + v.qp_fb_ns[fire]
        fab.cnp_due_ns[qf] = np.where(np.isfinite(pending), pending, due)
        if behind:  # one fired while one is on its way follows it (one behind at most)
            later = np.isfinite(pending) & ~np.isfinite(fab.cnp_next_ns[qf])
            fab.cnp_next_ns[qf[later]] = due[later]
