"""What the endpoint hands out: :class:`Transmit` (datagrams for the driver to put on the wire) and the
kinds of flow event it logs in its records (:class:`FlowEventKind`).

Frozen and picklable, so socket drivers can pass them between processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class FlowEventKind(IntEnum):
    """A congestion or recovery event on a queue pair, as logged in ``RankRecords.event_kind``; the
    results format stores each by its lower-case name (:mod:`emulator.results.events`)."""

    CNP_SENT = 0
    CNP_RECEIVED = 1
    NAK_SENT = 2
    NAK_RECEIVED = 3
    RETRANSMIT = 4
    TIMEOUT = 5


def split_segments(data: bytes | bytearray | memoryview, segment_size: int) -> list:
    """The datagrams of a GSO/GRO buffer (all ``segment_size`` bytes, the last may be shorter)."""
    n = len(data)
    if not segment_size or segment_size >= n:
        return [data]
    mv = memoryview(data)
    return [mv[o : o + segment_size] for o in range(0, n, segment_size)]


@dataclass(frozen=True, slots=True)
class Transmit:
    """One datagram, or one GSO batch of equal-size segments (the last may be shorter).

    ``data`` is the UDP payload (BTH ... ICRC; a batch = segments back to back); ``segment_size`` is 0
    for a single datagram, else the GSO segment size; ``tos`` is the IP TOS byte (DSCP << 2 | ECN);
    ``t_ns`` is the time the sender's pacer meant the data batch to leave (also stamped in its packets,
    :mod:`~emulator.wire.stamp`), -1 for control packets.
    """

    dst_rank: int
    data: bytes | bytearray | memoryview
    segment_size: int
    tos: int
    t_ns: int = -1

    def datagrams(self) -> list:
        """The datagrams this transmit puts on the wire (views into ``data`` for a batch)."""
        return split_segments(self.data, self.segment_size)
