"""Queue pairs per rank pair on the fluid fabric: a schedule's flows as parts on wire queue pairs.

With ``transport.qps_per_peer`` = Q every flow of schedule queue pair ``q`` is split as the packet sim's
endpoints split it (:func:`emulator.endpoint.qpn.part_sizes`: as even as bytes allow, empty parts left
out): part ``k`` travels on wire queue pair ``q·Q + k``, which has its own RoCEv2 UDP source port (so its
own ECMP path) and its own DCQCN state. The fluid fabric runs parts; the driver completes a flow's RECV
when its last part arrives and its SEND when its last part is acknowledged. Q = 1 is one part per flow,
on the schedule's own queue pair.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulator.schedule.model import Schedule


@dataclass(frozen=True, slots=True)
class Parts:
    """Parts of a schedule's flows: part ``p`` carries ``size_bytes[p]`` of flow ``flow[p]`` on wire queue
    pair ``qp[p]``; the parts of flow ``f`` are ``ptr[f]:ptr[f + 1]`` (in part order)."""

    flow: np.ndarray
    qp: np.ndarray
    size_bytes: np.ndarray
    ptr: np.ndarray
    qps_per_peer: int

    @property
    def n(self) -> int:
        return int(self.flow.size)


def flow_parts(schedule: Schedule, qps_per_peer: int = 1) -> Parts:
    """The parts of every flow of ``schedule`` over ``qps_per_peer`` wire queue pairs per schedule queue pair."""
    q_per = int(qps_per_peer)
    size = schedule.flow_size_bytes.astype(np.int64)
    nf = size.size
    if q_per == 1:
        ident = np.arange(nf, dtype=np.int64)
        return Parts(ident, schedule.flow_qp.astype(np.int64), size, np.arange(nf + 1, dtype=np.int64), 1)
    base, extra = np.divmod(size, q_per)
    k = np.arange(q_per, dtype=np.int64)
    part = base[:, None] + (k[None, :] < extra[:, None])  # [flow, k] bytes of part k
    keep = part > 0
    keep[:, 0] |= size == 0  # an empty flow is one empty part 0
    count = keep.sum(axis=1)
    flow = np.repeat(np.arange(nf, dtype=np.int64), count)
    kk = np.broadcast_to(k, part.shape)[keep]
    qp = schedule.flow_qp.astype(np.int64)[flow] * q_per + kk
    ptr = np.concatenate(([0], np.cumsum(count))).astype(np.int64)
    return Parts(flow, qp, part[keep].astype(np.int64), ptr, q_per)
