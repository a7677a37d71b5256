"""A socket worker's linger after reading a stream (``WorkerSpec.rx_linger_ns``): with no timer before its wait
cap, a pass that read a GSO batch's worth is followed by a sleep on a timer, not on the sockets, so the next
batches queue without waking the worker and one pass reads them all; a pass that read less (a message of a
packet or two) is followed by the usual wait on the sockets, so the next message is read the moment it comes.

A real UDP socket on 127.0.0.1 carries the datagrams; the endpoint logs what it receives and the loop's
``select`` with no sockets (the linger) is logged in the same list.
"""

from __future__ import annotations

import select as select_mod
import threading
import time

from support.worker_loop import IdleEndpoint, NullConn

from emulator.drivers.sockets.udp import UdpPort
from emulator.drivers.sockets.workers import RX_LINGER_BYTES, SLOTS, WorkerSpec, _Loop


class _Receiver(IdleEndpoint):
    """No timer; each datagram received is logged by its length."""

    def __init__(self, log: list) -> None:
        super().__init__()
        self.log = log
        self.first = threading.Event()

    def receive(self, data, ecn: int, now_ns: int, segment_size: int = 0) -> None:
        self.log.append(f"receive {len(data)}")
        self.first.set()


def _run(monkeypatch, linger_ns: int) -> list[str]:
    """A batch's worth (one datagram of ``RX_LINGER_BYTES``), then — once the loop lingers, or 50 ms after the
    batch was read when it does not — two small datagrams at once, then 50 ms later a third; returns the log."""
    log: list[str] = []
    lingered = threading.Event()
    real_select = select_mod.select

    def select(r, w, x, timeout=None):
        if not r:
            log.append(f"linger {timeout}")
            lingered.set()
        return real_select(r, w, x, timeout)

    monkeypatch.setattr(select_mod, "select", select)
    rx, tx = UdpPort("127.0.0.1"), UdpPort("127.0.0.1")
    try:
        ep = _Receiver(log)
        spec = WorkerSpec(0, (0,), (rx,), (rx.address,), spin_ns=0, rx_linger_ns=linger_ns)
        stop = threading.Event()
        t0 = time.monotonic_ns()
        loop = _Loop(spec, [ep], t0, NullConn(), [0] * SLOTS, stop, t0 + 10_000_000_000)

        def feed() -> None:
            tx.send(b"B" * RX_LINGER_BYTES, rx.address)
            ep.first.wait(5)
            lingered.wait(0.05)
            tx.send(b"s1", rx.address)
            tx.send(b"s2", rx.address)
            time.sleep(0.05)
            tx.send(b"s3", rx.address)
            time.sleep(0.05)
            stop.set()

        threading.Thread(target=feed).start()
        loop.run()
        return log
    finally:
        rx.close()
        tx.close()


def test_a_pass_that_read_a_batch_lingers_on_a_timer_then_reads_what_queued_in_one_pass(monkeypatch):
    log = _run(monkeypatch, 200_000_000)
    # the batch, then one linger of 200 ms, in which both small datagrams queue and are read after it; after
    # them (less than a batch) the loop waits on its socket again: the third is read with no linger before it
    assert log == [f"receive {RX_LINGER_BYTES}", "linger 0.2", "receive 2", "receive 2", "receive 2"], log


def test_without_a_linger_the_loop_always_waits_on_its_sockets(monkeypatch):
    log = _run(monkeypatch, 0)
    assert log == [f"receive {RX_LINGER_BYTES}", "receive 2", "receive 2", "receive 2"], log
