"""Cost of the sans-IO endpoint cores alone: CPU µs per GSO batch and per packet, sender and receiver.

No sockets, no fabric: two :class:`~emulator.endpoint.endpoint.RankEndpoint` of a one-flow (or many-flow)
schedule, each call timed in process CPU time (robust to other load on the machine, though a loaded machine
still slows every figure) and summed per part:

* **sender**: its ``poll_transmit`` and ``next_timer_ns`` (as the sim serves it, and as a socket driver
  that sleeps until then), called at every ``next_timer_ns`` until every packet went out;
* **receiver**: its ``receive`` of every transmit at once (a GSO batch as one GRO batch in the batch
  scenarios, one datagram per call in the packet scenarios) and its ``poll_transmit`` for the ACKs;
* **ACKs**: the sender's ``receive`` of those ACKs (the feedback path: cumulative ACK, message completion).

The timer's own cost (about 0.1 µs per reading) is included.

Scenarios (``--scenario``, default all):

* ``batch``: one 64 MiB flow, cc ``none`` at 100 Gbit/s, the socket drivers' modes (``pace_full_batches``,
  ``defer_acks``): full 15-packet batches, the direct path's cost per batch;
* ``batch-dcqcn``: the same flow under DCQCN (``connectx``): a rate-controlled QP's batch;
* ``packet``: one 4 MiB flow under DCQCN at 25 Gbit/s in the sim's modes: one packet per visit; the
  receiver takes datagram by datagram;
* ``small``: 256 messages of 16 KiB (4 packets: FIRST, MIDDLE, MIDDLE, LAST) as the sim's a2a-64 sends,
  served like ``packet``;
* ``socket``: the ``batch`` flow polled as a busy socket driver polls it, every 50 µs (each poll finds the
  bucket's whole burst, 4 batches at 100 Gbit/s);
* ``socket-qps``: the same at 25 Gbit/s (the collectives' line rate) over 4 queue pairs (``qps_per_peer``),
  every 50 µs: several queue pairs due at each poll, the NIC's burst (2 batches) shared between them.

``--reps N`` runs each scenario N times and prints the best (least CPU) of each figure; ``--compiled`` picks the
Python core (off), the compiled one (on, ``EndpointConfig.compiled_core``; tagged ``+c``) or both alternating
(default). ``--profile
SCENARIO`` prints the cProfile top of one scenario's three parts. ``--calls`` counts the Python function calls
(builtins included) of each part per batch and per packet instead: a figure the machine's load does not move.

    python bench/endpoint_cost.py [--scenario batch|batch-dcqcn|packet|small|socket|socket-qps] [--reps 3]
                                  [--profile packet] [--calls]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from dataclasses import dataclass

PC = time.process_time


@dataclass(frozen=True)
class Scenario:
    """A workload and the endpoint modes it is served with."""

    name: str
    flows: int
    flow_bytes: int
    cc: str
    rate_bps: float
    socket_modes: bool  # pace_full_batches + defer_acks + socket_sends (the socket drivers' modes)
    per_datagram_rx: bool  # the receiver gets each datagram alone (the sim), else whole GRO batches
    poll_ns: int = 0  # the sender is polled this long after its previous poll (0: at its next_timer_ns)
    qps_per_peer: int = 1


SCENARIOS = {
    "batch": Scenario("batch", 1, 64 << 20, "none", 100e9, True, False),
    "batch-dcqcn": Scenario("batch-dcqcn", 1, 64 << 20, "connectx", 100e9, True, False),
    "packet": Scenario("packet", 1, 4 << 20, "connectx", 25e9, False, True),
    "small": Scenario("small", 256, 16 << 10, "connectx", 25e9, False, True),
    "socket": Scenario("socket", 1, 64 << 20, "none", 100e9, True, False, poll_ns=50_000),
    "socket-qps": Scenario("socket-qps", 1, 64 << 20, "none", 25e9, True, False, poll_ns=50_000, qps_per_peer=4),
}


def _schedule(flows: int, flow_bytes: int):
    from emulator.schedule.compiler import compile_trace
    from emulator.trace.generators.common import p2p_node
    from emulator.trace.model import NodeType, RankGraph, Trace

    ranks = {
        0: RankGraph(0, [p2p_node(i, "send", NodeType.COMM_SEND_NODE, flow_bytes, 0, 1, i) for i in range(flows)]),
        1: RankGraph(1, [p2p_node(i, "recv", NodeType.COMM_RECV_NODE, flow_bytes, 0, 1, i) for i in range(flows)]),
    }
    return compile_trace(Trace(ranks=ranks))


def _config(sc: Scenario, compiled: bool = False):
    import dataclasses

    from emulator.endpoint.config import EndpointConfig

    cfg = EndpointConfig(mtu_bytes=4096, cc=sc.cc, line_rate_bps=sc.rate_bps, retransmit_timeout_ns=10**12,
                         pace_full_batches=sc.socket_modes, defer_acks=sc.socket_modes, qps_per_peer=sc.qps_per_peer)
    if sc.socket_modes and "socket_sends" in {f.name for f in dataclasses.fields(cfg)}:  # a tree that has it
        cfg = dataclasses.replace(cfg, socket_sends=True)
    if compiled:
        from emulator.wire.kernels import warm

        warm()
        cfg = dataclasses.replace(cfg, compiled_core=True)
    return cfg


class _Calls:
    """Python function calls (builtins included) made inside ``with`` blocks: a count that does not depend on
    the machine's load, summed over every block."""

    def __init__(self) -> None:
        self.n = 0

    def _count(self, _frame, event, _arg) -> None:
        if event == "call" or event == "c_call":
            self.n += 1

    def __enter__(self) -> None:
        sys.setprofile(self._count)

    def __exit__(self, *exc) -> None:
        sys.setprofile(None)
        self.n -= 1  # the setprofile(None) call itself


