"""The socket workers' event loop (``emulator.drivers.sockets.workers._Loop``) with stand-in endpoints.

A real UDP socket on 127.0.0.1 carries the datagrams; the endpoint is a recorder of the calls the loop
makes, so the order of the loop's work is what is tested, not the endpoint's.
"""

from __future__ import annotations

import select as select_mod
import threading
import time

from support.worker_loop import IdleEndpoint, NullConn

from emulator.drivers.sockets.udp import UdpPort
from emulator.drivers.sockets.wake import WAKE_CAP_NS, WakeEstimate
from emulator.drivers.sockets.workers import SLOTS, WorkerSpec, _Loop


class _Endpoint(IdleEndpoint):
    """Calls are logged; its one timer is due ``late_ns`` before the loop starts, then never again."""

    def __init__(self, late_ns: int) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.timer_ns: int | None = None
        self.late_ns = late_ns

    def start(self, now_ns: int, t0_ns: int) -> None:
        self.timer_ns = now_ns - self.late_ns

    def handle_timer(self, now_ns: int) -> None:
        self.calls.append("timer")
        self.timer_ns = None

    def receive(self, data, ecn: int, now_ns: int, segment_size: int = 0) -> None:
        self.calls.append(f"receive {bytes(data).decode()}")

    def next_timer_ns(self) -> int | None:
        return self.timer_ns


def _run_loop(late_ns: int, late_threshold_ns: int = 500_000) -> list[str]:
    rx, tx = UdpPort("127.0.0.1"), UdpPort("127.0.0.1")
    try:
        tx.send(b"ack", rx.address)
        time.sleep(0.05)  # the datagram waits in the socket, as an ACK that came while the worker slept
        ep = _Endpoint(late_ns)
        spec = WorkerSpec(0, (0,), (rx,), (rx.address,), late_threshold_ns=late_threshold_ns, spin_ns=0)
        stop = threading.Event()
        t0 = time.monotonic_ns()
        loop = _Loop(spec, [ep], t0, NullConn(), [0] * SLOTS, stop, t0 + 2_000_000_000)
        threading.Timer(0.1, stop.set).start()
        loop.run()
        return ep.calls
    finally:
        rx.close()
        tx.close()


def test_a_late_timer_is_served_after_what_arrived_meanwhile():
    """A wake-up later than the late threshold reads the rank's socket before its timers run: a retransmit
    timeout is not served ahead of the ACK that already came."""
    assert _run_loop(late_ns=5_000_000)[:2] == ["receive ack", "timer"]


def test_an_on_time_timer_is_served_first():
    """Within the late threshold (10 s here, so a loaded machine cannot make it late), the loop serves timers
    first and reads the socket when select says so (no extra recv)."""
    assert _run_loop(late_ns=0, late_threshold_ns=10_000_000_000)[:2] == ["timer", "receive ack"]


class _Spinner(_Endpoint):
    """Its timer is always due within the spin window: the loop never sleeps, it polls without a timeout."""

    def next_timer_ns(self) -> int | None:
        return self._now + 1_000

    def start(self, now_ns: int, t0_ns: int) -> None:
        self._now = now_ns

    def handle_timer(self, now_ns: int) -> None:
        self._now = now_ns


class _Keep(NullConn):
    def __init__(self) -> None:
        self.msgs: list = []

    def send(self, msg) -> None:
        self.msgs.append(msg)


def _serve(ep, datagrams: tuple[bytes, ...], spin_ns: int, gap_s: float, flush=None) -> _Keep:
    """Run the loop over ``ep`` on a fresh socket while another sends ``datagrams`` ``gap_s`` apart (then
    stops it); ``flush`` replaces the loop's ``_flush`` (given the original). Returns what the loop sent
    its parent."""
    rx, tx = UdpPort("127.0.0.1"), UdpPort("127.0.0.1")
    try:
        spec = WorkerSpec(0, (0,), (rx,), (rx.address,), spin_ns=spin_ns)
        stop = threading.Event()
        conn = _Keep()
        t0 = time.monotonic_ns()
        loop = _Loop(spec, [ep], t0, conn, [0] * SLOTS, stop, t0 + 5_000_000_000)
        if flush is not None:
            loop._flush = flush(loop._flush)

        def feed() -> None:
            for d in datagrams:
                time.sleep(gap_s)
                tx.send(d, rx.address)
            time.sleep(0.05)
            stop.set()

        threading.Thread(target=feed).start()
        loop.run()
        return conn
    finally:
        rx.close()
        tx.close()


