"""What a DCQCN queue pair's pacer lets its NIC send at line rate when a flow starts, on the fluid fabric.

The packet sim's queue-pair pacer (:class:`~emulator.pacing.pacer.TokenBucketPacer`, as
:mod:`emulator.endpoint.sender` builds it) is a token bucket of one GSO batch filled at the controller's
rate: it starts full, keeps filling while the queue pair has nothing to send, and what it holds leaves
back to back at the NIC's line rate. A queue pair sending without a break keeps it nearly empty, so a
flow posted on it right after the previous one sent its last byte (the next message of a chain, started
when the last one's ACK came) starts at the controller's rate, not with a batch at line rate; one posted
on a queue pair idle for a batch's time or more, or on a new queue pair, starts with a full batch.
A run whose queue pairs carry one flow each (an All-to-All) keeps no per-queue-pair clock: none restarts.
"""

from __future__ import annotations

import numpy as np

_BYTES_PER_BIT_NS = 1e-9 / 8


def idle_clock(n_qps: int, restarts: bool) -> np.ndarray | None:
    """Per queue pair, when its last flow sent its last byte (``-inf``: never); None if no queue pair has
    more than one flow (``restarts`` False)."""
    return np.full(n_qps, -np.inf) if restarts else None


def sent_last(idle_ns: np.ndarray | None, qp: np.ndarray, t_ns: np.ndarray | float) -> None:
    """Flows of queue pairs ``qp`` sent their last byte at ``t_ns``: their pacers fill from then on."""
    if idle_ns is not None:
        np.maximum.at(idle_ns, qp, t_ns)


def start_credit(batch_bytes: float, wire_bytes: np.ndarray | float, rc_bps: np.ndarray,
                 idle_ns: np.ndarray | None, qp: np.ndarray | int, now_ns: float | np.ndarray) -> np.ndarray | float:  # fmt: skip
    """Bytes a flow of queue pair ``qp`` may send at line rate from ``now_ns``: what the pacer earned at
    the rate ``rc_bps[qp]`` since ``idle_ns[qp]`` (its last flow's last byte; ``-inf`` or no clock: never
    sent, a full bucket), at most one batch and the flow's ``wire_bytes``."""
    if idle_ns is None:
        return np.minimum(batch_bytes, wire_bytes)
    earned = rc_bps[qp] * np.maximum(now_ns - idle_ns[qp], 0.0) * _BYTES_PER_BIT_NS
    return np.minimum(np.minimum(batch_bytes, wire_bytes), earned)
