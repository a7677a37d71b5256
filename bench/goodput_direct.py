"""Two-rank direct goodput (4096-byte packets) against iperf3 and the pure-Python GSO→GRO ceiling.

Measured in the same run, interleaved rep by rep, all on 127.0.0.0/8:

* **ours**: ``emulator.drivers.direct.run_direct`` with two ranks (127.0.0.2 → 127.0.0.3, one worker
  process each), one RDMA WRITE flow of ``--size`` bytes at path MTU 4096, no congestion control, at each
  NIC line rate of ``--line-rates`` and each of ``--pin-modes`` (pinned = sender worker on CPU0, receiver
  on CPU1, as the ceiling pins its processes; unpinned = the scheduler places them, which fared better
  on the shared machine); goodput = flow bytes × 8 / (receiver's RECV end − sender's SEND start). CPU
  per batch: the workers' own CPU time (``worker_cpu_s``) and ``RUSAGE_CHILDREN`` around the run, printed
  beside Gbit/s with each loop's busy share (CPU ÷ wall time of its loop), so a loaded machine, where the
  scheduler gives the workers a fraction of a core, still gives a comparable figure.
* **iperf3**: ``iperf3 -c 127.0.0.1 -u -b 0 -l 4096 -t D --json`` against ``iperf3 -s`` (receiver-side
  goodput, ``end.sum_received``; installed with apt-get when missing).
* **endpoints alone**: the two RankEndpoints driven in one process without sockets, CPU time per GSO
  batch in ``poll_transmit`` (sender, polled every µs, so one batch per call) and ``receive`` (receiver):
  the bound the endpoint code puts on any driver (process CPU time, so other load on the machine does
  not inflate it).
* **ceiling**: ``../shared/peers/py_udp_baseline.py --modes gso->gro --reps 1 --duration D``, its receiver
  goodput (pure-Python sendto of 61440-byte GSO buffers into a UDP_GRO receiver: no protocol at all).

Targets (issue 5): ours ≥ 3 × iperf3 and ≥ 75 % of the ceiling. ``--profile DIR`` writes cProfile stats of
the rank workers (``EMULATOR_WORKER_PROFILE``) for one extra run and prints the top entries.
``--record`` appends a section to bench/RESULTS.md. Every step is bounded by a timeout.

    python bench/goodput_direct.py [--reps 3] [--size 512MiB] [--line-rates 8Gbps,100Gbps]
                                   [--pin-modes pinned,unpinned] [--realtime] [--record]

``--cores compiled,python`` runs ours with the compiled per-batch core (``DirectConfig.compiled_core``, the
default) and with the Python core, interleaved rep by rep.

``--realtime`` (root): ours' workers (``DirectConfig.realtime``), iperf3, the ceiling and the endpoints alone
all run at SCHED_FIFO 1, so the other work of a busy machine takes none of their CPU and the figures compare
in one sitting (their wake-ups still share the cores, so an idle machine stays the reference).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = Path(os.environ.get("EMULATOR_PEERS_DIR", HERE.parents[1] / "shared" / "peers"))


def _schedule(size_bytes: int):
    from emulator.schedule.compiler import compile_trace
    from emulator.trace.generators.common import p2p_node
    from emulator.trace.model import NodeType, RankGraph, Trace

    ranks = {
        0: RankGraph(0, [p2p_node(0, "send", NodeType.COMM_SEND_NODE, size_bytes, 0, 1, 0)]),
        1: RankGraph(1, [p2p_node(0, "recv", NodeType.COMM_RECV_NODE, size_bytes, 0, 1, 0)]),
    }
    return compile_trace(Trace(ranks=ranks))


#: payload bytes of one full GSO batch at path MTU 4096 (15 packets): the unit of "CPU per batch"
BATCH_BYTES = 15 * 4096


def datapath_counts(res) -> dict:
    """Where a socket run's CPU goes, from its counters: data packets per GSO send, datagrams (or GSO batches)
    sent and received and the system calls that carried them (``sendmmsg``/``recvmmsg``, else one each), drains that found a socket empty (and how many of them by a failing ``recvmsg``), ACKs and worker-loop passes (and those that slept) per GB of payload sent,
    and per worker its CPU µs per full batch of payload sent, its busy share (loop CPU ÷ loop wall time;
    below 1 with nothing to wait for = the scheduler gave the CPU to others) and its waited share (time runnable
    without a CPU ÷ loop wall time: the rest of the loop's time it slept). The kernel's share is
    ``sys_s``."""
    socks = res.health.get("sockets", {}).values()
    sends = sum(s["sent_calls"] for s in socks)
    recvs = sum(s["recv_calls"] for s in socks)
    acks = res.bytes_counter("acks_sent")
    data_sends = sends - acks - res.bytes_counter("naks_sent") - res.bytes_counter("cnps_sent")
    sent = res.bytes_counter("bytes_sent")
    gb = sent / 1e9

    def per_gb(x: float) -> float:
        return x / gb if gb else 0.0

    workers = {s["worker"]: s for s in socks if "worker" in s}  # one loop per worker (its ranks share it)
    batches = sent / BATCH_BYTES
    return {"packets_per_send": res.bytes_counter("packets_sent") / data_sends if data_sends > 0 else 0.0,
            "sends_per_gb": per_gb(sends), "recvs_per_gb": per_gb(recvs), "acks_per_gb": per_gb(acks),
            "send_syscalls_per_gb": per_gb(sum(s.get("send_syscalls", s["sent_calls"]) for s in socks)),
            "recv_syscalls_per_gb": per_gb(sum(s.get("recv_syscalls", s["recv_calls"]) for s in socks)),
            "empty_recvs_per_gb": per_gb(sum(s.get("recv_empty", 0) for s in socks)),
            "failed_recvs_per_gb": per_gb(sum(s.get("recv_eagain", 0) for s in socks)),
            "loops_per_gb": per_gb(sum(w["worker_iterations"] for w in workers.values())),
            "sleeps_per_gb": per_gb(sum(w["worker_sleeps"] for w in workers.values())),
            "worker_sleeps_per_gb": {k: per_gb(w["worker_sleeps"]) for k, w in sorted(workers.items())},
            "worker_us_per_batch": {k: w["worker_cpu_s"] * 1e6 / batches if batches else 0.0
                                    for k, w in sorted(workers.items())},
            "worker_busy": {k: w["worker_cpu_s"] / w["worker_wall_s"] if w["worker_wall_s"] else 0.0
                            for k, w in sorted(workers.items())},
            # the share of its loop's wall time a worker waited runnable for a CPU (None: the kernel did not say)
            "worker_waited": {k: w["worker_runqueue_wait_s"] / w["worker_wall_s"]
                              if w.get("worker_runqueue_wait_s") is not None and w["worker_wall_s"] else None
                              for k, w in sorted(workers.items())}}


def run_ours(size_bytes: int, line_rate_bps: float, port: int, timeout_s: float, pin: bool = True,
             realtime: bool = False, sendmmsg: bool = False, compiled: bool = True) -> dict:
    import resource

    from emulator.drivers.direct import DirectConfig, run_direct
    from emulator.endpoint.config import EndpointConfig

    s = _schedule(size_bytes)
    ep = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=line_rate_bps, retransmit_timeout_ns=50_000_000)
    # worker w on CPU w: the sender (rank 0) on CPU0, the receiver on CPU1, as the peer ceiling pins them
    cfg = DirectConfig(addresses=("127.0.0.2", "127.0.0.3"), udp_port=port, ranks_per_worker=1, pin_cpus=pin,
                       realtime=realtime, sendmmsg=sendmmsg,
                       **({} if compiled else {"compiled_core": False}))  # a tree without it runs Python
    load = os.getloadavg()[0]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = run_direct(s, cfg, ep, timeout_s=timeout_s)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    tx, rx = res.records[0], res.records[1]
    dt = int(rx.end_ns[0]) - int(tx.start_ns[0])
    ok = res.complete and dt > 0
    batches = size_bytes / BATCH_BYTES
    cpu_us = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e6 / batches
    return {**datapath_counts(res), "sys_share": (r1.ru_stime - r0.ru_stime) / max(1e-9, r1.ru_utime + r1.ru_stime
                                                                                  - r0.ru_utime - r0.ru_stime),
        "gbps": size_bytes * 8 / dt if ok else 0.0, "complete": res.complete, "errors": res.errors,
        "retx_bytes": res.bytes_counter("retx_bytes"), "socket_drops": res.health["endpoint_socket_drops"],
        "window_cuts": res.health["receiver_overrun"]["window_cuts"],
        "timer_lag_p99_ns": res.health["endpoint_timer_lag_ns"]["p99"], "warnings": res.health["warnings"],
        "cpu_us_per_batch": cpu_us, "load": load, "kernel_warm_s": res.health.get("kernel_warm_s"),
        "tx_cpu_us": res.health["sockets"].get(0, {}).get("worker_cpu_s", 0.0) * 1e6 / batches,
        "rx_cpu_us": res.health["sockets"].get(1, {}).get("worker_cpu_s", 0.0) * 1e6 / batches,
        "tx_busy": res.health["sockets"].get(0, {}).get("worker_cpu_s", 0.0) / max(
            1e-9, res.health["sockets"].get(0, {}).get("worker_wall_s", 0.0)),
        "rx_busy": res.health["sockets"].get(1, {}).get("worker_cpu_s", 0.0) / max(
            1e-9, res.health["sockets"].get(1, {}).get("worker_wall_s", 0.0)),
    }  # fmt: skip


def endpoint_only(size_bytes: int, icrc: str = "zero", realtime: bool = False) -> dict:
    """The endpoints alone, no sockets: sender poll_transmit and receiver receive time per GSO batch, and
    the goodput each would allow on one core (an upper bound for any socket driver); with ``realtime`` this
    process runs them at SCHED_FIFO 1 and returns to its own scheduling after."""
    if realtime:
        policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except OSError:
            return endpoint_only(size_bytes, icrc)
        try:
            return endpoint_only(size_bytes, icrc)
        finally:
            os.sched_setscheduler(0, policy, param)
    from emulator.endpoint.config import EndpointConfig, virtual_addresses
    from emulator.endpoint.endpoint import RankEndpoint

    s = _schedule(size_bytes)
    ep = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=1e12, retransmit_timeout_ns=10**12, icrc=icrc,
                        rank_addresses=virtual_addresses(2))  # fmt: skip
    a, b = RankEndpoint(0, s, ep), RankEndpoint(1, s, ep)
    a.start(0)
    b.start(0)
    pc = time.process_time  # CPU time of this process: what the endpoint code costs, robust to other load
    t_tx = t_rx = 0.0
    batches = 0
    now = 0
    deadline = time.perf_counter() + 60
    while not (a.done and b.done) and time.perf_counter() < deadline:
        now += 1000
        t = pc()
        txs = a.poll_transmit(now)
        t_tx += pc() - t
        for tx in txs:
            t = pc()
            b.receive(tx.data, 2, now, tx.segment_size)
            t_rx += pc() - t
            batches += 1
        for tx in b.poll_transmit(now):
            a.receive(tx.data, 0, now, tx.segment_size)
        a.handle_timer(now)
    return {"batches": batches, "tx_us_per_batch": 1e6 * t_tx / max(1, batches),
            "rx_us_per_batch": 1e6 * t_rx / max(1, batches),
            "tx_gbps": size_bytes * 8 / t_tx / 1e9 if t_tx else 0.0, "rx_gbps": size_bytes * 8 / t_rx / 1e9 if t_rx else 0.0}


def ensure_iperf3() -> str | None:
    path = shutil.which("iperf3")
    if path is None and shutil.which("apt-get") and os.geteuid() == 0:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "iperf3"], capture_output=True, timeout=300, env=env)
        path = shutil.which("iperf3")
    return path


def realtime_prefix(realtime: bool) -> list[str]:
    """``chrt -f 1`` (SCHED_FIFO 1, as ``DirectConfig.realtime`` runs our workers) when asked for and
    permitted, so a reference runs under the same scheduling as ours; else nothing."""
    chrt = shutil.which("chrt")
    if not realtime or chrt is None or os.geteuid() != 0:
        return []
    return [chrt, "-f", "1"]


def run_iperf3(iperf3: str, port: int, duration_s: float, prefix: list[str] | None = None) -> dict:
    prefix = prefix or []
    server = subprocess.Popen([*prefix, iperf3, "-s", "-B", "127.0.0.1", "-p", str(port), "-1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        out = subprocess.run([*prefix, iperf3, "-c", "127.0.0.1", "-p", str(port), "-u", "-b", "0", "-l", "4096",
                              "-t", str(int(duration_s)), "--json"], capture_output=True, timeout=duration_s + 30)
        doc = json.loads(out.stdout or b"{}")
        end = doc.get("end", {})
        rec = end.get("sum_received") or end.get("sum") or {}
        return {"gbps": rec.get("bits_per_second", 0.0) / 1e9, "lost_percent": rec.get("lost_percent")}
    finally:
        server.kill()
        server.wait(5)


def run_ceiling(duration_s: float, prefix: list[str] | None = None) -> dict:
    script = PEERS / "py_udp_baseline.py"
    if not script.is_file():
        return {"gbps": 0.0, "error": f"{script} not found"}
    import resource

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PEERS_RESULTS_DIR=tmp)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([*(prefix or []), sys.executable, str(script), "--modes", "gso->gro", "--reps", "1", "--duration",
                        str(duration_s)], capture_output=True, timeout=duration_s + 60, env=env)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        path = Path(tmp) / "py_udp.json"
        if not path.is_file():
            return {"gbps": 0.0, "error": "py_udp_baseline.py wrote no result"}
        row = json.loads(path.read_text())["rows"][0]
        gbps = row["rx_gbps"]["median"]
        # CPU of its sender + receiver processes (and their start-up) per 61440-byte batch received: approximate
        batches = gbps * 1e9 / 8 * duration_s / 61440
        cpu_us = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e6 / batches if batches else 0.0
        # CPU seconds (their own loops) of the sender per GB it sent + of the receiver per GB it received:
        # what moving one GB through both ends of the syscall path costs, whatever the loss between them
        tx_gbps = row["tx_gbps"]["median"]
        cpu_s_per_gb = (row["tx_cpu_pct"]["median"] / 100 / (tx_gbps / 8) + row["rx_cpu_pct"]["median"] / 100 / (gbps / 8)
                        if gbps and tx_gbps else float("nan"))
        return {"gbps": gbps, "tx_gbps": row["tx_gbps"]["median"], "cpu_us_per_batch": cpu_us,
                "cpu_s_per_gb": cpu_s_per_gb}


def profile_once(size_bytes: int, line_rate_bps: float, port: int, out_dir: str) -> None:
    import pstats

    os.makedirs(out_dir, exist_ok=True)
    os.environ["EMULATOR_WORKER_PROFILE"] = out_dir
    try:
        r = run_ours(size_bytes, line_rate_bps, port, 120)
    finally:
        del os.environ["EMULATOR_WORKER_PROFILE"]
    print(f"\nprofiled run ({line_rate_bps / 1e9:g} Gbit/s line rate, under cProfile): {r['gbps']:.2f} Gbit/s")
    for w, role in ((0, "sender"), (1, "receiver")):
        path = Path(out_dir) / f"worker{w}.prof"
        if path.is_file():
            print(f"--- worker {w} ({role}), top by own time")
            pstats.Stats(str(path)).sort_stats("tottime").print_stats(12)


def main() -> int:
    from emulator.units import parse_rate_bps, parse_size_bytes

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--size", default="512MiB", help="bytes of the one flow (ours)")
    ap.add_argument("--line-rates", default="8Gbps,100Gbps", help="NIC line rates to run ours at")
    ap.add_argument("--duration", type=float, default=2.0, help="seconds per iperf3 / ceiling run")
    ap.add_argument("--port", type=int, default=24791)
    ap.add_argument("--pin-modes", default="pinned,unpinned",
                    help="run ours pinned (sender worker on CPU0, receiver on CPU1, as the ceiling) and/or unpinned")
    ap.add_argument("--profile", metavar="DIR", help="also profile one run of ours at the last line rate")
    ap.add_argument("--realtime", action="store_true",
                    help="run ours' workers, iperf3, the ceiling and the endpoints alone at SCHED_FIFO 1 (root): a "
                         "same-sitting comparison on a machine other work keeps busy")
    ap.add_argument("--sendmmsg", action="store_true",
                    help="ours' senders send a poll's batches by one sendmmsg (DirectConfig.sendmmsg)")
    ap.add_argument("--cores", default="compiled",
                    help="ours' per-batch core: compiled (DirectConfig.compiled_core), python, or both interleaved "
                         "('/py' marks the Python core's rows)")
    ap.add_argument("--record", action="store_true", help="append the figures to bench/RESULTS.md")
    args = ap.parse_args()
    cores = [c.strip() == "compiled" for c in args.cores.split(",") if c.strip()]
    size = parse_size_bytes(args.size)
    args.pin_modes = [m.strip() == "pinned" for m in args.pin_modes.split(",") if m.strip()]
    rates = [parse_rate_bps(x) for x in args.line_rates.split(",") if x]
    iperf3 = ensure_iperf3()
    prefix = realtime_prefix(args.realtime)
    modes = [(r, pin, c) for r in rates for pin in args.pin_modes for c in cores]
    keys = {m: f"ours@{m[0] / 1e9:g}G" + ("/pinned" if m[1] else "/unpinned") + ("" if m[2] else "/py") for m in modes}
    samples: dict[str, list[float]] = {"iperf3": [], "ceiling": [], **{k: [] for k in keys.values()}}
    notes: list[str] = []
    cpu: dict[str, list[float]] = {"ceiling": [], **{k: [] for k in keys.values()}}
    split: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in keys.values()}
    loads: list[float] = []
    load0 = os.getloadavg()
    for rep in range(args.reps):
        loads.append(os.getloadavg()[0])
        if iperf3:
            r = run_iperf3(iperf3, args.port + 1, args.duration, prefix)
            samples["iperf3"].append(r["gbps"])
            print(f"[rep {rep}] iperf3 -u -b 0 -l 4096: {r['gbps']:.2f} Gbit/s (loss {r['lost_percent']}%)", flush=True)
        r = run_ceiling(args.duration, prefix)
        samples["ceiling"].append(r["gbps"])
        cpu["ceiling"].append(r.get("cpu_us_per_batch", 0.0))
        print(f"[rep {rep}] python gso->gro ceiling: {r['gbps']:.2f} Gbit/s (CPU of its two processes ≈ "
              f"{r.get('cpu_us_per_batch', 0.0):.1f} µs per batch) {r.get('error', '')}", flush=True)
        for (rate, pin, compiled), key in keys.items():
            r = run_ours(size, rate, args.port, 120, pin=pin, realtime=args.realtime, sendmmsg=args.sendmmsg,
                         compiled=compiled)
            samples[key].append(r["gbps"])
            cpu[key].append(r["cpu_us_per_batch"])
            split[key].append((r["tx_cpu_us"], r["rx_cpu_us"], r["tx_busy"], r["rx_busy"]))
            print(f"[rep {rep}] {key} (line rate {rate / 1e9:g} Gbit/s): {r['gbps']:.2f} Gbit/s "
                  f"(retx {r['retx_bytes']} B, socket drops {r['socket_drops']}, window cuts {r['window_cuts']}, lag p99 "
                  f"{(r['timer_lag_p99_ns'] or 0) / 1000:.0f} µs, CPU per 15-packet batch: both workers "
                  f"{r['cpu_us_per_batch']:.1f} µs, sender loop {r['tx_cpu_us']:.1f} (busy {100 * r['tx_busy']:.0f} %), "
                  f"receiver loop {r['rx_cpu_us']:.1f} (busy {100 * r['rx_busy']:.0f} %), kernel "
                  f"{100 * r['sys_share']:.0f} %; {r['packets_per_send']:.1f} packets per GSO send, per GB "
                  f"{r['sends_per_gb']:.0f} sends in {r.get('send_syscalls_per_gb', 0):.0f} calls / {r['recvs_per_gb']:.0f} "
                  f"receives in {r.get('recv_syscalls_per_gb', 0):.0f} calls (+ {r['empty_recvs_per_gb']:.0f} empty, "
                  f"{r.get('failed_recvs_per_gb', 0):.0f} found nothing) / {r['acks_per_gb']:.0f} ACKs / {r['loops_per_gb']:.0f} loop passes "
                  f"({r['sleeps_per_gb']:.0f} slept: sender {r['worker_sleeps_per_gb'].get(0, 0):.0f}, receiver {r['worker_sleeps_per_gb'].get(1, 0):.0f}); kernels warmed in {r['kernel_warm_s']} s before the clock; "
                  f"load {r['load']:.2f}) "
                  f"{r['errors'] or ''}", flush=True)
            notes.extend(r["warnings"])
    load1 = os.getloadavg()
    eo = endpoint_only(min(size, 128 << 20), realtime=bool(prefix))
    print(f"endpoints alone (no sockets, one core each): sender {eo['tx_us_per_batch']:.1f} µs/batch = "
          f"{eo['tx_gbps']:.2f} Gbit/s, receiver {eo['rx_us_per_batch']:.1f} µs/batch = {eo['rx_gbps']:.2f} Gbit/s")
    med = {k: (statistics.median(v) if v else 0.0) for k, v in samples.items()}
    best_key = max((k for k in med if k.startswith("ours")), key=lambda k: med[k])
    ours = med[best_key]
    vs_iperf = ours / med["iperf3"] if med["iperf3"] else float("nan")
    vs_ceiling = ours / med["ceiling"] if med["ceiling"] else float("nan")
    lines = ["| measurement | median Gbit/s | samples |", "|---|---|---|"]
    for k, v in samples.items():
        extra = ""
        if cpu.get(k) and k in split:
            tx_us = statistics.median(x[0] for x in split[k])
            rx_us = statistics.median(x[1] for x in split[k])
            tx_busy = statistics.median(x[2] for x in split[k])
            rx_busy = statistics.median(x[3] for x in split[k])
            extra = (f" (CPU per batch, medians: both workers {statistics.median(cpu[k]):.1f} µs = sender loop "
                     f"{tx_us:.1f} + receiver loop {rx_us:.1f} + start-up; loops busy {100 * tx_busy:.0f} % / "
                     f"{100 * rx_busy:.0f} % of their wall time)")
        elif cpu.get(k):
            extra = f" (CPU of its two processes ≈ {statistics.median(cpu[k]):.1f} µs per batch)"
        lines.append(f"| {k} | {med[k]:.2f} | {', '.join(f'{x:.2f}' for x in v)}{extra} |")
    lines.append(f"| **ours (best: {best_key}) / iperf3** | **{vs_iperf:.2f}×** (target ≥ 3×) | |")
    lines.append(f"| **ours / python GSO→GRO ceiling** | **{100 * vs_ceiling:.0f} %** (target ≥ 75 %) | |")
    lines.append(f"| endpoints alone, no sockets (sender / receiver bound) | {eo['tx_gbps']:.2f} / {eo['rx_gbps']:.2f} "
                 f"| {eo['tx_us_per_batch']:.1f} / {eo['rx_us_per_batch']:.1f} µs per 15-packet batch |")
    table = "\n".join(lines)
    print()
    print(table)
    print(f"load average {load0[0]:.2f} -> {load1[0]:.2f} (at each rep's start: {', '.join(f'{x:.2f}' for x in loads)})")
    if args.profile:
        profile_once(size, rates[-1], args.port, args.profile)
    if args.record:
        cmd = "python bench/goodput_direct.py " + " ".join(sys.argv[1:])
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        text = (f"\n## Two-rank direct goodput vs iperf3 and the Python GSO→GRO ceiling ({stamp})\n\n"
                f"Command: `{cmd}` ({args.reps} interleaved reps, flow {args.size}, {os.cpu_count()} CPUs, "
                f"{'everything at SCHED_FIFO 1, ' if prefix else ''}load "
                f"average {load0[0]:.2f} → {load1[0]:.2f}, at each rep's start {', '.join(f'{x:.2f}' for x in loads)}; "
                f"'pinned' = sender worker on CPU0, receiver on CPU1 as the ceiling pins its processes).\n\n{table}\n")
        if notes:
            text += "\nDriver health warnings seen: " + "; ".join(sorted(set(notes))) + "\n"
        with open(HERE / "RESULTS.md", "a") as fh:
            fh.write(text)
        print("appended to bench/RESULTS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
