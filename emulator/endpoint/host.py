"""What the two halves of an endpoint may ask of the rank that hosts them, and nothing more.

:class:`~emulator.endpoint.sender.SenderSide` sees a :class:`SenderHost`,
:class:`~emulator.endpoint.receiver.ReceiverSide` a :class:`ReceiverHost`;
:class:`~emulator.endpoint.endpoint.RankEndpoint` is both. Op state (ready, started, complete) stays with
the rank: a half reports flow milestones (``on_send_started``, ``on_send_acked``, ``on_flow_received``)
and the rank moves the ops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from emulator.endpoint.events import Transmit
from emulator.endpoint.records import RankRecords

if TYPE_CHECKING:
    from emulator.endpoint.sender import TxQp


class _Host(Protocol):
    rank: int
    records: RankRecords

    def push_timer(self, t_ns: int, kind: int, obj: object) -> int:
        """Schedule timer ``kind`` for ``obj`` at ``t_ns``; returns its sequence number (a newer one for
        the same object supersedes it)."""
        ...

    def log_event(self, kind: int, qp: int, psn: int, packets: int, op: int, now_ns: int) -> int:
        """One row of the event log; returns the row or -1 (log full)."""
        ...


class SenderHost(_Host, Protocol):
    def rate_sample(self, qs: TxQp, now_ns: int, force: bool = False) -> None:
        """Record the QP's rate (at most one sample per interval unless ``force``)."""
        ...

    def on_send_started(self, op: int, now_ns: int) -> None:
        """SEND ``op``'s first packet was handed to the driver."""
        ...

    def on_send_acked(self, op: int, now_ns: int) -> None:
        """SEND ``op``'s last byte was acknowledged: the op completes."""
        ...


class ReceiverHost(_Host, Protocol):
    t0_ns: int

    def emit(self, tx: Transmit) -> None:
        """Queue a control packet (ACK/NAK/CNP) for the next ``poll_transmit``."""
        ...

    def is_held(self, op: int) -> bool:
        """Every byte of RECV ``op``'s flow has been received."""
        ...

    def on_flow_received(self, op: int, now_ns: int) -> None:
        """Every byte of RECV ``op``'s flow is here: the op completes once it is ready."""
        ...
