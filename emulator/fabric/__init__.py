"""Switch model for virtual-time fabrics (sans-IO): egress ports with RED/ECN, tail drop and PFC; a switch.

``EgressPort`` is one queue model; ``Switch`` puts N of them behind a forwarding function; ``run_incast``
(``emulator.fabric.loop``) is a small closed DCQCN loop used by the tests and as the reference behaviour.
"""

from emulator.fabric.loop import IncastConfig, IncastResult, jain_index, run_incast
from emulator.fabric.port import EgressPort, PfcEvent, PfcParams, PortConfig, PortCounters, SimPacket
from emulator.fabric.switch import Departure, Switch

__all__ = [
    "Departure", "EgressPort", "IncastConfig", "IncastResult", "PfcEvent", "PfcParams", "PortConfig", "PortCounters",
    "SimPacket", "Switch", "jain_index", "run_incast",
]
