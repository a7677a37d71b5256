"""``fabric.time_dilation: auto``: pick the dilation K from a short calibration of this machine and the
schedule's worst port load.

Theory of operation
-------------------
Two measurements, ~0.3 s together, on the machine as it is now (other processes included):

* **CPU per packet**: MTU-size packets sent one per datagram over two real loopback UDP hops (rank →
  switch → rank, as the loopback fabric does: its endpoints serve their queue pairs on model time, one
  packet per visit), received with GRO; CPU seconds per packet, times :data:`PATH_FACTOR` for the Python
  work around the sockets (endpoint, port model). The factor is fitted on the loopback fabric (alltoall_8,
  2 cores, 1-minute load ~9, 2026-12-01): the two hops cost 40–55 µs per packet, and the run was
  faithful at K = 40 but not at K = 13 or 20, i.e. ~4× the hops. The fabric needs ``offered packets/s × CPU
  per packet`` CPU-seconds per second; K makes that at most :data:`CPU_SHARE` of the idle CPUs (CPUs minus
  the 1-minute load).
* **Wake-up lateness**: short ``select`` sleeps; their p99 lateness L, measured at the priority the
  fabric's processes will run at (``scheduling`` ``fifo``: real-time SCHED_FIFO 1 for the measurement,
  as the switch and the rank workers get, when permitted; a normal-priority sleeper on a shared machine
  waits behind other processes' slices, which those processes do not). Timing is faithful when lag
  stays within one packet time at the port rate (the fidelity verdict's reference), so
  K ≥ 2·L / packet time.

**Port load** (:func:`peak_port_load`, from the schedule, no I/O): the most any egress port is offered
at once, in port rates, when every sender runs at its NIC rate shared by its flows of one collective
step. 1 for a ring or a direct All-to-All (every port fed at most as fast as it drains), 7 for a 7→1
incast. Above 1 the port holds a queue for the whole flow, and one packet that reaches it late moves
the marks and drops of every packet after it; the fidelity verdict then judges the lag tail (p99.9, not
p99) and K gets :data:`CONGESTED_HEADROOM` × the above. Fitted on incast_7to1 at 25 Gbps (2 cores,
2026-12-01, loads 1–7): at K = 1,600 (the CPU term) 0.1 % of the packets reached their port 1–5 MTU times
late (ingress lag max 3.4–6.8 µs against 1.34 µs per MTU) and the port dropped 4–7 packets; at K = 3,300
and above none was late by more than 0.1 MTU.

``K = headroom · max(1, K_cpu, K_lag)`` rounded up (to an integer below 10, two significant digits
above), capped at the schema's maximum (:func:`choose_time_dilation`). The figures travel with K into
the run's health (``time_dilation_calibration``).
"""

from __future__ import annotations

import math
import os
import select
import time
from dataclasses import asdict, dataclass

import numpy as np

from emulator.drivers.sockets.udp import UdpPort
from emulator.schedule.model import Schedule

#: CPU of the whole loopback data path per packet over that of its two socket hops (module docstring)
PATH_FACTOR = 4.0
#: share of the idle CPUs the emulated fabric may use
CPU_SHARE = 0.5
#: K multiplier for a schedule that offers some port more than its rate (module docstring)
CONGESTED_HEADROOM = 2.0
_BATCH = 1


@dataclass(frozen=True, slots=True)
class Calibration:
    """What the calibration measured and the K it chose."""

    time_dilation: float
    k_cpu: float
    k_lag: float
    offered_packets_per_s: float
    cpu_s_per_packet: float
    idle_cpus: float
    wakeup_lag_p99_ns: int
    packet_time_ns: int
    calibration_s: float
    port_load: float = 1.0

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return (f"time dilation: auto -> K = {self.time_dilation:g} (offered {self.offered_packets_per_s:,.0f} "
                f"packets/s at {self.cpu_s_per_packet * 1e6:.1f} µs CPU each on {self.idle_cpus:.1f} idle CPUs: "
                f"K ≥ {self.k_cpu:.1f}; wake-up lag p99 {self.wakeup_lag_p99_ns / 1000:.0f} µs against "
                f"{self.packet_time_ns / 1000:.0f} µs per packet: K ≥ {self.k_lag:.1f}"
                f"{self._congested()})")

    def _congested(self) -> str:
        if self.port_load <= 1.0:
            return ""
        return f"; a port offered {self.port_load:.3g}× its rate: × {CONGESTED_HEADROOM:g}"


def peak_port_load(schedule: Schedule) -> float:
    """The most any egress port is offered at once, in port rates: per collective step (flows with equal
    ``flow_coll`` and ``flow_step``; a trace's point-to-point flows group by step), each sender's NIC
    shared equally by its flows of the step, summed over the flows into each destination. 0 without
    flows."""
    src = np.asarray(schedule.flow_src, dtype=np.int64)
    if src.size == 0:
        return 0.0
    dst = np.asarray(schedule.flow_dst, dtype=np.int64)
    _, group = np.unique(np.stack([np.asarray(schedule.flow_coll, dtype=np.int64),
                                   np.asarray(schedule.flow_step, dtype=np.int64)]), axis=1, return_inverse=True)
    group = group.reshape(-1)
    _, by_sender, per_sender = np.unique(np.stack([group, src]), axis=1, return_inverse=True, return_counts=True)
    share = 1.0 / per_sender[by_sender.reshape(-1)]
    _, by_port = np.unique(np.stack([group, dst]), axis=1, return_inverse=True)
    return float(np.bincount(by_port.reshape(-1), weights=share).max())


