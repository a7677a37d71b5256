"""Run a compiled schedule on the fabric a profile names: driver configs, timeouts, Ctrl-C.

Theory of operation
-------------------
:func:`endpoint_config` and :func:`sim_config` / :func:`loopback_config` / :func:`direct_config` translate
the effective profile into the drivers' own frozen configs (the profile's names → the drivers' names;
nothing else is decided here). :func:`make_driver` picks the driver by fabric kind (the profile's
``fabric.kind``, which ``emulator run --fabric`` overrides before the profile is resolved) and returns
a callable ``driver(schedule, progress) -> DriverResult``.

Warmup and measured iterations are already in the schedule (:func:`emulator.run.workload.run_schedule`):
the driver runs them in one go, so the fabric is warm between them, and the results tell them apart.

Timeouts: the profile's ``timeout`` bounds the whole run — the sim driver stops at that much virtual
time *or* wall time, the socket drivers at that much wall time (their supervisors also end the run
early when a rank dies or hangs, naming it). Every driver returns the records measured so far.

Ctrl-C: the socket drivers catch it themselves and return partial records with an "interrupted" error.
If a ``KeyboardInterrupt`` escapes a driver (the sim driver does not catch it), :func:`execute` returns
an empty, incomplete result marked interrupted, so the command still writes a results directory.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from emulator.config import Profile
from emulator.drivers.result import DriverResult
from emulator.endpoint.config import EndpointConfig
from emulator.errors import ConfigError
from emulator.schedule.model import Schedule

Progress = Callable[[dict], None] | None
Driver = Callable[[Schedule, Progress], DriverResult]
INTERRUPTED = "interrupted by the user (Ctrl-C)"


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
    return SimConfig(topology=topo, port_rate_bps=float(f.ports.rate_bps), buffer_bytes=f.ports.buffer_bytes,
                     latency_ns=f.ports.latency_ns, red=_red(profile), pfc=pfc, loss=f.loss)


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
    if profile.fabric.time_dilation != 1.0:
        raise ConfigError(f"{profile.source or profile.name}: fabric.time_dilation: the direct fabric sends through "
                          "real links and switches, which cannot be slowed down (use the loopback fabric)")
    if len(eps) < world_size:
        raise ConfigError(f"{profile.source or profile.name}: fabric.direct.ranks: {len(eps)} rank addresses "
                          f"for {world_size} ranks")
    eps = eps[:world_size]
    return DirectConfig(addresses=tuple(a for a, _ in eps), ports=tuple(p for _, p in eps),
                        udp_port=profile.fabric.udp_port, ranks_per_worker=profile.fabric.workers)


def _sim_result(res: Any, world: int) -> DriverResult:
    ports, samples_t, samples_port, samples_q = [], [], [], []
    for p in res.ports:
        ports.append({
            "port": p.port_id, "name": p.name, "kind": p.kind, "rate_bps": p.rate_bps,
            "dequeued_packets": p.tx_packets, "dequeued_bytes": p.tx_bytes, "peak_queue_bytes": p.peak_queue_bytes,
            "mean_queue_bytes": p.mean_queue_bytes, "marked_packets": p.ecn_marked_packets,
            "dropped_packets": p.dropped_packets, "dropped_bytes": p.dropped_bytes, "loss_packets": p.loss_packets,
            "paused_time_ns": p.pause_time_ns, "xoff_time_ns": p.xoff_time_ns, "utilisation": p.utilisation,
        })
        samples_t.extend(p.sample_t_ns)
        samples_port.extend([p.port_id] * len(p.sample_t_ns))
        samples_q.extend(p.sample_queue_bytes)
    st = res.stats
    health = {"world_size": world, "stop_reason": res.stop_reason, "end_ns": res.end_ns, "events": st.events,
              "packets": st.packets, "hops": st.hops, "wall_s": st.wall_s,
              "packets_per_wall_s": st.packets_per_wall_s, "warnings": []}
    errors = []
    if not res.complete:
        left = ", ".join(map(str, res.incomplete_ranks[:16])) + (" ..." if len(res.incomplete_ranks) > 16 else "")
        what = {"deadlock": "no event left (deadlock)", "time_limit": "virtual-time limit reached",
                "wall_timeout": "wall-clock timeout", "interrupted": INTERRUPTED}.get(res.stop_reason,
                                                                                     res.stop_reason)
        errors.append(f"sim stopped at {res.end_ns} ns: {what}; ranks not done: {left}")
    fabric = {"kind": "sim", "ports": ports,
              "queue_samples": {"t_ns": samples_t, "port": samples_port, "queue_bytes": samples_q}}
    return DriverResult(driver="sim", records=dict(res.records), fabric=fabric, health=health,
                        complete=bool(res.complete), errors=errors, wall_ns=int(st.wall_s * 1e9))


def make_driver(profile: Profile, kind: str | None = None) -> Driver:
    """The driver callable for ``kind`` (default: the profile's fabric kind)."""
    kind = kind or profile.fabric.kind
    ecfg = endpoint_config(profile)
    timeout_s = profile.timeout_ns / 1e9
    if kind == "sim":
        cfg = sim_config(profile)

        def sim(schedule: Schedule, progress: Progress) -> DriverResult:
            from emulator.drivers.sim import run_sim

            res = run_sim(schedule, cfg, ecfg, seed=profile.seed, time_limit_ns=profile.timeout_ns,
                          wall_timeout_s=timeout_s, progress=progress)
            return _sim_result(res, schedule.world_size)

        return sim
    if kind == "fluid":
        fcfg = sim_config(profile)

        def fluid(schedule: Schedule, progress: Progress) -> DriverResult:
            from emulator.drivers.fluid import run_fluid

            return run_fluid(schedule, fcfg, ecfg, seed=profile.seed, time_limit_ns=profile.timeout_ns,
                             wall_timeout_s=timeout_s)

        return fluid
    if kind == "loopback":
        lcfg = loopback_config(profile)

        def loopback(schedule: Schedule, progress: Progress) -> DriverResult:
            from emulator.drivers.loopback import run_loopback

            cfg, calibration, ep_cfg = lcfg, None, ecfg
            if profile.fabric.time_dilation == "auto":
                from emulator.config.model import MAX_TIME_DILATION
                from emulator.drivers.loopback_calibrate import calibrate_time_dilation

                calibration = calibrate_time_dilation(
                    schedule.world_size, lcfg.port.rate_bps, ecfg.mtu_bytes + 16 + ecfg.wire_overhead_bytes,
                    max_k=MAX_TIME_DILATION, address=lcfg.address, scheduling=lcfg.switch_scheduling)
                cfg = dataclasses.replace(lcfg, time_dilation=calibration.time_dilation)
            rto = profile.fabric.transport.retransmit_timeout_for("loopback", cfg.time_dilation)
            if rto != ecfg.retransmit_timeout_ns:
                ep_cfg = dataclasses.replace(ecfg, retransmit_timeout_ns=rto)
            res = run_loopback(schedule, cfg, ep_cfg, seed=profile.seed, timeout_s=timeout_s, progress=progress)
            if calibration is not None:
                res.health["time_dilation_calibration"] = {**calibration.to_dict(), "text": calibration.describe()}
            return res

        return loopback
    if kind == "direct":

        def direct(schedule: Schedule, progress: Progress) -> DriverResult:
            from emulator.drivers.direct import run_direct

            return run_direct(schedule, direct_config(profile, schedule.world_size), ecfg, timeout_s=timeout_s,
                              progress=progress)

        return direct
    raise ConfigError(f"unknown fabric {kind!r} (sim, fluid, loopback or direct)")


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
        result = driver(schedule, progress)
        interrupted = any("interrupted" in e for e in result.errors) or result.health.get("stop_reason") == "interrupted"
    except KeyboardInterrupt:
        result = DriverResult(driver=driver_name, records={}, health={"world_size": schedule.world_size,
                                                                       "warnings": []},
                              complete=False, errors=[f"{INTERRUPTED}; the driver returned no records"])
        interrupted = True
    return RunOutcome(result, interrupted, started, utc_now(), time.monotonic() - t0)
