"""Paths of flows on the fluid fabric: the packet sim's routing (ECMP on the RoCEv2 UDP source port) as
index arrays (:func:`qp_paths`), one port per level of :data:`emulator.fabric.fluid.LEVELS`."""

from __future__ import annotations

import numpy as np

from emulator.errors import ConfigError
from emulator.fabric.topology import Topology


def udp_source_ports(qp: np.ndarray) -> np.ndarray:
    """RoCEv2 UDP source port of each schedule queue pair (:func:`emulator.wire.marking.udp_source_port` of
    its sender and receiver QP numbers, for arrays)."""
    lq = qp.astype(np.uint64) * np.uint64(2) + np.uint64(3)
    rq = qp.astype(np.uint64) * np.uint64(2) + np.uint64(2)
    v = lq * rq
    v ^= v >> np.uint64(20)
    v ^= v >> np.uint64(40)
    fl = v & np.uint64(0xFFFFF)
    low = (fl & np.uint64(0x3FFF)) ^ ((fl & np.uint64(0xFC000)) >> np.uint64(14))
    return (low | np.uint64(0xC000)).astype(np.int64)


def qp_paths(topo: Topology, src: np.ndarray, dst: np.ndarray, sport: np.ndarray) -> np.ndarray:
    """Ports per level (``[n, 4]``, -1 = level not on the path) of flows ``src → dst`` with UDP ``sport``.

    The packet sim's forwarding (:meth:`Topology.egress`) as tables: a switch sends to a host it serves
    on that host's port; otherwise up on the uplink ECMP picks (:func:`ecmp_indices`, the arrays form of
    :meth:`Topology.spine_of`), and the spine down to the destination's leaf. Cost: numpy passes over the
    flows, Python per rank and per port only.
    """
    n = int(src.shape[0])
    path = np.full((n, 4), -1, np.int64)
    path[:, 0] = src
    if not n:
        return path
    ports = topo.ports
    edge = np.array([ports[r].peer for r in range(topo.n_ranks)], np.int64)  # each rank's switch
    down = np.array([topo.egress(int(edge[r]), 0, r, 0) for r in range(topo.n_ranks)], np.int64)
    if (down < 0).any():
        raise ConfigError(f"fluid: no route to rank {int(np.flatnonzero(down < 0)[0])}")
    path[:, 3] = down[dst]
    cross = np.flatnonzero(edge[src] != edge[dst])
    if cross.size:
        uplinks: dict[int, list[int]] = {}
        spine_down: dict[tuple[int, int], int] = {}
        for spec in ports:
            if spec.kind == "up":
                uplinks.setdefault(spec.owner, []).append(spec.port_id)
            elif spec.kind == "spine_down":
                spine_down[(spec.owner, spec.peer)] = spec.port_id
        s_, d_ = src[cross], dst[cross]
        n_up = max((len(u) for u in uplinks.values()), default=1)
        table = np.full((topo.n_ranks + topo.n_switches, n_up), -1, np.int64)  # leaf node, spine index -> uplink port
        for owner, ups in uplinks.items():
            table[owner, : len(ups)] = ups
        pick = ecmp_indices(s_, d_, sport[cross], n_up) if topo.ecmp else np.zeros(cross.size, np.int64)
        up = table[edge[s_], pick]
        if (up < 0).any():
            bad = int(np.flatnonzero(up < 0)[0])
            raise ConfigError(f"fluid: no route from rank {int(s_[bad])} to rank {int(d_[bad])}")
        sw = topo.n_ranks  # switch nodes follow the ranks
        to_leaf = np.full((topo.n_switches, topo.n_switches), -1, np.int64)  # spine, leaf -> spine downlink
        for (spine, leaf_node), port in spine_down.items():
            to_leaf[spine - sw, leaf_node - sw] = port
        path[cross, 1] = up
        path[cross, 2] = to_leaf[np.array([p.peer for p in ports], np.int64)[up] - sw, edge[d_] - sw]
    return path


def _crc32_table() -> np.ndarray:
    k = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        k = np.where(k & 1, (k >> 1) ^ np.uint32(0xEDB88320), k >> 1)
    return k.astype(np.uint32)


_CRC32 = _crc32_table()


def ecmp_indices(src: np.ndarray, dst: np.ndarray, sport: np.ndarray, n: int) -> np.ndarray:
    """:func:`emulator.fabric.topology.ecmp_index` for arrays: CRC-32 of the big-endian (src, dst, sport)."""
    words = ((src, 4), (dst, 4), (sport & 0xFFFF, 2))
    crc = np.full(src.shape[0], 0xFFFFFFFF, np.uint32)
    for v, width in words:
        v = np.asarray(v).astype(np.uint64) & np.uint64(0xFFFFFFFF)
        for shift in range(8 * (width - 1), -1, -8):
            byte = ((v >> np.uint64(shift)) & np.uint64(0xFF)).astype(np.uint32)
            crc = _CRC32[(crc ^ byte) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
    return ((crc ^ np.uint32(0xFFFFFFFF)) % np.uint32(n)).astype(np.int64)
