"""Hosts as network namespaces (veth pairs into a bridge), real agents inside them, the controller in its
own namespace: a mixed All-Reduce + All-to-All over 3 hosts delivers every byte into one results
directory with every host's clock offset; killing one agent mid-run ends the run within its timeout
naming that host (exit 3); with ``tc tbf`` on a bridge port, an incast meets a real kernel bottleneck."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _controller(ctl_ns: str, prof: Path, hosts: Path, token_file: Path, out: Path) -> list[str]:
    return ["ip", "netns", "exec", ctl_ns, sys.executable, "-m", "emulator", "run", str(prof), "--hosts", str(hosts),
            "--token-file", str(token_file), "-o", str(out), "--quiet"]


def _wait_for_traffic(ns: str, url: str, token_file: Path, timeout_s: float = 60.0) -> None:
    """Until the agent at ``url`` (seen from namespace ``ns``) reports delivered bytes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.3)
        res = subprocess.run(["ip", "netns", "exec", ns, "curl", "-s", "-m", "5", "-H",
                              f"Authorization: Bearer {token_file.read_text().strip()}", f"{url}/v1/status"],
                             capture_output=True, text=True, timeout=10)
        try:
            if json.loads(res.stdout).get("progress", {}).get("bytes_delivered", 0) > 0:
                return
        except ValueError:
            pass
    pytest.fail(f"no traffic at {url} within {timeout_s:g} s")


def _agents(start_agent, names, addrs, n):
    subnet = addrs[0].rsplit(".", 1)[0] + ".0/24"
    return [start_agent("--allow", subnet, listen=f"{addrs[i]}:7400", ns=names[i]) for i in range(n)]


def test_mixed_run_over_three_namespaced_hosts(lab, start_agent, token_file, tmp_path, profiles):
    names, addrs, _ = lab(3)
    agents = _agents(start_agent, names, addrs, 3)
    out = tmp_path / "out"
    prof = profiles[0](tmp_path / "p.yaml", "mixed:1MiB")
    hosts = profiles[1](tmp_path / "hosts.yaml", agents, addrs[:3], ("0-2", "3-5", "6-7"))
    res = subprocess.run(_controller(names[-1], prof, hosts, token_file, out),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    doc = json.loads((out / "results.json").read_text())
    tot = doc["summary"]["totals"]
    assert doc["complete"] and tot["bytes_delivered"] == tot["bytes_scheduled"] > 0
    hosts = doc["driver"]["health"]["hosts"]
    assert [h["ranks"] for h in hosts] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert all(h["uncertainty_ns"] > 0 and h["samples"] == 32 for h in hosts)


def test_killing_one_namespaced_agent_ends_the_run_naming_it(lab, start_agent, token_file, tmp_path, profiles):
    names, addrs, _ = lab(3)
    agents = _agents(start_agent, names, addrs, 3)
    out = tmp_path / "out"
    prof = profiles[0](tmp_path / "p.yaml", "mixed:256MiB", timeout="120s", rate="500Mbps")
    hosts = profiles[1](tmp_path / "hosts.yaml", agents, addrs[:3], ("0-2", "3-5", "6-7"))
    ctl = subprocess.Popen(_controller(names[-1], prof, hosts, token_file, out),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_traffic(names[-1], agents[2].url, token_file)
        agents[2].kill()
        killed = time.monotonic()
        _, stderr = ctl.communicate(timeout=40)
    finally:
        if ctl.poll() is None:
            ctl.kill()
    assert ctl.returncode == 3, stderr
    assert time.monotonic() - killed < 20
    assert f"host {agents[2].url} (ranks 6-7)" in stderr
    doc = json.loads((out / "results.json").read_text())
    lost = [h for h in doc["driver"]["health"]["hosts"] if h["lost"]]
    assert [h["ranks"] for h in lost] == [[6, 7]]
    kept = [h for h in doc["driver"]["health"]["hosts"] if not h["lost"]]
    assert len(kept) == 2 and all("wall_ns" in h for h in kept)  # their records came back


def test_incast_through_a_tbf_bottleneck_on_the_bridge(lab, start_agent, token_file, tmp_path, profiles):
    names, addrs, br = lab(2)
    subprocess.run(["ip", "netns", "exec", br, "tc", "qdisc", "add", "dev", "p0", "root", "tbf", "rate", "100mbit",
                    "burst", "64kb", "latency", "50ms"], check=True, capture_output=True, timeout=10)
    agents = _agents(start_agent, names, addrs, 2)
    out = tmp_path / "out"
    # ranks 1-3 on host 1 each send 1 MiB to rank 0 on host 0: ≥ 24 Mbit through a 100 Mbit/s tbf ≥ 0.24 s
    prof = profiles[0](tmp_path / "p.yaml", """  collectives:
    - type: gather
      group: 0-3
      root: 0
      size: 1MiB
      algorithm: direct
      iterations: 1
""", ranks=4)
    hosts = profiles[1](tmp_path / "hosts.yaml", agents, addrs[:2], ("0", "1-3"))
    res = subprocess.run(_controller(names[-1], prof, hosts, token_file, out), capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    doc = json.loads((out / "results.json").read_text())
    tot = doc["summary"]["totals"]
    assert tot["bytes_delivered"] == tot["bytes_scheduled"] >= 3 << 20
    wall_s = doc["driver"]["wall_ns"] / 1e9
    assert wall_s >= tot["bytes_scheduled"] * 8 / 100e6  # the kernel's bottleneck set the pace, not the ports
