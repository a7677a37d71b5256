"""The loopback driver: every rank on real UDP sockets over 127.0.0.0/8, every packet through a software
switch process that applies port rate, buffer, drops and ECN marking.

Theory of operation
-------------------
The parent opens every socket first (the switch's and one per rank, all bound, unconnected), then forks
the switch process (:mod:`~emulator.drivers.loopback.switch`) and the worker processes
(:mod:`~emulator.drivers.sockets.workers`, several ranks each), which inherit them. Ranks send everything to the
switch address; the switch routes each packet by its BTH destination QP to the egress port of the
owning rank, runs the port model in real time, sets CE in the real IP TOS of marked packets and sends
them on to the rank's socket, which reads the ECN bits with ``IP_RECVTOS``. The supervisor
(:mod:`~emulator.drivers.sockets.supervisor`) gives all processes one t0, watches heartbeats and progress, and
ends the run on completion, death, hang, stall, timeout or Ctrl-C, always returning the records.

The switch runs its port model on the senders' intended send times, not on when its process got the
CPU (model time, :mod:`~emulator.drivers.loopback.switch`); with ``time_dilation`` K every process runs
on ``(CLOCK_MONOTONIC − t0) / K``, so rates, timers and delays run K× slower in real time and every
recorded time is emulated time. The endpoints serve their queue pairs on model time too
(``EndpointConfig.model_time_service``): each rank's packets are ordered and stamped as the sim's sender
would send them (round-robin over its queue pairs, batches as its NIC bucket allows, stamped at its NIC's line rate,
every rank from the origin), however late its worker wakes, so the switch's ports see the sim's arrival
process; a SEND that a delivery makes ready joins at the delivery time (the service runs a lag behind the
clock, :func:`service_lag_for`). The switch never overruns a rank's socket (back-pressure).
The result's ``health["fidelity"]`` says how far the timing can be
trusted: the lag p99 of the senders (beyond the switch's horizon) and of the switch (beyond its hold)
against one MTU's time at the port rate, and the ECN marks at queues only late arrivals made
(:mod:`~emulator.drivers.loopback.model_port`; any makes the run not faithful), with a one-line verdict.

``run_loopback(schedule, LoopbackConfig(...), EndpointConfig(...), seed=1, timeout_s=60)`` returns a
:class:`~emulator.drivers.contract.DriverResult` whose ``fabric`` holds the switch's per-port counters
and sampled queue depths and whose ``health`` holds switch lag, late packets, socket drops and the
endpoints' timer lag, with plain-language ``warnings`` when the machine could not keep up.

The switch's snapshots carry only the queue samples taken since its previous message; a
:class:`SampleTap` on the parent's end of its pipe takes them out of every message as the supervisor
reads it and appends them per port, so the result holds every sample received even when the switch
died before its final message.
"""

from __future__ import annotations

import ipaddress
import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from emulator.config.model import MAX_TIME_DILATION
from emulator.drivers.contract import DriverResult, FabricReport, Progress, QueueSamples
from emulator.drivers.loopback.calibrate import DEFAULT_BUDGET_S, peak_port_load, rerun_skipped_text
from emulator.drivers.loopback.spec import SwitchSpec
from emulator.drivers.loopback.switch import switch_main
from emulator.drivers.sockets.supervisor import (
    SupervisionConfig,
    Supervisor,
    add_fidelity,
    endpoint_warnings,
    mtu_time_ns,
    stall_timeout_for,
)
from emulator.drivers.sockets.udp import UdpPort
from emulator.drivers.sockets.workers import SLOTS, launch_workers
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.qpn import qp_endpoints
from emulator.endpoint.records import RankRecords
from emulator.errors import ConfigError, RunError
from emulator.fabric.port import PortConfig
from emulator.instruments.fidelity import with_cnp_lag, with_lag_marks, with_post_lag
from emulator.pacing.red import RedParams
from emulator.schedule.model import Schedule
from emulator.units import format_duration_ns


def _default_port() -> PortConfig:
    return PortConfig(rate_bps=10e9, buffer_bytes=1 << 20, red=RedParams())


