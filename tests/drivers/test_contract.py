"""The driver contract: every driver is a ``Driver`` returning one ``DriverResult`` with one port vocabulary."""

from __future__ import annotations

import dataclasses

import pytest
from support.sim import incast

from emulator.drivers.contract import Driver, DriverResult, FabricReport, PortReport, QueueSamples
from emulator.drivers.direct import DirectConfig, DirectDriver
from emulator.drivers.fluid import FluidDriver
from emulator.drivers.loopback import LoopbackConfig, LoopbackDriver
from emulator.drivers.sim import SimDriver, run_sim
from emulator.drivers.sim_types import SimConfig
from emulator.endpoint.config import EndpointConfig
from emulator.fabric.port import PortCounters
from emulator.run.runner import execute


def _drivers() -> list:
    ep = EndpointConfig()
    return [SimDriver(SimConfig(), ep, 1), FluidDriver(SimConfig(), ep, 1),
            LoopbackDriver(LoopbackConfig(), ep, 1, 10.0),
            DirectDriver(lambda n: DirectConfig(addresses=("127.0.0.1",) * n, ports=tuple(range(5000, 5000 + n))),
                         ep, 10.0)]


def test_every_driver_implements_the_protocol() -> None:
    names = set()
    for d in _drivers():
        assert isinstance(d, Driver), d
        names.add(d.name)
    assert names == {"sim", "fluid", "loopback", "direct"}


@pytest.mark.parametrize("kind", ["sim", "fluid"])
def test_sim_and_fluid_return_one_result_type_with_typed_ports(kind: str) -> None:
    s = incast(2, 64 * 1024)
    driver = next(d for d in _drivers() if d.name == kind)
    res = driver.run(s)
    assert isinstance(res, DriverResult) and res.complete and not res.interrupted, res.errors
    assert isinstance(res.fabric, FabricReport) and res.fabric.kind == kind
    assert all(isinstance(p, PortReport) for p in res.fabric.ports)
    bott = res.fabric.port_named("sw0->host2")
    assert bott.dequeued_bytes > 0 and bott.kind == "down"
    d = res.fabric_dict()
    assert [p["name"] for p in d["ports"]] == [p.name for p in res.fabric.ports]
    assert len(d["queue_samples"]["t_ns"]) == len(d["queue_samples"]["queue_bytes"])


def test_port_report_round_trips_and_derives_utilisation_from_counters() -> None:
    c = PortCounters(port=3, enqueued_packets=10, enqueued_bytes=10_000, dequeued_packets=9, dequeued_bytes=9_000,
                     marked_packets=2, marked_bytes=2_000, dropped_packets=1, dropped_bytes=1_000, queue_bytes=0,
                     peak_queue_bytes=4_000, mean_queue_bytes=1.5, xoff_time_ns=0, xoff_count=0, paused_time_ns=0,
                     elapsed_ns=1_000)  # fmt: skip
    p = PortReport.from_counters(c, name="sw0->host3", kind="down", rate_bps=100e9, loss_packets=4)
    assert p.utilisation == pytest.approx(9_000 * 8 / (100e9 * 1e-6))
    assert PortReport.from_dict(p.to_dict()) == p
    assert p.marked_packets == 2 and p.loss_packets == 4 and p.port == 3


def test_queue_samples_of_one_port() -> None:
    q = QueueSamples.of([0, 10, 0, 10], [0, 0, 1, 1], [1, 2, 3, 4])
    t, b = q.of_port(1)
    assert t.tolist() == [0, 10] and b.tolist() == [3, 4]


def test_interrupted_is_the_flag_not_the_error_text() -> None:
    """An error line that happens to contain "interrupted" is no interruption; the flag is."""
    s = incast(2, 4096)
    real = run_sim(s, SimConfig(), EndpointConfig(), seed=1)
    worded = dataclasses.replace(real, errors=["rank 1: link interrupted by a flapping cable"])
    flagged = dataclasses.replace(real, interrupted=True)

    class Fixed:
        name = "fixed"

        def __init__(self, res: DriverResult) -> None:
            self.res = res

        def run(self, schedule, progress=None) -> DriverResult:
            return self.res

    assert execute(s, Fixed(worded)).interrupted is False
    assert execute(s, Fixed(flagged)).interrupted is True


def test_a_keyboard_interrupt_escaping_a_driver_is_an_empty_interrupted_result() -> None:
    class Raises:
        name = "raises"

        def run(self, schedule, progress=None) -> DriverResult:
            raise KeyboardInterrupt

    out = execute(incast(2, 4096), Raises(), driver_name="raises")
    assert out.interrupted and out.result.interrupted and out.result.records == {} and not out.result.complete


def test_the_sim_does_not_load_the_socket_drivers() -> None:
    """The virtual-time driver is pure computation: importing it loads no socket code."""
    import subprocess
    import sys as _sys

    code = ("import sys, emulator.drivers.sim; "
            "print(sorted(m for m in sys.modules if m.startswith('emulator.drivers.sockets') or m == 'socket'))")
    out = subprocess.run([_sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout
