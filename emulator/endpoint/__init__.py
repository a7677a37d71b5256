"""The rank endpoint (sans-IO): a rank's schedule in, RoCEv2 datagrams out, records kept.

Public API: :class:`RankEndpoint`, :class:`EndpointConfig`, the actions :class:`Transmit`,
:class:`TimerRequest` and :class:`FlowEvent`, and the :class:`Recorder` that turns events into records
(see ``endpoint.py`` for the theory of operation, ``sender.py`` and ``receiver.py`` for the per-QP state
machines).
"""

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.events import FlowEvent, TimerRequest, Transmit
from emulator.endpoint.recorder import Recorder

__all__ = ["EndpointConfig", "FlowEvent", "RankEndpoint", "Recorder", "TimerRequest", "Transmit"]