@dataclass(frozen=True, slots=True)
class LoopbackConfig(SupervisionConfig):
    """How the loopback fabric runs (and its workers: :class:`~emulator.drivers.sockets.supervisor.SupervisionConfig`).

    * ``port``: every switch egress port (one per rank): rate, buffer (tail drop), RED/ECN, latency.
      PFC is not supported by the software switch (ConfigError).
    * ``address``: 127.0.0.0/8 address of the switch and the rank sockets; ``port_base``: switch UDP
      port, rank r uses ``port_base + 1 + r`` (0 = ephemeral ports).
    * ``high_priority_dscps``: DSCPs served first by the switch ports (CNP/ACK).
    * ``late_threshold_ns``: also the lag beyond which a switch packet counts as late, beyond its
      deliberate egress hold (``egress_slack_ns``).
    * ``spin_ns`` (default 50 µs): the switch and several workers share the CPUs, so keep it short.
    * ``egress_slack_ns``: how far (real ns) the switch's model clock runs behind the real one: senders
      late by less change nothing, and departures gather into GSO sends (None = :func:`egress_slack_for`:
      two packet times within 200–400 µs). Larger: more lateness absorbed, fewer, bigger GSO sends, more
      added delay per hop.
    * ``switch_scheduling``: "fifo" (default: real-time priority for the switch process when permitted,
      else nice -5), "nice" or "normal" — the fabric keeps its configured rates on a busy machine and
      the ranks, not the switch, absorb a CPU shortage (measured as their lag).
    * ``time_dilation``: K ≥ 1; every rate, timer and delay of the fabric and the endpoints runs K× slower
      in real time and every recorded time is emulated time (the run's timeout and stall timeout too).
    * ``stamp_spread_ns``: the endpoints stamp a batch's packets one packet time apart at their queue
      pair's rate and cap a batch to this span of emulated time (how far ahead of its pacer a sender
      commits packets). None: 0, one stamp per batch and batches as the sim's endpoint makes them (the
      switch spreads them at the NIC rate). The switch rewrites each forwarded stamp to the packet's model
      delivery time, and the receivers time CE marks (their CNPs) and message arrivals by it. The ranks
      serve their queue pairs :func:`service_lag_for` behind their clock.
    """

    port: PortConfig = field(default_factory=_default_port)
    address: str = "127.0.0.1"
    port_base: int = 0
    driver: ClassVar[str] = "loopback"

    high_priority_dscps: tuple[int, ...] = (48,)
    queue_sample_interval_ns: int = 1_000_000
    max_queue_samples: int = 200_000
    rank_rcvbuf_bytes: int = 4 << 20
    switch_rcvbuf_bytes: int = 16 << 20
    spin_ns: int = field(default=50_000, kw_only=True)
    switch_scheduling: str = "fifo"
    egress_slack_ns: int | None = None
    time_dilation: float = 1.0
    stamp_spread_ns: int | None = None

    def __post_init__(self) -> None:
        try:
            addr = ipaddress.ip_address(self.address)
        except ValueError:
            raise ConfigError(f"loopback: 'address' {self.address!r} is not an IPv4 address") from None
        if not (addr.version == 4 and addr.is_loopback):
            raise ConfigError(f"loopback: 'address' {self.address!r} must be in 127.0.0.0/8")
        if self.port.pfc is not None:
            raise ConfigError("loopback: 'pfc' is not supported by the software switch (use the sim fabric)")
        if self.switch_scheduling not in ("fifo", "nice", "normal"):
            raise ConfigError(f"loopback: 'switch_scheduling' must be fifo, nice or normal, got {self.switch_scheduling!r}")
        if self.egress_slack_ns is not None and not (isinstance(self.egress_slack_ns, int) and self.egress_slack_ns >= 0):
            raise ConfigError(f"loopback: 'egress_slack_ns' must be a non-negative integer, got {self.egress_slack_ns!r}")
        if self.stamp_spread_ns is not None and not (isinstance(self.stamp_spread_ns, int) and self.stamp_spread_ns >= 0):
            raise ConfigError(f"loopback: 'stamp_spread_ns' must be a non-negative integer, got {self.stamp_spread_ns!r}")
        k = self.time_dilation
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not 1.0 <= k <= MAX_TIME_DILATION:
            raise ConfigError(f"loopback: 'time_dilation' must be a number in 1..{MAX_TIME_DILATION}, got {k!r}")
        if not 0 <= self.port_base <= 65535:
            raise ConfigError(f"loopback: 'port_base' {self.port_base} out of range 0..65535")
        SupervisionConfig.__post_init__(self)


