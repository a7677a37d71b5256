"""Receiver CPU per GRO batch through a real socket: the Python drain vs the compiled drain, one process.

A sender :class:`~emulator.endpoint.endpoint.RankEndpoint` (cc none, 100 Gbit/s, the socket drivers' modes) is
polled every ``--step`` µs of virtual time and its GSO batches go by ``sendto`` to a receiver socket on
127.0.0.1; the receiving rank's drain then takes what waits, as a worker's ``_drain`` does (the ACKs it decides
go back to the sender without a socket). Timed in process CPU time around the receiver's part alone:

* ``python``: :meth:`UdpPort.drain_into` (``recvmmsg`` by ctypes, control messages, one ``receive`` a batch)
  and the rank's ``poll_transmit`` when it has output;
* ``compiled``: :class:`~emulator.drivers.sockets.rx_compiled.CompiledDrain` (the system call, control
  messages and the accept of MIDDLE runs in one numba call) and the same ``poll_transmit``.

* ``bare``: the same ``recvmmsg`` from compiled code into the same buffers, nothing parsed, no endpoint (the
  receiver never ACKs: the sender runs without a window and with a retransmit timeout longer than the run): the system call and the kernel's copy
  alone, what any receiver pays.

Modes alternate rep by rep; the best (least CPU) of ``--reps`` is printed with the median. All include the
kernel's copy of every batch.

    python bench/rx_drain_cost.py [--reps 5] [--size 256MiB] [--step 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import replace

PC = time.process_time


def _bare_recv():
    from numba import njit

    from emulator.drivers.sockets.rx_compiled import _recvmmsg

    @njit(cache=True)
    def bare(fd, hdr_addr, n):  # pragma: no cover - compiled
        return _recvmmsg(fd, hdr_addr, n, 0x40, 0)

    return bare


def one(mode: str, size: int, step_ns: int) -> tuple[float, int, int]:
    """(receiver CPU s, GRO batches received, bytes held) of one flow of ``size`` bytes."""
    from emulator.drivers.sockets.mmsg import RX_CONTROL_BYTES
    from emulator.drivers.sockets.rx_compiled import CompiledDrain
    from emulator.drivers.sockets.udp import UdpPort
    from emulator.endpoint.config import EndpointConfig
    from emulator.endpoint.endpoint import RankEndpoint
    from emulator.schedule.model import OP_RECV, OP_SEND

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from support.endpoint import make_schedule

    sched = make_schedule(2, [(0, 1, size, 0)], {0: [(OP_SEND, 0, 0, -1, ())], 1: [(OP_RECV, 0, 0, -1, ())]})
    cfg = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, pace_full_batches=True, defer_acks=True,
                         socket_sends=True, compiled_core=True, max_outstanding_bytes=4 << 20,
                         ack_every_packets=256)  # fmt: skip
    if mode == "bare":
        cfg = replace(cfg, max_outstanding_bytes=0, retransmit_timeout_ns=60_000_000_000)
    a, b = RankEndpoint(0, sched, cfg), RankEndpoint(1, sched, cfg)
    tx, rx = UdpPort("127.0.0.1", 0, sndbuf_bytes=16 << 20), UdpPort("127.0.0.1", 0, rcvbuf_bytes=64 << 20)
    buf = bytearray(65536)
    drain = CompiledDrain(rx, b) if mode == "compiled" else None
    bare = _bare_recv() if mode == "bare" else None
    if bare is not None:
        rx.drain_into(buf, b.receive, lambda: 0, 0, 16)  # makes the port's recvmmsg buffers (16 slots)
        mm = rx._mm_rx
    a.start(0)
    b.start(0)
    dest = (tx.address, rx.address)
    cpu = 0.0
    now = 0
    batches = got = 0
    try:
        for _ in range(10**7):
            if b.done or (bare is not None and batches and not got and a.records.counters.get("bytes_sent", 0) >= size):
                break
            now += step_ns
            txs = a.poll_transmit(now)
            tx.send_transmits(txs, dest)
            clock = _clock(now)
            t = PC()
            if bare is not None:
                got = max(0, bare(mm.fd, mm._hdr_addr, 16))
                for i in range(got):
                    mm.words[i * 8 + 5] = RX_CONTROL_BYTES
            elif drain is not None:
                got = drain.drain(clock, 0, 16)
            else:
                got = rx.drain_into(buf, b.receive, clock, 0, 16)
            out = b.poll_transmit(now, 0) if b.has_output else []
            cpu += PC() - t
            batches += got
            for x in out:
                a.receive(memoryview(bytearray(x.data)), x.tos & 3, now, 0)
            a.handle_timer(now)
    finally:
        tx.close()
        rx.close()
    held = b.records.counters.get("bytes_received", 0) if bare is None else a.records.counters.get("bytes_sent", 0)
    return cpu, batches, held


def _clock(now_ns: int):
    def clock() -> int:
        return now_ns

    return clock


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--size", type=int, default=256 << 20)
    ap.add_argument("--step", type=int, default=50, help="µs of virtual time between two sender polls")
    ap.add_argument("--modes", default="python,compiled,bare")
    args = ap.parse_args()
    from emulator.drivers.sockets.rx_compiled import warm

    warm()
    modes = args.modes.split(",")
    res: dict[str, list[float]] = {m: [] for m in modes}
    print(f"load {os.getloadavg()[0]:.2f}")
    for rep in range(args.reps):
        for m in (modes if rep % 2 == 0 else modes[::-1]):
            cpu, n, held = one(m, args.size, args.step * 1000)
            res[m].append(cpu / max(n, 1) * 1e6)
            print(f"rep {rep} {m:9s} {cpu / max(n, 1) * 1e6:6.2f} µs per GRO batch ({n} batches, "
                  f"{held / 1e6:.0f} MB held, {cpu / max(held, 1) * 1e9:.3f} CPU-s per GB)", flush=True)
    for m, v in res.items():
        print(f"{m:9s} best {min(v):6.2f}  median {statistics.median(v):6.2f} µs per GRO batch")
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
