"""Both socket-driver configs refuse non-positive hang, stall and snapshot periods, naming the key."""

import pytest

from emulator.drivers.direct import DirectConfig
from emulator.drivers.loopback import LoopbackConfig
from emulator.errors import ConfigError
from emulator.fabric.port import PortConfig


@pytest.mark.parametrize("name", ["hang_timeout_s", "stall_timeout_s", "snapshot_interval_s"])
def test_direct_refuses_non_positive_periods(name):
    with pytest.raises(ConfigError, match=rf"^direct: '{name}' must be positive, got 0"):
        DirectConfig(addresses=("127.0.0.2", "127.0.0.3"), **{name: 0})


@pytest.mark.parametrize("name", ["hang_timeout_s", "stall_timeout_s", "snapshot_interval_s"])
def test_loopback_refuses_non_positive_periods(name):
    with pytest.raises(ConfigError, match=rf"^loopback: '{name}' must be positive, got -1"):
        LoopbackConfig(port=PortConfig(rate_bps=1e9, buffer_bytes=1 << 20), **{name: -1})


def test_both_socket_configs_are_one_supervision_config() -> None:
    """The supervision knobs are declared once (SupervisionConfig) and reach the workers from it."""
    import dataclasses

    from emulator.drivers.sockets.supervisor import SupervisionConfig

    names = {f.name for f in dataclasses.fields(SupervisionConfig)}
    assert names == {"ranks_per_worker", "late_threshold_ns", "hang_timeout_s", "stall_timeout_s",
                     "snapshot_interval_s", "spin_ns"}
    lb, dr = LoopbackConfig(), DirectConfig(addresses=("127.0.0.2",))
    assert isinstance(lb, SupervisionConfig) and isinstance(dr, SupervisionConfig)
    assert lb.spin_ns == 50_000 and dr.spin_ns == 20_000  # the switch shares the CPUs: loopback spins less
    with pytest.raises(ConfigError, match=r"^loopback: 'ranks_per_worker' must be >= 0"):
        LoopbackConfig(ranks_per_worker=-1)
    with pytest.raises(ConfigError, match=r"^direct: 'spin_ns' must be >= 0"):
        DirectConfig(addresses=("127.0.0.2",), spin_ns=-1)
