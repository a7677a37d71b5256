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

**Stalls** (a third measurement, :data:`STALL_PROBE_S`): one process per CPU, pinned, at the probe's
priority, spins on ``CLOCK_MONOTONIC`` and records every gap. On a VM the hypervisor stops a vCPU now
and then (a firecracker VM with 2 vCPUs, 2026-12-07: gaps of 1–17 ms without a context switch, one
vCPU at a time, 0.1–4 % of the time, bursty; /proc/stat's steal counts them), which a short sleep
probe does not see. A packet due at a random instant is late by what is left of the gap it falls in,
so the probe's lateness at the judged quantile (:func:`stall_lateness_ns`: p99, p99.9 for a congested
port) against one packet time gives ``K_stall``. /proc/stat's steal share since boot is recorded with it.

``K = headroom · max(1, K_cpu, K_lag, K_stall)`` rounded up (to an integer below 10, two significant
digits above), capped at the schema's maximum (:func:`choose_time_dilation`). The figures travel with K
into the run's health (``time_dilation_calibration``).

**Learning from the run** (:func:`rerun_time_dilation`): stalls are rare, so a short probe may miss
them. A run under ``auto`` whose verdict is "upper bounds" is run once more, at K × (1.5 × its judged lag
over the reference, within 2–4), capped at the maximum; the driver keeps the first attempt's result.
Measured on the VM above (quickstart, first attempts forced to K 3–5 at load 9–14): lags 2–50× the
reference from a first attempt below the CPU term are the backlog of an overloaded CPU, not the
machine's stalls — without the ×4 bound, K 3 → 240 (226 s of wall time, where K 54 was faithful). The
re-run must also fit the wall time left of the run's budget (``fabric.time_dilation_budget``, default
:data:`DEFAULT_BUDGET_S`: calibration, first attempt and re-run together), at the first attempt's wall ×
the K ratio: mixed_ar_a2a's first attempt took ~60 s at load 7 and its ×4 re-run passed the 240 s a
benchmark run gets (the benchmark now gives its runs that budget); the quickstart's at load 9–13, with
other processes at real-time priority on the machine, lagged 11 ms at K 26 (29 s) and its re-run at K 110
still 1.8 ms (135 s more). A fixed 60 s bound for the re-run alone left a 43 s first attempt (2026-12-07,
mixed_ar_a2a, lag p99.9 beyond the bound, 4,490 marks) without one; when the budget leaves no room for
twice K the run says so (:func:`rerun_skipped_text`).
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
#: seconds every CPU spins to see the machine's stalls (module docstring)
STALL_PROBE_S = 0.3
#: a re-run's K is at least this multiple of the first attempt's ...
RERUN_MIN_FACTOR = 2.0
#: ... and at least this multiple of K × the first attempt's judged lag over the reference ...
RERUN_LAG_HEADROOM = 1.5
#: ... but at most this multiple of the first attempt's K (module docstring), and at most what keeps the
#: re-run's wall time (the first attempt's × K ratio) within the wall time left of the run's budget; no
#: re-run when that is less than :data:`RERUN_MIN_FACTOR`
RERUN_MAX_FACTOR = 4.0
#: the wall time a run under ``auto`` may take, calibration and re-run included, unless the profile says
#: (``fabric.time_dilation_budget``)
DEFAULT_BUDGET_S = 180.0
_BATCH = 1
_GAP_NS = 20_000  # a spinning loop's gaps shorter than this are its own iterations, not counted


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
    k_stall: float = 0.0
    #: the spinning probe's lateness at the judged quantile (p99; p99.9 with ``port_load`` > 1)
    stall_lateness_ns: int = 0
    stall_max_ns: int = 0
    #: share of the spinning probe's time lost to gaps
    stall_share: float = 0.0
    #: /proc/stat steal over all time since boot (None where there is none to read)
    steal_share_since_boot: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return (f"time dilation: auto -> K = {self.time_dilation:g} (offered {self.offered_packets_per_s:,.0f} "
                f"packets/s at {self.cpu_s_per_packet * 1e6:.1f} µs CPU each on {self.idle_cpus:.1f} idle CPUs: "
                f"K ≥ {self.k_cpu:.1f}; wake-up lag p99 {self.wakeup_lag_p99_ns / 1000:.0f} µs against "
                f"{self.packet_time_ns / 1000:.0f} µs per packet: K ≥ {self.k_lag:.1f}; stalls: lateness "
                f"{'p99.9' if self.port_load > 1.0 else 'p99'} {self.stall_lateness_ns / 1000:.0f} µs, max "
                f"{self.stall_max_ns / 1000:.0f} µs, {100 * self.stall_share:.2f} % of the time{self._steal()}: "
                f"K ≥ {self.k_stall:.1f}{self._congested()})")

    def _steal(self) -> str:
        return "" if self.steal_share_since_boot is None else \
            f", steal since boot {100 * self.steal_share_since_boot:.2f} %"

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
                         max_k: float, stall_lateness_ns: float = 0.0) -> tuple[float, float, float, float]:
    """``(K, K_cpu, K_lag, K_stall)`` from the calibration's figures (module docstring); K is never below 1
    nor above ``max_k``, and never smaller for more load, slower packets, fewer idle CPUs, later wake-ups,
    longer stalls or a more oversubscribed port."""
    k_cpu = offered_packets_per_s * cpu_s_per_packet / (CPU_SHARE * idle_cpus)
    k_lag = 2 * wakeup_lag_p99_ns / packet_time_ns if packet_time_ns > 0 else 1.0
    k_stall = stall_lateness_ns / packet_time_ns if packet_time_ns > 0 else 1.0
    headroom = CONGESTED_HEADROOM if port_load > 1.0 else 1.0
    k = min(max_k, _round_up(headroom * max(1.0, k_cpu, k_lag, k_stall)))
    return k, k_cpu, k_lag, k_stall


