"""Does this machine stop its CPUs for milliseconds, and all of them at once?

One spinning process per CPU (pinned with ``sched_setaffinity``, SCHED_FIFO 1 when permitted, so the guest's
own scheduler cannot take the CPU away) reads ``CLOCK_MONOTONIC`` in a tight loop and records every gap
longer than ``--threshold-us``, with the process's involuntary context switches across it (``getrusage``):
a gap with none is time the guest kernel did not give to another task — an interrupt, or the hypervisor
not running the vCPU. Spinning goes in 0.8 s bursts with 0.3 s pauses, under the kernel's real-time
throttling (0.95 s per 1 s). The parent reads /proc/stat's steal per CPU and ``CLOCK_BOOTTIME −
CLOCK_MONOTONIC`` before and after.

Reports per CPU: gaps per second, lost share of time, gap quantiles and max, gaps > 200 µs and > 1 ms,
how many had a context switch; and how many of the gaps > 500 µs on one CPU overlap a gap on the other
(VM-wide stalls) — against the overlap expected by chance.

    python bench/vcpu_stalls.py --seconds 6
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import time


def _spin(cpu: int, seconds: float, threshold_ns: int, fifo: bool, conn) -> None:
    os.sched_setaffinity(0, {cpu})
    if fifo:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except OSError:
            pass
    now = time.monotonic_ns
    gaps: list[tuple[int, int, int]] = []
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
    spun = 0
    end_all = now() + int(seconds * 1e9)
    while now() < end_all:
        t_end = min(end_all, now() + 800_000_000)
        prev = now()
        start = prev
        while prev < t_end:
            t = now()
            if t - prev > threshold_ns:
                r = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
                gaps.append((prev, t - prev, r - ru))
                ru = r
                t = now()
            prev = t
        spun += prev - start
        time.sleep(0.3)
        ru = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
    conn.send((cpu, spun, gaps))


def _steal() -> dict[str, int]:
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu"):
                parts = line.split()
                out[parts[0]] = int(parts[8])  # user nice system idle iowait irq softirq steal
    return out


def _q(xs: list[int], p: float) -> int:
    return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))] if xs else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--threshold-us", type=float, default=50.0)
    ap.add_argument("--normal", action="store_true", help="spin at normal priority (default SCHED_FIFO 1)")
    a = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    ctx = mp.get_context("fork")
    st0, d0 = _steal(), time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()
    pipes, procs = [], []
    for c in cpus:
        r, w = ctx.Pipe(False)
        p = ctx.Process(target=_spin, args=(c, a.seconds, int(a.threshold_us * 1000), not a.normal, w))
        p.start()
        pipes.append(r)
        procs.append(p)
    res = {}
    for r in pipes:
        cpu, spun, gaps = r.recv()
        res[cpu] = (spun, gaps)
    for p in procs:
        p.join()
    st1, d1 = _steal(), time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()
    print(f"load {os.getloadavg()[0]:.2f}; {'normal' if a.normal else 'SCHED_FIFO 1'}; boottime-monotonic "
          f"moved {(d1 - d0) / 1e3:.0f} µs; steal (USER_HZ ticks) " +
          ", ".join(f"{k} {st1[k] - st0[k]}" for k in st0))
    for cpu, (spun, gaps) in res.items():
        g = [x[1] for x in gaps]
        big = [x for x in gaps if x[1] > 200_000]
        print(f"cpu{cpu}: spun {spun / 1e9:.2f} s, {len(g)} gaps > {a.threshold_us:g} µs ({len(g) / (spun / 1e9):.0f}/s), "
              f"lost {100 * sum(g) / max(1, spun + sum(g)):.3f} %; p50 {_q(g, .5) / 1e3:.0f} p99 {_q(g, .99) / 1e3:.0f} "
              f"max {max(g, default=0) / 1e3:.0f} µs; > 200 µs: {len(big)} ({sum(1 for x in big if x[2])} with a "
              f"context switch), > 1 ms: {sum(1 for x in g if x > 1_000_000)}; largest: "
              + ", ".join(f"{x[1] / 1e3:.0f}{'*' if x[2] else ''}" for x in sorted(gaps, key=lambda x: -x[1])[:8]))
    if len(res) >= 2:
        (_, g0), (s1, g1) = res[cpus[0]], res[cpus[1]]
        big0 = [x for x in g0 if x[1] > 500_000 and not x[2]]
        iv1 = [(t, t + d) for t, d, _ in g1]
        both = 0
        for t, d, _ in big0:
            if any(min(t + d, e) - max(t, s) > d // 2 for s, e in iv1):
                both += 1
        frac1 = sum(x[1] for x in g1) / max(1, s1)
        print(f"gaps > 500 µs without a context switch on cpu{cpus[0]}: {len(big0)}; with a gap on cpu{cpus[1]} over "
              f"half of it: {both} (chance: ~{frac1 * len(big0):.2f})")


if __name__ == "__main__":
    main()
