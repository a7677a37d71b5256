"""Driver modes are EndpointConfig fields, fixed when the endpoint is built."""

from __future__ import annotations

import pytest
from support.endpoint import make_schedule, send

from emulator.drivers.sockets.workers import socket_endpoint_config
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.errors import ConfigError


def _ep(cfg: EndpointConfig) -> RankEndpoint:
    return RankEndpoint(0, make_schedule(2, [(0, 1, 1 << 20, 0)], {0: [send(0)]}), cfg)


def test_modes_come_from_the_config() -> None:
    plain = _ep(EndpointConfig())
    assert (plain.defer_acks, plain._tx.full_batches, plain._tx.spread_ns, plain._rx.delivery_stamps) == \
        (False, False, 0, False)
    assert plain._tx.fast and plain._rx.fast
    cfg = EndpointConfig(defer_acks=True, pace_full_batches=True, stamp_spread_ns=20_000, delivery_stamps=True,
                         batch_fast_paths=False)
    ep = _ep(cfg)
    assert (ep.defer_acks, ep._tx.full_batches, ep._tx.spread_ns, ep._rx.delivery_stamps) == (True, True, 20_000, True)
    assert not ep._tx.fast and not ep._rx.fast
    # whole-batch pacing doubles the NIC bucket (a QP waits for a whole batch of tokens)
    assert ep._tx.nic.burst_bytes == 2 * plain._tx.nic.burst_bytes


def test_socket_workers_run_the_socket_modes() -> None:
    cfg = socket_endpoint_config(EndpointConfig(stamp_spread_ns=5_000))
    assert cfg.defer_acks and cfg.pace_full_batches and cfg.stamp_spread_ns == 5_000 and not cfg.delivery_stamps


def test_a_negative_stamp_spread_is_a_config_error_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="stamp_spread_ns"):
        EndpointConfig(stamp_spread_ns=-1)


def test_the_endpoint_has_no_mode_setters() -> None:
    ep = _ep(EndpointConfig())
    for name in ("pace_full_batches", "stamp_spread_ns", "delivery_stamps"):
        assert not hasattr(type(ep), name), name
