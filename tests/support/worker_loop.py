"""Stand-ins for a rank endpoint's recorder in tests that run a socket worker's loop (``workers._Loop``)."""

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