def test_a_loop_that_never_sleeps_still_reads_its_sockets_and_reports_its_iterations():
    """With a timer always within ``spin_ns`` the loop polls its sockets without sleeping (epoll's ready list,
    not select): datagrams that arrive meanwhile are received all the same, and the final health counts the
    loop's iterations, its sleeps (none) and its wall time beside its CPU time."""
    rx, tx = UdpPort("127.0.0.1"), UdpPort("127.0.0.1")
    try:
        ep = _Spinner(0)
        spec = WorkerSpec(0, (0,), (rx,), (rx.address,), spin_ns=1_000_000_000)
        stop = threading.Event()
        conn = _Keep()
        t0 = time.monotonic_ns()
        loop = _Loop(spec, [ep], t0, conn, [0] * SLOTS, stop, t0 + 5_000_000_000)

        def feed() -> None:
            for i in range(3):
                tx.send(f"d{i}".encode(), rx.address)
                time.sleep(0.02)
            time.sleep(0.05)
            stop.set()

        threading.Thread(target=feed).start()
        loop.run()
        assert [c for c in ep.calls if c != "timer"] == ["receive d0", "receive d1", "receive d2"]
        final = [m for m in conn.msgs if m[0] == "final"]
        health = final[0][3]["sockets"][0]
        assert health["worker_sleeps"] == 0 and health["worker_iterations"] > 3
        assert health["recv_calls"] == 3 and health["recv_empty"] >= 3  # (+ late timers drain first)
        assert 0.1 <= health["worker_wall_s"] < 5 and 0 <= health["worker_cpu_s"] <= health["worker_wall_s"] * 1.05
    finally:
        rx.close()
        tx.close()


class _Idle(_Endpoint):
    """No timer at all: a receiver that waits for data."""

    def start(self, now_ns: int, t0_ns: int) -> None:
        self.timer_ns = None


def test_a_loop_with_no_timer_waits_for_data_in_epoll_not_select(monkeypatch):
    """With no timer before the 10 ms cap (a receiving rank's usual state) the loop sleeps in epoll's wait, not in
    ``select`` (whose fd sets cost ~2 µs more per sleep); it still wakes for every datagram, counts its sleeps,
    and stops on the stop event."""
    import select as select_mod

    selects = []
    real_select = select_mod.select
    monkeypatch.setattr(select_mod, "select", lambda *a: selects.append(a) or real_select(*a))
    ep = _Idle(0)
    conn = _serve(ep, (b"d0", b"d1", b"d2"), 0, 0.03)
    assert ep.calls == ["receive d0", "receive d1", "receive d2"]
    assert selects == []
    health = [m for m in conn.msgs if m[0] == "final"][0][3]["sockets"][0]
    assert health["worker_sleeps"] >= 3 and health["recv_calls"] == 3


class _Quiet(_Idle):
    """A receiver whose datagrams decide nothing to send, except the ones starting with ``a`` (an ACK due)."""

    def __init__(self, late_ns: int) -> None:
        super().__init__(late_ns)
        self.pending = False
        self.polls = 0

    @property
    def has_output(self) -> bool:
        return self.pending

    def receive(self, data, ecn: int, now_ns: int, segment_size: int = 0) -> None:
        super().receive(data, ecn, now_ns, segment_size)
        self.pending = bytes(data).startswith(b"a")

    def poll_transmit(self, now_ns: int) -> list:
        self.polls += 1
        self.pending = False
        return []


def test_a_drain_that_leaves_nothing_to_send_costs_no_poll_transmit():
    """After a drain the loop serves the rank (``poll_transmit``) only when it has output (an ACK decided,
    events) or data due by now: two data batches that decided nothing cost none, the one that decided an ACK
    one; every datagram is received."""
    ep = _Quiet(0)
    flushes = []

    def counting(real):
        def flush(i, now, nxt):
            flushes.append(i)
            real(i, now, nxt)

        return flush

    _serve(ep, (b"d0", b"d1", b"ack"), 0, 0.03, counting)
    assert ep.calls == ["receive d0", "receive d1", "receive ack"]
    assert ep.polls == len(flushes) == 2  # the start, and the drain that decided an ACK


