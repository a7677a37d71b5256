"""Hosts without a lab: network namespaces joined by veth pairs to one bridge, and agent processes in them.

Used by the tests (``tests/remote``) and ``bench/multihost.py``. :class:`NamespaceLab` creates
``<tag>br`` (the bridge), ``<tag>h<i>`` for every host and ``<tag>c`` for the controller, each with an
``eth0`` (MTU 9000) into the bridge (whose port toward host i is ``p<i>``) and one address in
``10.214.<net>.0/24``: host i at ``.10+i``, the controller at ``.250``. Everything it made is deleted on
exit, whatever happened. :func:`spawn_agent` starts ``emulator agent`` (optionally inside a namespace)
and returns once it listens.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


class LabUnavailable(RuntimeError):
    """``ip netns`` is missing or not permitted here."""


def ip(*args: str, ns: str | None = None) -> None:
    """``[ip netns exec NS] args...`` (raises CalledProcessError on failure)."""
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    subprocess.run(cmd, check=True, capture_output=True, timeout=10)


@dataclass
class NamespaceLab:
    """``n_hosts`` namespaced hosts plus a controller namespace on one bridge (module docstring)."""

    n_hosts: int
    tag: str = field(default_factory=lambda: f"m{os.getpid() % 100000}")
    net: int = field(default_factory=lambda: 100 + os.getpid() % 100)
    hosts: list[str] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)
    controller_ns: str = ""
    controller_address: str = ""
    bridge_ns: str = ""
    _made: list[str] = field(default_factory=list)

    @property
    def subnet(self) -> str:
        return f"10.214.{self.net}.0/24"

    def __enter__(self) -> NamespaceLab:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _build(self) -> None:
        self.bridge_ns = f"{self.tag}br"
        names = [f"{self.tag}h{i}" for i in range(self.n_hosts)] + [f"{self.tag}c"]
        try:
            for ns in (self.bridge_ns, *names):
                ip("ip", "netns", "add", ns)
                self._made.append(ns)
        except (subprocess.CalledProcessError, OSError) as exc:
            reason = exc.stderr.decode().strip() if isinstance(exc, subprocess.CalledProcessError) else str(exc)
            raise LabUnavailable(f"'ip netns add' is not permitted here: {reason}") from None
        ip("ip", "link", "add", "br0", "type", "bridge", ns=self.bridge_ns)
        for i, ns in enumerate(names):
            addr = f"10.214.{self.net}.{250 if i == self.n_hosts else 10 + i}"
            ip("ip", "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}", ns=self.bridge_ns)
            ip("ip", "link", "set", "eth0", "netns", ns, ns=self.bridge_ns)
            ip("ip", "link", "set", f"p{i}", "mtu", "9000", "master", "br0", "up", ns=self.bridge_ns)
            ip("ip", "link", "set", "eth0", "mtu", "9000", "up", ns=ns)
            ip("ip", "link", "set", "lo", "up", ns=ns)
            ip("ip", "addr", "add", f"{addr}/24", "dev", "eth0", ns=ns)
            if i < self.n_hosts:
                self.hosts.append(ns)
                self.addresses.append(addr)
            else:
                self.controller_ns, self.controller_address = ns, addr
        ip("ip", "link", "set", "br0", "up", ns=self.bridge_ns)

    def tbf(self, host: int, rate: str, burst: str = "64kb", latency: str = "50ms") -> None:
        """A token-bucket bottleneck on the bridge's port toward ``host``."""
        ip("tc", "qdisc", "add", "dev", f"p{host}", "root", "tbf", "rate", rate, "burst", burst, "latency", latency,
           ns=self.bridge_ns)

    def close(self) -> None:
        while self._made:
            subprocess.run(["ip", "netns", "del", self._made.pop()], capture_output=True, timeout=10)


@dataclass
class AgentProcess:
    """A running ``emulator agent``."""

    url: str
    proc: subprocess.Popen

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def spawn_agent(token_file: str | Path, *args: str, listen: str = "127.0.0.1:0", ns: str | None = None,
                log: str | Path | None = None, start_timeout_s: float = 30.0,
                wrap: Sequence[str] = ()) -> AgentProcess:
    """Start ``emulator agent`` (inside ``ns`` when given, behind the exec-style command ``wrap``, e.g.
    ``taskset -c 1``); returns once it prints where it listens."""
    cmd = [*wrap, sys.executable, "-m", "emulator", "agent", "--listen", listen, "--token-file", str(token_file), *args]
    if ns:
        cmd = ["ip", "netns", "exec", ns, *cmd]
    err = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 - the agent writes to it until it stops
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    deadline = time.monotonic() + start_timeout_s
    line = ""
    while time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        if "listening on" in line:
            return AgentProcess(line.split("listening on ")[1].split()[0], proc)
    proc.kill()
    proc.wait(10)
    raise RuntimeError(f"agent did not start: {line.strip()!r}")
