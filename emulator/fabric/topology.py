"""Fabric topologies for the virtual-time driver: one switch, or a two-tier leaf–spine with ECMP.

Theory of operation
-------------------
Nodes are numbered hosts first (host ``r`` carries rank ``r``), then switches. Every unidirectional link
is one egress *port* owned by the node that sends into it; a :class:`PortSpec` names its owner, its
far end (``peer``), its rate and its propagation latency. Forwarding is by destination rank:

* **single_switch**: each rank's NIC port leads to switch 0; switch 0 has one down port per rank.
* **leaf_spine**: rank ``r`` sits on leaf ``rank_leaf[r]`` (placement ``round_robin``: r mod leaves;
  ``block``: r // hosts_per_leaf; or an explicit host index per rank, leaf = host // hosts_per_leaf). A leaf
  forwards to a local rank on its down port, else up to one spine chosen by ECMP; a spine forwards
  down to the destination's leaf. Uplink rate defaults to
  ``hosts_per_leaf × host_rate / (spines × oversubscription)`` so ``oversubscription`` = 2 makes a leaf's
  uplinks carry half of what its hosts can send.
* **ECMP**: the spine is ``crc32(src rank, dst rank, UDP source port) mod spines``. The UDP source port
  is the RoCEv2 one (``emulator.wire.udp_source_port`` of the QP numbers), so a queue pair keeps one
  path for its lifetime and different QPs spread across spines; ``ecmp="none"`` pins everything to
  spine 0 (a deliberately unbalanced fabric).

:meth:`Topology.egress` answers "which port does switch ``node`` use for this packet"; decisions for
a (switch, src, dst, sport) tuple are cached, so per-packet routing is one dict lookup.
"""

from __future__ import annotations

import dataclasses
import math
import struct
import zlib

from emulator.errors import ConfigError

TOPOLOGY_KINDS = ("single_switch", "leaf_spine")
PLACEMENTS = ("round_robin", "block")
_HASH = struct.Struct("!IIH")


@dataclasses.dataclass(frozen=True, slots=True)
class TopologyConfig:
    """Which fabric to build (see the module docstring)."""

    kind: str = "single_switch"
    leaves: int = 2
    spines: int = 1
    hosts_per_leaf: int | None = None  # None = ceil(ranks / leaves)
    oversubscription: float = 1.0
    uplink_rate_bps: float | None = None  # None = derived from oversubscription
    ecmp: str = "udp_sport"
    placement: str | tuple[int, ...] = "round_robin"

    def __post_init__(self) -> None:
        if self.kind not in TOPOLOGY_KINDS:
            raise ConfigError(f"topology: 'kind' must be one of {', '.join(TOPOLOGY_KINDS)}, got {self.kind!r}")
        for name in ("leaves", "spines"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"topology: {name!r} must be an integer >= 1, got {v!r}")
        if self.hosts_per_leaf is not None and (not isinstance(self.hosts_per_leaf, int) or self.hosts_per_leaf < 1):
            raise ConfigError(f"topology: 'hosts_per_leaf' must be an integer >= 1, got {self.hosts_per_leaf!r}")
        if not isinstance(self.oversubscription, (int, float)) or not self.oversubscription >= 1.0:
            raise ConfigError(f"topology: 'oversubscription' must be >= 1, got {self.oversubscription!r}")
        if self.uplink_rate_bps is not None and not self.uplink_rate_bps > 0:
            raise ConfigError(f"topology: 'uplink_rate_bps' must be positive, got {self.uplink_rate_bps!r}")
        if self.ecmp not in ("udp_sport", "none"):
            raise ConfigError(f"topology: 'ecmp' must be udp_sport or none, got {self.ecmp!r}")
        if isinstance(self.placement, str) and self.placement not in PLACEMENTS:
            raise ConfigError(f"topology: 'placement' must be {' or '.join(PLACEMENTS)} or a list, "
                              f"got {self.placement!r}")  # fmt: skip


@dataclasses.dataclass(frozen=True, slots=True)
class PortSpec:
    """One unidirectional link: the egress port of ``owner`` toward ``peer`` (node ids)."""

    port_id: int
    name: str
    kind: str  # host (NIC uplink), down (switch → host), up (leaf → spine), spine_down (spine → leaf)
    owner: int
    peer: int
    rate_bps: float
    latency_ns: int


class Topology:
    """Nodes, ports and forwarding of a built fabric."""

    def __init__(self, n_ranks: int, n_switches: int, ports: list[PortSpec], rank_leaf: list[int],
                 down_port: dict[tuple[int, int], int], up_ports: dict[int, list[int]], ecmp: bool) -> None:  # fmt: skip
        self.n_ranks = n_ranks
        self.n_switches = n_switches
        self.ports = tuple(ports)
        self.rank_leaf = tuple(rank_leaf)
        self.host_port = tuple(p.port_id for p in ports[:n_ranks])
        self._down = down_port  # (switch node, dst rank) -> port
        self._up = up_ports  # leaf node -> uplink ports (index = spine)
        self._ecmp = ecmp
        self._cache: dict[tuple[int, int, int, int], int] = {}
        ing: dict[int, list[int]] = {}
        for p in ports:
            ing.setdefault(p.peer, []).append(p.port_id)
        self._ingress = {k: tuple(v) for k, v in ing.items()}

    @property
    def ecmp(self) -> bool:
        """Uplinks are chosen by ECMP on (src, dst, UDP source port); False: always the first."""
        return self._ecmp

    def is_host(self, node: int) -> bool:
        return node < self.n_ranks

    def switch_node(self, index: int) -> int:
        return self.n_ranks + index

    def ingress_ports(self, node: int) -> tuple[int, ...]:
        """Ports whose links end at ``node`` (the upstream neighbours a PFC pause from it stops)."""
        return self._ingress.get(node, ())

    def egress(self, node: int, src: int, dst: int, sport: int) -> int:
        """The port switch ``node`` sends a packet from rank ``src`` to rank ``dst`` out of (-1: none)."""
        key = (node, src, dst, sport)
        port = self._cache.get(key)
        if port is None:
            port = self._down.get((node, dst))
            if port is None:
                ups = self._up.get(node)
                if not ups:
                    port = -1
                else:
                    port = ups[ecmp_index(src, dst, sport, len(ups)) if self._ecmp else 0]
            self._cache[key] = port
        return port

    def spine_of(self, src: int, dst: int, sport: int) -> int | None:
        """The spine index ECMP gives this flow, or None when src and dst share a leaf."""
        if self.rank_leaf[src] == self.rank_leaf[dst] or not self._up:
            return None
        n = len(next(iter(self._up.values())))
        return ecmp_index(src, dst, sport, n) if self._ecmp else 0


