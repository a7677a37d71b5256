"""Trace decode benchmark: a 1,000,000-node rank file through the reader vs a bare protobuf loop.

Usage: ``python bench/trace_io.py [--nodes 1000000] [--runs 3] [--dir DIR] [--keep]``

1. Generates one rank file with ``nodes`` nodes (the ``collective`` generator: ALL_REDUCE, ALL_TO_ALL,
   ALL_GATHER, REDUCE_SCATTER with 5 µs COMP gaps, chained by data deps; streamed to the writer).
2. In a fresh subprocess per measurement (so ``ru_maxrss`` is that measurement's peak), best of
   ``runs``: ``read_trace(file)``, ``read_rank_file(file)`` when the reader has it, and a bare loop —
   varint32 framing + ``et_def_pb2.Node().ParseFromString`` per record, nothing kept.
   For reference only (not the target's denominator), ``bare_fields`` also keeps a plain tuple of
   (id, name, type, data_deps, duration, #attrs) per node: the floor cost of materialising Python objects.
3. Prints nodes/s, peak RSS (MiB) and the reader/bare throughput ratio. Targets (issue 2): ratio ≥ 0.7,
   peak < 600 MiB.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r'''
import json, resource, sys, time
mode, path = sys.argv[1], sys.argv[2]
import emulator.trace.et_def_pb2 as pb
if mode != "bare":
    import emulator.trace.io as tio
base_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
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
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"mode": mode, "nodes": n, "seconds": dt, "peak_mib": peak_kib / 1024, "base_mib": base_kib / 1024}))
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


def measure(mode: str, path: Path, runs: int) -> dict | None:
    best: dict | None = None
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(path)], capture_output=True, text=True)
        if proc.returncode != 0:
            last = proc.stderr.strip().splitlines()[-1:] or ["?"]
            print(f"  {mode}: failed: {last[0]}", file=sys.stderr)
            return None
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        if best is None or r["seconds"] < best["seconds"]:
            best = r | {"peak_mib": max(r["peak_mib"], best["peak_mib"] if best else 0)}
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3, help="subprocess runs per mode (best time, worst peak)")
    ap.add_argument("--dir", default=None, help="where to write the trace (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    args = ap.parse_args()

    import emulator.trace.io as tio

    tmp = tempfile.TemporaryDirectory(dir=args.dir)
    try:
        t0 = time.perf_counter()
        path = generate(Path(tmp.name) / "bench", args.nodes)
        gen_s = time.perf_counter() - t0
        size = path.stat().st_size
        print(f"generated {args.nodes} nodes, {size / 2**20:.1f} MiB in {gen_s:.1f} s "
              f"({args.nodes / gen_s:,.0f} nodes/s written): {path}")
        modes = ["bare", "bare_fields", "read_trace"] + (["read_rank_file"] if hasattr(tio, "read_rank_file") else [])
        results = {m: measure(m, path, args.runs) for m in modes}
        bare = results["bare"]
        print(f"{'mode':<16}{'nodes':>10}{'seconds':>10}{'nodes/s':>14}{'peak MiB':>10}{'vs bare':>9}")
        for m, r in results.items():
            if r is None:
                continue
            rate = r["nodes"] / r["seconds"]
            ratio = rate / (bare["nodes"] / bare["seconds"]) if bare else float("nan")
            print(f"{m:<16}{r['nodes']:>10}{r['seconds']:>10.2f}{rate:>14,.0f}{r['peak_mib']:>10.0f}{ratio:>9.2f}")
        rt = results.get("read_trace")
        if rt and bare:
            ratio = (rt["nodes"] / rt["seconds"]) / (bare["nodes"] / bare["seconds"])
            ok = ratio >= 0.7 and rt["peak_mib"] < 600
            print(f"target ratio >= 0.70 and peak < 600 MiB: {'met' if ok else 'MISSED'} "
                  f"(ratio {ratio:.2f}, peak {rt['peak_mib']:.0f} MiB)")
        if args.keep:
            keep = Path(args.dir or ".") / path.name
            path.replace(keep)
            print(f"kept {keep}")
    finally:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
