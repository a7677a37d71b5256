"""The rank endpoint (sans-IO): a rank's schedule in, RoCEv2 datagrams out, records kept.

Public API: :class:`RankEndpoint`, :class:`EndpointConfig`, :class:`Transmit` (see ``endpoint.py`` for the
theory of operation, ``sender.py`` and ``receiver.py`` for the per-QP state machines).
"""

from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.events import Transmit

__all__ = ["EndpointConfig", "RankEndpoint", "Transmit"]
