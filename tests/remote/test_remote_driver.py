"""The remote driver runs the profile's worker layout (``fabric.workers``) on every agent."""

from __future__ import annotations

import pytest

from emulator.config import load_profiles
from emulator.remote.controller import ControllerConfig
from emulator.remote.hosts import HostSpec, HostsPlan
from emulator.run.runner import remote_driver


@pytest.mark.parametrize("workers, given, expected", [(4, 0, 4), (0, 0, 0), (4, 2, 2)])
def test_profile_workers_reach_the_agents(profiles, tmp_path, workers, given, expected):
    prof = profiles[0](tmp_path / "p.yaml", "mixed:1MiB")
    profile = load_profiles(prof, overrides=[f"fabric.workers={workers}"])[0]
    plan = HostsPlan((HostSpec("http://127.0.0.1:7400", tuple(range(8)), ("127.0.0.40",) * 8),))
    driver = remote_driver(profile, plan, ControllerConfig(token="t", ranks_per_worker=given))
    assert driver.controller.ranks_per_worker == expected
