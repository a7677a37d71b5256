"""The remote driver: ``emulator run PROFILE --hosts HOSTS.yaml`` runs the profile's schedule on agents."""

from __future__ import annotations

from emulator.config import Profile
from emulator.drivers.result import DriverResult
from emulator.errors import ConfigError
from emulator.remote.controller import ControllerConfig, run_remote
from emulator.remote.hosts import HostsPlan
from emulator.run.runner import Driver, Progress, endpoint_config
from emulator.schedule.model import Schedule


def make_remote_driver(profile: Profile, plan: HostsPlan, cfg: ControllerConfig) -> Driver:
    """A driver callable (as :func:`emulator.run.runner.make_driver` returns) that runs on ``plan``'s agents."""
    if profile.fabric.kind != "direct":
        raise ConfigError(f"--hosts: runs on the direct fabric (the profile's fabric.kind is {profile.fabric.kind}; "
                          "pass --fabric direct)")
    ecfg = endpoint_config(profile)
    timeout_s = profile.timeout_ns / 1e9

    def remote(schedule: Schedule, progress: Progress) -> DriverResult:
        return run_remote(schedule, plan, ecfg, udp_port=profile.fabric.udp_port, timeout_s=timeout_s, cfg=cfg,
                          progress=progress)

    return remote