def ecmp_index(src: int, dst: int, sport: int, n: int) -> int:
    """Deterministic ECMP choice among ``n`` next hops from the flow's (src, dst, UDP source port)."""
    return zlib.crc32(_HASH.pack(src & 0xFFFFFFFF, dst & 0xFFFFFFFF, sport & 0xFFFF)) % n


def build_topology(config: TopologyConfig, n_ranks: int, host_rate_bps: float, latency_ns: int) -> Topology:
    """Ports and forwarding for ``n_ranks`` hosts at ``host_rate_bps`` with ``latency_ns`` per link."""
    if n_ranks < 1:
        raise ConfigError(f"topology: need at least one rank, got {n_ranks}")
    ports: list[PortSpec] = []

    def add(name: str, kind: str, owner: int, peer: int, rate: float) -> int:
        ports.append(PortSpec(len(ports), name, kind, owner, peer, float(rate), latency_ns))
        return len(ports) - 1

    down: dict[tuple[int, int], int] = {}
    if config.kind == "single_switch":
        sw = n_ranks
        for r in range(n_ranks):
            add(f"host{r}->sw0", "host", r, sw, host_rate_bps)
        for r in range(n_ranks):
            down[(sw, r)] = add(f"sw0->host{r}", "down", sw, r, host_rate_bps)
        return Topology(n_ranks, 1, ports, [0] * n_ranks, down, {}, False)

    leaves, spines = config.leaves, config.spines
    hpl = config.hosts_per_leaf or math.ceil(n_ranks / leaves)
    rank_leaf = _place(config.placement, n_ranks, leaves, hpl)
    per_leaf = [rank_leaf.count(leaf) for leaf in range(leaves)]
    if max(per_leaf) > hpl:
        raise ConfigError(f"topology: placement puts {max(per_leaf)} ranks on a leaf with {hpl} host ports "
                          f"(hosts_per_leaf)")  # fmt: skip
    uplink = config.uplink_rate_bps or hpl * host_rate_bps / (spines * config.oversubscription)
    leaf_node = [n_ranks + i for i in range(leaves)]
    spine_node = [n_ranks + leaves + j for j in range(spines)]
    for r in range(n_ranks):
        add(f"host{r}->leaf{rank_leaf[r]}", "host", r, leaf_node[rank_leaf[r]], host_rate_bps)
    for r in range(n_ranks):
        leaf = rank_leaf[r]
        down[(leaf_node[leaf], r)] = add(f"leaf{leaf}->host{r}", "down", leaf_node[leaf], r, host_rate_bps)
    up: dict[int, list[int]] = {}
    for i in range(leaves):
        up[leaf_node[i]] = [add(f"leaf{i}->spine{j}", "up", leaf_node[i], spine_node[j], uplink) for j in range(spines)]
    for j in range(spines):
        to_leaf = [add(f"spine{j}->leaf{i}", "spine_down", spine_node[j], leaf_node[i], uplink) for i in range(leaves)]
        for r in range(n_ranks):
            down[(spine_node[j], r)] = to_leaf[rank_leaf[r]]
    return Topology(n_ranks, leaves + spines, ports, rank_leaf, down, up, config.ecmp == "udp_sport")


def _place(placement: str | tuple[int, ...], n_ranks: int, leaves: int, hpl: int) -> list[int]:
    if placement == "round_robin":
        return [r % leaves for r in range(n_ranks)]
    if placement == "block":
        return [min(leaves - 1, r // hpl) for r in range(n_ranks)]
    hosts = list(placement)
    if len(hosts) != n_ranks:
        raise ConfigError(f"topology: placement lists {len(hosts)} hosts for {n_ranks} ranks")
    if len(set(hosts)) != len(hosts) or min(hosts) < 0 or max(hosts) >= leaves * hpl:
        raise ConfigError(f"topology: placement hosts must be distinct and within 0..{leaves * hpl - 1}")
    return [h // hpl for h in hosts]


def link_down_intervals(topo: Topology, link_down: tuple[tuple[str, int, int], ...]) -> dict[int, list[tuple[int, int]]]:
    """Port id → ``[(from_ns, until_ns), ...]`` for ``(port name, from, until)`` entries; an unknown name is
    a ConfigError listing a few known ones."""
    by_name = {p.name: p.port_id for p in topo.ports}
    out: dict[int, list[tuple[int, int]]] = {}
    for name, lo, hi in link_down:
        if name not in by_name:
            known = ", ".join(p.name for p in topo.ports[:4])
            raise ConfigError(f"link {name!r} is not a port of this topology (port names look like {known}, ...)")
        out.setdefault(by_name[name], []).append((int(lo), int(hi)))
    return out