US = 1_000

# -- the wake-up path: a worker asks its timed sleeps to end as much earlier as they have been ending late
# (emulator.drivers.sockets.wake): on the benches' VM a select returned 31–48 µs after it was asked to at the
# median, so a 20 µs spin window began before the worker was awake and paced timers were served ~13 µs late


def test_the_estimate_follows_the_sleeps_lateness_and_caps_a_preemption():
    w = WakeEstimate()
    assert w.early_ns == 0
    assert w.observe(40 * US) == 40 * US  # the first sleep sets it
    for _ in range(64):
        w.observe(30 * US)
    assert 30 * US <= w.early_ns <= 31 * US
    w.observe(50_000 * US)  # a 50 ms preemption counts as the cap, not as the wake-up path
    assert w.early_ns < 31 * US + WAKE_CAP_NS // 16
    for _ in range(64):
        w.observe(-5 * US)  # a sleep that ended early: none of it
    assert 0 <= w.early_ns < 2 * US
    assert w.samples == 130


class _Ticker(_Endpoint):
    """A timer every ``gap_ns``: the loop sleeps in select until shortly before each."""

    def __init__(self, gap_ns: int) -> None:
        super().__init__(0)
        self.gap_ns = gap_ns
        self.lags: list[int] = []

    def start(self, now_ns: int, t0_ns: int) -> None:
        self.timer_ns = now_ns + self.gap_ns

    def handle_timer(self, now_ns: int) -> None:
        self.lags.append(now_ns - self.timer_ns)
        self.timer_ns += self.gap_ns


def _early_by_with_late_sleeps(monkeypatch, period_ns: int) -> tuple[list[int], dict]:
    """How long before a ``period_ns`` ticker's timer each timed sleep was asked to end, with a select whose
    timed-out sleeps end 50 µs late, and the worker's socket stats."""
    late_s = 50e-6
    early_by: list[int] = []
    real_select = select_mod.select
    box: dict = {}

    def slow_select(r, w, x, timeout=None):
        if timeout:
            ep, t0 = box["ep"], box["t0"]
            early_by.append(ep.timer_ns - (time.monotonic_ns() - t0) - int(timeout * 1e9))
            got = real_select(r, w, x, timeout)
            if not got[0]:
                time.sleep(late_s)
            return got
        return real_select(r, w, x, timeout)

    monkeypatch.setattr(select_mod, "select", slow_select)
    rx = UdpPort("127.0.0.1")
    try:
        ep = box["ep"] = _Ticker(period_ns)
        spec = WorkerSpec(0, (0,), (rx,), (rx.address,), spin_ns=20 * US)
        stop = threading.Event()
        conn = _Keep()
        t0 = box["t0"] = time.monotonic_ns()
        loop = _Loop(spec, [ep], t0, conn, [0] * SLOTS, stop, t0 + 5_000_000_000)
        threading.Timer(0.3, stop.set).start()
        loop.run()
    finally:
        rx.close()
    return early_by, [m for m in conn.msgs if m[0] == "final"][0][3]["sockets"][0]


def test_a_worker_paced_at_a_sleeps_overshoot_does_not_wake_early(monkeypatch):
    # timers 100 µs apart, sleeps that end 50 µs late: waking 50 µs early would spin most of every gap (the
    # loop without the WAKE_FROM bound slept too little to time out at all); it sleeps to its spin window
    early_by, health = _early_by_with_late_sleeps(monkeypatch, 100 * US)
    assert len(early_by) >= 40
    assert health["worker_wake_early_ns"] >= 40 * US  # the estimate is still kept and reported
    assert sorted(early_by[-20:])[10] < 20 * US + 20 * US


def test_a_worker_whose_sleeps_end_late_asks_them_to_end_earlier(monkeypatch):
    # select stands in for a VM whose timed sleeps end at least 50 µs late: after a few of them the loop asks
    # for sleeps that end that much more than its 20 µs spin window before the timer (the old loop: the
    # spin window only, so it woke ~30 µs after the timer was due and every timer was served late)
    early_by, health = _early_by_with_late_sleeps(monkeypatch, 2_000 * US)
    assert len(early_by) >= 40
    assert sorted(early_by[-20:])[10] >= 20 * US + 40 * US  # the old loop: 20 µs (its spin window)
    assert health["worker_wake_early_ns"] >= 40 * US
