"""Worker processes that host rank endpoints on real UDP sockets (used by loopback and direct).

Theory of operation
-------------------
A worker hosts several ranks: one :class:`~emulator.endpoint.endpoint.RankEndpoint` and one bound
:class:`~emulator.drivers.sockets.udp.UdpPort` each (the socket was opened by the parent before the fork and is
inherited). Its life::

    build endpoints and the loop ─▶ settle the heap ─▶ send "ready" ─▶ wait for "go t0" ─▶ sleep to t0 ─▶ start every endpoint ─▶ loop
    loop: due timers (a late one after a drain of its socket; handle_timer + poll_transmit → one sendmmsg)
          ─▶ select() on the rank sockets until the earliest next_timer_ns (µs resolution; asked to end as
          much earlier as the timed-out sleeps have been ending late, module wake), or, when that
          is within the spin window, epoll's ready list without sleeping (and epoll's wait when no timer
          comes before the 10 ms cap: select's fd sets cost ~2 µs more per sleep; before that wait, a worker
          whose last pass read a GSO batch's worth and found nothing more sleeps ``WorkerSpec.rx_linger_ns`` on a
          timer, so a stream's next batches queue without waking it) ─▶ drain readable sockets
          (recvmmsg of the GRO batches waiting → receive each → poll_transmit when the rank has output or data due)
          ─▶ every 20 ms heartbeat/status, every snapshot interval the records
    until the parent sets the stop event, the parent dies, or the hard deadline passes ─▶ "final"

Times handed to the endpoints are ``(CLOCK_MONOTONIC − t0) / time_dilation`` in ns: emulated time
(every process uses the same t0 and factor, so rank records share one time base with the switch). A timer served later than it was due is *lag*: every lag goes into a
log-linear histogram and lags beyond ``late_threshold_ns`` are counted — a worker that cannot keep up
says so in the run's health instead of silently sending late.

Shared state: ``status`` (a shared int64 array, six slots per rank: heartbeat ns, done flag, progress
count (bytes sent + received + ACKs, for stall detection), ops completed, payload bytes and data packets
received) lets the parent see liveness and progress without reading pipes; records travel as
``RankRecords.to_arrays()`` dicts through each worker's pipe (a snapshot right after start, then
periodic ones, then the final one), so a worker killed by SIGKILL still leaves its last snapshot.

Per drain of a socket the endpoints coalesce their ACKs and pace whole GSO batches
(:func:`socket_endpoint_config`). The final health carries the worker's CPU time over its loop
(``worker_cpu_s`` in each of its ranks' socket stats, beside ``worker_wall_s``, ``worker_iterations`` and
``worker_sleeps``: the loop's wall time, passes and passes that slept), so benches can report CPU per batch
and how busy the loop was, and the scheduling it ran at (``worker_scheduling``: ``fifo`` when ``WorkerSpec.realtime`` asked for real-time
priority and it was permitted, else ``normal``).

The heap is settled before the clock (:func:`settle_heap`): the parent forks with its objects frozen
(``gc.freeze``, :meth:`~emulator.drivers.sockets.supervisor.Supervisor.spawn`), and a worker collects what
building its endpoints left and freezes the rest, so no collection during the run scans the ~10^5 objects
it inherited and built (``worker_gc_tracked_at_start``, ``worker_gc_full_collections`` in its socket stats).

The ranks of a worker share one MIDDLE arena (:func:`~emulator.endpoint.middles.share_arena`; every rank's transmits are sent before
the next poll), so the kernel copies every batch from one hot window (``worker_arena_bytes``).

Children ignore SIGINT (Ctrl-C is the parent's to handle), ask the kernel to SIGKILL them when the
parent dies (``PR_SET_PDEATHSIG``), and stop by themselves at a hard deadline: no loop is unbounded.
"""

from __future__ import annotations

import ctypes
import gc
import os
import resource
import select
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from emulator.drivers.sockets.mmsg import MmsgReceiver, page_aligned_buffer
from emulator.drivers.sockets.udp import RECV_BUFFER_BYTES, UdpPort
from emulator.drivers.sockets.wake import WAKE_FROM, WakeEstimate
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.middles import arena_bytes, share_arena
from emulator.instruments.histogram import LogLinearHistogram