def egress_slack_for(rate_bps: float, packet_wire_bytes: int) -> int:
    """How long the switch may hold a departed packet to send it with the next ones of its port (one GSO
    send instead of several): two packet times at the port rate, within 200–400 µs. Measured (8 ports,
    4-packet GRO batches in): 100 µs → 127k packets per switch CPU-second, 400 µs → 197k, and the ranks
    receive fewer, larger GRO batches."""
    two_packets = int(2 * packet_wire_bytes * 8e9 / rate_bps)
    return max(200_000, min(400_000, two_packets))


def service_lag_for(egress_slack_ns: int, time_dilation: float, nic_packet_ns: int) -> int:
    """How far (emulated ns) the ranks serve their queue pairs behind their clock: the switch's horizon
    (``egress_slack_ns`` real ns, its model clock's lag) plus half a packet time at the NIC rate. A message
    the switch delivers at model time d reaches its rank by real d + horizon (+ the rank's wake-up), when
    the rank's service has not passed d if the wake-up is within half a packet time, so the SEND it makes
    ready joins the round-robin at d, as in the sim; a packet stamped s reaches the switch's port model
    at s + one NIC packet time, which the switch's clock passes at real s + that + horizon: the other half
    packet time is the senders' margin."""
    return int(egress_slack_ns / time_dilation) + nic_packet_ns // 2


class SampleTap:
    """The parent's end of the switch's pipe, used by the supervisor like the connection it wraps (poll,
    recv, send, fileno, close). Every "snapshot"/"final" message passing through :meth:`recv` has its
    ``queue_samples_new`` (per port, only the samples new since the switch's previous message) removed
    and appended to per-port lists, which :meth:`queue_samples` returns flattened, port by port in time
    order — the order and count the switch would have produced holding them all."""

    def __init__(self, conn: Any, n_ports: int) -> None:
        self._conn = conn
        self.t_ns: list[list[int]] = [[] for _ in range(n_ports)]
        self.queue_bytes: list[list[int]] = [[] for _ in range(n_ports)]
        self.messages = 0

    def add(self, new: dict[str, list[list[int]]]) -> None:
        """Append one message's new samples (port r at index r)."""
        self.messages += 1
        for acc, part in zip(self.t_ns, new["t_ns"], strict=True):
            acc.extend(part)
        for acc, part in zip(self.queue_bytes, new["queue_bytes"], strict=True):
            acc.extend(part)

    def queue_samples(self) -> dict[str, list[int]]:
        """Every sample received: ``{"t_ns", "port", "queue_bytes"}`` parallel lists, port-major."""
        t: list[int] = []
        port: list[int] = []
        q: list[int] = []
        for i, (ts, qs) in enumerate(zip(self.t_ns, self.queue_bytes, strict=True)):
            t.extend(ts)
            port.extend([i] * len(ts))
            q.extend(qs)
        return {"t_ns": t, "port": port, "queue_bytes": q}

    def recv(self) -> Any:
        msg = self._conn.recv()
        if msg[0] in ("snapshot", "final") and isinstance(msg[2], dict):
            new = msg[2].pop("queue_samples_new", None)
            if new is not None:
                self.add(new)
        return msg

    def poll(self, timeout: float = 0.0) -> bool:
        return self._conn.poll(timeout)

    def send(self, obj: Any) -> None:
        self._conn.send(obj)

    def fileno(self) -> int:
        return self._conn.fileno()

    def close(self) -> None:
        self._conn.close()


