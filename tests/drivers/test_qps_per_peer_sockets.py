"""transport.qps_per_peer on the socket drivers: the loopback switch routes every wire queue pair (its QPNs
map back to the schedule qp's ranks) and the direct driver delivers every byte, one RECV per logical flow."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np

from emulator.drivers.direct import DirectConfig, run_direct
from emulator.drivers.loopback import LoopbackConfig, run_loopback
from emulator.fabric.port import PortConfig

_spec = importlib.util.spec_from_file_location("_lb_helpers", Path(__file__).with_name("test_loopback_driver.py"))
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)

EP4 = dataclasses.replace(_helpers.EP, qps_per_peer=4)


def _check(s, res):
    assert res.errors == [] and res.complete, (res.errors, res.health.get("warnings"))
    assert res.bytes_counter("bytes_received") == int(s.flow_size_bytes.sum())
    for r, rec in res.records.items():
        assert (rec.end_ns >= 0).all()
        peers = np.unique(s.flow_dst[s.flow_src == r]).size
        assert len(set(rec.rate_qp)) == 4 * peers


def test_q4_over_the_loopback_switch_delivers_every_byte():
    s = _helpers.incast_schedule(3, 256 * 1024 + 7)
    cfg = LoopbackConfig(port=PortConfig(rate_bps=1e9, buffer_bytes=1 << 20), ranks_per_worker=4)
    _check(s, run_loopback(s, cfg, EP4, seed=3, timeout_s=30))


def test_q4_direct_over_127_0_0_x_delivers_every_byte():
    s = _helpers.incast_schedule(3, 256 * 1024 + 7)
    cfg = DirectConfig(addresses=tuple(f"127.0.0.{40 + r}" for r in range(4)), udp_port=24791, ranks_per_worker=4)
    _check(s, run_direct(s, cfg, EP4, timeout_s=30))