if TYPE_CHECKING:
    from emulator.drivers.sockets.supervisor import SupervisionConfig

SLOTS = 6
S_HEARTBEAT, S_DONE, S_PROGRESS, S_OPS, S_RX_BYTES, S_RX_PACKETS = range(SLOTS)
_STATUS_EVERY_NS = 20_000_000
_MAX_WAIT_S = 0.01
_RECV_BURST = 16
#: what a pass must have read for the worker to linger (WorkerSpec.rx_linger_ns): one full GSO batch of 4,096-byte
#: packets, so a stream lingers and a message of a packet or two is read the moment it comes
RX_LINGER_BYTES = 15 * 4096


def child_setup() -> None:
    """Ignore Ctrl-C, die with the parent (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``), ask for 1 µs
    timer slack (``PR_SET_TIMERSLACK``; the default 50 µs would let every ``select`` timeout fire up to
    50 µs late, which the loop would otherwise have to hide by spinning) and for a short scheduler slice
    (:func:`request_short_slice`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)
        libc.prctl(29, 1000, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    request_short_slice()


#: the slice a worker asks the scheduler for (EEVDF's shortest custom slice)
WORKER_SLICE_NS = 100_000
_SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}


def request_short_slice(slice_ns: int = WORKER_SLICE_NS) -> bool:
    """Ask Linux's EEVDF scheduler (6.12+) for a ``slice_ns`` time slice, staying SCHED_OTHER at nice 0
    (``sched_setattr`` with ``sched_runtime``): a task with a short slice gets an early virtual deadline, so
    it runs soon after waking up instead of waiting behind busy tasks' default 3 ms slices. A paced
    sender wakes every few hundred µs and works for tens: on a loaded 2-core machine its wake-up lag is
    what limits how much of its rate it can keep within its burst. False where unsupported (older
    kernels accept and ignore it)."""
    nr = _SYS_SCHED_SETATTR.get(os.uname().machine)
    if nr is None:
        return False
    import struct

    attr = ctypes.create_string_buffer(struct.pack("=IIQiIQQQII", 56, 0, 0, 0, 0, int(slice_ns), 0, 0, 0, 0))
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(nr, 0, attr, 0) == 0
    except (OSError, AttributeError):
        return False


def settle_heap() -> int:
    """Collect the garbage of this process's unfrozen objects, then freeze every object it holds
    (``gc.freeze``): later collections, a full one included, scan only what is allocated after this.
    A worker's first full collection of the objects it inherited from its parent took 175–630 ms on a
    2-core VM; run after its clock started, it put a paced flow that far behind. Returns the objects a
    collection would still scan (0 right after)."""
    gc.collect()
    gc.freeze()
    return gc_tracked_objects()


def gc_tracked_objects() -> int:
    """Objects in the collector's generations (the frozen ones excluded): what a full collection scans."""
    return sum(len(gc.get_objects(generation=g)) for g in range(3))


def records_payload(recorders: list) -> dict[int, tuple[dict, dict]]:
    return {r.records.rank: (r.records.to_arrays(), dict(r.records.counters)) for r in recorders}


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What one worker hosts: ranks, their (inherited) sockets, and where each rank's packets go."""

    index: int
    ranks: tuple[int, ...]
    ports: tuple[UdpPort, ...]
    #: destination address per destination rank (loopback: the switch for every rank)
    dest: tuple[tuple[str, int], ...]
    late_threshold_ns: int = 500_000
    snapshot_interval_ns: int = 500_000_000
    start_timeout_s: float = 60.0
    #: poll instead of sleeping when the next timer is this close (0 = always sleep)
    spin_ns: int = 200_000
    #: CPU to pin the worker to (None = let the scheduler place it)
    cpu: int | None = None
    #: emulated time runs this many times slower than real time
    time_dilation: float = 1.0
    #: run the worker at real-time priority (SCHED_FIFO 1) when permitted, so its wake-ups are not
    #: queued behind other processes' time slices (the loopback fabric's senders; the kernel's RT
    #: throttling bounds a runaway loop)
    realtime: bool = False
    #: receive by the compiled drain (:class:`~emulator.drivers.sockets.rx_compiled.CompiledDrain`) where the
    #: ranks' receivers can be scanned and libc has ``recvmmsg``
    compiled_drain: bool = False
    #: with no timer before the wait cap, a pass that read at least ``RX_LINGER_BYTES`` is followed by a sleep
    #: this long on a timer, not on the sockets, before they are read again (0: off): a stream's next batches
    #: queue without waking the worker, so its sender's sends wake nobody and one pass reads several batches
    rx_linger_ns: int = 0
    #: the ranks' sockets receive into one set of ``recvmmsg`` slots (:func:`share_receivers`), not a set each
    share_rx_buffers: bool = True


