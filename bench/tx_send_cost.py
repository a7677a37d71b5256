"""Sender CPU per GSO batch through a real socket: the endpoint's ``poll_transmit`` and the port's
``send_transmits``, per-batch transmits and ``sendto`` each (``python``) vs runs as one transmit and
``sendmmsg`` from compiled code (``compiled``: ``EndpointConfig.run_transmits`` + ``UdpPort(send_compiled)``),
one process, 127.0.0.1.

One rank sends one flow of ``--size`` bytes (no congestion control, 4096-byte MTU, ``--rate`` line rate, the
direct driver's 8-batch line-rate burst), polled every ``--poll-us`` of virtual time (a socket worker's loop:
several batches a visit); the time of ``poll_transmit`` + ``send_transmits`` is process CPU time, the kernel's
copy included; the receiving socket is drained untimed after each poll (its ACKs never come back: no window,
no timeout). Modes alternate rep by rep; per mode the best and median CPU µs per batch.

    python bench/tx_send_cost.py [--reps 6] [--size 64MiB] [--rate 100Gbps] [--poll-us 50]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time


def _times() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def run(compiled: bool, size: int, rate: float, poll_ns: int) -> tuple[float, float, int]:
    """User and system CPU µs per GSO batch of one flow of ``size`` bytes in ``compiled`` or Python mode, and
    the batches."""
    from emulator.drivers.sockets.udp import UdpPort
    from emulator.endpoint.config import EndpointConfig
    from emulator.endpoint.endpoint import RankEndpoint
    from emulator.schedule.compiler import compile_trace
    from emulator.trace.generators.common import p2p_node
    from emulator.trace.model import NodeType, RankGraph, Trace

    sched = compile_trace(Trace(ranks={
        0: RankGraph(0, [p2p_node(0, "send", NodeType.COMM_SEND_NODE, size, 0, 1, 0)]),
        1: RankGraph(1, [p2p_node(0, "recv", NodeType.COMM_RECV_NODE, size, 0, 1, 0)])}))
    cfg = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=rate, retransmit_timeout_ns=10**15,
                         pace_full_batches=True, defer_acks=True, socket_sends=True, compiled_core=True,
                         line_rate_burst_batches=8, run_transmits=compiled)
    ep = RankEndpoint(0, sched, cfg)
    tx = UdpPort("127.0.0.1", 0, sndbuf_bytes=16 << 20, send_mmsg=compiled, send_compiled=compiled)
    rx = UdpPort("127.0.0.1", 0, rcvbuf_bytes=64 << 20)
    dest = (tx.address, rx.address)
    sink = bytearray(65536)
    ep.start(0)
    user = sys_ = 0.0
    now = 0
    sends0 = 0
    try:
        while ep.records.counters["bytes_sent"] < size and now < 10**12:
            u0, s0 = _times()
            tx.send_transmits(ep.poll_transmit(now), dest)
            u1, s1 = _times()
            user += u1 - u0
            sys_ += s1 - s0
            now += poll_ns
            while rx.drain_into(sink, lambda *a: None, time.monotonic_ns, 0, 16) == 16:
                pass
        sends = tx.sent_calls - sends0
    finally:
        tx.close()
        rx.close()
    return user / max(1, sends) * 1e6, sys_ / max(1, sends) * 1e6, sends


def main() -> None:
    from emulator.units import parse_rate_bps, parse_size_bytes

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--size", default="64MiB")
    ap.add_argument("--rate", default="100Gbps")
    ap.add_argument("--poll-us", type=float, default=50.0)
    ap.add_argument("--modes", default="python,compiled", help="modes to run (one alone: under callgrind)")
    args = ap.parse_args()
    from emulator.drivers.sockets.tx_compiled import warm as warm_send
    from emulator.wire.kernels import warm

    warm()
    warm_send()
    size, rate, poll = parse_size_bytes(args.size), parse_rate_bps(args.rate), int(args.poll_us * 1000)
    print(f"load {os.getloadavg()[0]:.2f}")
    modes = tuple(args.modes.split(","))
    res: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    for rep in range(args.reps):
        for mode in (modes if rep % 2 == 0 else modes[::-1]):
            u, s, n = run(mode == "compiled", size, rate, poll)
            res[mode].append((u, s))
    for mode, v in res.items():
        tot = [u + s for u, s in v]
        print(f"{mode}: best {min(tot):.2f}, median {statistics.median(tot):.2f} CPU µs per GSO batch (user "
              f"{statistics.median(u for u, _ in v):.2f} + system {statistics.median(s for _, s in v):.2f}, medians; "
              f"{n} batches a rep)")
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
