"""Multi-host data path against one process group: agents in network namespaces, the bare bridge, loopback.

Three ways to run the same 8 ranks (2 "hosts" × 4 ranks: host h's ranks on one address, UDP ports
``--udp-port`` + 0..3), each rep running all three in a shuffled order (interleaved, so load drifts hit
them alike):

* **remote**: 2 namespaced hosts (:class:`emulator.remote.lab.NamespaceLab`: veth pairs into a bridge,
  MTU 9000), an agent in each, the controller in its own namespace: ``emulator run PROFILE --hosts``;
* **bare**: the same ranks in one ``direct`` process group on this host, each rank's socket inside its
  host's namespace (``DirectConfig.netns``): the packets take the same veth/bridge path with no agent,
  controller or clock offset — the kernel's share of any remote/local gap;
* **local**: the same process group with both addresses on ``lo`` (127.0.0.0/8): the ``direct`` baseline.

Every run is one ``emulator``-equivalent process (``run_profile`` with the direct driver; ``remote`` is
``emulator run --hosts``), with ``fabric.workers`` from ``--workers`` in all three: 4 gives every run two
workers of four ranks (one per "host"); 0 gives a worker per CPU on every agent, so the remote run has
twice the local run's workers on one machine. ``--pin`` pins the workers the same way in every run:
worker w (the ranks of host w) on CPU w; each agent runs under ``taskset`` on its host's CPU.

Reported per mode: busbw (A2A, byte-weighted over the measured instances) median and min–max, the
per-rep paired ratios remote/local, bare/local and remote/bare (median and min–max), CPU seconds per
run (local and bare: the whole process; remote: the agents' run processes and workers, the agents'
own event loops during the run, and the controller), and the remote run's clock offset uncertainty
and skew share of the iteration time. **setup**: 8 agents on 127.0.0.0/8 with one rank each (a 64 KiB
All-to-All): the controller's setup to t0. Targets (issue 12): remote busbw ≥ 0.90 × local; setup to t0
< 1 s for 8 hosts; offset uncertainty < 100 µs on the namespaces. Every step is bounded by a timeout;
everything the bench made is removed.

    python bench/multihost.py [--reps 7] [--size 16MiB] [--iterations 10] [--rate 2Gbps] [--workers 4] [--pin]
        [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from emulator.remote.lab import NamespaceLab, spawn_agent  # noqa: E402

EMULATOR = [sys.executable, "-m", "emulator"]
MODES = ("remote", "bare", "local")
RANKS_PER_HOST = 4
LOCAL_ADDRESSES = ("127.0.0.80", "127.0.0.81")


def _profile(d: Path, size: str, rate: str, ranks: int, udp_port: int, iterations: int, workers: int = 0) -> Path:
    p = d / f"a2a_{ranks}_{size}.yaml"
    p.write_text(f"""extends: {ROOT / "profiles" / "base" / "loopback_8.yaml"}
name: multihost_a2a
timeout: 120s
warmup: 1
iterations: {iterations}
ranks:
  count: {ranks}
fabric:
  kind: direct
  udp_port: {udp_port}
  workers: {workers}
  time_dilation: 1
  ports:
    rate: {rate}
  transport:
    retransmit_timeout: 30ms
  direct:
    address_template: 127.0.0.{{rank+90}}
workload:
  collectives:
    - type: all_to_all
      group: 0-{ranks - 1}
      size: {size}
      algorithm: direct
      iterations: 1
""")
    return p


def direct_child(argv: list[str]) -> int:
    """``--direct-child PROFILE ADDR0,ADDR1 NS0,NS1|- pin|- -o OUT --quiet``: the profile's ranks in one direct
    process group, host h's ranks on ADDRh (ports udp_port + 0..3) with their sockets in namespace NSh."""
    from dataclasses import replace

    from emulator.config.loader import load_profile
    from emulator.drivers.direct import DirectDriver
    from emulator.run.pipeline import run_profile
    from emulator.run.runner import direct_config, endpoint_config

    prof_path, addrs, netns, pin, out = argv[0], argv[1].split(","), argv[2], argv[3] == "pin", argv[5]
    profile = load_profile(prof_path)
    per_host = netns.split(",") if netns != "-" else [None] * len(addrs)

    def config_for(world: int):
        host = [r // RANKS_PER_HOST for r in range(world)]
        return replace(direct_config(profile, world), addresses=tuple(addrs[h] for h in host),
                       ports=tuple(profile.fabric.udp_port + r % RANKS_PER_HOST for r in range(world)),
                       netns=tuple(per_host[h] for h in host) if any(per_host) else (), pin_cpus=pin)

    drv = DirectDriver(config_for, endpoint_config(profile), profile.timeout_ns / 1e9)
    return run_profile(profile, out_dir=out, driver=drv, quiet=True).exit_code


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _proc_cpu_s(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of process ``pid`` (``/proc/PID/stat``)."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(f[11]) + int(f[12])) / tick, (int(f[13]) + int(f[14])) / tick


def _run(cmd: list[str], out: Path, timeout_s: float = 300) -> tuple[dict, float]:
    """Run ``cmd -o out``; (its results.json, the CPU seconds it and its children used)."""
    cpu0 = _children_cpu_s()
    res = subprocess.run([*cmd, "-o", str(out), "--quiet"], capture_output=True, text=True, timeout=timeout_s)
    cpu_s = _children_cpu_s() - cpu0
    if res.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd[:8])}...: exit {res.returncode}: {res.stderr.strip()[-500:]}")
    doc = json.loads((out / "results.json").read_text())
    if not doc["complete"]:
        raise RuntimeError(f"{' '.join(cmd[:8])}...: incomplete: {doc['errors'][:3]}")
    return doc, cpu_s


