"""HOSTS.yaml: which agent runs which ranks on which data-plane addresses (sans-IO but for reading it).

::

    hosts:
      - agent: http://10.0.0.1:7400      # or https://
        ranks: 0-3                       # "0-3", "0,2,4-5", 7, or a list of ranks
        addresses: [10.0.1.1, 10.0.1.2]  # one data-plane address per rank, or one for all of them

Every problem is a :class:`~emulator.errors.ConfigError` naming the file and the key
(``hosts[1].ranks``). Ranks sharing an address get consecutive UDP ports from the profile's port.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from emulator.errors import ConfigError


@dataclass(frozen=True, slots=True)
class HostSpec:
    """One agent and the ranks it runs, with each rank's data-plane address."""

    agent: str
    ranks: tuple[int, ...]
    addresses: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.agent} (ranks {format_ranks(self.ranks)})"


@dataclass(frozen=True, slots=True)
class HostsPlan:
    """Every host of a run; index = host."""

    hosts: tuple[HostSpec, ...]
    source: str = "HOSTS.yaml"

    @property
    def world_size(self) -> int:
        return sum(len(h.ranks) for h in self.hosts)

    def rank_addresses(self) -> tuple[str, ...]:
        out: dict[int, str] = {}
        for h in self.hosts:
            out.update(zip(h.ranks, h.addresses, strict=True))
        return tuple(out[r] for r in sorted(out))

    def rank_ports(self, udp_port: int) -> tuple[int, ...]:
        """UDP port per rank: ``udp_port`` + how many lower ranks share its address."""
        seen: dict[str, int] = {}
        ports = []
        for a in self.rank_addresses():
            ports.append(udp_port + seen.get(a, 0))
            seen[a] = seen.get(a, 0) + 1
        if max(ports, default=0) > 65535:
            raise ConfigError(f"{self.source}: too many ranks share one address for UDP port {udp_port}")
        return tuple(ports)

    def check_world(self, world_size: int) -> None:
        if self.world_size != world_size:
            raise ConfigError(f"{self.source}: hosts name {self.world_size} ranks, the schedule has {world_size}")


def format_ranks(ranks: tuple[int, ...]) -> str:
    """``(0, 1, 2, 5)`` → ``0-2,5``."""
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(out)


def parse_ranks(value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected ranks like 0-3 or [0, 1], got {value!r}")
    if isinstance(value, int):
        items: list[Any] = [value]
    elif isinstance(value, list):
        items = value
    elif isinstance(value, str):
        items = [p.strip() for p in value.split(",") if p.strip()]
    else:
        raise ConfigError(f"{where}: expected ranks like 0-3 or [0, 1], got {value!r}")
    out: list[int] = []
    for it in items:
        if isinstance(it, int) and not isinstance(it, bool):
            out.append(it)
            continue
        lo, sep, hi = str(it).partition("-")
        if not lo.strip().isdigit() or (sep and not hi.strip().isdigit()):
            raise ConfigError(f"{where}: {it!r} is not a rank or a range like 0-3")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ConfigError(f"{where}: range {it!r} runs backwards")
        out.extend(range(a, b + 1))
    if not out or min(out) < 0:
        raise ConfigError(f"{where}: needs at least one rank >= 0")
    if len(set(out)) != len(out):
        raise ConfigError(f"{where}: names a rank twice")
    return tuple(sorted(out))


def parse_hosts(doc: Any, source: str = "HOSTS.yaml") -> HostsPlan:
    """A :class:`HostsPlan` from the parsed YAML document (module docstring)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("hosts"), list) or not doc["hosts"]:
        raise ConfigError(f"{source}: hosts: expected a non-empty list of hosts")
    for k in doc:
        if k != "hosts":
            raise ConfigError(f"{source}: {k}: unknown key (expected hosts)")
    hosts = []
    owner: dict[int, str] = {}
    for i, h in enumerate(doc["hosts"]):
        where = f"{source}: hosts[{i}]"
        if not isinstance(h, dict):
            raise ConfigError(f"{where}: expected a mapping with agent, ranks, addresses")
        for k in h:
            if k not in ("agent", "ranks", "addresses"):
                raise ConfigError(f"{where}.{k}: unknown key (expected agent, ranks, addresses)")
        for k in ("agent", "ranks", "addresses"):
            if k not in h:
                raise ConfigError(f"{where}.{k}: missing")
        url = h["agent"]
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            raise ConfigError(f"{where}.agent: expected http://HOST:PORT or https://HOST:PORT, got {url!r}")
        ranks = parse_ranks(h["ranks"], f"{where}.ranks")
        for r in ranks:
            if r in owner:
                raise ConfigError(f"{where}.ranks: rank {r} is also run by {owner[r]}")
            owner[r] = url
        addrs = h["addresses"]
        if isinstance(addrs, str):
            addrs = [addrs]
        if not isinstance(addrs, list) or len(addrs) not in (1, len(ranks)):
            raise ConfigError(f"{where}.addresses: expected one address per rank ({len(ranks)}) or one for all")
        for j, a in enumerate(addrs):
            try:
                ip = ipaddress.ip_address(str(a))
            except ValueError:
                raise ConfigError(f"{where}.addresses[{j}]: {a!r} is not an IP address") from None
            if ip.version != 4:
                raise ConfigError(f"{where}.addresses[{j}]: {a!r}: only IPv4 is supported")
        if len(addrs) == 1:
            addrs = addrs * len(ranks)
        hosts.append(HostSpec(agent=url.rstrip("/"), ranks=ranks, addresses=tuple(str(a) for a in addrs)))
    world = len(owner)
    missing = sorted(set(range(world)) - set(owner))
    if missing:
        raise ConfigError(f"{source}: hosts: ranks must be 0..{world - 1} with none missing; missing {missing[:8]}")
    return HostsPlan(hosts=tuple(hosts), source=source)


def load_hosts(path: str | Path) -> HostsPlan:
    """Read and check HOSTS.yaml."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"--hosts {path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    return parse_hosts(doc, str(path))
