"""8-rank All-Reduce and All-to-All busbw: ours (direct and loopback switch) vs gloo and Open MPI, same run.

What is measured (issue 5, "Benchmarks"), interleaved rep by rep, all traffic on 127.0.0.0/8:

* **ours/direct**: ``emulator.drivers.direct.run_direct``, rank r bound to 127.0.0.(r+2) (no switch; the
  kernel's loopback device is the network); **ours/loopback**: ``run_loopback``, every packet through the
  software switch process at ``--switch-rate`` per port. Workload: the ``collective`` generator's trace
  (ring All-Reduce / direct All-to-All, ``--size`` per rank = nccl-tests' S, 16 MiB by default), compiled
  with ``compile_trace`` and repeated ``--warmup`` + ``--iters`` times (``repeat_schedule``). busbw is
  computed by the tool's own summary (``emulator.stats.run_summary.compute_summary``): per measured
  instance CCT = last end − first scheduled start over the ranks, busbw at the median CCT with the
  nccl-tests factors (All-Reduce 2(n−1)/n, All-to-All (n−1)/n).
* **bare GSO→GRO syscall path**: ``../shared/peers/py_udp_baseline.py --modes gso->gro`` (one Python sender
  of 61440-byte GSO buffers into one UDP_GRO receiver, no protocol): CPU seconds of its sender per GB sent
  plus of its receiver per GB received, the floor of CPU per byte for any Python sender of GSO batches on this machine. Target: ours
  via direct within 1.2 × of it (CPU s per GB sent), measured in the same run.
* **peers**: ``../shared/peers/gloo_collectives.py`` (PyTorch gloo, TCP on lo) and ``mpi_collectives.py``
  (Open MPI ob1/tcp on lo), run by :mod:`peers` with reduced options (one launch, ``--warmup`` +
  ``--iters`` timed iterations, this size only); their busbw is the median over iterations of
  (barrier; time the op; max over ranks) — the same nccl-tests definition.

Each figure is the median over ``--reps`` interleaved repetitions of each rep's median. Targets (issue 10):
ours via direct ≥ 1 × the better peer, via the switch ≥ 1 ×. ``--profile DIR`` runs ours once more per fabric with
``EMULATOR_WORKER_PROFILE`` (cProfile of every worker) and prints where the time goes. ``--record``
appends a section to bench/RESULTS.md. ``--quick``: 1 rep, 2 MiB, 1+2 iterations (a smoke test).

``--realtime`` (root) runs ours/direct's workers, the peers and the bare path at SCHED_FIFO 1, so other work on
the machine takes none of their CPU: a same-sitting comparison on a busy machine.

    python bench/collectives.py [--quick] [--reps 3] [--size 16MiB] [--fabrics direct,loopback] [--realtime]
                                [--record]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pstats
import resource
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import peers  # noqa: E402
from goodput_direct import datapath_counts, realtime_prefix, run_ceiling  # noqa: E402

OPS = ("all_reduce", "all_to_all")
MPI_OP = {"all_reduce": "allreduce", "all_to_all": "alltoall"}
#: ours via direct ÷ the best peer, busbw (issue 10: at least the best peer on the day)
DIRECT_TARGET = 1.0


def build_schedule(op: str, ranks: int, size_bytes: int, warmup: int, iters: int):
    """``warmup + iters`` back-to-back instances of one collective over ``ranks`` ranks."""
    from emulator.schedule.compiler import compile_trace
    from emulator.schedule.compose import repeat_schedule
    from emulator.trace.generators.collective import CollectiveOptions, collective_trace
    from emulator.trace.model import CollectiveType, RankGraph, Trace

    gen = collective_trace(CollectiveOptions(ranks=ranks, collectives=(CollectiveType[op.upper()],),
                                             size_bytes=size_bytes, iterations=1))
    trace = Trace(ranks={r: RankGraph(r, list(gen.nodes(r))) for r in range(ranks)}, groups=dict(gen.groups))
    return repeat_schedule(compile_trace(trace), iters, warmup)


def endpoint_config(args: argparse.Namespace):
    from emulator.endpoint.config import EndpointConfig

    overrides = (("rate_bps", args.fixed_rate_bps),) if args.cc == "fixed" else ()
    return EndpointConfig(mtu_bytes=4096, cc=args.cc, cc_overrides=overrides, line_rate_bps=args.line_rate_bps,
                          retransmit_timeout_ns=args.rto_ns)


def run_ours(fabric: str, op: str, args: argparse.Namespace, schedule=None) -> dict[str, Any]:
    """One run of ours on ``fabric``; busbw at the median CCT and the driver's health."""
    from emulator.drivers.direct import DirectConfig, run_direct
    from emulator.drivers.loopback import LoopbackConfig, run_loopback
    from emulator.fabric.port import PortConfig
    from emulator.pacing.red import RedParams
    from emulator.stats.run_summary import compute_summary

    s = schedule if schedule is not None else build_schedule(op, args.ranks, args.size_bytes, args.warmup, args.iters)
    ecfg = endpoint_config(args)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    if fabric == "direct":
        addrs = tuple(f"127.0.0.{r + 2}" for r in range(args.ranks))
        dcfg = DirectConfig(addresses=addrs, udp_port=args.port or free_udp_port(addrs),
                            ranks_per_worker=args.ranks_per_worker, realtime=args.realtime)
        res = run_direct(s, dcfg, ecfg, timeout_s=args.timeout)
    else:
        port = PortConfig(rate_bps=args.switch_rate_bps, buffer_bytes=args.switch_buffer_bytes, red=RedParams())
        lcfg = LoopbackConfig(port=port, ranks_per_worker=args.ranks_per_worker)
        ecfg = dataclasses.replace(ecfg, line_rate_bps=args.switch_line_rate_bps)
        res = run_loopback(s, lcfg, ecfg, seed=1, timeout_s=args.timeout)
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    sent = res.bytes_counter("bytes_sent")
    summ = compute_summary(s, res.records, res.fabric_dict(), res.health)
    entry = summ.collectives.get(op)
    lag = res.health.get("endpoint_timer_lag_ns") or {}
    return {
        "busbw": (entry.busbw_gbps if entry else None) or 0.0, "cct_p50_ns": entry.cct.p50 if entry else None,
        "count": entry.count if entry else 0, "complete": res.complete, "errors": res.errors, "wall_s": wall,
        "bytes_sent": sent, "cpu_s": cpu_s, "cpu_s_per_gb": cpu_s / (sent / 1e9) if sent else float("nan"),
        # busbw = bytes each rank sends / CCT (AR and A2A alike), so with every CPU busy on this work:
        "busbw_cpu_bound": (os.cpu_count() or 1) / (cpu_s / sent) / args.ranks / 1e9 if cpu_s > 0 and sent else 0.0,
        "retransmits": res.bytes_counter("retransmits"),
        "timeouts": res.bytes_counter("timeouts"), "socket_drops": res.health.get("endpoint_socket_drops"),
        "timer_lag_p99_us": (lag.get("p99") or 0) / 1000, "warnings": list(res.health.get("warnings", [])),
        "fabric_drops": summ.fabric.drops, "sys_s": ru1.ru_stime - ru0.ru_stime, **datapath_counts(res),
        **worker_split(res, sent),
    }


