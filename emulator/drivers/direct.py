"""The direct driver: rank endpoints bound to given local addresses send straight to their peers.

Theory of operation
-------------------
No software switch: the real network (loopback, veth pairs and a bridge, or NICs and switches) carries the
packets and does any ECN marking. Every rank gets a UDP socket bound to its own ``(address, port)``;
its endpoint's transmits go to the destination rank's ``(address, port)`` with the endpoint's TOS (data
ECT(0) with the configured DSCP; CNP and ACK DSCPs from the endpoint config); receivers read the ECN bits
with ``IP_RECVTOS``, so CE marks set by a real switch reach the notification point. The UDP port is
configurable: on hosts with RoCE NICs the NIC claims 4791 for itself, so pick another there.

``local_ranks`` lets one host run only some ranks of a multi-host run (the others run the same schedule
elsewhere); the run then ends when the local ranks are done plus ``linger_s`` (to keep answering
retransmits of remote senders). Worker processes, heartbeats, hang and stall detection, Ctrl-C and
partial records are shared with the loopback driver (:mod:`~emulator.drivers.sockets.supervisor`).

Note: GSO needs an interface MTU of at least the path MTU + 76 bytes (a 4096-byte path MTU needs an MTU
above 4172, e.g. 9000 on veth/NICs); the kernel refuses larger datagrams because DF is set.
"""

from __future__ import annotations

import ipaddress
import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import ClassVar

import numpy as np

from emulator.drivers.contract import DriverResult, Progress
from emulator.drivers.sockets.mmsg import mmsg_supported
from emulator.drivers.sockets.netns import in_netns
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
from emulator.errors import ConfigError, RunError
from emulator.schedule.model import Schedule


