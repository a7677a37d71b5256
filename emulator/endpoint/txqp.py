"""Sender state of one queue pair: its message FIFO, PSN window, pacer and rate controller.

The state machine that drives it is described in :mod:`emulator.endpoint.sender`.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque

from emulator.pacing.base import RateController
from emulator.pacing.pacer import TokenBucketPacer


class TxQp:
    """Sender state of one queue pair (see the module docstring)."""

    __slots__ = ("qp", "dqpn", "dst", "queue", "msgs", "starts", "head", "cur", "una", "nxt", "max_sent",
                 "ctrl", "pacer", "rate_bps", "send_seq", "ctrl_t", "ctrl_seq", "rto_seq", "last_progress_ns",
                 "backoff", "last_sample_ns", "icrc", "since_ackreq", "retx_ev", "stamp_last", "wnd", "wnd_recover", "wnd_acked",
                 "wcost", "due_ns", "recover")  # fmt: skip

    def __init__(self, qp: int, dst: int, ctrl: RateController, pacer: TokenBucketPacer, icrc: object) -> None:
        self.qp = qp
        self.dqpn = 2 * qp + 2  # receiver_qpn(qp), without its frame (one queue pair per flow)
        self.dst = dst
        self.queue: deque[tuple[int, int, int, bool, bool]] = deque()  # (op, flow, size, first, last) not started
        self.msgs: list[tuple[int, int, int, int, int, bool]] = []  # (psn start, packets, op, flow, size, last)
        self.starts: list[int] = []
        self.head = 0  # msgs[head:] are not fully acknowledged
        self.cur = 0  # index of the message holding nxt (== len(msgs): next message comes from queue)
        self.una = 0
        self.nxt = 0
        self.max_sent = 0
        self.ctrl = ctrl
        self.pacer = pacer
        self.rate_bps = ctrl.rate_bps
        self.send_seq: int | None = None
        self.ctrl_t: int | None = None
        self.ctrl_seq = -1
        self.rto_seq: int | None = None
        self.last_progress_ns = 0
        #: go-back-N recovery (after a NAK or timeout) lasts while ``una`` is below this PSN (feedback docstring, RTO)
        self.recover = 0
        self.backoff = 1
        self.last_sample_ns = -(1 << 62)
        self.icrc = icrc
        self.since_ackreq = 0
        self.retx_ev = False  # a go-back-N rewind was logged: re-sent packets grow its row
        self.stamp_last = -(1 << 62)  # with a stamp spread: the stamp of the QP's last packet sent
        self.wnd = 0  # window of outstanding packets (0: none; EndpointConfig.max_outstanding_bytes)
        self.wnd_recover = 0  # a NAK below this PSN is of a loss the window was already cut for
        self.wnd_acked = 0  # packets acknowledged since the window last grew
        #: tokens the QP's next visit waits for (``SenderSide._wait_cost``), kept while it is in the send heap
        self.wcost = 0
        #: its key in the send heap while it is there (when its pacer allows its next visit)
        self.due_ns = 0

    def locate(self, psn: int) -> int:
        """Index of the message holding ``psn`` (len(msgs) when psn is past the last started message)."""
        n = len(self.msgs)
        if self.head >= n:
            return n
        i = max(self.head, bisect_right(self.starts, psn, self.head) - 1)
        start, n_pkts = self.msgs[i][0], self.msgs[i][1]
        return i + 1 if psn >= start + n_pkts else i