def worker_split(res, sent_bytes: int) -> dict[str, Any]:
    """Per worker, from its loop's ``getrusage``: user and kernel CPU µs per 61,440-byte batch sent, minor page
    faults, voluntary and involuntary context switches per GB sent, and its ``recvmmsg`` buffers (bytes, most
    slots one call filled)."""
    workers = {s["worker"]: s for s in res.health.get("sockets", {}).values() if "worker_user_s" in s}
    batches, gb = sent_bytes / 61_440, sent_bytes / 1e9
    if not workers or not sent_bytes:
        return {"split": ""}
    parts = [f"w{k} usr {w['worker_user_s'] * 1e6 / batches:.1f} + sys {w['worker_sys_s'] * 1e6 / batches:.1f} µs, "
             f"{w['worker_minflt'] / gb:.0f} faults, {w['worker_nvcsw'] / gb:.0f} + {w['worker_nivcsw'] / gb:.0f} "
             f"switches /GB, rx buffers {w['worker_rx_buffer_bytes'] >> 10} KiB (≤ {w['worker_rx_slots_high']} slots "
             "a call)" for k, w in sorted(workers.items())]
    return {"split": "; ".join(parts)}


def free_udp_port(addrs: tuple[str, ...]) -> int:
    """A UDP port free on every address right now (other runs of the benches may hold fixed ones)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind((addrs[0], 0))
            port = probe.getsockname()[1]
        try:
            for a in addrs:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    s.bind((a, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no UDP port free on every rank address")


def profile_ours(fabric: str, op: str, args: argparse.Namespace, out_dir: Path, top: int = 14) -> str:
    """Run ours once under ``EMULATOR_WORKER_PROFILE``; the merged top functions by own time, as text."""
    d = out_dir / f"{fabric}-{op}"
    d.mkdir(parents=True, exist_ok=True)
    os.environ["EMULATOR_WORKER_PROFILE"] = str(d)
    try:
        r = run_ours(fabric, op, argparse.Namespace(**{**vars(args), "warmup": 0, "iters": 2}))
    finally:
        del os.environ["EMULATOR_WORKER_PROFILE"]
    files = sorted(str(p) for p in d.glob("*.prof"))
    head = f"{fabric} {op}: busbw {r['busbw']:.3f} GB/s under cProfile; {len(files)} profiles in {d}"
    if not files:
        return head
    st = pstats.Stats(*files)
    total = st.total_tt
    calls = sum(nc for _cc, nc, _tt, _ct, _callers in st.stats.values())  # Python and C functions, every worker
    head += f"; {calls / (r['bytes_sent'] / 61_440):.2f} calls per 61,440-byte batch sent" if r["bytes_sent"] else ""
    rows = []
    for func, (_cc, nc, tt, ct, _callers) in sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]:
        name = f"{Path(func[0]).name}:{func[1]}({func[2]})"
        rows.append(f"  {100 * tt / total:5.1f}% own {tt:7.2f}s cum {ct:7.2f}s calls {nc:>9}  {name}")
    return head + f"; total {total:.1f} s CPU in workers\n" + "\n".join(rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from emulator.units import parse_rate_bps, parse_size_bytes

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke mode: 1 rep, 2 MiB, 1 warmup + 2 iterations")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--size", default="16MiB", help="bytes per rank (nccl-tests S)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--fabrics", default="direct,loopback")
    ap.add_argument("--peers", default="gloo,mpi", help="peers to run (gloo, mpi; empty = none)")
    ap.add_argument("--cc", default="none", help="congestion-control preset of ours (none, fixed, connectx, ...)")
    ap.add_argument("--fixed-rate", default="10Gbps", help="rate of cc=fixed")
    ap.add_argument("--line-rate", default="25Gbps", help="NIC line rate of each rank (ours/direct)")
    ap.add_argument("--switch-rate", default="4Gbps", help="loopback switch port rate")
    ap.add_argument("--switch-line-rate", default="2Gbps",
                    help="NIC line rate of ours/loopback (8 × this is what the software switch must forward)")
    ap.add_argument("--switch-buffer", default="4MiB", help="loopback switch buffer per port")
    ap.add_argument("--rto", default="100ms", help="retransmit timeout of ours (above the workers' timer lag)")
    ap.add_argument("--ranks-per-worker", type=int, default=0, help="0 = one worker process per CPU")
    ap.add_argument("--port", type=int, default=0, help="UDP port of ours/direct (0 = a free one per run)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per run of ours")
    ap.add_argument("--syscall-ref", type=float, default=2.0, metavar="S",
                    help="seconds of the bare GSO→GRO syscall reference per rep (0 = skip it)")
    ap.add_argument("--profile", metavar="DIR", help="also profile one run of ours per fabric and op")
    ap.add_argument("--realtime", action="store_true",
                    help="run ours/direct's workers, the peers and the bare syscall path at SCHED_FIFO 1 (root): a "
                         "same-sitting comparison on a machine other work keeps busy")
    ap.add_argument("--record", action="store_true", help="append the figures to bench/RESULTS.md")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps, args.size, args.warmup, args.iters = 1, "2MiB", 1, 2
    from emulator.units import parse_duration_ns

    args.size_bytes = parse_size_bytes(args.size)
    args.line_rate_bps = parse_rate_bps(args.line_rate)
    args.switch_rate_bps = parse_rate_bps(args.switch_rate)
    args.switch_line_rate_bps = parse_rate_bps(args.switch_line_rate)
    args.fixed_rate_bps = parse_rate_bps(args.fixed_rate)
    args.switch_buffer_bytes = parse_size_bytes(args.switch_buffer)
    args.rto_ns = parse_duration_ns(args.rto)
    args.op_list = [o for o in args.ops.split(",") if o]
    args.fabric_list = [f for f in args.fabrics.split(",") if f]
    args.peer_list = [p for p in args.peers.split(",") if p]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    peers.COMMAND_PREFIX = realtime_prefix(args.realtime)
    problems = peers.check_setup(need_mpi="mpi" in args.peer_list, need_torch="gloo" in args.peer_list)
    if problems:
        print("peers not ready:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    mib = args.size_bytes / (1 << 20)
    sizes_mib = f"{mib:g}"
    load0 = peers.load_note()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    samples: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[tuple[float, float]]] = {}
    notes: list[str] = []
    peer_cmds: dict[str, str] = {}
    schedules = {op: build_schedule(op, args.ranks, args.size_bytes, args.warmup, args.iters) for op in args.op_list}
    syscall_ref: list[float] = []
    for rep in range(args.reps):
        if args.syscall_ref > 0:
            ref = run_ceiling(args.syscall_ref, realtime_prefix(args.realtime))
            if ref.get("cpu_s_per_gb", 0) > 0:
                syscall_ref.append(ref["cpu_s_per_gb"])
            print(f"[rep {rep}] bare GSO→GRO syscall path: {ref['gbps']:.2f} Gbit/s, "
                  f"{ref.get('cpu_s_per_gb', float('nan')):.3f} CPU s per GB (sender + receiver) {ref.get('error', '')}",
                  flush=True)
        if "gloo" in args.peer_list:
            g = peers.run_gloo(args.ranks, sizes_mib, ops=",".join(args.op_list), warmup=args.warmup,
                               iters=args.iters)
            peer_cmds["gloo"] = g.command
            for op in args.op_list:
                bw = g.busbw(op, args.ranks, args.size_bytes)
                samples.setdefault(("gloo (TCP)", op), []).append(bw["median"] if bw else 0.0)
                print(f"[rep {rep}] gloo {op}: {bw['median'] if bw else 0.0:.3f} GB/s {'; '.join(g.errors)}",
                      flush=True)
        if "mpi" in args.peer_list:
            m = peers.run_mpi(args.ranks, sizes_mib, ops=",".join(MPI_OP[o] for o in args.op_list),
                              warmup=args.warmup, iters=args.iters)
            peer_cmds["mpi"] = m.command
            for op in args.op_list:
                bw = m.busbw(MPI_OP[op], args.ranks, args.size_bytes, "tcp")
                samples.setdefault(("Open MPI (TCP)", op), []).append(bw["median"] if bw else 0.0)
                print(f"[rep {rep}] mpi/tcp {op}: {bw['median'] if bw else 0.0:.3f} GB/s {'; '.join(m.errors)}",
                      flush=True)
        for fabric in args.fabric_list:
            for op in args.op_list:
                r = run_ours(fabric, op, args, schedules[op])
                samples.setdefault((f"ours/{fabric}", op), []).append(r["busbw"])
                cpu.setdefault((fabric, op), []).append((r["cpu_s_per_gb"], r["busbw_cpu_bound"]))
                cct = (r["cct_p50_ns"] or 0) / 1e6
                print(f"[rep {rep}] ours/{fabric} {op}: {r['busbw']:.3f} GB/s (CCT p50 {cct:.1f} ms, "
                      f"{r['count']} instances, wall {r['wall_s']:.1f} s, retx {r['retransmits']}, "
                      f"timeouts {r['timeouts']}, socket drops {r['socket_drops']}, switch drops "
                      f"{r['fabric_drops']}, timer lag p99 {r['timer_lag_p99_us']:.0f} µs, CPU {r['cpu_s']:.2f} s = "
                      f"{r['cpu_s_per_gb']:.2f} CPU s/GB sent ({100 * r['sys_s'] / max(1e-9, r['cpu_s']):.0f} % "
                      f"kernel) → CPU-bound busbw {r['busbw_cpu_bound']:.3f} GB/s; {r['packets_per_send']:.1f} packets "
                      f"per GSO send, per GB {r['sends_per_gb']:.0f} sends in {r.get('send_syscalls_per_gb', 0):.0f} calls / "
                      f"{r['recvs_per_gb']:.0f} receives in {r.get('recv_syscalls_per_gb', 0):.0f} calls (+ "
                      f"{r['empty_recvs_per_gb']:.0f} empty, {r.get('failed_recvs_per_gb', 0):.0f} found nothing) / {r['acks_per_gb']:.0f} ACKs / {r['loops_per_gb']:.0f} "
                      f"loop passes; per 61,440-byte batch sent, worker CPU "
                      f"{' + '.join(f'{v:.0f}' for v in r['worker_us_per_batch'].values())} µs, busy "
                      f"{' / '.join(f'{100 * v:.0f}' for v in r['worker_busy'].values())} %, waited for a CPU "
                      f"{' / '.join('?' if v is None else f'{100 * v:.0f}' for v in r['worker_waited'].values())} %) "
                      f"{'; '.join(r['errors'])}\n    per worker: {r['split']}", flush=True)
                notes.extend(f"{fabric}/{op}: {w}" for w in r["warnings"])
    load1 = peers.load_note()
    med = {k: statistics.median(v) for k, v in samples.items()}
    lines = [f"| op | {' | '.join(k[0] for k in med if k[1] == args.op_list[0])} | best peer | "
             "ours/direct ÷ best peer (target ≥ 1) | ours/loopback ÷ best peer (target ≥ 1) |"]
    names = [k[0] for k in med if k[1] == args.op_list[0]]
    lines.append("|---" * (len(names) + 4) + "|")
    verdicts = []
    for op in args.op_list:
        peer_best = max((med[(n, op)] for n in names if not n.startswith("ours")), default=0.0)
        cells = [f"{med[(n, op)]:.3f}" for n in names]
        ratios = []
        for fabric, target in (("direct", DIRECT_TARGET), ("loopback", 1.0)):
            v = med.get((f"ours/{fabric}", op))
            if v is None or not peer_best:
                ratios.append("–")
                continue
            ratio = v / peer_best
            ok = ratio >= target
            ratios.append(f"**{ratio:.2f}×** {'met' if ok else 'missed'}")
            verdicts.append(ok)
        lines.append(f"| {op} | {' | '.join(cells)} | {peer_best:.3f} | {' | '.join(ratios)} |")
    table = "\n".join(lines)
    ref_gb = statistics.median(syscall_ref) if syscall_ref else 0.0
    cpu_lines = ["| ours | op | CPU s per GB sent (workers + switch, user + sys) | busbw if all "
                 f"{os.cpu_count()} CPUs did only this (GB/s) | ÷ best peer | ÷ bare GSO→GRO syscall path "
                 "(target ≤ 1.2) |", "|---|---|---|---|---|---|"]
    if ref_gb:
        cpu_lines.append(f"| bare GSO→GRO syscall path (py_udp_baseline, sender + receiver per GB) | – | {ref_gb:.3f} | – | – "
                         "| 1.00× |")
    for (fabric, op), v in cpu.items():
        per_gb = statistics.median(x[0] for x in v)
        bound = statistics.median(x[1] for x in v)
        peer_best = max((med[(n, op)] for n in names if not n.startswith("ours")), default=0.0)
        ratio = f"{bound / peer_best:.2f}×" if peer_best else "–"
        vs_ref = f"**{per_gb / ref_gb:.2f}×**" if ref_gb else "–"
        cpu_lines.append(f"| {fabric} | {op} | {per_gb:.2f} | {bound:.3f} | {ratio} | {vs_ref} |")
    cpu_table = "\n".join(cpu_lines)
    per_rep = "\n".join(f"- {n} {op}: " + ", ".join(f"{x:.3f}" for x in samples[(n, op)])
                        for (n, op) in samples)
    print(f"\nbusbw GB/s (median of {args.reps} reps; {args.ranks} ranks, {args.size} per rank)\n{table}")
    print(cpu_table)
    print(f"{load0} -> {load1}")
    prof_text = ""
    if args.profile:
        outs = [profile_ours(f, op, args, Path(args.profile)) for f in args.fabric_list for op in args.op_list]
        prof_text = "\n\n".join(outs)
        print("\n" + prof_text)
    if args.record:
        cmd = "python bench/collectives.py " + " ".join(argv if argv is not None else sys.argv[1:])
        text = (f"\n## 8-rank collectives busbw vs gloo and Open MPI ({started}) — issue 5\n\n"
                f"Command: `{cmd}`. {args.reps} interleaved reps; per run {args.warmup} warmup + {args.iters} "
                f"measured instances; ours: cc={args.cc}, NIC line rate {args.line_rate} (direct), "
                f"{args.switch_line_rate} (loopback), switch ports {args.switch_rate} / {args.switch_buffer}, RTO {args.rto}, path MTU 4096, GSO batches. "
                f"Machine: {load0} at start, {load1} at end (other sessions' work was running).\n\n"
                f"busbw GB/s (nccl-tests factors; median of the reps' medians):\n\n{table}\n\n"
                f"CPU cost of ours (`getrusage(RUSAGE_CHILDREN)` around each run; busbw = bytes each rank "
                f"sends ÷ CCT for both ops, so CPUs ÷ (CPU s per byte) ÷ ranks bounds it on an otherwise idle "
                f"machine):\n\n{cpu_table}\n\n"
                f"Per rep:\n{per_rep}\n\nPeer commands (in a temp results dir):\n"
                + "".join(f"- `{c}`\n" for c in peer_cmds.values()))
        if notes:
            text += "\nDriver warnings seen:\n" + "".join(f"- {n}\n" for n in sorted(set(notes))[:12])
        if prof_text:
            text += f"\nProfile (cProfile of the rank workers, own time):\n\n```\n{prof_text}\n```\n"
        with open(HERE / "RESULTS.md", "a") as fh:
            fh.write(text)
        print("appended to bench/RESULTS.md")
    return 0 if verdicts and all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