def share_receivers(ports, slots: int) -> int:
    """Give the ports one ``recvmmsg`` receiver's buffers (each its own socket and call count): the worker drains
    its sockets one at a time and serves every datagram before the next call, so ``slots`` × 64 KiB stay hot
    for all its ranks instead of that much per rank. Ports with a receiver already keep it. Returns how many
    ports share."""
    first = None
    n = 0
    for p in ports:
        if not p._mmsg or p._mm_rx is not None:
            continue
        p._mm_rx = MmsgReceiver(p.fileno, slots, RECV_BUFFER_BYTES, share=first)
        first = first or p._mm_rx
        n += 1
    return n


def model_clock(t0_ns: int, time_dilation: float) -> Callable[[], int]:
    """A clock of emulated ns on the ``CLOCK_MONOTONIC`` scale: ``t0 + (now − t0) / time_dilation``."""
    real = time.monotonic_ns
    if time_dilation == 1.0:
        return real
    k = float(time_dilation)
    return lambda: t0_ns + int((real() - t0_ns) / k)


def worker_main(spec: WorkerSpec, schedule: Any, endpoint_config: Any, conn: Any, status: Any, stop: Any,
                hard_deadline_mono_ns: int) -> None:
    """Entry point of a worker process (fork start method; arguments are inherited, not pickled)."""
    child_setup()
    scheduling = "fifo" if spec.realtime and set_realtime(1) else "normal"
    if spec.cpu is not None and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {spec.cpu})
        except OSError:
            pass
    try:
        _worker(spec, schedule, endpoint_config, conn, status, stop, hard_deadline_mono_ns, scheduling)
    except Exception as exc:  # report, then exit non-zero: the parent names the ranks
        try:
            conn.send(("error", spec.index, f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=8)))
        except OSError:
            pass
        os._exit(3)


def set_realtime(priority: int) -> bool:
    """Put the calling process at SCHED_FIFO ``priority``; False when not permitted (it stays as it was)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        return True
    except (OSError, AttributeError):
        return False


def _worker(spec: WorkerSpec, schedule: Any, cfg: Any, conn: Any, status: Any, stop: Any, hard_ns: int,
            scheduling: str = "normal") -> None:
    from emulator.endpoint.endpoint import RankEndpoint
    from emulator.endpoint.recorder import Recorder

    # each rank's recorder is fed the endpoint's events after every receive or timer (_Loop._flush)
    eps = [RankEndpoint(r, schedule, cfg, Recorder.for_rank(schedule, r, cfg)) for r in spec.ranks]
    if share_arena(eps):
        for port in spec.ports:  # their sends read the shared arena's row addresses from it
            port.tx_arena = eps[0]._tx.arena
    loop = _Loop(spec, eps, 0, conn, status, stop, hard_ns)  # its buffers and drains before the clock, too
    loop.scheduling = scheduling
    settle_heap()
    conn.send(("ready", spec.index, os.getpid()))
    if not conn.poll(spec.start_timeout_s):
        return
    msg = conn.recv()
    if msg[0] != "go":
        return
    t0 = int(msg[1])
    tracked = gc_tracked_objects()
    loop.set_t0(t0)
    loop.gc_tracked_at_start = tracked
    mono = time.monotonic_ns
    while True:
        left = t0 - mono()
        if left <= 0:
            break
        time.sleep(min(left / 1e9, 0.05))
        if stop.is_set():
            return
    run_profiled(f"worker{spec.index}", loop.run)


def runqueue_wait_ns() -> int:
    """ns the calling process has waited runnable for a CPU (``/proc/self/schedstat``, field 2); −1 where the
    kernel does not say: with ``worker_cpu_s``, tells a worker starved of CPU from one that slept."""
    try:
        with open("/proc/self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def loop_rusage(ru0: resource.struct_rusage, ru1: resource.struct_rusage) -> dict[str, float]:
    """The loop's user and kernel CPU s, minor page faults and voluntary / involuntary context switches, from
    ``getrusage(RUSAGE_SELF)`` before and after it: where a run's CPU per GB went, and what it waited on."""
    return {"worker_user_s": round(ru1.ru_utime - ru0.ru_utime, 6), "worker_sys_s": round(ru1.ru_stime - ru0.ru_stime, 6),
            "worker_minflt": ru1.ru_minflt - ru0.ru_minflt, "worker_nvcsw": ru1.ru_nvcsw - ru0.ru_nvcsw,
            "worker_nivcsw": ru1.ru_nivcsw - ru0.ru_nivcsw}


