"""Each vocabulary has one source: path MTUs (wire), collective names (trace model), CC presets (registry)."""

from __future__ import annotations

import pytest

from emulator.config import COLLECTIVE_TYPES, ROOTED_TYPES, profile_from_dict
from emulator.config.model import Fabric
from emulator.endpoint.config import EndpointConfig
from emulator.errors import ConfigError
from emulator.trace.model import COLLECTIVE_NAMES, ROOTED, CollectiveType, collective_from_name
from emulator.wire import PATH_MTUS


def test_collective_names_are_the_trace_models() -> None:
    assert COLLECTIVE_TYPES is COLLECTIVE_NAMES
    assert {collective_from_name(n) for n in COLLECTIVE_NAMES} == set(CollectiveType) - {
        CollectiveType.REDUCE_SCATTER_BLOCK}
    assert ROOTED_TYPES == {c.name.lower() for c in ROOTED}


@pytest.mark.parametrize("mtu", PATH_MTUS)
def test_every_path_mtu_the_endpoint_takes_is_a_profile_choice(mtu: int) -> None:
    from emulator.run.runner import endpoint_config

    p = profile_from_dict({"name": "m", "ranks": {"count": 2}, "fabric": {"mtu": mtu},
                           "workload": {"collectives": [{"type": "all_reduce", "size": "64KiB"}]}})
    assert endpoint_config(p).mtu_bytes == mtu == EndpointConfig(mtu_bytes=mtu).mtu_bytes


def test_one_mtu_list() -> None:
    import dataclasses

    choices = next(f for f in dataclasses.fields(Fabric) if f.name == "mtu_bytes").metadata["choices"]
    assert choices is PATH_MTUS
    with pytest.raises(ConfigError, match="'mtu_bytes' must be one of 256, 512, 1024, 2048, 4096"):
        EndpointConfig(mtu_bytes=3000)


def test_one_icrc_mode_list() -> None:
    import dataclasses

    from emulator.config.model import Transport
    from emulator.endpoint import config as endpoint_config
    from emulator.wire.icrc import ICRC_MODES

    choices = next(f for f in dataclasses.fields(Transport) if f.name == "icrc").metadata["choices"]
    assert choices is ICRC_MODES is endpoint_config.ICRC_MODES