def _busbw(doc: dict) -> float:
    """The All-to-All busbw in GB/s (byte-weighted mean over the measured instances)."""
    return float(doc["summary"]["all_to_all"]["busbw_weighted_gbps"])


def _hosts_yaml(d: Path, agents: list, addresses: list[str], ranks: list[str]) -> Path:
    lines = ["hosts:"]
    for a, addr, r in zip(agents, addresses, ranks, strict=True):
        lines += [f"  - agent: {a.url}", f"    ranks: {r}", f"    addresses: [{addr}]"]
    p = d / f"hosts_{len(agents)}.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p


def _spread(v: list[float], fmt: str = ".3f") -> str:
    return f"{statistics.median(v):{fmt}} ({min(v):{fmt}}–{max(v):{fmt}})" if v else "n/a"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--direct-child":
        return direct_child(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--size", default="16MiB")
    ap.add_argument("--iterations", type=int, default=10, help="measured iterations per run (after 1 warmup)")
    ap.add_argument("--rate", default="2Gbps")
    ap.add_argument("--udp-port", type=int, default=14793)
    ap.add_argument("--workers", type=int, default=4,
                    help="fabric.workers (ranks per worker process) of every run: 4 = one worker per host, two "
                         "in all (the local run's layout); 0 = one worker per CPU on every agent (on one "
                         "machine, twice the local run's workers)")
    ap.add_argument("--pin", action="store_true", help="worker w on CPU w in every run (agents under taskset)")
    ap.add_argument("--modes", default=",".join(MODES), help="which of remote,bare,local to run")
    ap.add_argument("--no-setup", action="store_true", help="skip the 8-agent setup-to-t0 runs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--record", action="store_true", help="append a section to bench/RESULTS.md")
    args = ap.parse_args()
    modes = [m for m in MODES if m in args.modes.split(",")]
    rng = random.Random(args.seed)
    busbw: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in (*modes, "agents_data", "agents_own", "controller")}
    rows: dict[str, list[float]] = {"setup": [], "uncert": [], "skew": []}
    ratios: dict[str, list[float]] = {"remote/local": [], "bare/local": [], "remote/bare": []}
    loads = [float(open("/proc/loadavg").read().split()[0])]
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        tok = d / "token"
        tok.write_text("bench-token\n")
        prof = _profile(d, args.size, args.rate, 2 * RANKS_PER_HOST, args.udp_port, args.iterations, args.workers)
        small = _profile(d, "64KiB", args.rate, 8, args.udp_port, 3)
        pin = "pin" if args.pin else "-"
        with NamespaceLab(2) as lab:
            agents = []
            for i, (ns, a) in enumerate(zip(lab.hosts, lab.addresses, strict=True)):
                extra = ["taskset", "-c", str(i % os.cpu_count())] if args.pin else []
                agents.append(spawn_agent(tok, "--allow", lab.subnet, listen=f"{a}:7400", ns=ns, wrap=extra))
            local_agents = [] if args.no_setup else [spawn_agent(tok, listen=f"127.0.0.{100 + i}:0")
                                                     for i in range(8)]
            child = [sys.executable, str(Path(__file__).resolve()), "--direct-child", str(prof)]
            cmds = {
                "remote": ["ip", "netns", "exec", lab.controller_ns, *EMULATOR, "run", str(prof),
                           "--hosts", str(_hosts_yaml(d, agents, lab.addresses, ["0-3", "4-7"])),
                           "--token-file", str(tok)],
                "bare": [*child, ",".join(lab.addresses), ",".join(lab.hosts), pin],
                "local": [*child, ",".join(LOCAL_ADDRESSES), "-", pin],
            }
            try:
                hosts8 = None if args.no_setup else _hosts_yaml(
                    d, local_agents, [f"127.0.0.{90 + i}" for i in range(8)], [str(i) for i in range(8)])
                for rep in range(args.reps):
                    got: dict[str, float] = {}
                    for mode in rng.sample(modes, len(modes)):
                        before = [_proc_cpu_s(a.proc.pid) for a in agents] if mode == "remote" else []
                        try:
                            doc, cpu_s = _run(cmds[mode], d / f"{mode}{rep}")
                        except RuntimeError as exc:
                            failures.append(f"rep {rep} {mode}: {str(exc)[-300:]}")
                            print(failures[-1], flush=True)
                            continue
                        got[mode] = _busbw(doc)
                        busbw[mode].append(got[mode])
                        cpu[mode].append(cpu_s)
                        if mode == "remote":
                            after = [_proc_cpu_s(a.proc.pid) for a in agents]
                            cpu["controller"].append(cpu_s)
                            cpu["agents_own"].append(sum(a[0] - b[0] for a, b in zip(after, before, strict=True)))
                            cpu["agents_data"].append(sum(a[1] - b[1] for a, b in zip(after, before, strict=True)))
                            cpu["remote"][-1] = cpu_s + cpu["agents_own"][-1] + cpu["agents_data"][-1]
                            h = doc["driver"]["health"]["hosts"]
                            u_us = max(x["uncertainty_ns"] for x in h) / 1e3
                            rows["uncert"].append(u_us)
                            it_s = float((doc["summary"]["all_to_all"].get("cct") or {}).get("p50") or 0) / 1e9
                            rows["skew"].append(100 * u_us / 1e6 / it_s if it_s else float("nan"))
                    for k in ratios:
                        a, b = k.split("/")
                        if a in got and b in got and got[b]:
                            ratios[k].append(got[a] / got[b])
                    if hosts8 is not None:
                        try:
                            setup, _ = _run([*EMULATOR, "run", str(small), "--hosts", str(hosts8), "--token-file",
                                             str(tok)], d / f"setup{rep}")
                            rows["setup"].append(setup["driver"]["health"]["controller"]["setup_to_t0_s"])
                        except RuntimeError as exc:  # counted and named, the data-path figures are kept
                            failures.append(f"rep {rep} setup: {str(exc)[-300:]}")
                            print(failures[-1], flush=True)
                    loads.append(float(open("/proc/loadavg").read().split()[0]))
                    print(f"rep {rep}: busbw GB/s " + ", ".join(f"{m} {got[m]:.3f}" for m in modes if m in got)
                          + "; ratios " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in ratios.items() if v)
                          + (f"; setup to t0 (8 hosts) {rows['setup'][-1]:.3f} s" if rows["setup"] else "")
                          + (f"; offset uncertainty {rows['uncert'][-1]:.0f} µs" if rows["uncert"] else "")
                          + f"; load {loads[-1]:.2f}", flush=True)
            finally:
                for a in agents + local_agents:
                    a.stop()
    lines = [f"A2A {args.size} on 8 ranks (2 hosts × 4) at {args.rate}, {args.iterations} measured iterations, "
             f"fabric.workers {args.workers}{', pinned' if args.pin else ''}, {args.reps} reps interleaved "
             f"(shuffled order), load {min(loads):.2f}–{max(loads):.2f}:"]
    lines += [f"  busbw {m}: {_spread(busbw[m])} GB/s; CPU per run {_spread(cpu[m], '.2f')} s" for m in modes]
    lines += [f"  {k}: {_spread(v)}" + ("  (target ≥ 0.90)" if k == "remote/local" else "")
              for k, v in ratios.items() if v]
    if cpu["controller"]:
        lines.append(f"  remote CPU per run: agents' run processes + workers {_spread(cpu['agents_data'], '.2f')} s, "
                     f"agents' own event loops {_spread(cpu['agents_own'], '.3f')} s (= "
                     f"{_spread([100 * a / b for a, b in zip(cpu['agents_own'], cpu['agents_data'], strict=True)], '.1f')}"
                     f" % of the data plane's CPU), controller (whole process) {_spread(cpu['controller'], '.2f')} s")
    if rows["uncert"]:
        lines.append(f"  offset uncertainty {_spread(rows['uncert'], '.0f')} µs (target < 100 µs) = "
                     f"{_spread(rows['skew'], '.3f')} % of the median A2A time")
    if rows["setup"]:
        lines.append(f"  setup to t0, 8 hosts: {_spread(rows['setup'])} s (target < 1 s)")
    if failures:
        lines.append(f"  {len(failures)} failed runs (left out): " + "; ".join(failures))
    text = "\n".join(lines)
    print(text)
    if args.record:
        cmd = " ".join(sys.argv[1:]).replace("--record", "").strip()
        with open(HERE / "RESULTS.md", "a") as fh:
            fh.write(f"\n## Multi-host data path ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n\n"
                     f"`python bench/multihost.py {cmd}`:\n\n```\n{text}\n```\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
