"""Collective completion time (CCT) from per-member records (docs/metrics.md §4).

Theory of operation
-------------------
Input is one row per (instance, member rank): ``rank``, ``start_ns`` (when the rank's schedule let
the instance begin) and ``end_ns`` (when the rank had received everything addressed to it and all it
sent was delivered). Rows are grouped by instance in CSR form, like the schedule's
``coll_rank_ptr``: the members of instance ``i`` are rows ``member_ptr[i]:member_ptr[i+1]``.
:meth:`CollectiveRecords.from_instance_ids` builds that layout from unsorted rows tagged with an
instance id. Every instance must have at least one member, and a rank at most once per instance.

Per instance (vectorised with ``numpy.ufunc.reduceat``; 100k instances × 64 ranks is a few
million rows):

* ``T_r = end_r − start_r`` (per-rank completion),
* ``CCT = max_r end_r − min_r start_r``,
* algbw / busbw with t = CCT (nccl-tests factors, :mod:`emulator.stats.nccl`).

Distributions are then cut by any key columns: collective type and size, process group, rank. The
median used anywhere is the nearest-rank p50 (see :mod:`emulator.instruments.percentiles`).
Straggler figures built on the same records live in :mod:`emulator.stats.stragglers`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from emulator.instruments.percentiles import Distribution, summarize, summarize_by
from emulator.stats.bounded import EXACT, SummaryPolicy, summarize_by_bounded
from emulator.stats.nccl import algbw_bytes, algbw_gbps, bus_factor, collective_name


@dataclass(frozen=True, slots=True, eq=False)
class CollectiveRecords:
    """Per-member records of collective instances in CSR layout (see module docstring)."""

    member_ptr: np.ndarray  # int64, n_instances + 1
    rank: np.ndarray  # int64, one per member row
    start_ns: np.ndarray  # int64
    end_ns: np.ndarray  # int64
    instance_id: np.ndarray  # int64, n_instances: caller's id of each instance (default 0..n-1)

    @property
    def n_instances(self) -> int:
        return int(self.member_ptr.shape[0]) - 1

    @property
    def n_members(self) -> int:
        return int(self.rank.shape[0])

    @property
    def member_instance(self) -> np.ndarray:
        """Instance index (0..n_instances-1) of each member row."""
        return np.repeat(np.arange(self.n_instances, dtype=np.int64), np.diff(self.member_ptr))

    @property
    def members_per_instance(self) -> np.ndarray:
        return np.diff(self.member_ptr)

    @classmethod
    def from_csr(
        cls,
        member_ptr: np.ndarray,
        rank: np.ndarray,
        start_ns: np.ndarray,
        end_ns: np.ndarray,
        instance_id: np.ndarray | None = None,
    ) -> CollectiveRecords:
        """Validate and wrap arrays already grouped by instance."""
        ptr = np.asarray(member_ptr, dtype=np.int64)
        r = np.asarray(rank, dtype=np.int64)
        s = np.asarray(start_ns, dtype=np.int64)
        e = np.asarray(end_ns, dtype=np.int64)
        if ptr.ndim != 1 or ptr.shape[0] < 1 or ptr[0] != 0:
            raise ValueError("member_ptr must be a 1-D array starting at 0")
        if not (r.shape == s.shape == e.shape) or r.ndim != 1:
            raise ValueError("rank, start_ns and end_ns must be 1-D arrays of equal length")
        if int(ptr[-1]) != r.shape[0]:
            raise ValueError(f"member_ptr ends at {int(ptr[-1])} but there are {r.shape[0]} member rows")
        sizes = np.diff(ptr)
        if (sizes < 1).any():
            bad = int(np.flatnonzero(sizes < 1)[0])
            raise ValueError(f"collective instance {bad} has no members")
        if (r < 0).any():
            raise ValueError(f"negative rank {int(r.min())} in collective records")
        backwards = e < s
        if backwards.any():
            i = int(np.flatnonzero(backwards)[0])
            raise ValueError(f"member row {i} (rank {int(r[i])}) ends at {int(e[i])} ns before it starts at {int(s[i])} ns")
        n_inst = ptr.shape[0] - 1
        seg = np.repeat(np.arange(n_inst, dtype=np.int64), sizes)
        if r.size > 1 and (sizes > 1).any():
            m = int(sizes[0])
            if (sizes == m).all():
                rs = np.sort(r.reshape(-1, m), axis=1)
                dup2 = rs[:, 1:] == rs[:, :-1]
                if dup2.any():
                    i, j = (int(x[0]) for x in np.nonzero(dup2))
                    raise ValueError(f"rank {int(rs[i, j])} appears twice in collective instance {i}")
            else:
                order = np.lexsort((r, seg))
                rs, ss = r[order], seg[order]
                dup = (rs[1:] == rs[:-1]) & (ss[1:] == ss[:-1])
                if dup.any():
                    j = int(np.flatnonzero(dup)[0])
                    raise ValueError(f"rank {int(rs[j])} appears twice in collective instance {int(ss[j])}")
        ids = np.arange(n_inst, dtype=np.int64) if instance_id is None else np.asarray(instance_id, dtype=np.int64)
        if ids.shape != (n_inst,):
            raise ValueError(f"instance_id has {ids.shape[0]} entries for {n_inst} instances")
        return cls(ptr, r, s, e, ids)

    @classmethod
    def from_instance_ids(
        cls, instance: np.ndarray, rank: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray
    ) -> CollectiveRecords:
        """Group unsorted member rows by their instance id (ascending id order, stable inside)."""
        inst = np.asarray(instance, dtype=np.int64)
        if inst.ndim != 1 or inst.shape != np.shape(rank):
            raise ValueError("instance and rank must be 1-D arrays of equal length")
        order = np.argsort(inst, kind="stable")
        ids, counts = np.unique(inst[order], return_counts=True)
        ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        return cls.from_csr(
            ptr, np.asarray(rank)[order], np.asarray(start_ns)[order], np.asarray(end_ns)[order], ids
        )


def segment_max(values: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    return np.maximum.reduceat(values, ptr[:-1]) if values.size else values[:0]


def segment_min(values: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    return np.minimum.reduceat(values, ptr[:-1]) if values.size else values[:0]


def segment_lower_median(values: np.ndarray, ptr: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Nearest-rank p50 (``x[ceil(m/2)]``) of each non-empty segment."""
    if values.size == 0:
        return values[:0]
    sizes = np.diff(ptr)
    m = int(sizes[0])
    if (sizes == m).all():  # common case: every instance has the same members count
        kth = (m - 1) // 2
        return np.partition(values.reshape(-1, m), kth, axis=1)[:, kth]
    order = np.lexsort((values, seg))
    return values[order][ptr[:-1] + (sizes - 1) // 2]


@dataclass(frozen=True, slots=True, eq=False)
class InstanceTimes:
    """Per-instance and per-member completion times."""

    instance_id: np.ndarray  # n_instances
    n_members: np.ndarray  # n_instances
    first_start_ns: np.ndarray  # min_r start_r
    last_end_ns: np.ndarray  # max_r end_r
    cct_ns: np.ndarray  # last_end − first_start
    completion_ns: np.ndarray  # per member row: T_r = end_r − start_r

    def cct_distribution(self) -> Distribution:
        return summarize(self.cct_ns)


def instance_times(records: CollectiveRecords) -> InstanceTimes:
    """CCT and per-rank completion of every instance."""
    ptr = records.member_ptr
    first = segment_min(records.start_ns, ptr)
    last = segment_max(records.end_ns, ptr)
    return InstanceTimes(
        instance_id=records.instance_id,
        n_members=records.members_per_instance,
        first_start_ns=first,
        last_end_ns=last,
        cct_ns=last - first,
        completion_ns=records.end_ns - records.start_ns,
    )


def instance_bandwidths_gbps(
    collective: Sequence[object] | np.ndarray, comm_size_bytes: np.ndarray, n_ranks: np.ndarray, t_ns: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-instance ``(algbw, busbw)`` in GB/s from aligned per-instance arrays (t = CCT)."""
    names = [collective_name(c) for c in np.asarray(collective, dtype=object).tolist()]
    sizes = np.asarray(comm_size_bytes, dtype=np.int64).tolist()
    ranks = np.asarray(n_ranks, dtype=np.int64).tolist()
    if not (len(names) == len(sizes) == len(ranks) == np.shape(t_ns)[0]):
        raise ValueError("instance_bandwidths_gbps needs aligned arrays of equal length")
    s = np.array([algbw_bytes(c, z, n) for c, z, n in zip(names, sizes, ranks, strict=True)], dtype=np.float64)
    f = np.array([bus_factor(c, n) for c, n in zip(names, ranks, strict=True)], dtype=np.float64)
    alg = np.asarray(algbw_gbps(s, np.asarray(t_ns)), dtype=np.float64)
    return alg, alg * f


@dataclass(frozen=True, slots=True)
class CctRow:
    """CCT of one (collective, comm_size, group, n_ranks) with busbw at the median CCT (docs/metrics.md §4)."""

    collective: str
    comm_size_bytes: int
    group: int
    n_ranks: int
    cct_ns: Distribution
    busbw_at_median_gbps: float | None

    def to_dict(self) -> dict[str, object]:
        return {
            "collective": self.collective,
            "comm_size_bytes": self.comm_size_bytes,
            "group": self.group,
            "n_ranks": self.n_ranks,
            "cct_ns": self.cct_ns.to_dict(),
            "busbw_at_median_gbps": self.busbw_at_median_gbps,
        }


def cct_report(
    times: InstanceTimes,
    collective: Sequence[object] | np.ndarray,
    comm_size_bytes: np.ndarray,
    group: np.ndarray | None = None,
    policy: SummaryPolicy | None = None,
) -> list[CctRow]:
    """CCT distributions per (collective, comm_size, group, n_ranks), keys ascending.

    ``policy`` bounds the memory (exact by default; see :mod:`emulator.stats.bounded`).

    ``collective``, ``comm_size_bytes`` and ``group`` are aligned with the instances of ``times``;
    without ``group`` every instance is in group 0.
    """
    n = times.cct_ns.shape[0]
    names = [collective_name(c) for c in np.asarray(collective, dtype=object).tolist()]
    order = sorted(set(names))
    code = np.array([order.index(c) for c in names], dtype=np.int64)
    sizes = np.asarray(comm_size_bytes, dtype=np.int64)
    groups = np.zeros(n, dtype=np.int64) if group is None else np.asarray(group, dtype=np.int64)
    if not (code.shape[0] == sizes.shape[0] == groups.shape[0] == n):
        raise ValueError("cct_report needs per-instance arrays aligned with the instance times")
    rows = []
    for (c, size, g, m), dist in summarize_by_bounded([code, sizes, groups, times.n_members], times.cct_ns,
                                                           policy or EXACT).items():
        name = order[int(c)]
        busbw = busbw_at(name, int(m), algbw_bytes(name, int(size), int(m)), dist.p50)
        rows.append(CctRow(name, int(size), int(g), int(m), dist, busbw))
    return rows


def busbw_at(name: str, n_ranks: int, size_bytes: int, t_ns: float | None) -> float | None:
    if t_ns is None:
        return None
    return float(algbw_gbps(size_bytes, t_ns)) * bus_factor(name, n_ranks)


def cct_distributions(times: InstanceTimes, keys: Sequence[np.ndarray]) -> dict[tuple, Distribution]:
    """CCT distribution per distinct tuple of the per-instance ``keys`` (e.g. ``[type, size]``)."""
    return summarize_by(list(keys), times.cct_ns)


def rank_completion_distributions(records: CollectiveRecords, times: InstanceTimes,
                                  policy: SummaryPolicy | None = None) -> dict[int, Distribution]:
    """Per-rank distribution of ``T_r`` across all instances the rank took part in.

    One ordering by rank (per chunk above ``policy.exact_limit``), never a copy per rank.
    """
    dists = summarize_by_bounded(records.rank, times.completion_ns, policy or EXACT)
    return {int(k[0]): d for k, d in dists.items()}
