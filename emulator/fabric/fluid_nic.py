"""What a DCQCN queue pair's pacer lets its NIC send at line rate when a flow starts, on the fluid fabric.

The packet sim's queue-pair pacer (:class:`~emulator.pacing.pacer.TokenBucketPacer`, as
:mod:`emulator.endpoint.sender` builds it) is a token bucket of one GSO batch filled at the controller's
rate: it starts full, keeps filling while the queue pair has nothing to send, and what it holds leaves
back to back at the NIC's line rate. A queue pair sending without a break keeps it nearly empty, so a
flow posted on it right after the previous one sent its last byte (the next message of a chain, started
when the last one's ACK came) starts at the controller's rate, not with a batch at line rate; one posted
on a queue pair idle for a batch's time or more, or on a new queue pair, starts with a full batch.
"""

from __future__ import annotations

import numpy as np

_BYTES_PER_BIT_NS = 1e-9 / 8


def start_credit(batch_bytes: float, wire_bytes: np.ndarray | float, rc_bps: np.ndarray, idle_ns: np.ndarray,
                 qp: np.ndarray | int, now_ns: float) -> np.ndarray | float:  # fmt: skip
    """Bytes a flow of queue pair ``qp`` may send at line rate from ``now_ns``: what the pacer earned at
    the rate ``rc_bps[qp]`` since ``idle_ns[qp]`` (its last flow's last byte; ``-inf``: never sent), at
    most one batch and the flow's ``wire_bytes``."""
    earned = rc_bps[qp] * np.maximum(now_ns - idle_ns[qp], 0.0) * _BYTES_PER_BIT_NS
    return np.minimum(np.minimum(batch_bytes, wire_bytes), earned)
