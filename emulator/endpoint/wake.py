"""When an endpoint next has work: :meth:`RankEndpoint.next_timer_ns <emulator.endpoint.endpoint.RankEndpoint.
next_timer_ns>`, the driver's per-service question, in one frame.

The answer is the earliest of: now (a control packet or an ACK waits), the first live entry of the endpoint's
timer heap (entries of a queue pair's controller, RTO or the NP re-armed since are skipped and dropped), and —
unless the driver asks without data (``transmit`` False: its NIC is backed up) — when the send heap's first live
queue pair may send (its due time, or later when the NIC's bucket holds too few tokens for its next packet).
The send heap's and the NIC's part is the sender's (``SenderSide.heap``/``nic``), read here rather than through
a method of the sender: the sim driver asks after every service, so one frame fewer per service counts.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from emulator.endpoint.feedback import T_CTRL, T_RTO
from emulator.endpoint.receiver import T_NP
from emulator.pacing.pacer import UNITS_PER_BYTE as _UNITS

if TYPE_CHECKING:
    from emulator.endpoint.endpoint import RankEndpoint

__all__ = ["next_timer_ns"]


def next_timer_ns(ep: RankEndpoint, transmit: bool = True) -> int | None:
    """Earliest time ``handle_timer``/``poll_transmit`` has work (None: nothing until a packet arrives).

    ``transmit=False`` leaves out data the pacers would release (for a driver whose NIC is backed up).
    """
    if ep._ctrl_out or ep._rx.pending:
        return ep._now
    timers = ep._timers
    t = None
    while timers:  # skip superseded entries (a timer of a QP or the NP re-armed since)
        t, seq, kind, obj = timers[0]
        if kind == T_CTRL:
            if obj.ctrl_seq == seq:
                break
        elif kind == T_RTO:
            if obj.rto_seq == seq:
                break
        elif kind != T_NP or ep._rx.np_seq == seq:
            break
        heapq.heappop(timers)
        t = None
    if not transmit:
        return t
    tx = ep._tx
    heap = tx.heap
    while heap:  # the send heap's first live queue pair (stale entries dropped)
        ts, seq, qs = heap[0]
        if qs.send_seq == seq:
            if qs.cur < len(qs.msgs) or qs.queue:
                break
            qs.send_seq = None
        heapq.heappop(heap)
    else:
        return t
    nic = tx.nic  # its ready_ns(qs.wcost, 0), inline: the NIC's bucket is plain, and 0 refills nothing
    cost = qs.wcost
    if cost > nic.burst_bytes:  # beyond the bucket (ready_ns None): no NIC bound
        nic_t = ts
    else:
        need = cost * _UNITS - nic._tokens
        if need <= 0:
            nic_t = nic._t_ns
        elif nic._rate:
            nic_t = nic._t_ns - (-need // nic._rate)
        else:
            nic_t = ts
    if tx.model_time:
        ts = max(ts, tx.served_ns, nic_t)
    elif nic_t > ts:
        ts = nic_t
    ts += ep._lag
    return ts if t is None or ts < t else t