@dataclass(frozen=True, slots=True)
class DirectConfig(SupervisionConfig):
    """Where each rank lives (and how its workers run:
    :class:`~emulator.drivers.sockets.supervisor.SupervisionConfig`).

    * ``addresses``: IPv4 address of every rank (index = rank); each binds there and peers send there.
    * ``udp_port``: UDP port every rank binds and sends to (default 4791); ``ports`` overrides per rank.
    * ``local_ranks``: ranks run on this host (default: all).
    * ``rcvbuf_bytes``: socket receive buffer per rank (absorbs bursts the receiver cannot take at once).
      Unless the endpoint config sets ``max_outstanding_bytes``, every queue pair's window is a quarter of
      the effective buffer (Linux reports twice the request, the rest is per-datagram overhead) shared by
      the most queue pairs that send to one rank (:func:`max_senders_into_a_rank`): the senders into a
      receiver can never overrun its socket together, nor queue more in it than a quarter of the buffer
      (what a receiver that fell behind works through before its ACKs move), and senders that do overrun
      one (a window set by hand) back off on the NAKs (:func:`receiver_overrun` reports it). Receivers ACK
      every half of that window (:func:`direct_ack_every`) unless ``ack_every_packets`` is set.
    * ``spin_ns``: a worker polls instead of sleeping when its next timer is this close (0 = always sleep;
      workers run with 1 µs timer slack, so a short spin suffices, and a long one made a paced sender on a
      shared machine lose its CPU share: at 8 Gbit/s and load 6, 200 µs gave 0.9–2.2 Gbit/s and
      4–8 ms timer-lag p99, 20 µs gave 3.0–3.1 Gbit/s and 85–175 µs).
    * ``pin_cpus``: pin worker w to CPU w (mod the CPUs this process may use).
    * ``linger_s``: after the local ranks are done, keep serving this long when some ranks are remote.
    * ``netns``: per rank, the network namespace (``ip netns`` name) its socket lives in, or None; lets
      one machine run ranks behind veth pairs and a bridge (the worker processes stay where they are).
    * ``realtime``: run the rank workers at SCHED_FIFO 1 where permitted (root), so other load on the host
      neither delays their wake-ups nor takes their CPU; each rank's socket health says what applied
      (``worker_scheduling``). The kernel's RT throttling bounds a runaway loop.
    * ``sendmmsg``: send each worker poll's batches by one ``sendmmsg`` instead of one ``sendto`` each
      (receives always take every waiting batch by one ``recvmmsg``); off by default: measured 2–3 µs
      more CPU per 61 KB batch on the sender (bench/goodput_direct.py ``--sendmmsg``).
    * ``compiled_core``: the endpoints' per-batch work by compiled kernels (``EndpointConfig.compiled_core``:
      the same bytes and records as the Python core); compiled, or loaded from numba's on-disk cache, before
      the workers start, so the run's clock never includes it (``kernel_warm_s`` in the health).
    * ``compiled_drain`` (with ``compiled_core``): a worker receives by one compiled call that makes the
      ``recvmmsg`` system call and accepts every GRO batch of MIDDLE packets into the receiver's queue-pair
      table (:mod:`~emulator.drivers.sockets.rx_compiled`); the rest goes to ``receive`` as before. Each
      rank's socket health counts the batches so taken (``scanned_datagrams``).
    * ``compiled_send`` (with ``compiled_core``): a worker sends each poll's transmits by one compiled call
      that writes the ``sendmmsg`` headers and makes the system calls
      (:mod:`~emulator.drivers.sockets.tx_compiled`), and the senders hand out a run of MIDDLE batches in their
      reused buffers as one transmit (``EndpointConfig.run_transmits``): the interpreter's work is per run,
      not per batch. The same bytes on the wire, in the same order. Overrides ``sendmmsg``.
    * ``line_rate_burst_batches``: the endpoints' line-rate pacers hold at least this many GSO batches
      (``EndpointConfig.line_rate_burst_batches``, unless the endpoint config sets it; 0: off). A rank
      short of CPU then sends this many batches per visit to a queue pair instead of the 2 a 25 Gbit/s
      NIC's 20 µs burst allows, and a visit's fixed work (pacers, heap, window, timers) is paid once for
      them: 8-rank collectives at 25 Gbit/s, SCHED_FIFO workers, 2 → 8 batches: All-Reduce 0.68 → 0.52,
      All-to-All 0.76 → 0.60 CPU-s per GB (medians of 4 alternating runs, bench/RESULTS.md, dpcore6). At
      100 Gbit/s the 20 µs burst is already 4 batches.
    * ``rx_linger_ns``: a worker with no timer before its wait cap that has just read at least a GSO batch
      sleeps this long on a timer before reading its sockets again, instead of sleeping on them
      (``WorkerSpec.rx_linger_ns``; 0: off): a stream's next batches queue meanwhile, so its sender's sends
      wake nobody and the receiver reads several batches a pass. One flow at 100 Gbit/s, SCHED_FIFO, load ~10:
      receiver 12.9 → 6.3 µs and sender 16.3 → 11.4 µs CPU per batch, receiver sleeps 8,773 → 1,561 per GB
      (bench/RESULTS.md, dack15). A message's arrival after such a pass is seen up to this much later.
    """

    driver: ClassVar[str] = "direct"

    addresses: tuple[str, ...]
    udp_port: int = 4791
    ports: tuple[int, ...] = ()
    local_ranks: tuple[int, ...] | None = None
    linger_s: float = 1.0
    rcvbuf_bytes: int = 16 << 20
    pin_cpus: bool = False
    netns: tuple[str | None, ...] = ()
    realtime: bool = False
    sendmmsg: bool = False
    compiled_core: bool = True
    compiled_drain: bool = True
    compiled_send: bool = True
    line_rate_burst_batches: int = 8
    rx_linger_ns: int = 50_000

    def __post_init__(self) -> None:
        for i, a in enumerate(self.addresses):
            try:
                ip = ipaddress.ip_address(a)
            except ValueError:
                raise ConfigError(f"direct: 'addresses[{i}]' {a!r} is not an IP address") from None
            if ip.version != 4:
                raise ConfigError(f"direct: 'addresses[{i}]' {a!r}: only IPv4 is supported")
        if not 1 <= self.udp_port <= 65535:
            raise ConfigError(f"direct: 'udp_port' {self.udp_port} out of range 1..65535")
        if self.ports and len(self.ports) != len(self.addresses):
            raise ConfigError(f"direct: 'ports' lists {len(self.ports)} ports for {len(self.addresses)} addresses")
        for i, p in enumerate(self.ports):
            if not 1 <= p <= 65535:
                raise ConfigError(f"direct: 'ports[{i}]' {p} out of range 1..65535")
        if self.netns and len(self.netns) != len(self.addresses):
            raise ConfigError(f"direct: 'netns' lists {len(self.netns)} entries for {len(self.addresses)} addresses")
        endpoints = [(a, self.port_of(r)) for r, a in enumerate(self.addresses)]
        if len(set(endpoints)) != len(endpoints):
            raise ConfigError("direct: two ranks share one address and port")
        v = self.rx_linger_ns
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 1_000_000:
            raise ConfigError(f"direct: 'rx_linger_ns' must be an integer in 0..1000000, got {v!r}")
        n = self.line_rate_burst_batches
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 64:
            raise ConfigError(f"direct: 'line_rate_burst_batches' must be an integer in 0..64, got {n!r}")
        SupervisionConfig.__post_init__(self)

    def port_of(self, rank: int) -> int:
        return self.ports[rank] if self.ports else self.udp_port