def _bind(address: str, port: int, rcvbuf: int, what: str) -> UdpPort:
    try:
        return UdpPort(address, port, rcvbuf_bytes=rcvbuf)
    except OSError as exc:
        raise RunError(f"loopback: cannot bind {what} to {address}:{port}: {exc.strerror or exc}") from None


def run_loopback(schedule: Schedule, loopback_config: LoopbackConfig, endpoint_config: EndpointConfig, *,
                 seed: int, timeout_s: float, progress: Callable[[dict], None] | None = None) -> DriverResult:
    """Run ``schedule`` over real UDP through the software switch (module docstring)."""
    cfg = loopback_config
    world = schedule.world_size
    if world < 1:
        raise RunError("loopback: the schedule has no ranks")
    if cfg.port_base and cfg.port_base + world > 65535:
        raise ConfigError(f"loopback: 'port_base' {cfg.port_base} leaves no room for {world} rank ports")
    qp_src, qp_dst = qp_endpoints(schedule.flow_qp, schedule.flow_src, schedule.flow_dst,
                                  endpoint_config.qps_per_peer)
    k = float(cfg.time_dilation)
    timeout_s *= k  # emulated seconds
    ctx = mp.get_context("fork")
    status = ctx.RawArray("q", world * SLOTS)
    stop = ctx.Event()
    ranks = tuple(range(world))
    sup = Supervisor(ctx, status, stop, ranks, timeout_s=timeout_s, hang_timeout_s=cfg.hang_timeout_s,
                     stall_timeout_s=stall_timeout_for(schedule, cfg.stall_timeout_s) * k, progress=progress)
    hard = time.monotonic_ns() + int((timeout_s + 30.0) * 1e9)
    taps: list[SampleTap] = []  # the switch's (one, once launched)

    def launch(opened: list[UdpPort]) -> None:
        sw_port = _bind(cfg.address, cfg.port_base, cfg.switch_rcvbuf_bytes, "the software switch")
        opened.append(sw_port)
        rank_ports: dict[int, UdpPort] = {}
        for r in ranks:
            p = _bind(cfg.address, cfg.port_base + 1 + r if cfg.port_base else 0, cfg.rank_rcvbuf_bytes, f"rank {r}")
            opened.append(p)
            rank_ports[r] = p
        spec = SwitchSpec(
            port=cfg.port, rank_addresses=tuple(rank_ports[r].address for r in ranks),
            qp_src=tuple(int(x) for x in qp_src), qp_dst=tuple(int(x) for x in qp_dst), seed=seed,
            wire_overhead_bytes=endpoint_config.wire_overhead_bytes, high_priority_dscps=cfg.high_priority_dscps,
            late_threshold_ns=cfg.late_threshold_ns, sample_interval_ns=cfg.queue_sample_interval_ns,
            max_samples=cfg.max_queue_samples, snapshot_interval_ns=int(cfg.snapshot_interval_s * 1e9),
            scheduling=cfg.switch_scheduling, nic_rate_bps=endpoint_config.line_rate_bps, time_dilation=k,
            egress_slack_ns=slack_ns, rank_fds=tuple(rank_ports[r].fileno for r in ranks),
        )  # fmt: skip
        child = sup.spawn("software switch", switch_main, (spec, sw_port), (stop, hard), ())
        child.conn = tap = SampleTap(child.conn, world)
        taps.append(tap)
        dest = (sw_port.address,) * world
        ecfg = replace(endpoint_config, stamp_spread_ns=spread, delivery_stamps=True,  # the switch runs on stamps
                       model_time_service=True, service_lag_ns=service_lag_for(slack_ns, k, nic_packet_ns),
                       feedback_lag_bound_ns=ref)
        if ecfg.icrc == "compute":  # the ICRC of what the ranks send: from their sockets to the switch's
            ecfg = replace(ecfg, rank_addresses=tuple(rank_ports[r].address[0] for r in ranks),
                           rank_udp_ports=tuple(rank_ports[r].address[1] for r in ranks), dest_endpoints=dest)
        launch_workers(sup, schedule, ecfg, rank_ports, dest, cfg, status, stop, hard, time_dilation=k,
                       realtime=cfg.switch_scheduling == "fifo")

    nic_packet_ns = mtu_time_ns(endpoint_config, endpoint_config.line_rate_bps)
    spread = cfg.stamp_spread_ns if cfg.stamp_spread_ns is not None else 0
    slack_ns = cfg.egress_slack_ns if cfg.egress_slack_ns is not None else egress_slack_for(
        cfg.port.rate_bps / k, endpoint_config.mtu_bytes + 64 + endpoint_config.wire_overhead_bytes)
    ref = mtu_time_ns(endpoint_config, cfg.port.rate_bps)
    sup.run(launch)
    res = _result(sup, cfg, world, endpoint_config.retransmit_timeout_ns, taps[0] if taps else None)
    congested = peak_port_load(schedule) > 1.0
    add_fidelity(res.health, res.health.get("switch_ingress_lag_ns", {}), _beyond(res.health), ref, k,
                 congested=congested)
    _add_lag_marks(res.health, res.fabric)
    _add_cnp_lag(res.health, res.records, congested)
    return res


