"""The parent side of the socket drivers: start child processes, watch them, stop them, gather results.

Theory of operation
-------------------
::

    start children (fork) ─▶ wait "ready" from each ─▶ send "go t0" (t0 = now + lead) ─▶ monitor ─▶ stop
    monitor, every ≤ 50 ms: read pipes (snapshots, finals, errors) · sentinels (a child exited) ·
             shared status (done flags, progress, heartbeats) · deadline · Ctrl-C
    stop: set the stop event ─▶ wait ≤ grace for each live child's "final" ─▶ SIGKILL whatever is left

End conditions, each with one error line naming ranks: every rank done (success); a child died
("rank 5 (worker pid 1234) died: exit code -9" for every rank it hosted); a worker's heartbeat is older
than ``hang_timeout_s`` ("rank 3 hung: no heartbeat from worker pid … for 5.0 s"); no rank made progress
for ``stall_timeout_s`` ("rank 3 hung: no progress for 10.0 s" for every rank not done); the run's
timeout; KeyboardInterrupt ("interrupted by the user"). In every case the records gathered so far
(final, else the last snapshot) are returned, and no child outlives :meth:`Supervisor.close`.

The ``progress`` callback gets, every ``progress_interval_s`` and once when every rank is done:
``elapsed_s``, ``ranks_done``, ``ranks``, ``ops_done``, ``bytes_delivered`` and ``packets_delivered``
(payload bytes and data packets the receivers accepted, each once), ``rank_delivered`` (the same two
per local rank: ``{"3": [bytes, packets]}``), ``progress`` (the stall counter: bytes sent + received +
ACKs) and ``processes``.
"""

from __future__ import annotations

import gc
import multiprocessing.connection as mpc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from emulator.drivers.sockets.workers import (
    S_DONE,
    S_HEARTBEAT,
    S_OPS,
    S_PROGRESS,
    S_RX_BYTES,
    S_RX_PACKETS,
    SLOTS,
)
from emulator.endpoint.records import RankRecords
from emulator.errors import ConfigError
from emulator.instruments.fidelity import timing_fidelity
from emulator.instruments.histogram import LogLinearHistogram
from emulator.units import format_duration_ns

_POLL_S = 0.05
_GO_LEAD_NS = 100_000_000
_GRACE_S = 3.0
_INTERRUPTED = "interrupted by the user (Ctrl-C); returning what was measured"


@dataclass
class Child:
    name: str
    proc: Any
    conn: Any
    ranks: tuple[int, ...]
    pid: int = 0
    ready: bool = False
    final: tuple | None = None
    snapshot: dict = field(default_factory=dict)
    error: str | None = None
    dead_reported: bool = False