def stall_lateness_ns(gaps_ns: list[int], observed_ns: int, share: float) -> int:
    """The lateness that a ``share`` of instants (0.01: the p99) exceeds, when the process was stopped for
    ``gaps_ns`` out of ``observed_ns`` (gaps included): an instant inside a gap of g, at a uniformly random
    point of it, is late by what is left of it, so the share late by more than x is
    ``Σ max(0, g − x) / observed_ns``. 0 when the gaps together are within the share."""
    budget = share * observed_ns
    total, m, x = 0, 0, 0
    gaps = sorted(gaps_ns, reverse=True)
    for i, g in enumerate(gaps):
        total += g
        m += 1
        nxt = gaps[i + 1] if i + 1 < len(gaps) else 0
        x = (total - budget) / m  # Σ over the m largest of (g − x) = budget
        if x >= nxt:
            return max(0, math.ceil(x))
    return max(0, math.ceil(x))


def rerun_time_dilation(time_dilation: float, fidelity: dict, max_k: float,
                        first_wall_s: float = 0.0, wall_left_s: float | None = None) -> float | None:
    """The K to run again at when a run at ``time_dilation`` that took ``first_wall_s`` had the ``fidelity``
    verdict (:func:`~emulator.instruments.fidelity.timing_fidelity`'s dict) under ``auto``: K ×
    :data:`RERUN_LAG_HEADROOM` × judged lag / the bound it was held to (``limit_ns``; else the reference),
    at least :data:`RERUN_MIN_FACTOR` × K, at most :data:`RERUN_MAX_FACTOR` × K and what keeps the re-run
    (``first_wall_s`` × the K ratio) within ``wall_left_s`` (None: no wall bound), rounded up and capped at
    ``max_k``. None when the run was faithful (or its lag not measured), K is at ``max_k`` already, or the
    wall time left has no room for twice K. The real-time lag does not grow with K (it falls as the fabric's CPU share does), so
    the judged lag over K lands within the reference."""
    if fidelity.get("faithful", True) or not fidelity.get("measured", True) or time_dilation >= max_k:
        return None
    most = RERUN_MAX_FACTOR
    if wall_left_s is not None and first_wall_s > 0:
        most = min(most, wall_left_s / first_wall_s)
    if most < RERUN_MIN_FACTOR:
        return None
    ref = float(fidelity.get("limit_ns") or fidelity.get("reference_ns") or 0)
    ratio = float(fidelity.get("lag_judged_ns") or 0) / ref if ref > 0 else 0.0
    factor = min(most, max(RERUN_MIN_FACTOR, RERUN_LAG_HEADROOM * ratio))
    return min(max_k, _round_up(time_dilation * factor))


def rerun_skipped_text(time_dilation: float, first_wall_s: float, wall_left_s: float, budget_s: float) -> str:
    """Why a run under ``auto`` whose timing was not faithful was not run again: twice its K would take
    about twice its ``first_wall_s``, more than the ``wall_left_s`` of its ``budget_s``."""
    return (f"not re-run at K = {_round_up(time_dilation * RERUN_MIN_FACTOR):g}: it would take about "
            f"{RERUN_MIN_FACTOR * first_wall_s:.0f} s, more than the {max(0.0, wall_left_s):.0f} s left of "
            f"fabric.time_dilation_budget ({budget_s:.0f} s)")


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