def _add_lag_marks(health: dict, fabric: FabricReport | None) -> None:
    """Judge the ECN marks at queues only late arrivals made (:func:`~emulator.instruments.fidelity.with_lag_marks`);
    a verdict it turns (or extends) replaces the fidelity warning."""
    fid = health.get("fidelity")
    if fid is None or "switch_lag_marks" not in health or fabric is None:
        return
    _replace_verdict(health, with_lag_marks(fid, health["switch_lag_marks"], health["switch_unplaced_late_batches"],
                                            sum(p.marked_packets for p in fabric.ports)))


def _add_cnp_lag(health: dict, records: dict[int, RankRecords], congested: bool) -> None:
    """Judge the CNPs the senders acted on, and the sends they posted, later than their model time
    (:func:`~emulator.instruments.fidelity.with_cnp_lag`, :func:`~emulator.instruments.fidelity.with_post_lag`);
    a verdict they turn (or extend) replaces the fidelity warning."""
    fid = health.get("fidelity")
    if fid is None:
        return
    counters = [r.counters for r in records.values()]
    _replace_verdict(health, with_cnp_lag(fid, *_late_totals(counters, "cnps_timed", "cnps_acted_late",
                                                             "cnp_lag_max_ns"), congested))
    _replace_verdict(health, with_post_lag(health["fidelity"], *_late_totals(counters, "posts_timed", "posts_late",
                                                                             "post_lag_max_ns"), congested))


def _late_totals(counters: list[dict], timed: str, late: str, lag_max: str) -> tuple[int, int, int]:
    """Over the ranks' ``counters``: the sums of ``timed`` and ``late`` and the largest ``lag_max``."""
    return (sum(c.get(timed, 0) for c in counters), sum(c.get(late, 0) for c in counters),
            max((c.get(lag_max, 0) for c in counters), default=0))


def _replace_verdict(health: dict, new: dict) -> None:
    """``health["fidelity"]`` becomes ``new``; a warning it changed replaces the old one."""
    old = health["fidelity"]["warning"]
    health["fidelity"] = new
    if new["warning"] != old:
        health["warnings"] = [new["warning"]] + [w for w in health.get("warnings", []) if w != old]


def _beyond(health: dict) -> dict | None:
    """The switch's forwarding lag beyond its deliberate hold (the horizon), or None without a switch."""
    lag = health.get("switch_lag_ns")
    if not lag:
        return None
    h = int(health.get("switch_horizon_ns", 0))
    return {k: (None if lag.get(k) is None else max(0, int(lag[k]) - h)) for k in ("p50", "p99", "p999", "max")}


def _fabric_report(sw: dict, tap: SampleTap | None) -> FabricReport:
    """The switch's final counters with every queue sample the tap received."""
    samples = tap.queue_samples() if tap is not None else {"t_ns": [], "port": [], "queue_bytes": []}
    notes = {k: v for k, v in sw.items() if k not in ("kind", "ports", "queue_samples_new")}
    return FabricReport(sw["kind"], tuple(sw["ports"]), QueueSamples.of(**samples), notes)


