"""Switch model for virtual-time fabrics (sans-IO): egress ports with RED/ECN, tail drop and PFC; a switch.

``EgressPort`` is one queue model; ``Switch`` puts N of them behind a forwarding function.
"""

from emulator.fabric.port import EgressPort, PfcEvent, PfcParams, PortConfig, PortCounters, SimPacket
from emulator.fabric.switch import Departure, Switch

__all__ = [
    "Departure", "EgressPort", "PfcEvent", "PfcParams", "PortConfig", "PortCounters", "SimPacket", "Switch",
]
