"""Stand-ins for a rank endpoint and the parent's pipe in tests that run a socket worker's loop (``workers._Loop``)."""

from __future__ import annotations


class NoRecords:
    """A rank's records with nothing in them."""

    rank = 0
    counters: dict = {}

    def to_arrays(self) -> dict:
        return {}


class NoRecorder:
    """A recorder that keeps no events."""

    records = NoRecords()

    def consume(self, events) -> None:
        pass


class IdleEndpoint:
    """Rank 0 with nothing to send, no timer and no events; a test overrides what it watches."""

    rank = 0
    done = False
    ops_completed = 0
    has_output = False

    def __init__(self) -> None:
        self.recorder = NoRecorder()

    def start(self, now_ns: int, t0_ns: int) -> None:
        pass

    def handle_timer(self, now_ns: int) -> None:
        pass

    def receive(self, data, ecn: int, now_ns: int, segment_size: int = 0) -> None:
        pass

    def poll_transmit(self, now_ns: int) -> list:
        return []

    def restart_pacers(self, now_ns: int) -> int:
        return 0

    def sent_late(self, paced_ns: int, sent_ns: int) -> bool:
        return False

    def events(self) -> tuple:
        return ()

    def next_timer_ns(self) -> int | None:
        return None


class NullConn:
    """The parent's end of the pipe, dropping what the loop sends it."""

    def send(self, msg) -> None:
        pass
