"""The software switch process's scheduling: its priority over the rank workers and its timer slack."""

from __future__ import annotations

import ctypes
import os

from emulator.drivers.sockets.workers import set_realtime


def raise_priority(mode: str) -> str:
    """Put the switch ahead of the ranks when permitted; returns what was applied (for the health report)."""
    if mode == "fifo":
        if set_realtime(2):  # above the rank workers (1)
            return "fifo"
        mode = "nice"
    if mode == "nice":
        try:
            os.setpriority(os.PRIO_PROCESS, 0, -5)
            return "nice -5"
        except OSError:
            pass
    return "normal"


def fine_timer_slack() -> None:
    """Ask for 1 ns timer slack (Linux default 50 µs): the switch's short sleeps end when asked."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass
