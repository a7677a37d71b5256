"""Fixtures of the multi-host tests: agents as real processes (optionally inside a network namespace),
a token file, and namespaces as hosts (veth pairs into a bridge), all removed whatever happens."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

TOKEN = "s3cret-token-for-tests"


@dataclass
class AgentProc:
    url: str
    proc: subprocess.Popen
    log: Path

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def make_mixed():
    """:func:`mixed_schedule`, for the tests."""
    return mixed_schedule


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    p = tmp_path / "token"
    p.write_text(TOKEN + "\n")
    return p


@pytest.fixture
def start_agent(tmp_path: Path, token_file: Path):
    """``start_agent(*args, listen="127.0.0.1:0", ns=None)`` → a running agent; all are stopped at the end."""
    started: list[AgentProc] = []

    def start(*args: str, listen: str = "127.0.0.1:0", ns: str | None = None, https: bool = False) -> AgentProc:
        log = tmp_path / f"agent{len(started)}.log"
        cmd = [sys.executable, "-m", "emulator", "agent", "--listen", listen, "--token-file", str(token_file), *args]
        if ns:
            cmd = ["ip", "netns", "exec", ns, *cmd]
        fh = open(log, "w")  # noqa: SIM115 - the agent writes to it until it stops
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=fh, text=True)
        a = AgentProc("", proc, log)
        started.append(a)
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline and proc.poll() is None:
            line = proc.stdout.readline()
            if "listening on" in line:
                break
        if "listening on" not in line:
            pytest.fail(f"agent did not start: {line!r} {log.read_text()}")
        a.url = line.split("listening on ")[1].split()[0]
        return a

    yield start
    for a in started:
        if a.proc.poll() is None:
            a.proc.send_signal(signal.SIGTERM)
            try:
                a.proc.wait(10)
            except subprocess.TimeoutExpired:
                a.kill()


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    subprocess.run(cmd, check=True, capture_output=True, timeout=10)


@pytest.fixture
def lab():
    """``lab(n_hosts)`` → (namespace names, their 10.214.x.y addresses, the bridge's namespace): host i is namespace ``<tag>h<i>`` with
    address 10.214.<pid-derived>.<10+i>, plus a controller namespace (last entry) on .250; each has a veth
    into one bridge (its own namespace; the bridge's port toward host i is ``p<i>``). MTU 9000. Every namespace is deleted at the end."""
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (ip) not installed")
    tag = f"m{os.getpid() % 100000}"
    net = 100 + os.getpid() % 100
    made: list[str] = []

    def make(n: int) -> tuple[list[str], list[str], str]:
        br = f"{tag}br"
        names = [f"{tag}h{i}" for i in range(n)] + [f"{tag}c"]
        try:
            for ns in (br, *names):
                _ip("ip", "netns", "add", ns)
                made.append(ns)
        except (subprocess.CalledProcessError, OSError) as exc:
            reason = exc.stderr.decode().strip() if isinstance(exc, subprocess.CalledProcessError) else str(exc)
            pytest.skip(f"'ip netns add' is not permitted here: {reason}")
        _ip("ip", "link", "add", "br0", "type", "bridge", ns=br)
        addrs = []
        for i, ns in enumerate(names):
            peer = f"p{i}"
            addr = f"10.214.{net}.{250 if ns.endswith('c') else 10 + i}"
            _ip("ip", "link", "add", "eth0", "type", "veth", "peer", "name", peer, ns=br)
            _ip("ip", "link", "set", "eth0", "netns", ns, ns=br)
            _ip("ip", "link", "set", peer, "mtu", "9000", "master", "br0", "up", ns=br)
            _ip("ip", "link", "set", "eth0", "mtu", "9000", "up", ns=ns)
            _ip("ip", "link", "set", "lo", "up", ns=ns)
            _ip("ip", "addr", "add", f"{addr}/24", "dev", "eth0", ns=ns)
            addrs.append(addr)
        _ip("ip", "link", "set", "br0", "up", ns=br)
        return names, addrs, br

    try:
        yield make
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def mixed_schedule(ranks_ar: int, ranks_a2a: int, size_bytes: int):
    """Ranks 0..ranks_ar-1 ring All-Reduce, the next ranks_a2a ranks All-to-All, at the same time."""
    from emulator.schedule.compiler import compile_trace
    from emulator.trace.generators.common import coll_node
    from emulator.trace.model import CollectiveType, ProcessGroup, RankGraph, Trace

    ar = tuple(range(ranks_ar))
    a2a = tuple(range(ranks_ar, ranks_ar + ranks_a2a))
    ranks = {r: RankGraph(r, [coll_node(0, "c", CollectiveType.ALL_REDUCE if r in ar else CollectiveType.ALL_TO_ALL,
                                        size_bytes, pg_name="1" if r in ar else "2")]) for r in ar + a2a}
    groups = {"1": ProcessGroup("1", ar), "2": ProcessGroup("2", a2a)}
    return compile_trace(Trace(ranks=ranks, groups=groups))