def _result(sup: Supervisor, cfg: LoopbackConfig, world: int, rto_ns: int, tap: SampleTap | None) -> DriverResult:
    records = sup.records()
    health = sup.worker_health()
    health["world_size"] = world
    warnings = endpoint_warnings(health, cfg.late_threshold_ns, records, rto_ns)
    fabric = None
    sw = sup.child_final("software switch")
    if sw is not None:
        fabric = _fabric_report(sw[0], tap)
        if len(sw) > 1:
            sh = sw[1]
            health.update(sh)
            fwd = sh["switch_forwarded_packets"]
            if fwd and sh["switch_late_packets"] / fwd > 0.01:
                lag = sh["switch_lag_ns"]
                warnings.append(
                    f"software switch fell behind: {100 * sh['switch_late_packets'] / fwd:.1f}% of packets forwarded "
                    f"more than {format_duration_ns(cfg.late_threshold_ns + sh.get('switch_horizon_ns', 0))} late "
                    f"(p99 lag {format_duration_ns(lag['p99'])})")
            if sh["switch_socket_drops"]:
                warnings.append(f"software switch socket dropped {sh['switch_socket_drops']} datagrams before "
                                "forwarding them (receive buffer full)")
    health["warnings"] = warnings
    return DriverResult(driver="loopback", records=records, fabric=fabric, health=health, complete=sup.complete(records),
                        errors=list(sup.errors), interrupted=sup.interrupted, wall_ns=sup.wall_ns)


