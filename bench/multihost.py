"""Multi-host control plane cost: agents in network namespaces against one direct process group.

Measured in one run, interleaved rep by rep:

* **remote**: 2 namespaced hosts × 4 ranks (:class:`emulator.remote.lab.NamespaceLab`, veth pairs into a
  bridge, MTU 9000), the controller in its own namespace: ``emulator run PROFILE --hosts`` with an
  All-to-All of ``--size`` (default 16 MiB) on 8 ranks; busbw (byte-weighted mean over the measured
  instances) from its results.json, and each host's clock offset uncertainty.
* **local**: the same profile with the same 8 ranks in one ``direct`` process group on one host
  (127.0.0.0/8 addresses, ``emulator run --fabric direct``).

Both runs take ``fabric.workers`` from ``--workers`` (default 0: a worker per CPU on every agent, so the
namespaced hosts, which share this machine's cores, run twice the local run's workers; 4 gives both runs
the same two workers).
* **setup**: 8 agents on 127.0.0.0/8 with one rank each (a 64 KiB All-to-All): the controller's setup to
  t0 (version check, 32 clock exchanges per agent, upload, arm, every agent ready, start) from
  results.json.

Targets (issue 12): remote busbw within 10 % of local; setup to t0 < 1 s for 8 hosts; offset uncertainty
< 100 µs on the namespaces. Every step is bounded by a timeout; everything the bench made is removed.

    python bench/multihost.py [--reps 3] [--size 16MiB] [--rate 2Gbps] [--workers 0] [--record]
"""

from __future__ import annotations

import argparse
import json
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


def _profile(d: Path, size: str, rate: str, ranks: int, address_template: str, workers: int = 0) -> Path:
    p = d / f"a2a_{ranks}_{size}.yaml"
    p.write_text(f"""extends: {ROOT / "profiles" / "base" / "loopback_8.yaml"}
name: multihost_a2a
timeout: 120s
warmup: 1
iterations: 3
ranks:
  count: {ranks}
fabric:
  kind: direct
  udp_port: 14793
  workers: {workers}
  time_dilation: 1
  ports:
    rate: {rate}
  transport:
    retransmit_timeout: 30ms
  direct:
    address_template: {address_template}
workload:
  collectives:
    - type: all_to_all
      group: 0-{ranks - 1}
      size: {size}
      algorithm: direct
      iterations: 1
""")
    return p


def _run(cmd: list[str], out: Path, timeout_s: float = 300) -> dict:
    res = subprocess.run([*cmd, "-o", str(out), "--quiet"], capture_output=True, text=True, timeout=timeout_s)
    if res.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd[:6])}...: exit {res.returncode}: {res.stderr.strip()[-500:]}")
    return json.loads((out / "results.json").read_text())


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--size", default="16MiB")
    ap.add_argument("--rate", default="2Gbps")
    ap.add_argument("--workers", type=int, default=0,
                    help="fabric.workers (ranks per worker process) of both runs: 0 = one worker per CPU on "
                         "every agent (on one machine, twice the local run's workers); 4 = one worker per "
                         "host, two in all, the local run's layout")
    ap.add_argument("--record", action="store_true", help="append a section to bench/RESULTS.md")
    args = ap.parse_args()
    rows: dict[str, list[float]] = {"remote": [], "local": [], "setup": [], "uncert": []}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        tok = d / "token"
        tok.write_text("bench-token\n")
        local_prof = _profile(d, args.size, args.rate, 8, "127.0.0.{rank+80}", args.workers)
        small = _profile(d, "64KiB", args.rate, 8, "127.0.0.{rank+90}")
        with NamespaceLab(2) as lab:
            agents = [spawn_agent(tok, "--allow", lab.subnet, listen=f"{a}:7400", ns=ns)
                      for ns, a in zip(lab.hosts, lab.addresses, strict=True)]
            local_agents = [spawn_agent(tok, listen=f"127.0.0.{100 + i}:0") for i in range(8)]
            try:
                hosts = _hosts_yaml(d, agents, lab.addresses, ["0-3", "4-7"])
                hosts8 = _hosts_yaml(d, local_agents, [f"127.0.0.{90 + i}" for i in range(8)],
                                     [str(i) for i in range(8)])
                for rep in range(args.reps):
                    remote = _run(["ip", "netns", "exec", lab.controller_ns, *EMULATOR, "run", str(local_prof),
                                   "--hosts", str(hosts), "--token-file", str(tok)], d / f"remote{rep}")
                    local = _run([*EMULATOR, "run", str(local_prof)], d / f"local{rep}")
                    setup = _run([*EMULATOR, "run", str(small), "--hosts", str(hosts8), "--token-file", str(tok)],
                                 d / f"setup{rep}")
                    h = remote["driver"]["health"]
                    rows["remote"].append(_busbw(remote))
                    rows["local"].append(_busbw(local))
                    rows["setup"].append(setup["driver"]["health"]["controller"]["setup_to_t0_s"])
                    rows["uncert"].append(max(x["uncertainty_ns"] for x in h["hosts"]) / 1e3)
                    print(f"rep {rep}: busbw remote {rows['remote'][-1]:.3f} GB/s, local {rows['local'][-1]:.3f} GB/s; "
                          f"setup to t0 (8 hosts) {rows['setup'][-1]:.3f} s; offset uncertainty "
                          f"{rows['uncert'][-1]:.0f} µs (min RTT {min(x['min_rtt_ns'] for x in h['hosts']) / 1e3:.0f} µs)",
                          flush=True)
            finally:
                for a in agents + local_agents:
                    a.stop()
    med = {k: statistics.median(v) for k, v in rows.items()}
    ratio = med["remote"] / med["local"] if med["local"] else float("nan")
    load = open("/proc/loadavg").read().split()[0]
    text = (f"remote/local busbw {ratio:.3f} (median remote {med['remote']:.3f} GB/s, local {med['local']:.3f} GB/s; "
            f"target ≥ 0.90); setup to t0, 8 hosts: median {med['setup']:.3f} s (target < 1 s); offset "
            f"uncertainty on the namespaces: median {med['uncert']:.0f} µs, max {max(rows['uncert']):.0f} µs "
            f"(target < 100 µs); {args.reps} reps, A2A {args.size} on 8 ranks at {args.rate}, "
            f"fabric.workers {args.workers}, load {load}")
    print(text)
    if args.record:
        with open(HERE / "RESULTS.md", "a") as fh:
            fh.write(f"\n## Multi-host control plane ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n\n"
                     f"`python bench/multihost.py --reps {args.reps} --size {args.size} --rate {args.rate} "
                     f"--workers {args.workers}`: {text}.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