def _spin(cpu: int | None, seconds: float, realtime: bool, conn) -> None:
    """Spin for ``seconds`` on ``cpu`` (SCHED_FIFO 1 with ``realtime``, when permitted); send back
    ``(gaps_ns, observed_ns)``."""
    try:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        if realtime:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (OSError, AttributeError):
        pass
    now = time.monotonic_ns
    gaps: list[int] = []
    t0 = prev = now()
    end = t0 + int(seconds * 1e9)
    while prev < end:
        t = now()
        if t - prev > _GAP_NS:
            gaps.append(t - prev)
        prev = t
    conn.send((gaps, prev - t0))
    conn.close()


def _stall_probe(seconds: float, realtime: bool) -> tuple[list[int], int]:
    """Every gap of a loop spinning ``seconds`` on each CPU at once, and the time observed (all CPUs)."""
    import multiprocessing as mp

    cpus: list[int | None] = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [None]
    ctx = mp.get_context("fork")
    procs = []
    for c in cpus:
        r, w = ctx.Pipe(False)
        p = ctx.Process(target=_spin, args=(c, seconds, realtime, w), daemon=True)
        p.start()
        w.close()
        procs.append((p, r))
    gaps: list[int] = []
    observed = 0
    for p, r in procs:
        if r.poll(seconds + 5.0):
            g, t = r.recv()
            gaps.extend(g)
            observed += t
        r.close()
        p.join(1.0)
        if p.is_alive():
            p.kill()
            p.join()
    return gaps, observed


def _steal_share_since_boot() -> float | None:
    """Steal over all CPU time since boot from /proc/stat's ``cpu`` line (None where unreadable)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 8 or not sum(fields[:8]):
        return None
    return fields[7] / sum(fields[:8])


def _round_up(k: float) -> float:
    if k <= 1.0:
        return 1.0
    if k < 10.0:
        return float(math.ceil(k))
    step = 10 ** (math.floor(math.log10(k)) - 1)
    return float(math.ceil(k / step) * step)


def calibrate_time_dilation(n_ports: int, port_rate_bps: float, packet_wire_bytes: int, *, max_k: float,
                            address: str = "127.0.0.1", budget_s: float = 0.15,
                            scheduling: str = "fifo", port_load: float = 1.0,
                            stall_probe_s: float = STALL_PROBE_S) -> Calibration:
    """Measure this machine and choose K for ``n_ports`` ports at ``port_rate_bps`` (module docstring);
    ``scheduling``: the loopback fabric's ``switch_scheduling``; ``port_load``: :func:`peak_port_load`
    of the schedule; ``stall_probe_s``: how long every CPU spins to see stalls."""
    t0 = time.monotonic()
    cpu_pp = PATH_FACTOR * _socket_cpu_per_packet(address, min(packet_wire_bytes, 8192), budget_s)
    lag = _wakeup_lag_p99_ns(realtime=scheduling == "fifo")
    gaps, observed = _stall_probe(stall_probe_s, scheduling == "fifo")
    stall = stall_lateness_ns(gaps, observed, 0.001 if port_load > 1.0 else 0.01)
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    idle = max(0.25 * ncpu, ncpu - os.getloadavg()[0])
    pps = n_ports * port_rate_bps / (8 * packet_wire_bytes)
    packet_ns = int(packet_wire_bytes * 8e9 / port_rate_bps)
    k, k_cpu, k_lag, k_stall = choose_time_dilation(
        offered_packets_per_s=pps, cpu_s_per_packet=cpu_pp, idle_cpus=idle, wakeup_lag_p99_ns=lag,
        packet_time_ns=packet_ns, port_load=port_load, max_k=max_k, stall_lateness_ns=stall)
    steal = _steal_share_since_boot()
    return Calibration(k, round(k_cpu, 3), round(k_lag, 3), round(pps, 1), cpu_pp, round(idle, 2), lag, packet_ns,
                       round(time.monotonic() - t0, 3), round(port_load, 3), round(k_stall, 3), stall,
                       max(gaps, default=0), round(sum(gaps) / observed, 5) if observed else 0.0,
                       None if steal is None else round(steal, 5))
