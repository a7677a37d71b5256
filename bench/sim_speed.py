"""Speed of the virtual-time driver: simulated packets per wall second; 64-rank All-to-All wall time.

``emulator.drivers.sim.run_sim`` (deterministic, seed 1) on a single switch with ``--rate`` ports (1 MiB
buffer, ECN on, 1 µs links), endpoints with DCQCN (``connectx`` preset), path MTU 4096. Workloads from the
``collective`` generator, compiled with ``compile_trace`` (not timed):

* **a2a-64**: 64-rank direct All-to-All, ``--size`` per rank (nccl-tests S: each rank sends S/64 to each
  peer; 1 MiB → 16 KiB per pair);
* **a2a-64-pair** (unless ``--quick``): 64-rank All-to-All with ``--size`` to *each* peer (S = 64 × size);
* **ar-8**: 8-rank ring All-Reduce of 16 MiB (the packet-rate figure on long flows).

Reported per workload: wall seconds of ``run_sim`` only, simulated time, packets (datagrams put on NIC
links), hops (departures from any port), events, packets and hops per wall second, packets per CPU
second of the process (steadier than wall time on a shared machine), and the ratio simulated time ÷ wall time.
A workload whose run takes less than ``--min-wall`` seconds (5) is run again, up to 7 runs in all, and the
run of median packets per wall second is reported with the range (a 1 s run is noise on a VM). There is no simulator among ``../shared/peers``; the in-run reference is the
pure-Python event-loop floor: a ``heapq`` push+pop of one event per hop (the least any Python
discrete-event simulator of this fabric must do), timed on this machine in the same run.
``--profile`` prints the top functions (cProfile) of a 64-rank All-to-All with ``--size``/4 to each peer. ``--record`` appends to
bench/RESULTS.md.

**Fluid rows** (unless ``--no-fluid``): every workload also runs on the fluid fabric
(``emulator.drivers.fluid.run_fluid``, same schedule, fabric and seed) in the same run: wall time, the
packet ÷ fluid wall ratio, simulated time of both (their ratio is the CCT agreement of the one-collective
workload) and simulated payload bytes per wall second.

**ns-3 rows** when the ns-3 venv of ``../shared/peers`` exists (``$NS3_PYTHON``, else
``~/.venv-ns3/bin/python``; ``WITH_NS3=1 bash setup.sh`` makes it): ``ns3_star.py 8 50000 ring`` and
``ns3_star.py 64 5000 ring`` (25 Gbps star, 4096-byte UDP datagrams) run in the same run; their packets
per wall second are set against the packet sim's on the like-for-like ring and 64-host workloads, and
their payload bytes per wall second against the fluid fabric's. Without the venv the rows say so.

``--digest`` prints, instead, the results digests (records, fabric counters, queue samples) and event
counts of seven small runs (an incast with ECN and drops, All-to-All, ring, loss, PFC on a leaf–spine,
PFC without RED, a link down): a speed-up that keeps the model keeps every line.

``--train 10us`` runs every workload a second time with packet trains (``SimConfig.train_ns``) and prints
its speed and simulated time against the per-packet run.

    python bench/sim_speed.py [--quick] [--size 1MiB] [--record] [--profile] [--no-fluid] [--digest] [--train 10us] [--min-wall 5]
"""

from __future__ import annotations

import argparse
import cProfile
import heapq
import io
import os
import pstats
import re
import subprocess
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


MAX_REPEATS = 7