class _Off:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        return None


def run(sc: Scenario, prof: cProfile.Profile | None = None, count: bool = False, compiled: bool = False) -> dict:
    """One run of ``sc``: CPU seconds of each part, batches, packets and ACKs handled (with ``count``: the
    Python calls of each part instead of meaningful times; ``compiled``: ``EndpointConfig.compiled_core``,
    the kernels compiled or loaded before the clock)."""
    from emulator.endpoint.endpoint import RankEndpoint

    s = _schedule(sc.flows, sc.flow_bytes)
    cfg = _config(sc, compiled)
    a, b = RankEndpoint(0, s, cfg), RankEndpoint(1, s, cfg)
    a.start(0)
    b.start(0)
    now = 0
    wall_end = time.perf_counter() + 120
    want = sc.flows * -(-sc.flow_bytes // cfg.mtu_bytes)
    sent = batches = n_acks = 0
    t_tx = t_rx = t_ack = 0.0
    per_datagram = sc.per_datagram_rx
    c_tx, c_rx, c_ack = (_Calls(), _Calls(), _Calls()) if count else (_Off(), _Off(), _Off())
    if prof:
        prof.enable()
    while sent < want and time.perf_counter() < wall_end:
        c0 = PC()
        with c_tx:
            txs = a.poll_transmit(now)
            t = a.next_timer_ns()
        c1 = PC()
        t_tx += c1 - c0
        for tx in txs:
            seg = tx.segment_size
            sent += -(-len(tx.data) // seg) if seg else 1
        batches += len(txs)
        units = [(d, 0) for tx in txs for d in tx.datagrams()] if per_datagram else [
            (tx.data, tx.segment_size) for tx in txs]
        c1 = PC()
        acks = []
        with c_rx:
            for data, seg in units:
                b.receive(data, 2, now, seg)
                if b.has_output:
                    acks.extend(b.poll_transmit(now, 0))
        c2 = PC()
        with c_ack:
            for tx in acks:
                a.receive(tx.data, 0, now, tx.segment_size)
        c3 = PC()
        t_rx += c2 - c1
        t_ack += c3 - c2
        n_acks += len(acks)
        if sc.poll_ns:
            now = max(t or 0, now + sc.poll_ns)
        elif t is not None and t > now:
            now = t
    acks = b.poll_transmit(now, 0)
    for tx in acks:
        a.receive(tx.data, 0, now, tx.segment_size)
    n_acks += len(acks)
    if prof:
        prof.disable()
    if not (a.done and b.done):
        raise SystemExit(f"{sc.name}: the run did not complete (sender done {a.done}, receiver done {b.done})")
    out = {"tx_s": t_tx, "rx_s": t_rx, "ack_s": t_ack, "batches": batches, "packets": sent, "acks": n_acks,
           "bytes": sc.flows * sc.flow_bytes}
    if count:
        out.update(tx_calls=c_tx.n, rx_calls=c_rx.n, ack_calls=c_ack.n)
    return out


def report(sc: Scenario, r: dict, tag: str = "") -> str:
    nb, npk = r["batches"], r["packets"]
    return (f"{sc.name + tag:12s} {npk / nb:5.1f} pkt/batch | sender {1e6 * r['tx_s'] / nb:7.2f} µs/batch "
            f"{1e6 * r['tx_s'] / npk:6.2f} µs/pkt | receiver {1e6 * r['rx_s'] / nb:7.2f} µs/batch "
            f"{1e6 * r['rx_s'] / npk:6.2f} µs/pkt | ACKs {r['acks']:6d} {1e6 * r['ack_s'] / max(1, r['acks']):6.2f} µs each"
            f" | both cores {(r['tx_s'] + r['rx_s'] + r['ack_s']) / (r['bytes'] / 1e9):.3f} CPU-s/GB")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), action="append")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--profile", choices=sorted(SCENARIOS))
    ap.add_argument("--calls", action="store_true", help="count Python calls per batch/packet (load-independent)")
    ap.add_argument("--compiled", choices=("off", "on", "both"), default="both",
                    help="the Python core, the compiled one (compiled_core), or both alternating rep by rep")
    args = ap.parse_args(argv)
    modes = {"off": (False,), "on": (True,), "both": (False, True)}[args.compiled]
    if True in modes:
        try:
            from emulator.wire.kernels import warm
        except ImportError:  # a tree without the compiled core
            modes = (False,)
        else:
            warm()
    if args.calls:
        for name, c in ((n, c) for n in args.scenario or list(SCENARIOS) for c in modes):
            r = run(SCENARIOS[name], count=True, compiled=c)
            nb, npk = r["batches"], r["packets"]
            print(f"{name + ('+c' if c else ''):14s} Python calls: sender {r['tx_calls'] / nb:6.1f} per batch {r['tx_calls'] / npk:6.2f} per "
                  f"packet | receiver {r['rx_calls'] / nb:6.1f} per batch {r['rx_calls'] / npk:6.2f} per packet | "
                  f"{r['ack_calls'] / max(1, r['acks']):5.1f} per ACK", flush=True)
        return 0
    if args.profile:
        prof = cProfile.Profile()
        run(SCENARIOS[args.profile], prof, compiled=modes[-1])
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(22)
        print(s.getvalue())
        return 0
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    for name in args.scenario or list(SCENARIOS):
        sc = SCENARIOS[name]
        best: dict = {c: {} for c in modes}
        for _ in range(args.reps):
            for c in modes:
                r = run(sc, compiled=c)
                for k in ("tx_s", "rx_s", "ack_s"):
                    best[c][k] = min(best[c].get(k, float("inf")), r[k])
                best[c].update({k: r[k] for k in ("batches", "packets", "acks", "bytes")})
        for c in modes:
            print(report(sc, best[c], "+c" if c else ""), flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
