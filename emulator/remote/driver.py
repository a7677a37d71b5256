"""The remote driver: the schedule runs on agents (``emulator run PROFILE --hosts HOSTS.yaml``, ``emulator rank``).

:class:`RemoteDriver` keeps the :class:`~emulator.drivers.contract.Driver` contract like the local drivers:
``run(schedule, progress)`` returns one :class:`~emulator.drivers.contract.DriverResult` (the controller
merges every host's records onto its clock; ``fabric`` is None, as for ``direct``: the real network keeps
its counters).
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.drivers.contract import DriverResult, Progress
from emulator.endpoint.config import EndpointConfig
from emulator.remote.controller import ControllerConfig, run_remote
from emulator.remote.hosts import HostsPlan
from emulator.schedule.model import Schedule


@dataclass(frozen=True)
class RemoteDriver:
    """Runs a schedule on the agents of ``plan`` (the ranks' endpoints configured by ``endpoint``)."""

    plan: HostsPlan
    controller: ControllerConfig
    endpoint: EndpointConfig
    udp_port: int
    timeout_s: float
    name: str = "remote"

    def run(self, schedule: Schedule, progress: Progress = None) -> DriverResult:
        return run_remote(schedule, self.plan, self.endpoint, udp_port=self.udp_port, timeout_s=self.timeout_s,
                          cfg=self.controller, progress=progress)