def _wait(children: list[Child], timeout_s: float) -> None:
    """Block until one of ``children`` sent a message or exited, or ``timeout_s`` passed."""
    mpc.wait([c.conn for c in children] + [c.proc.sentinel for c in children], timeout=timeout_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class SupervisionConfig:
    """How a socket driver runs its worker processes; the loopback and direct configs extend it.

    * ``ranks_per_worker``: ranks per worker process (0 = one worker per CPU).
    * ``late_threshold_ns``: lag beyond which an endpoint wake-up counts as late.
    * ``hang_timeout_s``: a worker without heartbeat this long is hung; ``stall_timeout_s``: no rank made
      progress this long → the run ends naming the ranks not done (stretched to cover the schedule's
      longest DELAY and latest not-before time, :func:`stall_timeout_for`).
    * ``snapshot_interval_s``: how often a worker sends its records (what a killed worker leaves).
    * ``spin_ns``: a worker polls instead of sleeping when its next timer is this close (0 = always sleep).
    """

    driver: ClassVar[str] = "socket"

    ranks_per_worker: int = 0
    late_threshold_ns: int = 500_000
    hang_timeout_s: float = 5.0
    stall_timeout_s: float = 10.0
    snapshot_interval_s: float = 0.5
    spin_ns: int = 20_000

    def __post_init__(self) -> None:
        for name in ("hang_timeout_s", "stall_timeout_s", "snapshot_interval_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{self.driver}: {name!r} must be positive, got {getattr(self, name)!r}")
        for name in ("ranks_per_worker", "late_threshold_ns", "spin_ns"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{self.driver}: {name!r} must be >= 0, got {getattr(self, name)}")


def stall_timeout_for(schedule: Any, configured_s: float) -> float:
    """The stall timeout a schedule needs: a rank waiting out a long DELAY (compute) or a late not-before
    time makes no progress without being hung, so the configured value is stretched to cover them."""
    longest = 0.0
    if schedule.op_duration_ns.size:
        longest = 1.5 * float(schedule.op_duration_ns.max()) / 1e9
    if schedule.op_not_before_ns.size:
        longest = max(longest, float(schedule.op_not_before_ns.max()) / 1e9)
    return max(configured_s, longest + 1.0)


def lag_summary(hist: LogLinearHistogram) -> dict[str, Any]:
    """p50/p99/p999/max/mean/count of a histogram of ns (None when empty)."""
    if hist.count == 0:
        return {"count": 0, "p50": None, "p99": None, "p999": None, "max": None, "mean": None}
    p50, p99, p999 = hist.percentiles([50.0, 99.0, 99.9])
    return {"count": hist.count, "p50": p50, "p99": p99, "p999": p999, "max": hist.max, "mean": hist.mean}


class Supervisor:
    """Owns the child processes of one run (see the module docstring)."""

    def __init__(self, ctx: Any, status: Any, stop: Any, ranks: tuple[int, ...], *, timeout_s: float,
                 hang_timeout_s: float, stall_timeout_s: float, progress: Callable[[dict], None] | None,
                 start_timeout_s: float | None = None, progress_interval_s: float = 0.25) -> None:
        self.ctx = ctx
        self.status = status
        self.stop = stop
        self.ranks = ranks
        self.timeout_s = timeout_s
        self.hang_timeout_s = hang_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.progress = progress
        #: building endpoints of a big schedule takes a while, but never longer than the run's own timeout
        self.start_timeout_s = start_timeout_s if start_timeout_s is not None else min(60.0, max(10.0, timeout_s))
        self.progress_interval_s = progress_interval_s
        self.children: list[Child] = []
        self.errors: list[str] = []
        self.t0_ns = 0
        #: called once every child is ready; returns the common t0 (CLOCK_MONOTONIC ns) of a multi-host run
        #: (None: t0 is right after the children are ready)
        self.start_at: Callable[[], int] | None = None
        self.end_ns = 0
        self.interrupted = False

    # -- processes -----------------------------------------------------------------------------------
    def spawn(self, name: str, target: Callable, pre: tuple, post: tuple, ranks: tuple[int, ...]) -> Child:
        """Start ``target(*pre, conn, *post)`` in a forked child, this process's objects frozen (``gc.freeze``)
        across the fork: the child's collections never scan what it inherited (the parent's are unfrozen
        again at once)."""
        parent_conn, child_conn = self.ctx.Pipe(duplex=True)
        proc = self.ctx.Process(target=target, args=(*pre, child_conn, *post), name=name, daemon=True)
        thaw = gc.get_freeze_count() == 0  # what the caller froze itself stays frozen
        gc.freeze()
        try:
            proc.start()
        finally:
            if thaw:
                gc.unfreeze()
        child_conn.close()
        child = Child(name, proc, parent_conn, ranks, pid=proc.pid)
        self.children.append(child)
        return child

    def close(self, grace_s: float = 0.0) -> None:
        """Give children that sent their final records ``grace_s`` to exit, then SIGKILL every child still
        alive and reap it (idempotent)."""
        deadline = time.monotonic() + grace_s
        for c in self.children:
            if c.final is not None and c.proc.is_alive():
                c.proc.join(max(0.0, deadline - time.monotonic()))
        for c in self.children:
            if c.proc.is_alive():
                c.proc.kill()
        for c in self.children:
            c.proc.join(2.0)
            try:
                c.conn.close()
            except OSError:
                pass

    # -- messages ------------------------------------------------------------------------------------
    def _read(self, c: Child) -> None:
        try:
            while c.conn.poll():
                msg = c.conn.recv()
                kind = msg[0]
                if kind == "ready":
                    c.ready = True
                    c.pid = msg[2]
                elif kind == "snapshot":
                    c.snapshot = msg[2]
                elif kind == "final":
                    c.final = msg[2:]
                elif kind == "error":
                    c.error = msg[2]
        except (EOFError, OSError):
            pass

    def _who(self, c: Child) -> list[str]:
        if not c.ranks:
            return [f"{c.name} (pid {c.pid})"]
        return [f"rank {r} ({c.name} pid {c.pid})" for r in c.ranks]

    def _on_exit(self, c: Child) -> None:
        if c.dead_reported:
            return
        c.dead_reported = True
        self._read(c)
        code = c.proc.exitcode
        if c.error:
            self.errors.extend(f"{w} failed: {c.error}" for w in self._who(c))
        elif c.final is None or code:
            self.errors.extend(f"{w} died: exit code {code}" for w in self._who(c))

    # -- the run -------------------------------------------------------------------------------------
    def start(self) -> bool:
        """Wait until every child is ready, then send go with a common t0. False if the start failed."""
        deadline = time.monotonic() + self.start_timeout_s
        while not all(c.ready for c in self.children):
            left = deadline - time.monotonic()
            if left <= 0:
                late = [c for c in self.children if not c.ready]
                for c in late:
                    self.errors.extend(f"{w} did not start within {self.start_timeout_s:.0f} s" for w in self._who(c))
                return False
            _wait(self.children, min(left, _POLL_S))
            for c in self.children:
                self._read(c)
                if not c.proc.is_alive():
                    self._on_exit(c)
                    return False
        self.t0_ns = time.monotonic_ns() + _GO_LEAD_NS
        if self.start_at is not None:
            t0 = self.start_at()
            late_ns = time.monotonic_ns() - t0
            if late_ns > 0:
                self.errors.append(f"the common start time t0 came {late_ns / 1e6:.1f} ms late")
                return False
            self.t0_ns = t0
        for c in self.children:
            c.conn.send(("go", self.t0_ns))
        return True

    def monitor(self) -> None:
        """Watch the run until an end condition (module docstring); never longer than the timeout."""
        st = self.status
        ranks = self.ranks
        deadline_ns = self.t0_ns + int(self.timeout_s * 1e9)
        last_progress = -1
        last_change_ns = self.t0_ns
        next_report = 0.0
        try:
            while True:
                _wait(self.children, _POLL_S)
                now = time.monotonic_ns()
                for c in self.children:
                    self._read(c)
                dead = [c for c in self.children if not c.proc.is_alive() and not c.dead_reported]
                if dead:
                    for c in dead:
                        self._on_exit(c)
                    if self.errors:
                        return
                if now < self.t0_ns:
                    continue
                done = sum(1 for r in ranks if st[r * SLOTS + S_DONE])
                prog = sum(st[r * SLOTS + S_PROGRESS] + st[r * SLOTS + S_OPS] for r in ranks)
                if self.progress is not None and (time.monotonic() >= next_report or done == len(ranks)):
                    next_report = time.monotonic() + self.progress_interval_s
                    self.progress({"elapsed_s": (now - self.t0_ns) / 1e9, "ranks_done": done,
                                   "ranks": len(ranks), "progress": prog,
                                   "ops_done": sum(st[r * SLOTS + S_OPS] for r in ranks),
                                   "bytes_delivered": sum(st[r * SLOTS + S_RX_BYTES] for r in ranks),
                                   "packets_delivered": sum(st[r * SLOTS + S_RX_PACKETS] for r in ranks),
                                   "rank_delivered": {str(r): [st[r * SLOTS + S_RX_BYTES],
                                                               st[r * SLOTS + S_RX_PACKETS]] for r in ranks},
                                   "processes": [(c.name, c.pid, c.ranks) for c in self.children]})
                if done == len(ranks):
                    return
                if prog != last_progress:
                    last_progress, last_change_ns = prog, now
                for c in self.children:
                    if not c.ranks or not c.proc.is_alive():
                        continue
                    hb = max(st[r * SLOTS + S_HEARTBEAT] for r in c.ranks)
                    if now - max(hb, self.t0_ns) > self.hang_timeout_s * 1e9:
                        self.errors.extend(
                            f"rank {r} hung: no heartbeat from {c.name} pid {c.pid} for {self.hang_timeout_s:.1f} s"
                            for r in c.ranks
                        )
                        c.proc.kill()
                        c.dead_reported = True
                if self.errors:
                    return
                if now - last_change_ns > self.stall_timeout_s * 1e9:
                    self.errors.extend(f"rank {r} hung: no progress for {(now - last_change_ns) / 1e9:.1f} s"
                                       for r in ranks if not st[r * SLOTS + S_DONE])
                    return
                if now >= deadline_ns:
                    left = [r for r in ranks if not st[r * SLOTS + S_DONE]]
                    self.errors.append(f"run timed out after {self.timeout_s:g} s; ranks not done: "
                                       + ", ".join(map(str, left)))
                    return
        except KeyboardInterrupt:
            self.interrupted = True
            self.errors.append(_INTERRUPTED)

    def finish(self) -> None:
        """Ask every child to stop, gather finals within the grace period, kill the rest."""
        self.end_ns = time.monotonic_ns()
        self.stop.set()
        deadline = time.monotonic() + _GRACE_S
        try:
            while True:
                pending = [c for c in self.children if c.final is None and c.proc.is_alive()]
                if not pending:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                _wait(pending, min(left, _POLL_S))
                for c in pending:
                    self._read(c)
            for c in self.children:
                self._read(c)
        except KeyboardInterrupt:
            self.interrupted = True
        self.close(grace_s=0.0 if self.interrupted else 1.0)
        for c in self.children:
            if c.final is None and not c.dead_reported:
                c.dead_reported = True
                self.errors.extend(f"{w} sent no final records (last snapshot used)" for w in self._who(c))

    def run(self, launch: Callable[[list], None], linger_s: float = 0.0) -> None:
        """The whole life of a socket run: ``launch(opened)`` opens the sockets (appending each to
        ``opened``) and spawns the children, which inherit them; the parent's copies are closed, then
        start ─▶ monitor ─▶ ``linger_s`` when the run ended without errors ─▶ finish. Ctrl-C at any point
        ends the run as interrupted with what was gathered; every child is killed and every socket closed
        on the way out, whatever happened."""
        opened: list = []
        try:
            launch(opened)
            for p in opened:
                p.close()
            if self.start():
                self.monitor()
                if not self.errors and linger_s > 0:
                    time.sleep(linger_s)
            self.finish()
        except KeyboardInterrupt:
            self.errors.append(_INTERRUPTED)
            self.finish()
        finally:
            self.close()
            for p in opened:
                p.close()

    # -- results -------------------------------------------------------------------------------------
    def complete(self, records: dict[int, RankRecords]) -> bool:
        """No error, and every supervised rank sent records in which every op ended."""
        return not self.errors and all(r in records and bool(np.all(records[r].end_ns >= 0)) for r in self.ranks)

    def records(self) -> dict[int, RankRecords]:
        out: dict[int, RankRecords] = {}
        for c in self.children:
            if not c.ranks:
                continue
            payload = c.final[0] if c.final is not None else c.snapshot
            for r, (arrays, counters) in payload.items():
                out[int(r)] = RankRecords.from_arrays(int(r), arrays, counters)
        return dict(sorted(out.items()))

    def worker_health(self) -> dict[str, Any]:
        """Merged health of the rank workers: timer lag, late wake-ups, per-rank socket counters."""
        hist = LogLinearHistogram()
        late = wakeups = 0
        sockets: dict[int, dict] = {}
        for c in self.children:
            if not c.ranks or c.final is None:
                continue
            h = c.final[1]
            hist.merge(LogLinearHistogram.from_dict(h["timer_lag_ns"]))
            late += h["late_wakeups"]
            wakeups += h["timer_wakeups"]
            sockets.update({int(r): s for r, s in h["sockets"].items()})
        drops = sum(s["socket_drops"] for s in sockets.values())
        return {
            "endpoint_timer_lag_ns": lag_summary(hist), "endpoint_late_wakeups": late,
            "endpoint_timer_wakeups": wakeups, "endpoint_socket_drops": drops,
            "endpoint_send_errors": sum(s["send_errors"] for s in sockets.values()),
            "endpoint_send_waits": sum(s["send_waits"] for s in sockets.values()),
            "sockets": {r: sockets[r] for r in sorted(sockets)},
        }  # fmt: skip

    def child_final(self, name: str) -> tuple | None:
        for c in self.children:
            if c.name == name:
                return c.final if c.final is not None else ((c.snapshot,) if c.snapshot else None)
        return None

    @property
    def wall_ns(self) -> int:
        return max(0, (self.end_ns or time.monotonic_ns()) - self.t0_ns) if self.t0_ns else 0


def endpoint_warnings(health: dict[str, Any], late_threshold_ns: int, records: dict[int, RankRecords] | None = None,
                      rto_ns: int = 0) -> list[str]:
    """Plain-language warnings about endpoint lag, socket drops and spurious timeouts (never silent)."""
    out = []
    timeouts = sum(int(r.counters.get("timeouts", 0)) for r in (records or {}).values())
    p99 = health["endpoint_timer_lag_ns"]["p99"]
    if timeouts and p99 is not None and rto_ns and rto_ns < 2 * p99:
        out.append(f"{timeouts} retransmit timeouts with a timeout of {rto_ns / 1e6:g} ms, close to or below the "
                   f"endpoints' p99 timer lag of {p99 / 1e6:.1f} ms on this machine: some may be spurious "
                   "(raise retransmit_timeout)")
    lag = health["endpoint_timer_lag_ns"]
    if health["endpoint_timer_wakeups"] and health["endpoint_late_wakeups"]:
        frac = health["endpoint_late_wakeups"] / health["endpoint_timer_wakeups"]
        if frac > 0.01:
            out.append(f"endpoints fell behind: {100 * frac:.1f}% of timer wake-ups more than "
                       f"{format_duration_ns(late_threshold_ns)} late (p99 lag {format_duration_ns(lag['p99'])})")
    if health["endpoint_socket_drops"]:
        out.append(f"rank sockets dropped {health['endpoint_socket_drops']} datagrams (receive buffers full)")
    if health["endpoint_send_errors"]:
        out.append(f"rank sockets failed {health['endpoint_send_errors']} sends")
    return out


def mtu_time_ns(endpoint_config: Any, rate_bps: float) -> int:
    """Serialisation time of one full-MTU data packet (MIDDLE: BTH + payload + ICRC + wire overhead)."""
    return int((endpoint_config.mtu_bytes + 16 + endpoint_config.wire_overhead_bytes) * 8e9 / rate_bps)





def add_fidelity(health: dict, sender_lag_ns: dict, switch_lag_ns: dict | None, reference_ns: int,
                 time_dilation: float, congested: bool = False) -> None:
    """Put the timing-fidelity verdict in ``health["fidelity"]`` (``congested``: judged on the lag tail,
    :func:`~emulator.instruments.fidelity.timing_fidelity`); when the timing is not faithful, the
    "fell behind" warnings become one warning: the verdict with their details."""
    warnings = health.setdefault("warnings", [])
    behind = tuple(w for w in warnings if "fell behind" in w)
    fid = timing_fidelity(sender_lag_ns, switch_lag_ns, reference_ns, time_dilation=time_dilation, behind=behind,
                          congested=congested)
    health["fidelity"] = fid
    health["time_dilation"] = float(time_dilation)
    if fid["warning"]:
        health["warnings"] = [fid["warning"]] + [w for w in warnings if w not in behind]
