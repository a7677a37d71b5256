"""Sender CPU per 61 KB GSO batch: ``sendto`` vs ``sendmmsg`` (ctypes, as ``UdpPort(send_mmsg=True)``) vs
``sendmmsg`` called from compiled code, one process, 127.0.0.1.

Each round sends ``--batches`` GSO batches of 15 × 4,112 bytes (a writable buffer, as the sender's arena) from one
socket to another, timed in process CPU time around the send alone, then drains the receiver (untimed) so the
receive buffer never fills. Modes alternate rep by rep; per mode the median over reps of CPU µs per batch, and
the same for 64-byte messages (the per-call and per-message overhead almost without the
kernel's copy). dpcore4 measured the sender loop 2–3 µs per batch dearer with ``sendmmsg``; this separates the
system call's own cost from the Python around it.

    python bench/send_cost.py [--reps 7] [--rounds 400] [--batches 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from numba import njit, types

PC = time.process_time
_sendmmsg = types.ExternalFunction("sendmmsg", types.int32(types.int32, types.intp, types.uint32, types.int32))


@njit(cache=True)
def _send_all(fd, hdr_addr, n):  # pragma: no cover - compiled
    return _sendmmsg(fd, hdr_addr, n, 0)


def run(mode: str, rounds: int, k: int, nbytes: int) -> float:
    """CPU µs per message of ``mode`` over ``rounds`` rounds of ``k`` messages of ``nbytes``."""
    from emulator.drivers.sockets.mmsg import MmsgSender, buffer_address
    from emulator.drivers.sockets.udp import UdpPort
    from emulator.endpoint.events import Transmit

    tx = UdpPort("127.0.0.1", 0, sndbuf_bytes=16 << 20, send_mmsg=mode == "sendmmsg")
    rx = UdpPort("127.0.0.1", 0, rcvbuf_bytes=64 << 20)
    seg = 4112
    bufs = [bytearray(max(nbytes, 1)) for _ in range(k)]
    views = [memoryview(b)[:nbytes] for b in bufs]
    txs = [Transmit(1, v, seg if nbytes > seg else 0, 2) for v in views]
    dest = (tx.address, rx.address)
    tx.send_transmits(txs[:1], dest)  # the socket's own options
    mm = None
    if mode == "compiled":  # headers built once, as a compiled sender would keep them
        mm = MmsgSender(tx.fileno, k)
        names = mm.names_for(dest)
        for i, v in enumerate(views):
            mm.words[i * 8] = names + 16
            mm.iovecs[2 * i] = buffer_address(bufs[i])
            mm.iovecs[2 * i + 1] = len(v)
    sink = bytearray(65536)
    cpu = 0.0
    try:
        for _ in range(rounds):
            t = PC()
            if mm is not None:
                _send_all(tx.fileno, mm._hdr_addr, k)
            else:
                tx.send_transmits(txs, dest)
            cpu += PC() - t
            while rx.drain_into(sink, lambda *a: None, time.monotonic_ns, 0, 16) == 16:
                pass
    finally:
        tx.close()
        rx.close()
    return cpu / (rounds * k) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--batches", type=int, default=4)
    args = ap.parse_args()
    _send_all(-1, 0, 0)  # compile or load
    modes = ("sendto", "sendmmsg", "compiled")
    print(f"load {os.getloadavg()[0]:.2f}")
    for nbytes in (15 * 4112, 64):
        res: dict[str, list[float]] = {m: [] for m in modes}
        for rep in range(args.reps):
            for m in (modes if rep % 2 == 0 else modes[::-1]):
                res[m].append(run(m, args.rounds, args.batches, nbytes))
        print(f"{nbytes} B messages, {args.batches} a call: " + ", ".join(
            f"{m} {statistics.median(v):.2f} (best {min(v):.2f})" for m, v in res.items()) + " CPU µs per message")
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