def choose_time_dilation(*, offered_packets_per_s: float, cpu_s_per_packet: float, idle_cpus: float,
                         wakeup_lag_p99_ns: float, packet_time_ns: float, port_load: float,
                         max_k: float) -> tuple[float, float, float]:
    """``(K, K_cpu, K_lag)`` from the calibration's figures (module docstring); K is never below 1 nor
    above ``max_k``, and never smaller for more load, slower packets, fewer idle CPUs, later wake-ups or a
    more oversubscribed port."""
    k_cpu = offered_packets_per_s * cpu_s_per_packet / (CPU_SHARE * idle_cpus)
    k_lag = 2 * wakeup_lag_p99_ns / packet_time_ns if packet_time_ns > 0 else 1.0
    headroom = CONGESTED_HEADROOM if port_load > 1.0 else 1.0
    k = min(max_k, _round_up(headroom * max(1.0, k_cpu, k_lag)))
    return k, k_cpu, k_lag


def _socket_cpu_per_packet(address: str, packet_bytes: int, budget_s: float) -> float:
    """CPU seconds per packet of GSO send → GRO receive → GSO send → GRO receive over loopback UDP."""
    ports = [UdpPort(address, 0, rcvbuf_bytes=8 << 20) for _ in range(3)]
    try:
        payload = bytes(packet_bytes * _BATCH)
        a, b, c = ports
        n = 0
        cpu0 = time.process_time()
        end = time.monotonic() + budget_s
        while time.monotonic() < end:
            a.send(payload, b.address, packet_bytes)
            select.select([b.fileno], (), (), 0.01)
            data, _, seg = b.recv()
            while data is not None:
                b.send(data, c.address, seg or packet_bytes)
                data, _, seg = b.recv()
            select.select([c.fileno], (), (), 0.01)
            data, _, _ = c.recv()
            while data is not None:
                n += _BATCH if len(data) >= packet_bytes * _BATCH else max(1, len(data) // packet_bytes)
                data, _, _ = c.recv()
        cpu = time.process_time() - cpu0
        return cpu / n if n else 1e-3
    finally:
        for p in ports:
            p.close()


def _wakeup_lag_p99_ns(sleeps: int = 100, sleep_ns: int = 200_000, realtime: bool = False) -> int:
    """p99 lateness of ``sleeps`` short sleeps; with ``realtime`` at SCHED_FIFO 1 when permitted (the
    caller's policy is restored)."""
    old = None
    if realtime:
        try:
            old = (os.sched_getscheduler(0), os.sched_getparam(0))
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except (OSError, AttributeError):
            old = None
    try:
        lags = []
        for _ in range(sleeps):
            t = time.monotonic_ns()
            select.select((), (), (), sleep_ns / 1e9)
            lags.append(max(0, time.monotonic_ns() - t - sleep_ns))
    finally:
        if old is not None:
            os.sched_setscheduler(0, old[0], old[1])
    lags.sort()
    return lags[min(len(lags) - 1, int(0.99 * len(lags)))]


def _round_up(k: float) -> float:
    if k <= 1.0:
        return 1.0
    if k < 10.0:
        return float(math.ceil(k))
    step = 10 ** (math.floor(math.log10(k)) - 1)
    return float(math.ceil(k / step) * step)


def calibrate_time_dilation(n_ports: int, port_rate_bps: float, packet_wire_bytes: int, *, max_k: float,
                            address: str = "127.0.0.1", budget_s: float = 0.15,
                            scheduling: str = "fifo", port_load: float = 1.0) -> Calibration:
    """Measure this machine and choose K for ``n_ports`` ports at ``port_rate_bps`` (module docstring);
    ``scheduling``: the loopback fabric's ``switch_scheduling``; ``port_load``: :func:`peak_port_load`
    of the schedule."""
    t0 = time.monotonic()
    cpu_pp = PATH_FACTOR * _socket_cpu_per_packet(address, min(packet_wire_bytes, 8192), budget_s)
    lag = _wakeup_lag_p99_ns(realtime=scheduling == "fifo")
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    idle = max(0.25 * ncpu, ncpu - os.getloadavg()[0])
    pps = n_ports * port_rate_bps / (8 * packet_wire_bytes)
    packet_ns = int(packet_wire_bytes * 8e9 / port_rate_bps)
    k, k_cpu, k_lag = choose_time_dilation(offered_packets_per_s=pps, cpu_s_per_packet=cpu_pp, idle_cpus=idle,
                                           wakeup_lag_p99_ns=lag, packet_time_ns=packet_ns, port_load=port_load,
                                           max_k=max_k)
    return Calibration(k, round(k_cpu, 3), round(k_lag, 3), round(pps, 1), cpu_pp, round(idle, 2), lag, packet_ns,
                       round(time.monotonic() - t0, 3), round(port_load, 3))