@dataclass(frozen=True)
class LoopbackDriver:
    """The loopback fabric as a :class:`~emulator.drivers.contract.Driver`.

    With ``calibrate_max_time_dilation`` set, the time dilation is measured on this machine before the
    run (:func:`~emulator.drivers.loopback.calibrate.calibrate_time_dilation`, up to that value) and the
    measurement lands in ``health["time_dilation_calibration"]``; ``retransmit_timeout_for`` gives the
    endpoints' retransmit timeout under the dilation in force (None: the endpoint config's).

    A calibrated run that completed but whose timing verdict is "upper bounds" runs once more, at the K
    :func:`~emulator.drivers.loopback.calibrate.rerun_time_dilation` chooses from its lag (never above the
    cap, and only when its expected wall time fits what is left of ``budget_s`` since the calibration
    started): the result is the second run's, with the first one's in ``previous_attempt`` (nothing measured
    is lost) and ``health["time_dilation_rerun"]`` saying why (the first K, verdict and wall time). A re-run
    that fails, is interrupted or does not complete leaves the first attempt's result; one the budget has no
    room for is said in ``health["time_dilation_rerun"]`` (``skipped``).
    """

    config: LoopbackConfig
    endpoint: EndpointConfig
    seed: int
    timeout_s: float
    calibrate_max_time_dilation: float | None = None
    retransmit_timeout_for: Callable[[float], int] | None = None
    #: called with the first attempt before a re-run starts (the pipeline writes it at once: a re-run killed
    #: outright loses nothing measured)
    on_first_attempt: Callable[[DriverResult], None] | None = None
    #: under calibration: the wall seconds calibration, first attempt and re-run may take together (None:
    #: :data:`~emulator.drivers.loopback.calibrate.DEFAULT_BUDGET_S`)
    budget_s: float | None = None
    name: str = "loopback"

    def run(self, schedule: Schedule, progress: Progress = None) -> DriverResult:
        cfg, calibration = self.config, None
        t0 = time.monotonic()
        if self.calibrate_max_time_dilation is not None:
            from emulator.drivers.loopback.calibrate import calibrate_time_dilation

            ecfg = self.endpoint
            calibration = calibrate_time_dilation(
                schedule.world_size, cfg.port.rate_bps, ecfg.mtu_bytes + 16 + ecfg.wire_overhead_bytes,
                max_k=self.calibrate_max_time_dilation, address=cfg.address, scheduling=cfg.switch_scheduling,
                port_load=peak_port_load(schedule))
            cfg = replace(cfg, time_dilation=calibration.time_dilation)
        res = self._run_at(schedule, cfg, progress)
        if calibration is None:
            return res
        res.health["time_dilation_calibration"] = {**calibration.to_dict(), "text": calibration.describe()}
        budget_s = DEFAULT_BUDGET_S if self.budget_s is None else float(self.budget_s)
        wall_left_s = budget_s - (time.monotonic() - t0)
        k2 = self._rerun_k(res, cfg.time_dilation, wall_left_s)
        fid = res.health["fidelity"]
        if k2 is None:
            if self._rerun_k(res, cfg.time_dilation) is not None:  # only the budget stood in the way: say so
                res.health["time_dilation_rerun"] = {
                    "first_time_dilation": cfg.time_dilation, "skipped": True, "budget_s": budget_s,
                    "wall_left_s": round(wall_left_s, 3), "first_wall_ns": res.wall_ns,
                    "text": rerun_skipped_text(cfg.time_dilation, res.wall_ns / 1e9, wall_left_s, budget_s)}
            return res
        rerun = {"first_time_dilation": cfg.time_dilation, "time_dilation": k2, "first_verdict": fid["verdict"]}
        if self.on_first_attempt is not None:
            self.on_first_attempt(res)
        try:
            again = self._run_at(schedule, replace(cfg, time_dilation=k2), progress)
        except (Exception, KeyboardInterrupt) as exc:  # the first attempt is kept whatever became of the re-run
            stopped = isinstance(exc, KeyboardInterrupt)
            why = "interrupted (Ctrl-C)" if stopped else f"failed: {type(exc).__name__}: {exc}"
            res.health["time_dilation_rerun"] = {
                **rerun, "first_attempt_kept": False,
                "text": f"the re-run at K = {k2:g} {why}; these are the first attempt's results (K = "
                        f"{cfg.time_dilation:g}, {fid['verdict']})"}
            return replace(res, interrupted=res.interrupted or stopped)
        if not again.complete and not again.interrupted:  # the first attempt completed: it is the result
            res.health["time_dilation_rerun"] = {
                **rerun, "first_attempt_kept": False,
                "text": f"the re-run at K = {k2:g} did not complete; these are the first attempt's results (K = "
                        f"{cfg.time_dilation:g}, {fid['verdict']})"}
            return res
        again.health["time_dilation_calibration"] = res.health["time_dilation_calibration"]
        again.health["time_dilation_rerun"] = {
            **rerun, "first_lag_judged_ns": fid["lag_judged_ns"], "reference_ns": fid["reference_ns"],
            "first_wall_ns": res.wall_ns, "first_attempt_kept": True,
            "text": f"re-run at K = {k2:g}: the first attempt at K = {cfg.time_dilation:g} was not faithful "
                    f"({fid['verdict']}); its results are kept",
        }
        return replace(again, previous_attempt=res)

    def _run_at(self, schedule: Schedule, cfg: LoopbackConfig, progress: Progress) -> DriverResult:
        ecfg = self.endpoint
        if self.retransmit_timeout_for is not None:
            rto = self.retransmit_timeout_for(cfg.time_dilation)
            if rto != ecfg.retransmit_timeout_ns:
                ecfg = replace(ecfg, retransmit_timeout_ns=rto)
        return run_loopback(schedule, cfg, ecfg, seed=self.seed, timeout_s=self.timeout_s, progress=progress)

    def _rerun_k(self, res: DriverResult, k: float, wall_left_s: float | None = None) -> float | None:
        """The K of the one re-run of a calibrated run (None: no re-run): only for a run that completed,
        uninterrupted and without errors, whose timing was not faithful, and whose re-run fits the
        ``wall_left_s`` of its budget (None: any)."""
        from emulator.drivers.loopback.calibrate import rerun_time_dilation

        fid = res.health.get("fidelity")
        if fid is None or not res.complete or res.interrupted or res.errors:
            return None
        return rerun_time_dilation(k, fid, float(self.calibrate_max_time_dilation or k), res.wall_ns / 1e9,
                                   wall_left_s)
