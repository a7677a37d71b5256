"""The fluid fabric against the packet sim: accuracy on the shipped profiles, speed and memory at scale.

* **accuracy** (default): every shipped ``profiles/sim_*.yaml`` and the three study profiles run with
  ``emulator run --fabric sim`` and ``--fabric fluid`` (same seed, same schedule). Per collective type:
  CCT p50 and p99 of fluid ÷ packet (from collectives.csv, measured instances), the ECN-marked fraction
  (marked packets on switch ports ÷ data packets) fluid ÷ packet, and the wall-time ratio. Verdicts
  against issue 13's targets: p50 within 5 %, p99 within 10 %, marked fraction within 2×.
* ``--speed``: the 64-rank All-to-All of 1 MiB to each peer (single switch, 25 Gbps, ConnectX DCQCN, as
  bench/sim_speed.py ``a2a-64-pair``): wall time of both fabrics, their ratio and the simulated time.
* ``--scale``: 1,024-rank All-to-All (16 MiB per rank) and 1,024-rank ring All-Reduce (256 MiB) on a
  leaf–spine of 32 leaves × 32 hosts and 8 spines at 400 Gbps (ECMP on the UDP source port); each in its
  own process, so the peak resident memory (``ru_maxrss``) is that run's; compile time is reported apart.

* ``--resnet``: a ResNet-50-like data-parallel step on 64 ranks (``emulator generate data-parallel``: 50
  layers × 2 MiB of gradients ≈ ResNet-50's 25.6 M fp32 parameters, 25 MiB buckets) through ``emulator run
  --fabric fluid`` with the shipped trace defaults, one iteration: the driver's wall time (``wall_s`` of
  results.json) and the whole command's, and their peak memory.
* 4,096 ranks (with ``--scale``): not run; the fluid driver's memory estimate for the flows of a 4,096-rank
  All-to-All (N(N−1) flows) and ring All-Reduce (2N(N−1)) against this machine's memory.

* ``--digest``: the results digests (records, fabric counters, queue samples) and slice/event counts of
  bench/sim_speed.py's seven digest cases run on the fluid fabric (the loss case without its per-packet
  loss, which the fluid refuses): a change that keeps the fluid model keeps every digest.
* ``--time-limit-ms X`` with ``--one``: stop the run at X ms simulated (slices per simulated µs and CPU
  per slice of a workload too long to run whole).

``--record`` appends the tables to bench/RESULTS.md with the machine's ``uptime`` load (the machine is
shared, so wall times move with it).

    python bench/fluid.py [--speed] [--scale] [--resnet] [--digest] [--profiles sim_incast_7to1 ...] [--record]
    python bench/fluid.py --profiles sim_incast_7to1 --seeds 1 2 3 [--sim-cache /tmp/sim]
    python bench/fluid.py --one fluid:all_reduce:1024:268435456 [--time-limit-ms 0.2]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROFILES = ROOT / "profiles"
STUDY = ("study_ar_alone", "study_a2a_alone", "study_mixed")


def _cct_by_type(d: Path) -> dict[str, np.ndarray]:
    seen: dict[str, tuple[str, float]] = {}
    with open(d / "collectives.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["warmup"] == "0" and row["cct_ns"]:
                seen[row["instance"]] = (row["type"], float(row["cct_ns"]))
    out: dict[str, list[float]] = {}
    for kind, cct in seen.values():
        out.setdefault(kind, []).append(cct)
    return {k: np.array(v) for k, v in out.items()}


def _marked_counts(d: Path) -> tuple[int, int]:
    """(ECN-marked packets on switch ports, data packets) of a run."""
    doc = json.loads((d / "results.json").read_text())
    marked = sum(p.get("marked_packets", 0) for p in doc["summary"]["fabric"]["ports"] if p.get("kind") != "host")
    with open(d / "flows.csv", newline="") as fh:
        packets = sum(int(r["packets"] or 0) for r in csv.DictReader(fh))
    return marked, packets


def _run(profile: str, fabric: str, out: Path, seed: int | None = None) -> float:
    t0 = time.perf_counter()
    extra = ["--set", "timeout=3600s"]  # a wall bound: on a loaded machine the profile's own one stops runs
    if seed is not None:
        extra += ["--set", f"seed={seed}"]
    subprocess.run([sys.executable, "-m", "emulator", "run", str(PROFILES / f"{profile}.yaml"), "--fabric", fabric,
                    "-o", str(out), "--quiet", *extra], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)  # fmt: skip
    return time.perf_counter() - t0


def accuracy(profiles: list[str], seeds: list[int] | None = None, sim_cache: Path | None = None) -> list[str]:
    """The verdict rows; with ``seeds``, a row per seed and one of the seeds' instances pooled (a single seed of
    the packet sim is itself noisy). ``sim_cache``: keep the packet sim's directories there and reuse them."""
    lines = ["| profile | collective | CCT p50 fluid ÷ packet | CCT p99 fluid ÷ packet | marked fraction fluid ÷ packet "
             "| wall packet / fluid (s) | verdict |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name in profiles:
            runs = []
            for seed in seeds or [None]:
                tag = "" if seed is None else f"_s{seed}"
                dirs = {f: Path(tmp) / f"{name}_{f}{tag}" for f in ("sim", "fluid")}
                wall = {}
                if sim_cache is not None:
                    dirs["sim"] = sim_cache / f"{name}{tag}"
                    if _combinations(dirs["sim"]):
                        wall["sim"] = float("nan")
                wall.update({f: _run(name, f, d, seed) for f, d in dirs.items() if f not in wall})
                runs.append((tag, dirs, wall))
            for combo in _combinations(runs[0][1]["sim"]):  # a matrix profile writes one directory per combination
                label = f"{name}/{combo}" if combo else name
                pairs, first = [], len(lines)
                for tag, dirs, wall in runs:
                    pair = {"sim": dirs["sim"] / combo, "fluid": dirs["fluid"] / combo}
                    pairs.append(pair)
                    if seeds:
                        lines += _compare(f"{label} seed {tag[2:]}", [pair], wall)
                total = {f: sum(w[f] for _, _, w in runs) for f in ("sim", "fluid")}
                lines += _compare(label + (f" pooled, seeds {','.join(map(str, seeds))}" if seeds else ""), pairs,
                                  total)  # fmt: skip
                print("\n".join(lines[first:]), flush=True)
    return lines


def _combinations(d: Path) -> list[str]:
    if (d / "results.json").exists():
        return [""]
    return sorted(p.parent.name for p in d.glob("*/results.json"))


def _compare(label: str, pairs: list[dict[str, Path]], wall: dict[str, float]) -> list[str]:
    """Verdict rows of ``pairs`` (sim and fluid directories of one or more seeds, their instances pooled)."""
    cct: dict[str, dict[str, np.ndarray]] = {}
    mf = {}
    for f in ("sim", "fluid"):
        per = [_cct_by_type(p[f]) for p in pairs]
        cct[f] = {k: np.concatenate([c[k] for c in per if k in c]) for k in {k for c in per for k in c}}
        counts = [_marked_counts(p[f]) for p in pairs]
        packets = sum(c[1] for c in counts)
        mf[f] = sum(c[0] for c in counts) / packets if packets else 0.0
    if mf["sim"] > 0:
        mratio = mf["fluid"] / mf["sim"]
        mtext = f"{mratio:.2f} ({mf['fluid']:.4f} / {mf['sim']:.4f})"
    else:
        mratio = 1.0 if mf["fluid"] == 0 else float("inf")
        mtext = f"- ({mf['fluid']:.4f} / 0)"
    out = []
    for kind in sorted(cct["sim"]):
        s, f = cct["sim"][kind], cct["fluid"].get(kind, np.array([np.nan]))
        r50 = float(np.median(f) / np.median(s))
        r99 = float(np.percentile(f, 99) / np.percentile(s, 99))
        ok = abs(r50 - 1) <= 0.05 and abs(r99 - 1) <= 0.10 and 0.5 <= mratio <= 2.0
        out.append(f"| {label} | {kind} | {r50:.3f} | {r99:.3f} | {mtext} | {wall['sim']:.1f} / {wall['fluid']:.1f} | "
                   f"{'meets' if ok else 'misses'} |")  # fmt: skip
    return out


def _one(kind: str, time_limit_ns: int = 10_000_000_000) -> dict:
    """One speed workload in this process (``--one``): wall, CPU, slices, events and peak memory."""
    sys.path.insert(0, str(HERE))
    from sim_speed import schedule_for

    from emulator.drivers.fluid import run_fluid
    from emulator.drivers.sim import SimConfig, run_sim
    from emulator.endpoint.config import EndpointConfig
    from emulator.fabric.topology import TopologyConfig
    from emulator.pacing.red import RedParams

    fabric, op, ranks, size, *merge = kind.split(":")
    n, size_bytes = int(ranks), int(size)
    merge_ns = float(merge[0]) if merge else 0.0
    t0 = time.perf_counter()
    warm = None
    if fabric == "fluid" and n >= 1024:  # a large run: its kernels compile in a helper while the schedule is built
        from emulator.drivers import fluid_warm

        warm = fluid_warm.start()
    schedule = schedule_for(op, n, size_bytes)
    compile_s = time.perf_counter() - t0
    rate = 25e9 if n <= 64 else 400e9
    topo = TopologyConfig() if n <= 64 else TopologyConfig(kind="leaf_spine", leaves=n // 32, spines=8,
                                                           hosts_per_leaf=32)  # fmt: skip
    scfg = SimConfig(topology=topo, port_rate_bps=rate, buffer_bytes=1 << 20, latency_ns=1000, red=RedParams())
    ecfg = EndpointConfig(mtu_bytes=4096, cc="connectx", line_rate_bps=rate)
    t0, c0 = time.perf_counter(), time.process_time()
    if fabric == "fluid":
        res = run_fluid(schedule, scfg, ecfg, seed=1, merge_ns=merge_ns, time_limit_ns=time_limit_ns)
        end_ns, done = res.health["end_ns"], res.complete
    else:
        res = run_sim(schedule, scfg, ecfg, seed=1)
        end_ns, done = res.health["end_ns"], res.complete
    wall = time.perf_counter() - t0
    if warm is not None:  # run_fluid joined it (a run this large); stopped here in any case
        warm.stop()
    helper = {"warm_join_s": warm.join_s, "warm_wait_s": warm.wait_s, "warm_compiled_here": warm.compiled,
              "helper_cpu_s": (lambda r: r.ru_utime + r.ru_stime)(resource.getrusage(resource.RUSAGE_CHILDREN))
              } if warm is not None else {}  # fmt: skip
    return {"kind": kind, "flows": schedule.n_flows, "compile_s": compile_s, "wall_s": wall, "sim_ms": end_ns / 1e6,
            "cpu_s": time.process_time() - c0, "slices": res.health.get("steps"), "complete": done,
            "events": res.health.get("events"), "ops_done": int(sum((r.end_ns >= 0).sum() for r in res.records.values())),
            "n_ops": schedule.n_ops,
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **helper}


def digests() -> list[tuple[str, str, str, str, dict]]:
    """(case, records digest, fabric digest, samples digest, counts) of bench/sim_speed.py's digest cases on
    the fluid fabric."""
    sys.path.insert(0, str(HERE))
    from sim_speed import DIGEST_CASES, result_digests, schedule_for

    from emulator.drivers.fluid import run_fluid
    from emulator.drivers.sim import SimConfig
    from emulator.endpoint.config import EndpointConfig
    from emulator.fabric.port import PfcParams
    from emulator.fabric.topology import TopologyConfig

    out = []
    for name, op, n, size, skw, ekw, seed in DIGEST_CASES:
        skw = dict(skw)
        if skw.pop("loss", 0):  # per-packet loss has no meaning on the fluid fabric: the case runs without it
            name += "-without"
        if "pfc" in skw:
            skw["pfc"] = PfcParams(*skw["pfc"])
        if skw.pop("leaf_spine", False):
            skw["topology"] = TopologyConfig(kind="leaf_spine", leaves=2, spines=2)
        res = run_fluid(schedule_for(op, n, size), SimConfig(**skw), EndpointConfig(mtu_bytes=4096, **ekw), seed=seed)
        counts = {k: res.health[k] for k in ("stop_reason", "end_ns", "events", "steps")}
        out.append((name, *result_digests(res), counts))
    return out


def _spawn(kind: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", kind], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def speed(scale: bool, with_packet: bool) -> list[str]:
    lines = ["| workload | fabric | flows | compile s | wall s | CPU s | slices | simulated ms | peak RSS MB |",
             "|---|---|---|---|---|---|---|---|---|"]
    rows = []
    kinds = [("all_to_all", 64, 64 << 20)] if not scale else [("all_to_all", 1024, 16 << 20),
                                                               ("all_reduce", 1024, 256 << 20)]  # fmt: skip
    for op, n, size in kinds:
        for fabric in ("fluid", "sim") if with_packet and not scale else ("fluid",):
            r = _spawn(f"{fabric}:{op}:{n}:{size}")
            rows.append(r)
            lines.append(f"| {op} {n} ranks, {size >> 20} MiB{' per rank' if n > 64 else ' (S: 1 MiB per peer)'} | "
                         f"{fabric} | {r['flows']} | {r['compile_s']:.1f} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                         f"{r['slices']} | {r['sim_ms']:.3f} | {r['maxrss_mb']:.0f} |")  # fmt: skip
            print(lines[-1], flush=True)
    if len(rows) == 2:
        lines.append(f"\nfluid is {rows[1]['wall_s'] / rows[0]['wall_s']:.0f}× faster than packet; simulated time "
                     f"{rows[0]['sim_ms']:.3f} vs {rows[1]['sim_ms']:.3f} ms "
                     f"({rows[0]['sim_ms'] / rows[1]['sim_ms'] - 1:+.1%})")  # fmt: skip
    return lines


def resnet() -> list[str]:
    """The ResNet-50-like 64-rank data-parallel step on the fluid fabric (see module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp) / "rn50"
        subprocess.run([sys.executable, "-m", "emulator", "generate", "data-parallel", "--ranks", "64", "-o",
                        str(prefix), "--layers", "50", "--params-per-layer", "2MiB", "--fwd", "100us", "--bwd",
                        "200us"], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        out = Path(tmp) / "out"
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "emulator", "run", "--trace", str(prefix), "--fabric", "fluid", "-o", str(out),
               "--quiet", "--set", "warmup=0", "--set", "iterations=1"]  # fmt: skip
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], check=True, capture_output=True, text=True)
        total = time.perf_counter() - t0
        rss_mb = int(proc.stderr.strip().splitlines()[-1]) / 1024
        doc = json.loads((out / "results.json").read_text())
        h = doc["driver"]["health"]
    return ["| workload | driver wall s | command wall s | peak RSS MB | slices | calm events | complete |",
            "|---|---|---|---|---|---|---|",
            f"| ResNet-50-like data-parallel, 64 ranks, 1 iteration | {doc['wall_s']:.2f} | {total:.1f} | "
            f"{rss_mb:.0f} | {h.get('steps')} | {h.get('calm_events')} | {doc['complete']} |"]  # fmt: skip


def estimate_4096() -> list[str]:
    """The fluid driver's memory estimate for 4,096-rank All-to-All and ring All-Reduce, without running them."""
    from emulator.drivers.fluid import MEMORY_BASE_BYTES, MEMORY_PER_FLOW_BYTES, available_memory_bytes

    n = 4096
    have = available_memory_bytes()
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    lines = []
    for name, flows in (("all_to_all 4096 ranks", n * (n - 1)), ("ring all_reduce 4096 ranks", 2 * n * (n - 1))):
        need = MEMORY_BASE_BYTES + MEMORY_PER_FLOW_BYTES * flows
        lines.append(f"| {name} | fluid | {flows:,} | - | not run | - | - | - | needs ≈ {need / 2**30:.0f} GiB (machine "
                     f"{total / 2**30:.0f} GiB, {(have or 0) / 2**30:.0f} GiB available): refused before the run |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--speed", action="store_true", help="64-rank All-to-All, fluid vs packet")
    p.add_argument("--scale", action="store_true", help="1,024-rank All-to-All and ring All-Reduce on a leaf-spine")
    p.add_argument("--no-packet", action="store_true", help="--speed without the (slow) packet run")
    p.add_argument("--resnet", action="store_true", help="ResNet-50-like 64-rank data-parallel step on fluid")
    p.add_argument("--profiles", nargs="*", help="accuracy on these profiles only")
    p.add_argument("--seeds", nargs="*", type=int, help="accuracy at these seeds (both fabrics), per seed and pooled")
    p.add_argument("--sim-cache", type=Path, help="accuracy: keep the packet sim's runs in this directory, reuse them")
    p.add_argument("--record", action="store_true", help="append to bench/RESULTS.md")
    p.add_argument("--digest", action="store_true", help="digests of the seven digest cases on the fluid fabric")
    p.add_argument("--one", help="one workload in this process, e.g. fluid:all_reduce:1024:268435456[:merge_ns]")
    p.add_argument("--time-limit-ms", type=float, default=10_000.0, help="with --one: stop at this simulated time")
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(_one(args.one, round(args.time_limit_ms * 1e6))))
        return 0
    if args.digest:
        for row in digests():
            print(*row)
        return 0
    load = os.popen("uptime").read().strip()
    out = [f"\n## Fluid fabric (bench/fluid.py), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
           f"`uptime` before: {load}\n"]  # fmt: skip
    if args.resnet:
        out += resnet()
    if args.speed or args.scale:
        out += speed(args.scale, not args.no_packet)
        if args.scale:
            out += estimate_4096()
    elif not args.resnet:
        names = args.profiles or sorted(q.stem for q in PROFILES.glob("sim_*.yaml")) + list(STUDY)
        out += accuracy(names, args.seeds, args.sim_cache)
    out.append(f"\n`uptime` after: {os.popen('uptime').read().strip()}")
    text = "\n".join(out) + "\n"
    print(text)
    if args.record:
        with open(HERE / "RESULTS.md", "a") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
