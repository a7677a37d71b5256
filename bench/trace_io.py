"""Trace decode benchmark: a 1,000,000-node rank file through the reader vs a bare protobuf loop.

Usage: ``python bench/trace_io.py [--nodes 1000000] [--runs 3] [--dir DIR] [--keep]``

1. Generates one rank file with ``nodes`` nodes (the ``collective`` generator: ALL_REDUCE, ALL_TO_ALL,
   ALL_GATHER, REDUCE_SCATTER with 5 µs COMP gaps, chained by data deps; streamed to the writer).
2. In a fresh subprocess per measurement (so ``ru_maxrss`` is that measurement's peak), ``runs``
   rounds, the modes interleaved within each round (so a load swing hits them alike):
   ``read_trace(file)``, ``read_rank_file(file)``, and a bare loop — varint32 framing +
   ``et_def_pb2.Node().ParseFromString`` per record, nothing kept. For reference only (not the
   target's denominator), ``bare_fields`` also keeps a plain tuple of (id, name, type, data_deps,
   duration, #attrs) per node: the floor cost of materialising Python objects.
3. Prints, per mode, the median CPU time (user + system of the child, from ``getrusage``; the machine
   may be shared, and CPU time swings far less with load than wall time), the median wall time, nodes/s
   by CPU time, the worst peak RSS (MiB) and the reader/bare ratio by CPU time (median of the per-round
   ratios, with their range) and by wall time. The load average is printed before and after.
   Targets (issue 2): ratio ≥ 0.7, peak < 600 MiB.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r'''
import gc, json, resource, sys, time
mode, path = sys.argv[1], sys.argv[2]
import emulator.trace.et_def_pb2 as pb
if mode != "bare":
    import emulator.trace.io as tio
base_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
gc.collect()
r0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
if mode in ("bare", "bare_fields"):
    Node, Meta = pb.Node, pb.GlobalMetadata
    keep = [] if mode == "bare_fields" else None
    with open(path, "rb") as f:
        buf = f.read()
    mv = memoryview(buf)
    pos, end, n = 0, len(buf), 0
    first = True
    while pos < end:
        b = buf[pos]; pos += 1
        if b < 0x80:
            size = b
        else:
            size, shift = b & 0x7F, 7
            while True:
                b = buf[pos]; pos += 1
                size |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
        if first:
            Meta().ParseFromString(mv[pos:pos + size]); first = False
        else:
            m = Node(); m.ParseFromString(mv[pos:pos + size]); n += 1
            if keep is not None:
                keep.append((m.id, m.name, m.type, tuple(m.data_deps), m.duration_micros, len(m.attr)))
        pos += size
elif mode == "read_trace":
    tr = tio.read_trace(path)
    n = sum(len(g.nodes) for g in tr.ranks.values())
else:
    g = tio.read_rank_file(path, 0)
    nodes = getattr(g, "nodes", g)
    n = len(nodes)
dt = time.perf_counter() - t0
r1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
print(json.dumps({"mode": mode, "nodes": n, "seconds": dt, "cpu": cpu, "peak_mib": r1.ru_maxrss / 1024,
                  "base_mib": base_kib / 1024, "minflt": r1.ru_minflt - r0.ru_minflt}))
'''


def generate(path_prefix: Path, nodes: int) -> Path:
    from emulator.trace import generators as gen
    from emulator.trace.generators.common import comp_node
    from emulator.trace.io import write_rank
    from emulator.trace.model import CollectiveType as CT

    colls = (CT.ALL_REDUCE, CT.ALL_TO_ALL, CT.ALL_GATHER, CT.REDUCE_SCATTER)
    per_iter = 2 * len(colls)
    iterations = -(-(nodes + 1) // per_iter)
    t = gen.collective_trace(gen.CollectiveOptions(ranks=1, collectives=colls, size_bytes=1 << 20,
                                                   iterations=iterations, gap_us=5))
    stream = itertools.islice(t.nodes(0), nodes)
    produced = min(nodes, per_iter * iterations - 1)
    if produced < nodes:  # top up with trailing COMP nodes
        stream = itertools.chain(stream, (comp_node(10**9 + i, f"tail{i}", 1) for i in range(nodes - produced)))
    path = Path(f"{path_prefix}.0.et")
    written = write_rank(path, stream, metadata=t.metadata)
    assert written == nodes, (written, nodes)
    return path


def run_once(mode: str, path: Path) -> dict | None:
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines()[-1:] or ["?"]
        print(f"  {mode}: failed: {last[0]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3, help="rounds of fresh subprocesses (median times, worst peak)")
    ap.add_argument("--modes", default="bare,bare_fields,read_trace,read_rank_file",
                    help="comma-separated modes (bare is always included: it is the denominator)")
    ap.add_argument("--dir", default=None, help="where to write the trace (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    args = ap.parse_args()

    modes = ["bare"] + [m for m in args.modes.split(",") if m and m != "bare"]
    tmp = tempfile.TemporaryDirectory(dir=args.dir)
    try:
        t0 = time.perf_counter()
        path = generate(Path(tmp.name) / "bench", args.nodes)
        gen_s = time.perf_counter() - t0
        size = path.stat().st_size
        print(f"generated {args.nodes} nodes, {size / 2**20:.1f} MiB in {gen_s:.1f} s "
              f"({args.nodes / gen_s:,.0f} nodes/s written): {path}")
        print(f"load average (1/5/15 min) before: {load()}")
        rounds: list[dict[str, dict]] = []
        for _ in range(args.runs):
            got = {m: run_once(m, path) for m in modes}
            rounds.append({m: r for m, r in got.items() if r is not None})
        print(f"load average (1/5/15 min) after:  {load()}")
        print(f"{'mode':<16}{'nodes':>10}{'cpu s':>8}{'wall s':>8}{'nodes/cpu-s':>13}{'peak MiB':>10}"
              f"{'cpu ratio':>11}{'(range)':>13}{'wall ratio':>11}")
        summary: dict[str, dict] = {}
        for m in modes:
            rs = [r[m] for r in rounds if m in r]
            if not rs:
                continue
            cpu = statistics.median(r["cpu"] for r in rs)
            wall = statistics.median(r["seconds"] for r in rs)
            pairs = [r["bare"]["cpu"] / r[m]["cpu"] for r in rounds if m in r and "bare" in r]
            bare_wall = statistics.median(r["bare"]["seconds"] for r in rounds if "bare" in r)
            s = {"nodes": rs[0]["nodes"], "cpu": cpu, "wall": wall, "peak": max(r["peak_mib"] for r in rs),
                 "ratio": statistics.median(pairs) if pairs else float("nan"),
                 "lo": min(pairs, default=float("nan")), "hi": max(pairs, default=float("nan")),
                 "wall_ratio": bare_wall / wall}
            summary[m] = s
            rng = f"({s['lo']:.2f}-{s['hi']:.2f})"
            print(f"{m:<16}{s['nodes']:>10}{cpu:>8.2f}{wall:>8.2f}{s['nodes'] / cpu:>13,.0f}{s['peak']:>10.0f}"
                  f"{s['ratio']:>11.2f}{rng:>13}"
                  f"{s['wall_ratio']:>11.2f}")
        rt = summary.get("read_trace")
        if rt:
            ok = rt["ratio"] >= 0.7 and rt["peak"] < 600
            print(f"target cpu ratio >= 0.70 and peak < 600 MiB: {'met' if ok else 'MISSED'} "
                  f"(read_trace cpu ratio {rt['ratio']:.2f}, wall ratio {rt['wall_ratio']:.2f}, "
                  f"peak {rt['peak']:.0f} MiB)")
        if args.keep:
            keep = Path(args.dir or ".") / path.name
            path.replace(keep)
            print(f"kept {keep}")
    finally:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