def run_one(schedule, rate_bps: float, timeout_s: float, profile: bool = False, train_ns: int = 0) -> dict:
    from emulator.drivers.sim import SimConfig, run_sim
    from emulator.endpoint.config import EndpointConfig
    from emulator.pacing.red import RedParams

    scfg = SimConfig(port_rate_bps=rate_bps, buffer_bytes=1 << 20, latency_ns=1000, red=RedParams(),
                     **({"train_ns": train_ns} if train_ns else {}))
    ecfg = EndpointConfig(mtu_bytes=4096, cc="connectx", line_rate_bps=rate_bps)
    prof = cProfile.Profile() if profile else None
    c0 = time.process_time()
    t0 = time.perf_counter()
    if prof:
        res = prof.runcall(run_sim, schedule, scfg, ecfg, seed=1, wall_timeout_s=timeout_s)
    else:
        res = run_sim(schedule, scfg, ecfg, seed=1, wall_timeout_s=timeout_s)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    st = res.health
    out = {"complete": res.complete, "stop": st["stop_reason"], "wall_s": wall, "sim_wall_s": st["wall_s"],
           "sim_ns": st["end_ns"], "packets": st["packets"], "hops": st["hops"], "events": st["events"],
           "pkts_per_s": st["packets"] / wall, "hops_per_s": st["hops"] / wall, "cpu_s": cpu,
           "pkts_per_cpu_s": st["packets"] / cpu if cpu > 0 else 0.0, "flows": schedule.n_flows,
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


def run_repeated(schedule, rate_bps: float, timeout_s: float, min_wall_s: float) -> dict:
    """The run of median packets/s among repeats of one workload, repeated while the runs so far took less
    than ``min_wall_s`` in all (at most ``MAX_REPEATS``); ``repeats`` and the spread are in the row."""
    runs = [run_one(schedule, rate_bps, timeout_s)]
    while sum(r["wall_s"] for r in runs) < min_wall_s and len(runs) < MAX_REPEATS:
        runs.append(run_one(schedule, rate_bps, timeout_s))
    ranked = sorted(runs, key=lambda r: r["pkts_per_s"])
    out = dict(ranked[(len(ranked) - 1) // 2])
    out["repeats"] = len(runs)
    out["pkts_per_s_range"] = (ranked[0]["pkts_per_s"], ranked[-1]["pkts_per_s"])
    return out


def run_fluid_one(schedule, rate_bps: float) -> dict:
    """The same workload on the fluid fabric: wall time, simulated time, payload bytes per wall second."""
    from emulator.drivers.fluid import run_fluid
    from emulator.drivers.sim import SimConfig
    from emulator.endpoint.config import EndpointConfig
    from emulator.pacing.red import RedParams

    scfg = SimConfig(port_rate_bps=rate_bps, buffer_bytes=1 << 20, latency_ns=1000, red=RedParams())
    ecfg = EndpointConfig(mtu_bytes=4096, cc="connectx", line_rate_bps=rate_bps)
    t0 = time.perf_counter()
    res = run_fluid(schedule, scfg, ecfg, seed=1)
    wall = time.perf_counter() - t0
    size = int(schedule.flow_size_bytes.sum())
    return {"complete": res.complete, "wall_s": wall, "sim_ns": res.health["end_ns"], "bytes": size,
            "bytes_per_s": size / wall, "steps": res.health["steps"]}


#: the ns-3 star workloads set against ours: (hosts, packets per sender, our like-for-like workload)
NS3_CASES = ((8, 50_000, "ar-8"), (64, 5_000, "a2a-64"))


def ns3_python() -> Path:
    return Path(os.environ.get("NS3_PYTHON") or Path.home() / ".venv-ns3" / "bin" / "python")


def run_ns3(hosts: int, per_sender: int, timeout_s: float = 600.0) -> dict | None:
    """``ns3_star.py HOSTS PER_SENDER ring`` with the ns-3 venv; None when the venv is missing or its ns-3
    does not run (said on one line)."""
    py = ns3_python()
    if not py.exists():
        return None
    proc = subprocess.run([str(py), str(peers.PEERS_DIR / "ns3_star.py"), str(hosts), str(per_sender), "ring"],
                          capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode:  # a venv without a working ns3 module: no ns-3 rows, the rest of the bench stands
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"ns-3: {py} failed ({last}): no ns-3 rows", flush=True)
        return None
    out = proc.stdout
    m = re.search(r"(\d+) packets delivered, (\d+) hops in ([\d.]+) s wall", out)
    if not m:
        raise RuntimeError(f"ns3_star.py printed no result line: {out[-300:]!r}")
    got, _hops, wall = int(m.group(1)), int(m.group(2)), float(m.group(3))
    return {"packets": got, "wall_s": wall, "pkts_per_s": got / wall, "bytes_per_s": got * 4096 / wall}


#: the digest cases: (name, collective, ranks, bytes, SimConfig keywords, EndpointConfig keywords, seed)
DIGEST_CASES = (
    ("ecn-gather", "gather", 8, 8 << 20, {}, {"cc": "connectx"}, 1),
    ("a2a", "all_to_all", 16, 4 << 20, {}, {"cc": "connectx"}, 1),
    ("ring", "all_reduce", 8, 4 << 20, {}, {"cc": "connectx"}, 3),
    ("loss", "all_to_all", 8, 2 << 20, {"loss": 0.01}, {"cc": "paper", "retransmit_timeout_ns": 100_000}, 7),
    ("pfc-leaf-spine", "gather", 16, 4 << 20,
     {"pfc": (100_000, 50_000), "buffer_bytes": 300_000, "leaf_spine": True}, {"cc": "paper"}, 2),
    ("pfc-no-red", "gather", 8, 4 << 20, {"pfc": (100_000, 50_000), "red": None}, {"cc": "none"}, 4),
    ("link-down", "all_to_all", 8, 2 << 20, {"link_down": (("sw0->host2", 100_000, 400_000),)},
     {"cc": "connectx", "retransmit_timeout_ns": 200_000}, 5),
)


def digests() -> list[tuple[str, str, str, str, dict]]:
    """(case, records digest, fabric digest, samples digest, health) of every :data:`DIGEST_CASES` run: a
    change that keeps the model keeps all three digests."""
    from emulator.drivers.sim import SimConfig, run_sim
    from emulator.endpoint.config import EndpointConfig
    from emulator.fabric.port import PfcParams
    from emulator.fabric.topology import TopologyConfig

    out = []
    for name, op, n, size, skw, ekw, seed in DIGEST_CASES:
        skw = dict(skw)
        if "pfc" in skw:
            skw["pfc"] = PfcParams(*skw["pfc"])
        if skw.pop("leaf_spine", False):
            skw["topology"] = TopologyConfig(kind="leaf_spine", leaves=2, spines=2)
        res = run_sim(schedule_for(op, n, size), SimConfig(**skw), EndpointConfig(mtu_bytes=4096, **ekw), seed=seed)
        health = {k: res.health[k] for k in ("stop_reason", "end_ns", "events", "packets", "hops")}
        out.append((name, *result_digests(res), health))
    return out


def result_digests(res) -> tuple[str, str, str]:
    """Digests of a driver result's records, fabric counters and queue samples."""
    import hashlib

    h_rec = hashlib.sha256()
    for r in sorted(res.records):
        rec = res.records[r]
        for k, v in sorted(rec.to_arrays().items()):
            h_rec.update(k.encode() + v.tobytes())
        h_rec.update(repr(sorted(rec.counters.items())).encode())
    fab = res.fabric
    h_fab = hashlib.sha256(repr([p.to_dict() for p in fab.ports]).encode()).hexdigest()[:16]
    q = fab.queue_samples
    h_q = hashlib.sha256(q.t_ns.tobytes() + q.queue_bytes.tobytes()).hexdigest()[:16]
    return h_rec.hexdigest()[:16], h_fab, h_q


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
    from emulator.units import parse_duration_ns, parse_rate_bps, parse_size_bytes

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke mode: 16-rank A2A and 8-rank 1 MiB AR only")
    ap.add_argument("--size", default="1MiB")
    ap.add_argument("--rate", default="25Gbps")
    ap.add_argument("--timeout", type=float, default=300.0, help="wall seconds per sim run")
    ap.add_argument("--min-wall", type=float, default=5.0,
                    help="repeat a workload whose run took less than this many wall seconds (in all, at most "
                         f"{MAX_REPEATS} runs) and report the run of median packets/s: one short run is noise")
    ap.add_argument("--profile", action="store_true", help="cProfile the 64-rank All-to-All (extra run)")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--no-fluid", action="store_true", help="no fluid-fabric rows")
    ap.add_argument("--train", default="0", help="also run every workload with packet trains of this span "
                    "(SimConfig.train_ns, e.g. 10us) in the same run")
    ap.add_argument("--digest", action="store_true",
                    help="only print the results digests of the seven digest cases (ECN, loss, PFC, link down)")
    args = ap.parse_args(argv)
    if args.digest:
        for row in digests():
            print(*row[:4], " ".join(f"{k}={v}" for k, v in row[4].items()), flush=True)
        return 0
    size = parse_size_bytes(args.size)
    rate = parse_rate_bps(args.rate)
    train_ns = parse_duration_ns(args.train) if args.train != "0" else 0
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
        r = run_repeated(sched, rate, args.timeout, args.min_wall)
        rows.append((name, op, n, s_bytes, r))
        print(f"{name}: {r['flows']} flows, {r['bytes'] / 2**20:.0f} MiB, {r['packets']:,} packets, {r['hops']:,} hops, "
              f"{r['events']:,} events in {r['wall_s']:.2f} s wall → {r['pkts_per_s'] / 1e3:.1f} k packets/s, "
              f"{r['hops_per_s'] / 1e3:.1f} k hops/s, {r['pkts_per_cpu_s'] / 1e3:.1f} k packets per CPU second; simulated {r['sim_ns'] / 1e6:.3f} ms "
              f"(sim/wall {r['sim_ns'] / 1e9 / r['wall_s']:.2e}); {r['stop']}{_spread(r)}", flush=True)
        if train_ns:
            tr = r["train"] = run_one(sched, rate, args.timeout, train_ns=train_ns)
            print(f"  trains of {args.train}: {tr['packets']:,} packets in {tr['wall_s']:.2f} s wall → "
                  f"{tr['pkts_per_s'] / 1e3:.1f} k packets/s ({tr['pkts_per_s'] / r['pkts_per_s']:.2f}× per packet), "
                  f"{tr['pkts_per_cpu_s'] / 1e3:.1f} k packets per CPU second; simulated {tr['sim_ns'] / 1e6:.3f} ms "
                  f"({tr['sim_ns'] / r['sim_ns'] - 1:+.2%} vs per packet); {tr['stop']}", flush=True)
        if not args.no_fluid:
            fl = run_fluid_one(sched, rate)
            r["fluid"] = fl
            print(f"  fluid: {fl['wall_s']:.3f} s wall ({r['wall_s'] / fl['wall_s']:.0f}× faster), simulated "
                  f"{fl['sim_ns'] / 1e6:.3f} ms ({fl['sim_ns'] / r['sim_ns'] - 1:+.1%} vs packet), "
                  f"{fl['bytes_per_s'] / 1e9:.2f} GB simulated payload per wall second", flush=True)
    ns3 = {}
    for hosts, per, like in NS3_CASES if not args.quick else ():
        got = run_ns3(hosts, per)
        if got is None:
            if not ns3_python().exists():
                print(f"ns-3: no venv at {ns3_python()} (WITH_NS3=1 bash ../shared/peers/setup.sh): no ns-3 rows",
                      flush=True)
            break
        ns3[like] = got
        print(f"ns-3 ring n={hosts}: {got['packets']:,} packets in {got['wall_s']:.2f} s → "
              f"{got['pkts_per_s'] / 1e3:.1f} k packets/s", flush=True)
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
        text += "\n" + "\n".join(_fluid_ns3_lines(rows, ns3, args.no_fluid)) + "\n"
        if prof_text:
            text += f"\nProfile (cProfile, own time):\n\n```\n{prof_text}\n```\n"
        with open(HERE / "RESULTS.md", "a") as fh:
            fh.write(text)
        print("appended to bench/RESULTS.md")
    return 0 if all(r["complete"] for *_x, r in rows) else 1


def _spread(r: dict) -> str:
    if r.get("repeats", 1) == 1:
        return ""
    lo, hi = r["pkts_per_s_range"]
    return f"; median of {r['repeats']} runs ({lo / 1e3:.1f}–{hi / 1e3:.1f} k packets/s)"


def _fluid_ns3_lines(rows: list, ns3: dict, no_fluid: bool) -> list[str]:
    """The fluid and ns-3 tables of ``--record``."""
    out = []
    if not no_fluid:
        out += ["| workload | packet wall s | fluid wall s | packet ÷ fluid | simulated fluid ÷ packet | "
                "fluid GB payload / wall s |", "|---" * 6 + "|"]
        for name, _op, _n, _s, r in rows:
            fl = r["fluid"]
            out.append(f"| {name} | {r['wall_s']:.2f} | {fl['wall_s']:.3f} | {r['wall_s'] / fl['wall_s']:.0f}× | "
                       f"{fl['sim_ns'] / r['sim_ns']:.3f} | {fl['bytes_per_s'] / 1e9:.2f} |")
    if not ns3:
        out.append(f"\nns-3: no venv at {ns3_python()} on this machine, no ns-3 rows.")
        return out
    out += ["", "| ns-3 run | k packets/s | ours (like-for-like) | ours ÷ ns-3 packets/s | fluid ÷ ns-3 payload B/s |",
            "|---" * 5 + "|"]
    by_name = {name.split(" ")[0]: r for name, _op, _n, _s, r in rows}
    for hosts, per, like in NS3_CASES:
        got, r = ns3.get(like), by_name.get(like)
        if got is None or r is None:
            continue
        fl = r.get("fluid")
        fluid_cell = f"{fl['bytes_per_s'] / got['bytes_per_s']:.0f}×" if fl else "-"
        out.append(f"| ring n={hosts}, {per:,} per sender | {got['pkts_per_s'] / 1e3:.1f} | {like} "
                   f"{r['pkts_per_s'] / 1e3:.1f} | {r['pkts_per_s'] / got['pkts_per_s']:.2f} | {fluid_cell} |")
    return out


if __name__ == "__main__":
    sys.exit(main())
