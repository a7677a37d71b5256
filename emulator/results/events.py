"""The event kinds of the results format: ``timeseries.npz`` stores ``event_kind`` codes that index
:data:`EVENT_KINDS`, and the table itself as ``event_kinds`` so a reader re-codes by name.

The codes are the endpoint's :class:`~emulator.endpoint.events.FlowEventKind` values (tests keep the two
in step); a name once stored keeps its meaning in every later version.
"""

from __future__ import annotations

EVENT_KINDS: tuple[str, ...] = ("cnp_sent", "cnp_received", "nak_sent", "nak_received", "retransmit", "timeout")
