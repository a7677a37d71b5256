"""Per-packet traces of one run's send stamps, and a sim run and a loopback run of one schedule compared.

The loopback's switch runs its port model on the senders' stamps (the model times their pacers meant each
packet to leave). When a loopback run has queues or ECN marks its sim twin has not, this tells where they
come from: the senders' service order (which queue pair a rank served at which model time) and the stamps
at each egress port, packet by packet, against the sim's.

    python bench/stamp_trace.py run DIR -- run profiles/mixed_ar_a2a.yaml --fabric sim -o OUT --quiet
    python bench/stamp_trace.py run DIR2 -- run profiles/mixed_ar_a2a.yaml --fabric loopback \\
        --set fabric.time_dilation=8 -o OUT2 --quiet
    python bench/stamp_trace.py compare DIR DIR2

``run`` runs ``emulator`` with the given arguments in this process (the loopback's processes are forked
from it) with three hooks, each writing ``DIR/<kind>.<pid>.txt``: ``stamps`` — every stamped data batch
``src dst stamp step packets payload t`` as the loopback switch received it (``t``: its model clock) or as
the sim queued it at the sender's NIC (``t``: the sim's time); ``service`` — every batch a sender's service
sent, ``rank t qp dst psn packets rate``. The hooks cost time: a loopback run under them is slower and
later than without (read its verdict).

``compare`` prints, per rank, the first packet whose service time, queue pair or destination differs
(the sim's next to the loopback's), and an ideal FIFO replay of each run's stamps: every rank's NIC
serialises its stamped packets at the line rate, every egress port serves them in arrival order at the
port rate; the queue each packet found (bytes ahead of it), how many found more than Kmin, the largest.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def _writer(directory: str, kind: str) -> tuple[list[str], Callable[[], None]]:
    rows: list[str] = []

    def flush() -> None:
        if rows:
            with open(f"{directory}/{kind}.{os.getpid()}.txt", "a", encoding="utf-8") as fh:
                fh.write("\n".join(rows) + "\n")
            rows.clear()

    return rows, flush


def run(directory: str, argv: list[str]) -> int:
    """``emulator`` ``argv`` with the stamp and service hooks (module docstring)."""
    os.makedirs(directory, exist_ok=True)
    from emulator.cli import main
    from emulator.drivers import sim as simm
    from emulator.drivers.loopback import switch as swm
    from emulator.endpoint import sender as sm

    stamps, flush_stamps = _writer(directory, "stamps")
    service, flush_service = _writer(directory, "service")

    arrive = swm._SoftwareSwitch._arrive

    def _arrive(self, buf, k, seg, last, tos, dst, src, stamp, now, step=0):  # noqa: ANN001, ANN202
        if src >= 0 and stamp >= 0:
            stamps.append(f"{src} {dst} {stamp} {step} {k} {seg} {now}")
        return arrive(self, buf, k, seg, last, tos, dst, src, stamp, now, step)

    switch_run = swm._SoftwareSwitch.run

    def _run(self, t0):  # noqa: ANN001, ANN202
        try:
            return switch_run(self, t0)
        finally:
            flush_stamps()

    inject = simm._Sim.inject

    def _inject(self, r, tx, t):  # noqa: ANN001, ANN202
        if tx[4] >= 0:
            seg, n = tx[2], len(tx[1])
            k = -(-n // seg) if seg and seg < n else 1
            stamps.append(f"{r} {tx[0]} {tx[4]} {tx[5]} {k} {seg or n} {t}")
        return inject(self, r, tx, t)

    bind = simm._Sim.bind

    def _bind(self):  # noqa: ANN001, ANN202
        self.one_visits = False  # every send through SenderSide._send_batch (the same sends, one path)
        return bind(self)

    send_batch = sm.SenderSide._send_batch

    def _send_batch(self, qs, now_ns, *rest):  # noqa: ANN001, ANN202
        psn = qs.nxt
        n = send_batch(self, qs, now_ns, *rest)
        service.append(f"{self.rank} {now_ns - self.t0_ns} {qs.qp} {qs.dst} {psn} {qs.nxt - psn} {int(qs.rate_bps)}")
        if len(service) >= 2000:
            flush_service()
        return n

    swm._SoftwareSwitch._arrive, swm._SoftwareSwitch.run = _arrive, _run
    simm._Sim.inject, simm._Sim.bind = _inject, _bind
    sm.SenderSide._send_batch = _send_batch
    try:
        return main(argv)
    finally:
        flush_stamps()
        flush_service()


def _load(directory: str, kind: str) -> list[list[int]]:
    rows = []
    for f in sorted(glob.glob(f"{directory}/{kind}.*.txt")):
        with open(f, encoding="utf-8") as fh:
            rows += [[int(x) for x in line.split()] for line in fh if line.strip()]
    return rows


def replay(rows: list[list[int]], port_rate_bps: float, nic_rate_bps: float, overhead_bytes: int,
           kmin_bytes: int, buffer_bytes: int = 0) -> dict[str, float]:
    """Ideal FIFO replay of stamped batches (module docstring): packets, queue > Kmin, largest queue, p99, and
    with ``buffer_bytes`` the packets a tail-drop buffer of that size drops (per packet, at its arrival)."""
    by_src: dict[int, list[tuple[int, int, int]]] = collections.defaultdict(list)
    for src, dst, stamp, step, k, seg, _t in rows:
        for j in range(k):
            by_src[src].append((stamp + j * step, dst, seg + overhead_bytes))
    arrivals: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for pkts in by_src.values():
        pkts.sort(key=lambda p: p[0])
        free = 0
        for t, dst, wire in pkts:
            free = max(t, free) + -(-wire * 8 * 10**9 // int(nic_rate_bps))
            arrivals[dst].append((free, wire))
    queues: list[int] = []
    drops = 0
    for pkts in arrivals.values():
        pkts.sort(key=lambda p: p[0])
        fifo: collections.deque[tuple[int, int]] = collections.deque()
        busy_until = queued = 0
        for t, wire in pkts:
            while fifo and fifo[0][0] <= t:
                queued -= fifo.popleft()[1]
            queues.append(queued)
            if buffer_bytes and queued + wire > buffer_bytes:
                drops += 1
                continue
            busy_until = max(t, busy_until) + wire * 8 * 10**9 // int(port_rate_bps)
            fifo.append((busy_until, wire))
            queued += wire
    queues.sort()
    n = len(queues)
    return {"packets": n, "above_kmin": sum(q > kmin_bytes for q in queues), "max_bytes": queues[-1] if n else 0,
            "p99_bytes": queues[min(n - 1, int(0.99 * n))] if n else 0, "drops": drops}


def compare(sim_dir: str, lb_dir: str, args: argparse.Namespace) -> int:
    for label, d in (("sim", sim_dir), ("loopback", lb_dir)):
        r = replay(_load(d, "stamps"), args.port_rate, args.nic_rate or args.port_rate, args.overhead, args.kmin,
                   args.buffer)
        print(f"{label}: ideal FIFO on the stamps: {r['packets']} packets, {r['above_kmin']} found more than Kmin, "
              f"queue p99 {r['p99_bytes']} B, max {r['max_bytes']} B"
              + (f", {r['drops']} dropped by a {args.buffer} B buffer" if args.buffer else ""))
    a, b = _load(sim_dir, "service"), _load(lb_dir, "service")
    for rank in sorted({r[0] for r in a}):
        pa = [(t, qp, dst, psn + j) for rk, t, qp, dst, psn, n, _ in a if rk == rank for j in range(n)]
        pb = [(t, qp, dst, psn + j) for rk, t, qp, dst, psn, n, _ in b if rk == rank for j in range(n)]
        i = next((i for i, (x, y) in enumerate(zip(pa, pb, strict=False)) if x != y), None)
        if i is None:
            print(f"rank {rank}: the same {min(len(pa), len(pb))} packets (sim {len(pa)}, loopback {len(pb)})")
        else:
            print(f"rank {rank}: first difference at packet {i}: sim (t, qp, dst, psn) {pa[i]}, loopback {pb[i]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"] and len(argv) >= 3 and "--" in argv:
        cut = argv.index("--")
        return run(argv[1], argv[cut + 1 :])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["compare"])
    p.add_argument("sim_dir")
    p.add_argument("loopback_dir")
    p.add_argument("--port-rate", type=float, default=200e6, help="egress port rate, bit/s (loopback_8: 200 Mbps)")
    p.add_argument("--nic-rate", type=float, default=0.0, help="senders' NIC rate, bit/s (default: the port rate)")
    p.add_argument("--overhead", type=int, default=66,
                   help="wire bytes per packet beyond its UDP payload (wire_overhead_bytes: 66)")
    p.add_argument("--kmin", type=int, default=16384, help="ECN Kmin, bytes")
    p.add_argument("--buffer", type=int, default=0,
                   help="tail-drop buffer of the replay's ports, bytes (loopback_8: 524288; 0: unbounded, no drops)")
    args = p.parse_args(argv)
    for d in (args.sim_dir, args.loopback_dir):
        if not glob.glob(f"{d}/stamps.*.txt"):
            print(f"error: {d}: no stamps.*.txt (make it with `stamp_trace.py run {d} -- run ...`)", file=sys.stderr)
            return 2
    return compare(args.sim_dir, args.loopback_dir, args)


if __name__ == "__main__":
    sys.exit(main())
