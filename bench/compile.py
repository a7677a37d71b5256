"""Benchmark: compile a generated 64-rank data-parallel trace (>= 1,000,000 nodes) into a schedule.

Prints nodes/s, flows/s (wall and process CPU time; on a loaded machine the CPU figure is the
comparable one), peak memory (``ru_maxrss``) and the schedule file size (plus save/load times). The trace is
built in memory from ``emulator.trace.generators.data_parallel`` (generation is not timed); the timed
part is ``compile_trace`` (topological order, lowering, matching, assembly), then ``save_schedule`` and
``load_schedule``.

Default shape: 64 ranks × 39 iterations of 200 layers (4 MiB of gradients each) with 200 MiB buckets
→ 405 nodes per iteration per rank (200 fwd, 200 bwd, 4 all-reduces, 1 optimizer), 15,795 nodes per
rank, 1,010,880 nodes in total, 156 ring all-reduces per rank (8,064 flows each on 64 ranks).

    python bench/compile.py [--ranks 64] [--iterations 39] [--layers 200] [--algo ring] [--chunks 1] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from emulator.schedule.compiler import CompileOptions, compile_trace
from emulator.schedule.io import load_schedule, save_schedule
from emulator.trace.generators.data_parallel import DataParallelOptions, data_parallel_trace
from emulator.trace.model import CollectiveType, RankGraph, Trace


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def build_trace(ranks: int, iterations: int, layers: int, layer_mib: int, bucket_mib: int) -> Trace:
    gen = data_parallel_trace(
        DataParallelOptions(
            ranks=ranks,
            layers=layers,
            params_per_layer_bytes=(layer_mib << 20,),
            bucket_bytes=bucket_mib << 20,
            iterations=iterations,
        )
    )
    return Trace(
        ranks={r: RankGraph(r, list(gen.nodes(r))) for r in range(gen.world_size)},
        groups=dict(gen.groups),
        source="generated:data-parallel",
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--iterations", type=int, default=39)
    p.add_argument("--layers", type=int, default=200)
    p.add_argument("--layer-mib", type=int, default=4)
    p.add_argument("--bucket-mib", type=int, default=200)
    p.add_argument("--algo", default="ring")
    p.add_argument("--chunks", type=int, default=1)
    p.add_argument("--runs", type=int, default=3, help="compile this many times (fresh graph objects); best and median")
    args = p.parse_args(argv)

    t0 = time.perf_counter()
    trace = build_trace(args.ranks, args.iterations, args.layers, args.layer_mib, args.bucket_mib)
    nodes = sum(len(g.nodes) for g in trace.ranks.values())
    t_gen = time.perf_counter() - t0
    rss_trace = _rss_mib()

    options = CompileOptions(algorithms={CollectiveType.ALL_REDUCE: args.algo}, chunks=args.chunks)
    times: list[float] = []
    cpu_times: list[float] = []  # process CPU time: comparable across runs on a loaded machine
    for _ in range(max(args.runs, 1)):
        # fresh RankGraph wrappers: no per-graph index cached by an earlier run
        fresh = Trace(ranks={r: RankGraph(r, g.nodes) for r, g in trace.ranks.items()}, groups=trace.groups)
        schedule = None  # let the previous schedule go before compiling again
        t0, c0 = time.perf_counter(), time.process_time()
        schedule = compile_trace(fresh, options)
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
        del fresh
    rss_compile = _rss_mib()
    t_compile = min(times)
    t_median = sorted(times)[len(times) // 2]

    n_ops, n_flows, n_colls, n_deps = schedule.n_ops, schedule.n_flows, schedule.n_colls, schedule.dep_idx.shape[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.sched"
        t0 = time.perf_counter()
        digest = save_schedule(schedule, path)
        t_save = time.perf_counter() - t0
        size = os.path.getsize(path)
        del schedule  # the load below should not hold two schedules (process peak = compile peak)
        t0 = time.perf_counter()
        loaded = load_schedule(path)
        t_load = time.perf_counter() - t0
        assert loaded.n_flows == n_flows
        del loaded
    rss_end = _rss_mib()

    print(f"trace: {args.ranks} ranks, {nodes:,} nodes ({t_gen:.1f} s to generate in memory, RSS {rss_trace:.0f} MiB)")
    print(
        f"schedule: {n_ops:,} ops, {n_flows:,} flows, {n_colls:,} collectives, {n_deps:,} deps, hash {digest[:16]}"
    )
    print(
        f"compile: best {t_compile:.2f} s (median {t_median:.2f} s of {len(times)})  →  "
        f"{nodes / t_compile:,.0f} nodes/s, {n_flows / t_compile:,.0f} flows/s (best)"
    )
    print(f"compile CPU time: best {min(cpu_times):.2f} s  →  {nodes / min(cpu_times):,.0f} nodes/s of CPU")
    print(
        f"peak RSS: {rss_compile:.0f} MiB after compiling (trace alone {rss_trace:.0f} MiB, "
        f"+{rss_compile - rss_trace:.0f} MiB compiling); {rss_end:.0f} MiB after save + load"
    )
    print(f"schedule file: {size / 2**20:.1f} MiB ({size / max(n_flows, 1):.1f} B/flow); save {t_save:.2f} s, load {t_load:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
