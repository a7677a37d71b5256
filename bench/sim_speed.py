"""Speed of the virtual-time driver: simulated packets per wall second; 64-rank All-to-All wall time.

``emulator.drivers.sim.run_sim`` (deterministic, seed 1) on a single switch with ``--rate`` ports (1 MiB
buffer, ECN on, 1 µs links), endpoints with DCQCN (``connectx`` preset), path MTU 4096. Workloads from the
``collective`` generator, compiled with ``compile_trace`` (not timed):

* **a2a-64**: 64-rank direct All-to-All, ``--size`` per rank (nccl-tests S: each rank sends S/64 to each
  peer; 1 MiB → 16 KiB per pair);
* **a2a-64-pair** (unless ``--quick``): 64-rank All-to-All with ``--size`` to *each* peer (S = 64 × size);
* **ar-8**: 8-rank ring All-Reduce of 16 MiB (the packet-rate figure on long flows).

Reported per workload: wall seconds of ``run_sim`` only, simulated time, packets (datagrams put on NIC
links), hops (departures from any port), events, packets and hops per wall second, and the ratio
simulated time ÷ wall time. There is no simulator among ``../shared/peers``; the in-run reference is the
pure-Python event-loop floor: a ``heapq`` push+pop of one event per hop (the least any Python
discrete-event simulator of this fabric must do), timed on this machine in the same run.
``--profile`` prints the top functions (cProfile) of a 64-rank All-to-All with ``--size``/4 to each peer. ``--record`` appends to
bench/RESULTS.md.

    python bench/sim_speed.py [--quick] [--size 1MiB] [--record] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import heapq
import io
import pstats
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import peers  # noqa: E402


def schedule_for(op: str, ranks: int, size_bytes: int):
    from emulator.schedule.compiler import compile_trace
    from emulator.trace.generators.collective import CollectiveOptions, collective_trace
    from emulator.trace.model import CollectiveType, RankGraph, Trace

    gen = collective_trace(CollectiveOptions(ranks=ranks, collectives=(CollectiveType[op.upper()],),
                                             size_bytes=size_bytes, iterations=1))
    return compile_trace(Trace(ranks={r: RankGraph(r, list(gen.nodes(r))) for r in range(ranks)},
                               groups=dict(gen.groups)))


def run_one(schedule, rate_bps: float, timeout_s: float, profile: bool = False) -> dict:
    from emulator.drivers.sim import SimConfig, run_sim
    from emulator.endpoint.config import EndpointConfig
    from emulator.pacing.red import RedParams

    scfg = SimConfig(port_rate_bps=rate_bps, buffer_bytes=1 << 20, latency_ns=1000, red=RedParams())
    ecfg = EndpointConfig(mtu_bytes=4096, cc="connectx", line_rate_bps=rate_bps)
    prof = cProfile.Profile() if profile else None
    t0 = time.perf_counter()
    if prof:
        res = prof.runcall(run_sim, schedule, scfg, ecfg, seed=1, wall_timeout_s=timeout_s)
    else:
        res = run_sim(schedule, scfg, ecfg, seed=1, wall_timeout_s=timeout_s)
    wall = time.perf_counter() - t0
    st = res.health
    out = {"complete": res.complete, "stop": st["stop_reason"], "wall_s": wall, "sim_wall_s": st["wall_s"],
           "sim_ns": st["end_ns"], "packets": st["packets"], "hops": st["hops"], "events": st["events"],
           "pkts_per_s": st["packets"] / wall, "hops_per_s": st["hops"] / wall, "flows": schedule.n_flows,
           "bytes": int(schedule.flow_size_bytes.sum())}
    if prof:
        s = io.StringIO()
        ps = pstats.Stats(prof, stream=s).sort_stats("tottime")
        total = ps.total_tt
        rows = []
        for func, (_cc, nc, tt, ct, _c) in sorted(ps.stats.items(), key=lambda kv: -kv[1][2])[:14]:
            rows.append(f"  {100 * tt / total:5.1f}% own {tt:6.2f}s cum {ct:6.2f}s calls {nc:>9}  "
                        f"{Path(func[0]).name}:{func[1]}({func[2]})")
        out["profile"] = f"total {total:.1f} s under cProfile\n" + "\n".join(rows)
    return out


def heap_floor(n_events: int = 1_000_000) -> float:
    """Events per second of a bare heapq push+pop loop (tuple events like the sim's)."""
    h: list = []
    push, pop = heapq.heappush, heapq.heappop
    t0 = time.perf_counter()
    for i in range(64):
        push(h, (i * 100, i, 0, i, None))
    for i in range(n_events):
        e = pop(h)
        push(h, (e[0] + 3300, i, 0, e[3], None))
    return n_events / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    from emulator.units import parse_rate_bps, parse_size_bytes

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke mode: 16-rank A2A and 8-rank 1 MiB AR only")
    ap.add_argument("--size", default="1MiB")
    ap.add_argument("--rate", default="25Gbps")
    ap.add_argument("--timeout", type=float, default=300.0, help="wall seconds per sim run")
    ap.add_argument("--profile", action="store_true", help="cProfile the 64-rank All-to-All (extra run)")
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args(argv)
    size = parse_size_bytes(args.size)
    rate = parse_rate_bps(args.rate)
    load0 = peers.load_note()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if args.quick:
        cases = [("a2a-16", "all_to_all", 16, size), ("ar-8 (1 MiB)", "all_reduce", 8, 1 << 20)]
    else:
        cases = [("a2a-64", "all_to_all", 64, size), ("a2a-64-pair", "all_to_all", 64, 64 * size),
                 ("ar-8 (16 MiB)", "all_reduce", 8, 16 << 20)]
    floor = heap_floor(300_000 if args.quick else 1_000_000)
    print(f"in-run floor: bare heapq push+pop {floor / 1e3:.0f} k events/s", flush=True)
    rows = []
    for name, op, n, s_bytes in cases:
        sched = schedule_for(op, n, s_bytes)
        r = run_one(sched, rate, args.timeout)
        rows.append((name, op, n, s_bytes, r))
        print(f"{name}: {r['flows']} flows, {r['bytes'] / 2**20:.0f} MiB, {r['packets']:,} packets, {r['hops']:,} hops, "
              f"{r['events']:,} events in {r['wall_s']:.2f} s wall → {r['pkts_per_s'] / 1e3:.1f} k packets/s, "
              f"{r['hops_per_s'] / 1e3:.1f} k hops/s; simulated {r['sim_ns'] / 1e6:.3f} ms "
              f"(sim/wall {r['sim_ns'] / 1e9 / r['wall_s']:.2e}); {r['stop']}", flush=True)
    prof_text = ""
    if args.profile:
        n = 16 if args.quick else 64
        pr = run_one(schedule_for("all_to_all", n, n * size // 4), rate, args.timeout, profile=True)
        prof_text = f"{n}-rank All-to-All, {args.size}/4 to each peer ({pr['packets']:,} packets): " + pr["profile"]
        print(prof_text)
    load1 = peers.load_note()
    print(f"{load0} -> {load1}")
    if args.record:
        cmd = "python bench/sim_speed.py " + " ".join(argv if argv is not None else sys.argv[1:])
        lines = ["| workload | flows | packets | hops | events | wall s | k packets/s | k hops/s | "
                 "events ÷ heapq floor | simulated | complete |", "|---" * 11 + "|"]
        for name, _op, _n, _s, r in rows:
            lines.append(f"| {name} | {r['flows']:,} | {r['packets']:,} | {r['hops']:,} | {r['events']:,} | "
                         f"{r['wall_s']:.2f} | {r['pkts_per_s'] / 1e3:.1f} | {r['hops_per_s'] / 1e3:.1f} | "
                         f"{r['events'] / r['wall_s'] / floor:.3f} | {r['sim_ns'] / 1e6:.3f} ms | {r['stop']} |")
        text = (f"\n## Sim speed ({started}) — issue 5\n\nCommand: `{cmd}`. run_sim, single switch, {args.rate} "
                f"ports, 1 MiB buffers, ECN, DCQCN connectx, MTU 4096, seed 1; wall = run_sim only (compile not "
                f"timed). Machine: {load0} at start, {load1} at end. No peer simulator in ../shared/peers; the "
                f"in-run reference is a bare heapq push+pop loop: {floor / 1e3:.0f} k events/s.\n\n"
                + "\n".join(lines) + "\n")
        if prof_text:
            text += f"\nProfile (cProfile, own time):\n\n```\n{prof_text}\n```\n"
        with open(HERE / "RESULTS.md", "a") as fh:
            fh.write(text)
        print("appended to bench/RESULTS.md")
    return 0 if all(r["complete"] for *_x, r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
