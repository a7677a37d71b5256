"""Run a compiled schedule on the fabric a profile names: driver configs, timeouts, Ctrl-C.

Theory of operation
-------------------
:func:`endpoint_config` and :func:`sim_config` / :func:`loopback_config` / :func:`direct_config` translate
the effective profile into the drivers' own frozen configs (the profile's names → the drivers' names;
nothing else is decided here). :func:`make_driver` picks the driver by fabric kind (the profile's
``fabric.kind``, which ``emulator run --fabric`` overrides before the profile is resolved) and returns
a :class:`~emulator.drivers.contract.Driver` (``driver.run(schedule, progress) -> DriverResult``).

Warmup and measured iterations are already in the schedule (:func:`emulator.run.workload.run_schedule`):
the driver runs them in one go, so the fabric is warm between them, and the results tell them apart.

Timeouts: the profile's ``timeout`` bounds the whole run — the sim driver stops at that much virtual
time *or* wall time, the socket drivers at that much wall time (their supervisors also end the run
early when a rank dies or hangs, naming it). Every driver returns the records measured so far.

Ctrl-C: the drivers catch it themselves and return partial records marked ``interrupted``. If a
``KeyboardInterrupt`` escapes a driver, :func:`execute` returns an empty, incomplete result marked
interrupted, so the command still writes a results directory.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from emulator.config import Profile
from emulator.drivers.contract import INTERRUPTED_TEXT, Driver, DriverResult, Progress
from emulator.endpoint.config import EndpointConfig
from emulator.errors import ConfigError
from emulator.schedule.model import Schedule

if TYPE_CHECKING:
    from emulator.remote.controller import ControllerConfig
    from emulator.remote.hosts import HostsPlan


def endpoint_config(profile: Profile) -> EndpointConfig:
    cc = profile.congestion_control
    fabric = profile.fabric
    rp, npk = cc.pacing_kwargs()
    overrides = tuple(sorted(rp.items()))
    np = None
    if npk:
        from emulator.pacing import np_params

        np = dataclasses.replace(np_params(cc.preset), **npk)
    return EndpointConfig(
        mtu_bytes=fabric.mtu_bytes,
        cc=cc.preset,
        cc_overrides=overrides,
        np=np,
        line_rate_bps=float(fabric.ports.rate_bps),
        data_dscp=fabric.dscp.data,
        cnp_dscp=fabric.dscp.cnp,
        udp_dport=fabric.udp_port,
        retransmit_timeout_ns=fabric.transport.retransmit_timeout_for(fabric.kind),
        ack_every_packets=fabric.transport.ack_every_packets,
        max_segments=fabric.transport.max_segments,
        icrc=fabric.transport.icrc,
        qps_per_peer=fabric.transport.qps_per_peer,
    )


def _red(profile: Profile):
    from emulator.pacing.red import RedParams

    e = profile.fabric.ecn
    return RedParams(kmin_bytes=e.kmin_bytes, kmax_bytes=e.kmax_bytes, pmax=e.pmax) if e.enabled else None


def sim_config(profile: Profile):
    from emulator.drivers.sim_types import SimConfig
    from emulator.fabric.port import PfcParams
    from emulator.fabric.topology import TopologyConfig

    f = profile.fabric
    t = f.topology
    topo = TopologyConfig(kind=t.kind, leaves=t.leaves, spines=t.spines, hosts_per_leaf=t.hosts_per_leaf,
                          oversubscription=t.oversubscription,
                          uplink_rate_bps=float(t.uplink_rate_bps) if t.uplink_rate_bps else None,
                          ecmp=t.ecmp, placement=profile.ranks.placement)
    pfc = PfcParams(xoff_bytes=f.pfc.xoff_bytes, xon_bytes=f.pfc.xon_bytes) if f.pfc.enabled else None
    from emulator.run.perturbations import link_down

    return SimConfig(topology=topo, port_rate_bps=float(f.ports.rate_bps), buffer_bytes=f.ports.buffer_bytes,
                     latency_ns=f.ports.latency_ns, red=_red(profile), pfc=pfc, loss=f.loss,
                     link_down=link_down(profile), train_ns=f.sim_train_ns)


def loopback_config(profile: Profile):
    from emulator.drivers.loopback import LoopbackConfig
    from emulator.fabric.port import PortConfig

    f = profile.fabric
    if f.pfc.enabled:
        raise ConfigError(f"{profile.source or profile.name}: fabric.pfc.enabled: the loopback software switch has "
                          "no PFC (use the sim fabric)")
    port = PortConfig(rate_bps=float(f.ports.rate_bps), buffer_bytes=f.ports.buffer_bytes, red=_red(profile),
                      latency_ns=f.ports.latency_ns)
    k = f.time_dilation
    return LoopbackConfig(port=port, address=f.switch.address, port_base=f.switch.port_base,
                          ranks_per_worker=f.workers, time_dilation=1.0 if k == "auto" else k)


def direct_config(profile: Profile, world_size: int):
    from emulator.drivers.direct import DirectConfig

    eps = profile.fabric.direct.endpoints
    if profile.fabric.time_dilation not in (1.0, "auto"):  # auto chooses 1: the only K real links run at
        raise ConfigError(f"{profile.source or profile.name}: fabric.time_dilation: the direct fabric sends through "
                          "real links and switches, which cannot be slowed down (use the loopback fabric)")
    if len(eps) < world_size:
        raise ConfigError(f"{profile.source or profile.name}: fabric.direct.ranks: {len(eps)} rank addresses "
                          f"for {world_size} ranks")
    eps = eps[:world_size]
    return DirectConfig(addresses=tuple(a for a, _ in eps), ports=tuple(p for _, p in eps),
                        udp_port=profile.fabric.udp_port, ranks_per_worker=profile.fabric.workers)


def make_driver(profile: Profile, kind: str | None = None) -> Driver:
    """The driver for ``kind`` (default: the profile's fabric kind)."""
    kind = kind or profile.fabric.kind
    ecfg = endpoint_config(profile)
    timeout_s = profile.timeout_ns / 1e9
    if kind == "sim":
        from emulator.drivers.sim import SimDriver

        return SimDriver(sim_config(profile), ecfg, profile.seed, time_limit_ns=profile.timeout_ns,
                         wall_timeout_s=timeout_s)
    if kind == "fluid":
        from emulator.drivers.fluid import FluidDriver

        return FluidDriver(sim_config(profile), ecfg, profile.seed, time_limit_ns=profile.timeout_ns,
                           wall_timeout_s=timeout_s)
    if kind == "loopback":
        from emulator.config.model import MAX_TIME_DILATION
        from emulator.drivers.loopback import LoopbackDriver

        transport = profile.fabric.transport
        return LoopbackDriver(
            loopback_config(profile), ecfg, profile.seed, timeout_s,
            calibrate_max_time_dilation=MAX_TIME_DILATION if profile.fabric.time_dilation == "auto" else None,
            retransmit_timeout_for=functools.partial(transport.retransmit_timeout_for, "loopback"),
            budget_s=profile.fabric.time_dilation_budget_ns / 1e9)
    if kind == "direct":
        from emulator.drivers.direct import DirectDriver

        return DirectDriver(functools.partial(direct_config, profile), ecfg, timeout_s)
    raise ConfigError(f"unknown fabric {kind!r} (sim, fluid, loopback or direct)")


def start_compiling(profile: Profile) -> None:
    """A large fluid run's kernels start compiling in a helper process now, while the workload compiles (the
    fluid driver joins the helper, or stops it when the schedule is small: :mod:`emulator.drivers.fluid_warm`)."""
    if profile.fabric.kind == "fluid":
        from emulator.drivers import fluid_warm

        fluid_warm.start_early(profile.ranks.count or 0)


def remote_driver(profile: Profile, plan: HostsPlan, controller: ControllerConfig) -> Driver:
    """The driver that runs the profile's ranks on the agents of ``plan`` (the fabric must be ``direct``)."""
    from emulator.remote.driver import RemoteDriver

    if profile.fabric.kind != "direct":
        raise ConfigError(f"--hosts: runs on the direct fabric (the profile's fabric.kind is {profile.fabric.kind}; "
                          "pass --fabric direct)")
    if controller.ranks_per_worker == 0:  # the profile's worker layout, on every agent
        controller = dataclasses.replace(controller, ranks_per_worker=profile.fabric.workers)
    return RemoteDriver(plan, controller, endpoint_config(profile), udp_port=profile.fabric.udp_port,
                        timeout_s=profile.timeout_ns / 1e9)


@dataclass
class RunOutcome:
    """A driver's result plus when it ran and whether the user interrupted it."""

    result: DriverResult
    interrupted: bool
    started_utc: str
    finished_utc: str
    wall_s: float


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def execute(schedule: Schedule, driver: Driver, progress: Progress = None, driver_name: str = "") -> RunOutcome:
    """Run ``driver`` on ``schedule``; a Ctrl-C that escapes the driver gives an empty interrupted result."""
    started = utc_now()
    t0 = time.monotonic()
    try:
        result = driver.run(schedule, progress)
    except KeyboardInterrupt:
        result = DriverResult(driver=driver_name or driver.name, records={}, health={"world_size": schedule.world_size,
                                                                       "warnings": []},
                              errors=[f"{INTERRUPTED_TEXT}; the driver returned no records"], interrupted=True)
    return RunOutcome(result, result.interrupted, started, utc_now(), time.monotonic() - t0)