def run_direct(schedule: Schedule, direct_config: DirectConfig, endpoint_config: EndpointConfig, *,
               timeout_s: float, progress: Callable[[dict], None] | None = None,
               start_at: Callable[[], int] | None = None) -> DriverResult:
    """Run ``schedule`` with every local rank on its own address (module docstring); ``start_at``, called
    once every local rank is ready, returns the common t0 of a multi-host run on this host's clock."""
    cfg = direct_config
    world = schedule.world_size
    if len(cfg.addresses) != world:
        raise ConfigError(f"direct: 'addresses' lists {len(cfg.addresses)} ranks, the schedule has {world}")
    local = tuple(range(world)) if cfg.local_ranks is None else tuple(sorted(set(cfg.local_ranks)))
    if not local or local[0] < 0 or local[-1] >= world:
        raise ConfigError(f"direct: 'local_ranks' must name ranks 0..{world - 1}, got {cfg.local_ranks!r}")
    ctx = mp.get_context("fork")
    status = ctx.RawArray("q", world * SLOTS)
    stop = ctx.Event()
    sup = Supervisor(ctx, status, stop, local, timeout_s=timeout_s, hang_timeout_s=cfg.hang_timeout_s,
                     stall_timeout_s=stall_timeout_for(schedule, cfg.stall_timeout_s), progress=progress)
    sup.start_at = start_at
    dest = tuple((cfg.addresses[r], cfg.port_of(r)) for r in range(world))
    if endpoint_config.icrc == "compute":  # the ICRC covers the addresses and ports the sockets use
        endpoint_config = replace(endpoint_config, rank_addresses=cfg.addresses, rank_udp_ports=tuple(
            p for _, p in dest), dest_endpoints=dest)
    if cfg.line_rate_burst_batches and not endpoint_config.line_rate_burst_batches:
        endpoint_config = replace(endpoint_config, line_rate_burst_batches=cfg.line_rate_burst_batches)
    warm_s = None
    send_compiled = cfg.compiled_core and cfg.compiled_send and mmsg_supported()
    if cfg.compiled_core:  # before the clock: the forked workers inherit the compiled kernels
        from emulator.wire.kernels import warm

        endpoint_config = replace(endpoint_config, compiled_core=True)
        t_warm = time.perf_counter()
        warm()
        if cfg.compiled_drain:
            from emulator.drivers.sockets.rx_compiled import warm as warm_drain

            warm_drain()
        if send_compiled:
            from emulator.drivers.sockets.tx_compiled import warm as warm_send

            endpoint_config = replace(endpoint_config, run_transmits=True)
            warm_send()
        warm_s = time.perf_counter() - t_warm
    hard = time.monotonic_ns() + int((timeout_s + 30.0) * 1e9)

    def launch(opened: list[UdpPort]) -> None:
        rank_ports: dict[int, UdpPort] = {}
        for r in local:
            try:
                with in_netns(cfg.netns[r] if cfg.netns else None):
                    p = UdpPort(dest[r][0], dest[r][1], rcvbuf_bytes=cfg.rcvbuf_bytes,
                                send_mmsg=cfg.sendmmsg or send_compiled, send_compiled=send_compiled)
            except OSError as exc:
                raise RunError(f"direct: rank {r}: cannot bind {dest[r][0]}:{dest[r][1]}: "
                               f"{exc.strerror or exc}") from None
            opened.append(p)
            rank_ports[r] = p
        nonlocal endpoint_config
        rcvbuf = min(p.rcvbuf_bytes for p in rank_ports.values())
        share = rcvbuf // (4 * max_senders_into_a_rank(schedule, endpoint_config.qps_per_peer))
        if not endpoint_config.max_outstanding_bytes:
            endpoint_config = replace(endpoint_config, max_outstanding_bytes=share)
        endpoint_config = replace(endpoint_config, ack_every_packets=direct_ack_every(endpoint_config, share))
        launch_workers(sup, schedule, endpoint_config, rank_ports, dest, cfg, status, stop, hard,
                       pin_cpus=cfg.pin_cpus, realtime=cfg.realtime,
                       compiled_drain=cfg.compiled_core and cfg.compiled_drain, rx_linger_ns=cfg.rx_linger_ns)

    sup.run(launch, linger_s=cfg.linger_s if len(local) < world else 0.0)
    records = sup.records()
    health = sup.worker_health()
    health["world_size"] = world
    health["local_ranks"] = list(local)
    if warm_s is not None:
        health["kernel_warm_s"] = round(warm_s, 3)
    health["warnings"] = endpoint_warnings(health, cfg.late_threshold_ns, records,
                                           endpoint_config.retransmit_timeout_ns)
    health["receiver_overrun"] = over = receiver_overrun(health, records, endpoint_config.max_outstanding_bytes)
    if over["warning"]:
        health["warnings"].append(over["warning"])
    add_fidelity(health, health.get("endpoint_timer_lag_ns", {}), None,
                 mtu_time_ns(endpoint_config, endpoint_config.line_rate_bps), 1.0)
    return DriverResult(driver="direct", records=records, health=health, complete=sup.complete(records),
                        errors=list(sup.errors), interrupted=sup.interrupted, wall_ns=sup.wall_ns)


