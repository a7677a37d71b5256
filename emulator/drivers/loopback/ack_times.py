"""When an ACK leaves its receiver on model time: the delivery time of the data packet it acknowledges.

ACKs carry no stamp. Joining the switch's port model at the model clock when their datagram reaches the
switch, they would be as late as their receiver's process got the CPU: a SEND completes on its ACK, so
a late ACK delays the next step of a ring and shifts it against every flow it shares a port with, on
model time (the quickstart's All-Reduce against its All-to-All). The switch knows when it delivered each
data packet (the stamps it rewrites on the way out), so it keeps, per queue pair, the last runs of
packets it forwarded (first PSN, count, first delivery time, spacing) and times an ACK of PSN ``n`` at the
delivery of packet ``n`` plus the ACK's own serialisation at its receiver's NIC, as the sim's receiver
sends it. An ACK of a PSN outside the runs it keeps goes at the model clock.

NAKs and CNPs carry their time: a receiver with ``delivery_stamps`` (:mod:`emulator.endpoint.receiver`)
writes a NAK's model time (the delivery time of the packet that revealed the gap), modulo 2^24 ns, into
its AETH's MSN, and a CNP's (the delivery time of the CE-marked packet that caused it, or the end of a
deferring NP's quiet interval) into its reserved bytes (:func:`emulator.wire.stamp.read_cnp_stamp`); a NAK's
MSN is read as the latest such time not after the switch's model clock. On the way out the switch writes
each ACK's and NAK's model delivery time into its MSN (which the senders do not use) and each stamped
CNP's into its stamp, and a sender with ``delivery_stamps`` acts on it at that time, not when its
process read it (:mod:`emulator.endpoint.endpoint`): the SEND an ACK completes makes the next one ready
when the sim's would, and a CNP cuts the rate when the sim's would (or, its sender's service being past
that time already, from the service's time on, counted as lag). Sans-IO.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from emulator.wire.stamp import read_cnp_stamp

_PSN_MASK = 0xFFFFFF
#: runs kept per queue pair (a receiver acknowledges within a few batches of the last packet)
KEEP_RUNS = 8


class AckTimes:
    """Per queue pair, the model delivery times of the last runs of data packets forwarded."""

    def __init__(self, keep: int = KEEP_RUNS) -> None:
        self._keep = keep
        self._runs: dict[int, deque[tuple[int, int, int, int]]] = {}

    def record(self, qp: int, psn0: int, n: int, first_ns: int, step_ns: int) -> None:
        """Packets ``psn0`` … ``psn0 + n − 1`` of queue pair ``qp`` were delivered at ``first_ns + j·step_ns``."""
        runs = self._runs.get(qp)
        if runs is None:
            runs = self._runs[qp] = deque(maxlen=self._keep)
        runs.append((psn0, n, first_ns, step_ns))

    def delivered_ns(self, qp: int, psn: int) -> int | None:
        """When packet ``psn`` of queue pair ``qp`` was delivered (None: not among the runs kept)."""
        runs = self._runs.get(qp)
        if runs:
            for p0, n, first, step in reversed(runs):
                j = (psn - p0) & _PSN_MASK
                if j < n:
                    return first + j * step
        return None

    def sent_ns(self, pkt: Any, qp: int, now_ns: int) -> int:
        """When control packet ``pkt`` (ACK, NAK or CNP to the sender of queue pair ``qp``, reaching the switch at
        model time ``now_ns``) left its receiver, by the module docstring's rules; -1 when not known."""
        if pkt[0] == 0x81:
            return read_cnp_stamp(pkt)
        kind = pkt[12] >> 5
        if kind == 0:
            d = self.delivered_ns(qp, (pkt[9] << 16) | (pkt[10] << 8) | pkt[11])
            return -1 if d is None else d
        if kind == 3:
            return now_ns - ((now_ns - ((pkt[13] << 16) | (pkt[14] << 8) | pkt[15])) & _PSN_MASK)
        return -1