def rx_buffer_bytes(ports) -> int:
    """Bytes of ``recvmmsg`` data buffers the worker's ports hold (each distinct buffer once)."""
    seen = {}
    for p in ports:
        rx = p._mm_rx
        if rx is not None:
            seen[id(rx.data)] = len(rx.data)
    return sum(seen.values())


def run_profiled(name: str, fn: Callable[..., None], *args: Any) -> None:
    """``fn(*args)``; under ``EMULATOR_WORKER_PROFILE=DIR`` (measuring the hot paths of the child
    processes) inside cProfile, written to ``DIR/<name>.prof``."""
    prof_dir = os.environ.get("EMULATOR_WORKER_PROFILE")
    if not prof_dir:
        fn(*args)
        return
    import cProfile

    prof = cProfile.Profile(time.process_time)  # CPU time: a profile of a loaded machine is not its waits
    try:
        prof.runcall(fn, *args)
    finally:
        prof.dump_stats(os.path.join(prof_dir, f"{name}.prof"))


class _Loop:
    """The worker's event loop (see the module docstring)."""

    def __init__(self, spec: WorkerSpec, eps: list, t0: int, conn: Any, status: Any, stop: Any, hard_ns: int) -> None:
        self.spec = spec
        self.eps = eps
        self.t0 = t0
        self.conn = conn
        self.status = status
        self.stop = stop
        self.hard_ns = hard_ns
        self.lag_hist = LogLinearHistogram()
        self.lags: list[int] = []
        self.late_wakeups = 0
        self.timer_wakeups = 0
        self.buf = page_aligned_buffer(65536)  # recvmsg's buffer where libc has no recvmmsg
        self.clock = model_clock(t0, spec.time_dilation)
        self.scheduling = "normal"  # what worker_main applied ("fifo" or "normal")
        self.gc_tracked_at_start = -1  # objects a full collection would have scanned at the start (-1: unknown)
        self.drains: list = [None] * len(eps)  # per rank its CompiledDrain, or None: UdpPort.drain_into
        self.unpolled = set(range(len(eps)))  # ranks not polled yet (restart_pacers at their first poll)
        self.wake = WakeEstimate()
        if spec.share_rx_buffers:
            share_receivers(spec.ports, _RECV_BURST)
        if spec.compiled_drain:
            from emulator.drivers.sockets.rx_compiled import CompiledDrain, compiled_drain_supported

            if compiled_drain_supported():
                for i, (ep, port) in enumerate(zip(eps, spec.ports, strict=True)):
                    if ep.scan_state() is not None:
                        self.drains[i] = CompiledDrain(port, ep, _RECV_BURST)

    def set_t0(self, t0: int) -> None:
        """The common start time (``CLOCK_MONOTONIC`` ns) the "go" message gave."""
        self.t0 = t0
        self.clock = model_clock(t0, self.spec.time_dilation)

    def run(self) -> None:
        spec, eps = self.spec, self.eps
        mono = self.clock  # emulated time; `real` for supervision
        real = time.monotonic_ns
        k_s = spec.time_dilation / 1e9  # emulated ns -> real s
        t0 = self.t0
        ports = spec.ports
        n = len(eps)
        cpu0 = time.process_time()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        wait0 = runqueue_wait_ns()
        wall0 = real()
        full0 = gc.get_stats()[2]["collections"]
        iterations = sleeps = 0
        for ep in eps:
            # the common "go" time is every rank's origin (0 on the driver's clock), so records share one
            # time base and a worker that woke late shows it as lag instead of hiding it
            ep.start(max(0, mono() - t0), 0)
        now = mono() - t0
        nxt: list[int | None] = [None] * n
        for i in range(n):
            self._flush(i, now, nxt)
        fd_index = {p.fileno: i for i, p in enumerate(ports)}
        rlist = list(fd_index)
        self._status(now)
        self._snapshot()
        next_status = real() - t0 + _STATUS_EVERY_NS
        next_snap = real() - t0 + spec.snapshot_interval_ns
        lags = self.lags
        late = spec.late_threshold_ns
        sel = select.select
        poller = select.epoll()
        for fd in rlist:
            poller.register(fd, select.EPOLLIN)
        peek = poller.poll
        stop = self.stop
        hard = self.hard_ns - t0
        spin_ns = int(spec.spin_ns / spec.time_dilation)
        wk = self.wake  # how late select's sleeps end: asked to end that much earlier
        early = 0  # wk.early_ns in emulated ns
        linger = spec.rx_linger_ns / 1e9  # real s (a receive path's economy, not emulated time)
        lingering = False  # the last pass read a stream's worth (RX_LINGER_BYTES)
        read_bytes = 0
        while True:
            iterations += 1
            now = mono() - t0
            wake = None
            for i in range(n):
                t = nxt[i]
                if t is None:
                    continue
                if t <= now:
                    lag = now - t
                    lags.append(lag)
                    if lag > late:
                        self.late_wakeups += 1
                        # a late wake-up first reads what arrived meanwhile (ACKs that came in time), so a
                        # retransmit timeout it would otherwise serve first re-sends nothing they cover
                        self._drain(i, nxt)
                    eps[i].handle_timer(now)
                    self._flush(i, now, nxt)
                    t = nxt[i]
                    if t is None:
                        continue
                if wake is None or t < wake:
                    wake = t
            now = mono() - t0
            if wake is None:
                timeout = _MAX_WAIT_S
            else:
                # sleep until spin_ns before the timer (less the wake-up's own lateness when the sleep is long
                # enough: module wake), then poll without sleeping, so the kernel's wake-up latency does not eat
                # into the pacers' rate
                ahead = wake - now - spin_ns
                if ahead >= WAKE_FROM * early:
                    ahead -= early
                timeout = min(_MAX_WAIT_S, ahead * k_s) if ahead > 0 else 0.0
            if timeout and timeout < _MAX_WAIT_S:  # select: µs resolution (epoll's timeout is whole ms)
                sleeps += 1
                slept = real()
                ready = sel(rlist, (), (), timeout)[0]
                if ready:
                    for fd in ready:
                        self._drain(fd_index[fd], nxt)
                else:  # the sleep timed out: how late it ended is the wake-up path's (module wake)
                    early = int(wk.observe(real() - slept - int(timeout * 1e9)) / spec.time_dilation)
            else:
                # a poll without sleeping, or a sleep until data with no timer before the cap (a receiver's
                # usual wait; whole ms suffice there): epoll's ready list, no fd sets built per call
                if not timeout:
                    ready = peek(0)
                elif lingering:  # a stream, caught up: let its next batches queue, then read them in one pass
                    ready = peek(0)
                    if not ready:
                        sleeps += 1
                        sel((), (), (), linger)
                        ready = peek(0) or peek(timeout)
                else:
                    sleeps += 1
                    ready = peek(timeout)
                for fd, _ev in ready:
                    self._drain(fd_index[fd], nxt)
                if linger:
                    was, read_bytes = read_bytes, sum(p.recv_bytes for p in ports)
                    lingering = read_bytes - was >= RX_LINGER_BYTES
            now = real() - t0
            if now >= next_status:
                next_status = now + _STATUS_EVERY_NS
                self._status(now)
                if len(lags) > 4096:
                    self._fold_lags()
                if stop.is_set() or now >= hard or os.getppid() == 1:
                    break
                if now >= next_snap:
                    next_snap = now + spec.snapshot_interval_ns
                    self._snapshot()
        poller.close()
        self._status(mono() - t0)
        self._fold_lags()
        cpu_s = round(time.process_time() - cpu0, 6)  # the worker's CPU (user + sys) over its loop
        wait1 = runqueue_wait_ns()
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        loop = {"worker": spec.index, "worker_cpu_s": cpu_s, "worker_wall_s": round((real() - wall0) / 1e9, 6),
                "worker_iterations": iterations, "worker_sleeps": sleeps, "worker_scheduling": self.scheduling,
                "worker_gc_tracked_at_start": self.gc_tracked_at_start,
                "worker_gc_full_collections": gc.get_stats()[2]["collections"] - full0,
                "worker_arena_bytes": arena_bytes(eps), "worker_wake_early_ns": wk.early_ns,
                "worker_runqueue_wait_s": round((wait1 - wait0) / 1e9, 6) if wait0 >= 0 and wait1 >= 0 else None,
                **loop_rusage(ru0, ru1), "worker_rx_buffer_bytes": rx_buffer_bytes(spec.ports),
                "worker_rx_slots_high": max((d.slots_high for d in self.drains if d is not None), default=0)}
        health = {
            "timer_lag_ns": self.lag_hist.to_dict(), "late_wakeups": self.late_wakeups,
            "timer_wakeups": self.timer_wakeups,
            "sockets": {r: {**p.stats(), **loop, **({"scanned_datagrams": d.scanned_datagrams} if d else {})}
                        for r, p, d in zip(spec.ranks, ports, self.drains, strict=True)},
        }  # fmt: skip
        for ep in eps:  # whatever a step left unconsumed
            ep.recorder.consume(ep.events())
        self.conn.send(("final", spec.index, records_payload([ep.recorder for ep in eps]), health))

    def _fold_lags(self) -> None:
        if self.lags:
            import numpy as np

            self.timer_wakeups += len(self.lags)
            self.lag_hist.record_many(np.asarray(self.lags, dtype=np.int64))
            self.lags.clear()

    def _flush(self, i: int, now: int, nxt: list) -> None:
        ep = self.eps[i]
        txs = ep.poll_transmit(now)
        if self.unpolled and i in self.unpolled:
            # the rank's first poll: its pacers start as its first burst goes. Its start, first poll and first
            # sendmmsg took 1.4–9.5 ms on a 2-CPU VM at load 3–4, a deficit the pacers would repay at their
            # catch-up ratio right after the first frame (bench/pacing_burst.py's first 100 ms window +2–8 %);
            # restarted after sendmmsg returned instead, the window fell 1–6 % short (the call took 0.6–7 ms)
            self.unpolled.discard(i)
            ep.restart_pacers(self.clock() - self.t0)
        if txs:
            self.spec.ports[i].send_transmits(txs, self.spec.dest)
            ep.sent_late(now, self.clock() - self.t0)  # a send that ended late holds its deficit pacers' gates
        events = ep.events()
        if events:
            ep.recorder.consume(events)
        nxt[i] = ep.next_timer_ns()

    def _drain(self, i: int, nxt: list) -> None:
        """Receive what waits on rank ``i``'s socket, then serve the rank only when it has something to hand
        out (ACKs, control packets, events) or data due by now: a drain of data that decided no ACK (the
        common case of a receiver) costs no ``poll_transmit``."""
        ep = self.eps[i]
        d = self.drains[i]
        if d is not None:
            d.drain(self.clock, self.t0, _RECV_BURST)
        else:
            self.spec.ports[i].drain_into(self.buf, ep.receive, self.clock, self.t0, _RECV_BURST)
        now = self.clock() - self.t0
        if not ep.has_output:
            t = ep.next_timer_ns()
            if t is None or t > now:
                nxt[i] = t
                return
        self._flush(i, now, nxt)

    def _status(self, now: int) -> None:
        st = self.status
        hb = time.monotonic_ns()
        for ep in self.eps:
            base = ep.rank * SLOTS
            c = ep.recorder.records.counters
            st[base + S_HEARTBEAT] = hb
            st[base + S_DONE] = 1 if ep.done else 0
            st[base + S_PROGRESS] = c.get("bytes_sent", 0) + c.get("bytes_received", 0) + c.get("acks_received", 0)
            st[base + S_OPS] = ep.ops_completed
            st[base + S_RX_BYTES] = c.get("bytes_received", 0)
            st[base + S_RX_PACKETS] = c.get("packets_received", 0)

    def _snapshot(self) -> None:
        self.conn.send(("snapshot", self.spec.index, records_payload([ep.recorder for ep in self.eps])))


