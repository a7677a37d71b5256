"""The direct driver: ranks bound to their own addresses send straight to each other.

On 127.0.0.x, and over veth pairs + a bridge in network namespaces this test creates (and always
deletes), with a tbf bottleneck on one veth. Skipped, with the reason, only where ``ip netns`` is not
permitted.
"""

from __future__ import annotations

import importlib.util
import multiprocessing as mp
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from emulator.drivers.direct import DirectConfig, run_direct
from emulator.endpoint.config import EndpointConfig
from emulator.errors import ConfigError, RunError

_spec = importlib.util.spec_from_file_location("_lb_helpers", Path(__file__).with_name("test_loopback_driver.py"))
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)
mixed_schedule = _helpers.mixed_schedule

EP = EndpointConfig(line_rate_bps=2e9, retransmit_timeout_ns=30_000_000, data_dscp=10)


def _free_port() -> int:
    return random.Random(os.getpid()).randrange(20000, 30000)


def test_mixed_run_over_127_0_0_x_delivers_every_byte_on_a_chosen_udp_port():
    s = mixed_schedule(256 * 1024)
    cfg = DirectConfig(addresses=tuple(f"127.0.0.{10 + r}" for r in range(8)), udp_port=_free_port(),
                       ranks_per_worker=4)
    res = run_direct(s, cfg, EP, timeout_s=30)
    assert res.errors == [] and res.complete, res.errors
    assert sorted(res.records) == list(range(8))
    assert res.bytes_counter("bytes_received") == int(s.flow_size_bytes.sum())
    assert res.bytes_counter("bytes_sent") == int(s.flow_size_bytes.sum())
    for rec in res.records.values():
        assert (rec.end_ns >= 0).all()
    assert res.fabric is None and "endpoint_socket_drops" in res.health and "warnings" in res.health
    assert not [p for p in mp.active_children() if p.is_alive()]


def test_direct_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"addresses\[1\]"):
        DirectConfig(addresses=("127.0.0.2", "not-an-ip"))
    with pytest.raises(ConfigError, match="share one address"):
        DirectConfig(addresses=("127.0.0.2", "127.0.0.2"))
    with pytest.raises(ConfigError, match="udp_port"):
        DirectConfig(addresses=("127.0.0.2",), udp_port=0)
    with pytest.raises(ConfigError, match="schedule has 8"):
        run_direct(mixed_schedule(1024), DirectConfig(addresses=("127.0.0.2",)), EP, timeout_s=5)


def test_address_already_in_use_is_a_run_error_naming_the_rank():
    import socket

    port = _free_port() + 1
    blocker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    blocker.bind(("127.0.0.13", port))
    try:
        cfg = DirectConfig(addresses=tuple(f"127.0.0.{10 + r}" for r in range(8)), udp_port=port)
        with pytest.raises(RunError, match=r"rank 3: cannot bind 127\.0\.0\.13"):
            run_direct(mixed_schedule(1024), cfg, EP, timeout_s=5)
    finally:
        blocker.close()


# ----------------------------------------------------------------------------------- network namespaces


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    subprocess.run(cmd, check=True, capture_output=True, timeout=10)


@pytest.fixture
def two_namespaces():
    """Namespaces A and B, each with one veth into a bridge living in a third namespace; MTU 9000;
    a tbf bottleneck (200 Mbit/s) on the bridge's port toward B. Deleted whatever happens."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("iproute2 (ip, tc) not installed")
    tag = f"e{os.getpid() % 100000}"
    a, b, br = f"{tag}a", f"{tag}b", f"{tag}br"
    made: list[str] = []
    try:
        try:
            for ns in (a, b, br):
                _ip("ip", "netns", "add", ns)
                made.append(ns)
        except (subprocess.CalledProcessError, OSError) as exc:
            reason = exc.stderr.decode().strip() if isinstance(exc, subprocess.CalledProcessError) else str(exc)
            pytest.skip(f"'ip netns add' is not permitted here: {reason}")
        _ip("ip", "link", "add", "br0", "type", "bridge", ns=br)
        for ns, peer in ((a, "pa"), (b, "pb")):
            _ip("ip", "link", "add", "eth0", "type", "veth", "peer", "name", peer, ns=br)
            _ip("ip", "link", "set", "eth0", "netns", ns, ns=br)
            _ip("ip", "link", "set", peer, "mtu", "9000", "master", "br0", "up", ns=br)
            _ip("ip", "link", "set", "eth0", "mtu", "9000", "up", ns=ns)
            _ip("ip", "link", "set", "lo", "up", ns=ns)
        _ip("ip", "link", "set", "br0", "up", ns=br)
        _ip("tc", "qdisc", "add", "dev", "pb", "root", "tbf", "rate", "200mbit", "burst", "64kb", "latency", "20ms",
            ns=br)
        addrs, netns = [], []
        for r in range(8):
            ns, host = (a, 1 + r) if r % 2 == 0 else (b, 101 + r)
            addr = f"10.213.0.{host}"
            _ip("ip", "addr", "add", f"{addr}/24", "dev", "eth0", ns=ns)
            addrs.append(addr)
            netns.append(ns)
        yield tuple(addrs), tuple(netns)
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def test_mixed_run_over_veth_and_bridge_with_a_tbf_bottleneck(two_namespaces):
    addrs, netns = two_namespaces
    s = mixed_schedule(128 * 1024)
    cfg = DirectConfig(addresses=addrs, netns=netns, udp_port=4791, ranks_per_worker=4)
    res = run_direct(s, cfg, EndpointConfig(line_rate_bps=1e9, retransmit_timeout_ns=50_000_000), timeout_s=40)
    assert res.complete, (res.errors, res.health.get("warnings"))
    assert res.bytes_counter("bytes_received") == int(s.flow_size_bytes.sum())
    # every flow crossed the bridge (ranks alternate between the namespaces)
    assert all(rec.counters["packets_received"] > 0 for rec in res.records.values())
