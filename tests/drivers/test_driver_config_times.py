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