#: ACK spacing of the direct driver when the endpoint config keeps the default: half a queue pair's window
#: (``ACK_WINDOW_PARTS``), within these bounds (packets; a sender whose window is shorter than the spacing
#: would wait for its retransmit timeout) and at most what the line rate sends in ``1 / ACK_RTO_PARTS`` of
#: the retransmit timeout (so the ACKs of a flow at the line rate never let the timer fire). Half, not a
#: quarter: the 8-rank All-to-All (7 queue pairs into each receive buffer, windows of 286 packets) made 2,600
#: ACKs per GB against the All-Reduce's 954; half a window made 1,840, −1.4 % CPU per GB and +3 % busbw
#: (medians of 6 alternating pairs at SCHED_FIFO, bench/RESULTS.md, a2a12). The cap of 1,024 packets (4 MiB)
#: lets one sender's 2,048-packet window (16 MiB buffers) be ACKed per half window too: 237 ACKs per GB
#: instead of 905 at a cap of 256, and less time waiting on a full window (bench/RESULTS.md, dack15).
ACK_EVERY_MIN, ACK_EVERY_MAX = 1, 1024
ACK_WINDOW_PARTS = 2
ACK_RTO_PARTS = 4
_FIELDS = {f.name: f for f in fields(EndpointConfig)}