def worker_groups(ranks: tuple[int, ...], ranks_per_worker: int) -> list[tuple[int, ...]]:
    """Split ranks into contiguous groups: ``ranks_per_worker`` each, or (0) one group per CPU."""
    if not ranks:
        return []
    if ranks_per_worker <= 0:
        n_workers = max(1, min(len(ranks), os.cpu_count() or 1))
    else:
        n_workers = -(-len(ranks) // ranks_per_worker)
    size, extra = divmod(len(ranks), n_workers)
    out, pos = [], 0
    for w in range(n_workers):
        k = size + (1 if w < extra else 0)
        out.append(tuple(ranks[pos : pos + k]))
        pos += k
    return [g for g in out if g]


def socket_endpoint_config(config: EndpointConfig) -> EndpointConfig:
    """``config`` as a worker's endpoints run it: ACKs coalesced per drain of up to ``_RECV_BURST``
    datagrams, not one per datagram (``defer_acks``), whole GSO batches paced even when the loop is
    faster than a packet time (``pace_full_batches``), and every transmit sent before the endpoint's next
    ``poll_transmit`` (``socket_sends``: reused buffers, a queue pair's burst per visit)."""
    return replace(config, defer_acks=True, pace_full_batches=True, socket_sends=True)


def launch_workers(sup: Any, schedule: Any, endpoint_config: EndpointConfig, rank_ports: dict[int, UdpPort],
                   dest: tuple[tuple[str, int], ...], supervision: SupervisionConfig, status: Any, stop: Any,
                   hard_deadline_mono_ns: int, *, pin_cpus: bool = False, time_dilation: float = 1.0,
                   realtime: bool = False, compiled_drain: bool = False, rx_linger_ns: int = 0) -> None:
    """Fork one worker per group of ranks under the supervisor ``sup`` (worker w on CPU w mod n if pinned).

    The workers' endpoints run ``endpoint_config`` in socket mode (:func:`socket_endpoint_config`)."""
    endpoint_config = socket_endpoint_config(endpoint_config)
    cpus = sorted(os.sched_getaffinity(0)) if pin_cpus and hasattr(os, "sched_getaffinity") else []
    sv = supervision
    for w, group in enumerate(worker_groups(tuple(sorted(rank_ports)), sv.ranks_per_worker)):
        spec = WorkerSpec(w, group, tuple(rank_ports[r] for r in group), dest, sv.late_threshold_ns,
                          int(sv.snapshot_interval_s * 1e9), spin_ns=sv.spin_ns, cpu=cpus[w % len(cpus)] if cpus else None,
                          time_dilation=time_dilation, realtime=realtime, compiled_drain=compiled_drain,
                          rx_linger_ns=rx_linger_ns)
        sup.spawn(f"worker {w}", worker_main, (spec, schedule, endpoint_config),
                  (status, stop, hard_deadline_mono_ns), group)
