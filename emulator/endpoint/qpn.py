"""Queue-pair numbers on the wire, derived from the schedule's queue-pair ids.

Schedule queue pair ``q`` (``Schedule.flow_qp``) connects a sending rank and a receiving rank. Each end
has its own 24-bit QP number, so anyone holding the schedule (the endpoints, the software switch) can
tell from a BTH destination QP alone which rank a packet is for:

    receiver-side QPN = 2·q + 2   (data packets carry it; the data receiver owns it)
    sender-side   QPN = 2·q + 3   (ACKs, NAKs and CNPs carry it; the data sender owns it)

QPN 0 and 1 are special in InfiniBand (SMI/GSI) and are never used.

With ``qps_per_peer`` = Q > 1 every schedule queue pair is Q wire queue pairs: part ``k`` of each flow
(:func:`part_sizes`) travels on wire qp ``q·Q + k``, whose QPNs (above, with the wire qp for ``q``) give
it its own RoCEv2 UDP source port, hence its own ECMP path, and its own DCQCN state. Q = 1 is the
schedule's numbering unchanged.
"""

from __future__ import annotations

import numpy as np

QPN_LIMIT = 1 << 24


def receiver_qpn(qp: int) -> int:
    return 2 * qp + 2


def sender_qpn(qp: int) -> int:
    return 2 * qp + 3


def qp_of(qpn: int) -> tuple[int, bool]:
    """(schedule qp id, True if this QPN is the data *sender's* end)."""
    v = qpn - 2
    return v >> 1, bool(v & 1)


def part_sizes(size_bytes: int, qps_per_peer: int) -> list[tuple[int, int]]:
    """(part index, bytes) of the parts a flow of ``size_bytes`` is split into over ``qps_per_peer`` queue
    pairs: as even as bytes allow, the first ``size % Q`` parts one byte longer; empty parts are left out
    (an empty flow is one empty part 0)."""
    base, extra = divmod(size_bytes, qps_per_peer)
    parts = [(k, base + (k < extra)) for k in range(qps_per_peer) if base + (k < extra) > 0]
    return parts or [(0, 0)]


def qp_endpoints(flow_qp: np.ndarray, flow_src: np.ndarray, flow_dst: np.ndarray,
                 qps_per_peer: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Per wire qp id: (sending rank, receiving rank); -1 for ids no flow uses."""
    n = int(flow_qp.max()) + 1 if flow_qp.size else 0
    if 2 * n * qps_per_peer + 3 >= QPN_LIMIT:
        raise ValueError(f"{n} x {qps_per_peer} queue pairs do not fit in 24-bit QP numbers")
    qp_src = np.full(n, -1, dtype=np.int32)
    qp_dst = np.full(n, -1, dtype=np.int32)
    qp_src[flow_qp] = flow_src
    qp_dst[flow_qp] = flow_dst
    return np.repeat(qp_src, qps_per_peer), np.repeat(qp_dst, qps_per_peer)


def rank_for_qpn(qpn: int, qp_src: np.ndarray, qp_dst: np.ndarray) -> int:
    """The rank that owns ``qpn`` (where a packet with this destination QP must go); -1 if unknown."""
    qp, sender_side = qp_of(qpn)
    if qp < 0 or qp >= qp_src.shape[0]:
        return -1
    return int(qp_src[qp] if sender_side else qp_dst[qp])