def max_senders_into_a_rank(schedule: Schedule, qps_per_peer: int = 1) -> int:
    """The most queue pairs that send to one rank (distinct (source, QP) of its incoming flows, each on
    ``qps_per_peer`` wire QPs): how many windows one receive buffer may have to hold at once."""
    if not schedule.flow_src.size:
        return 1
    pairs = np.unique(np.stack([schedule.flow_dst, schedule.flow_src, schedule.flow_qp]), axis=1)
    return max(1, int(np.bincount(pairs[0]).max()) * max(1, qps_per_peer))


def direct_ack_every(config: EndpointConfig, window_bytes: int) -> int:
    """Packets between a receiver's ACKs in direct mode: the configured ``ack_every_packets`` when it is not
    the default, else half the window in MTU packets (the smaller of ``max_outstanding_bytes`` and
    ``window_bytes``, the window every sender into one receive buffer can have without overrunning it)
    within ``ACK_EVERY_MIN..ACK_EVERY_MAX`` and no more than the line rate sends in a quarter of the retransmit
    timeout. Every ACK costs a ``sendmsg`` at the receiver and a ``recvmsg``
    plus its parsing at the sender; one per half window still frees the window before it
    fills, and a message's last packet is always acknowledged at once (AckReq)."""
    default = _FIELDS["ack_every_packets"].default
    if config.ack_every_packets != default or not config.max_outstanding_bytes:
        return config.ack_every_packets
    window_packets = min(config.max_outstanding_bytes, window_bytes) // config.mtu_bytes
    packet_bits = 8 * (config.mtu_bytes + config.wire_overhead_bytes)
    rto_packets = int(config.retransmit_timeout_ns * config.line_rate_bps / 1e9 / packet_bits) // ACK_RTO_PARTS
    return max(ACK_EVERY_MIN, min(ACK_EVERY_MAX, rto_packets, window_packets // ACK_WINDOW_PARTS))


def receiver_overrun(health: dict, records: dict, window_bytes: int) -> dict:
    """How far receivers fell behind their senders: datagrams their sockets dropped, NAKs, the senders'
    window cuts and retransmitted bytes, with a warning line when any receiver was overrun."""

    def total(key: str) -> int:
        return sum(int(r.counters.get(key, 0)) for r in records.values())

    out = {"socket_drops": int(health.get("endpoint_socket_drops", 0)), "naks_received": total("naks_received"),
           "window_cuts": total("window_cuts"), "retx_bytes": total("retx_bytes"),
           "max_outstanding_bytes": int(window_bytes), "warning": None}
    if out["socket_drops"] or out["window_cuts"]:
        out["warning"] = (f"receiver overrun: rank sockets dropped {out['socket_drops']} datagrams; senders backed "
                          f"off (window cut {out['window_cuts']} times, {out['retx_bytes']} bytes retransmitted): "
                          "the receivers' CPU, not the network, set the pace")
    return out


@dataclass(frozen=True)
class DirectDriver:
    """The direct fabric as a :class:`~emulator.drivers.contract.Driver`: :func:`run_direct` on the config
    ``config_for(world_size)`` gives (a profile lists rank addresses; a run takes as many as it has ranks)."""

    config_for: Callable[[int], DirectConfig]
    endpoint: EndpointConfig
    timeout_s: float
    name: str = "direct"

    def run(self, schedule: Schedule, progress: Progress = None) -> DriverResult:
        cfg = self.config_for(schedule.world_size)
        return run_direct(schedule, cfg, self.endpoint, timeout_s=self.timeout_s, progress=progress)
