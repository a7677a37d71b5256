"""nccl-tests bandwidths and the nccl-tests-style table (docs/metrics.md §1, docs/chakra-format.md §8).

Theory of operation
-------------------
``algbw = S / t`` and ``busbw = algbw × factor(n)`` in GB/s (10^9 bytes/s). Because t is in ns,
``algbw_gbps = S_bytes / t_ns`` exactly. ``factor(n)`` and the bytes ``S`` follow nccl-tests:

================  ===========  =============================================
collective        factor(n)    S from the Chakra ``comm_size``
================  ===========  =============================================
ALL_REDUCE        2(n−1)/n     comm_size (the buffer)
REDUCE_SCATTER    (n−1)/n      comm_size (the full input)
ALL_GATHER        (n−1)/n      n · comm_size (comm_size is the per-rank shard)
ALL_TO_ALL        (n−1)/n      comm_size (the full send buffer)
GATHER            (n−1)/n      n · comm_size (input is the per-rank shard)
SCATTER           (n−1)/n      comm_size (input is the root's full buffer)
BROADCAST/REDUCE  1            comm_size
SEND_RECV         1            comm_size
HYPERCUBE         1            (n−1) · comm_size
BARRIER           1            0 (no payload; bandwidth is 0)
================  ===========  =============================================

Chakra leaves ``comm_size`` unspecified for GATHER and SCATTER; we read it as PyTorch's converter
does for the others ("Σ input tensor bytes" of the rank with the largest input): a gather's input
is one shard, a scatter's is the root's whole buffer. Either way S = count · typesize · n as in
nccl-tests. REDUCE_SCATTER_BLOCK is treated as REDUCE_SCATTER.

The table's ``count`` column is in elements of ``dtype_size_bytes`` (default 4, float32): total
elements (S / typesize) for the factor-1 collectives and ALL_REDUCE, per-rank elements
(S / (typesize · n)) for the (n−1)/n ones — as nccl-tests prints it. ``size`` is S (= max of send and
receive bytes). ``time`` is the mean completion time in µs (nccl-tests' default ``-a 1``), and
algbw/busbw are computed from that mean, like nccl-tests. We add our own tail columns (p50, p99, max
of the completion time, in µs, and the instance count they rest on) next to it.

Collectives are named by :class:`~emulator.trace.model.CollectiveType`, its int value, or a name
such as ``"all_reduce"``, ``"AllReduce"`` or ``"ALLREDUCE"`` (case and ``_``/``-`` ignored).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from emulator.instruments.percentiles import percentile_sorted
from emulator.trace.model import CollectiveType

_ALIASES = {
    "allreduce": "all_reduce", "reducescatter": "reduce_scatter", "reducescatterblock": "reduce_scatter",
    "allgather": "all_gather", "alltoall": "all_to_all", "alltoallv": "all_to_all", "gather": "gather",
    "scatter": "scatter", "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "send_recv",
    "hypercube": "hypercube", "barrier": "barrier",
}
_PER_RANK = frozenset({"reduce_scatter", "all_gather", "all_to_all", "gather", "scatter"})


def collective_name(collective: CollectiveType | int | str) -> str:
    """Canonical snake-case name (``"all_reduce"``) of a collective given in any accepted spelling."""
    if isinstance(collective, str):
        key = collective.replace("_", "").replace("-", "").replace(" ", "").lower()
    else:
        try:
            key = CollectiveType(int(collective)).name.replace("_", "").lower()
        except ValueError:
            raise ValueError(f"unknown collective type {collective!r}") from None
    if key not in _ALIASES:
        raise ValueError(f"unknown collective {collective!r}")
    return _ALIASES[key]


def bus_factor(collective: CollectiveType | int | str, n_ranks: int) -> float:
    """nccl-tests busbw/algbw factor for ``n_ranks`` (e.g. ALL_REDUCE, 8 ranks → 1.75)."""
    if n_ranks < 1:
        raise ValueError(f"n_ranks must be at least 1, got {n_ranks}")
    name = collective_name(collective)
    if name == "all_reduce":
        return 2 * (n_ranks - 1) / n_ranks
    if name in _PER_RANK:
        return (n_ranks - 1) / n_ranks
    return 1.0


def algbw_bytes(collective: CollectiveType | int | str, comm_size_bytes: int, n_ranks: int) -> int:
    """The bytes S that nccl-tests divides by the time, from a Chakra ``comm_size``."""
    if n_ranks < 1:
        raise ValueError(f"n_ranks must be at least 1, got {n_ranks}")
    if comm_size_bytes < 0:
        raise ValueError(f"comm_size_bytes must not be negative, got {comm_size_bytes}")
    name = collective_name(collective)
    if name in ("all_gather", "gather"):
        return int(comm_size_bytes) * n_ranks
    if name == "hypercube":
        return int(comm_size_bytes) * (n_ranks - 1)
    if name == "barrier":
        return 0
    return int(comm_size_bytes)


def algbw_gbps(size_bytes: float | np.ndarray, t_ns: float | np.ndarray) -> float | np.ndarray:
    """``S / t`` in GB/s (10^9 B/s) = bytes per ns. A time ≤ 0 gives NaN (never a silent 0)."""
    s = np.asarray(size_bytes, dtype=np.float64)
    t = np.asarray(t_ns, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(t > 0, s / np.where(t > 0, t, 1.0), np.nan)
    return float(out) if out.ndim == 0 else out


def busbw_gbps(
    collective: CollectiveType | int | str, n_ranks: int, size_bytes: float | np.ndarray, t_ns: float | np.ndarray
) -> float | np.ndarray:
    """``algbw × bus_factor`` in GB/s; ``size_bytes`` is S (see :func:`algbw_bytes`)."""
    return algbw_gbps(size_bytes, t_ns) * bus_factor(collective, n_ranks)


def element_count(
    collective: CollectiveType | int | str, size_bytes: int, n_ranks: int, dtype_size_bytes: int = 4
) -> int:
    """nccl-tests ``count`` column: total elements, or per-rank elements for the (n−1)/n collectives."""
    if dtype_size_bytes < 1:
        raise ValueError(f"dtype_size_bytes must be positive, got {dtype_size_bytes}")
    per = n_ranks if collective_name(collective) in _PER_RANK else 1
    return int(size_bytes) // (dtype_size_bytes * per)


@dataclass(frozen=True, slots=True)
class NcclRow:
    """One line of the nccl-tests-style table (one collective type, size and rank count)."""

    collective: str
    n_ranks: int
    comm_size_bytes: int  # the trace's comm_size
    size_bytes: int  # nccl-tests "size" = S
    count: int  # nccl-tests "count" (elements)
    instances: int  # how many completion times the row rests on
    time_us: float  # mean
    algbw_gbps: float
    busbw_gbps: float
    p50_us: float
    p99_us: float
    max_us: float
    root: str = "-"  # the root rank its instances share, ``mixed`` when they differ, ``-`` when unrooted

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def nccl_table(
    collective: Sequence[CollectiveType | int | str] | np.ndarray,
    comm_size_bytes: np.ndarray,
    n_ranks: np.ndarray,
    time_ns: np.ndarray,
    dtype_size_bytes: int = 4,
    root_rank: np.ndarray | None = None,
) -> list[NcclRow]:
    """Rows per (collective, comm_size, n_ranks) from aligned per-instance arrays.

    ``time_ns`` is the completion time of each instance (CCT); ``root_rank`` its root rank (-1 when
    unrooted). Rows come sorted by collective name, then size, then rank count.
    """
    names = np.asarray([collective_name(c) for c in np.asarray(collective, dtype=object).tolist()], dtype=object)
    sizes = np.asarray(comm_size_bytes, dtype=np.int64)
    ranks = np.asarray(n_ranks, dtype=np.int64)
    times = np.asarray(time_ns)
    roots = np.full(times.shape, -1, dtype=np.int64) if root_rank is None else np.asarray(root_rank, dtype=np.int64)
    if not (names.shape == sizes.shape == ranks.shape == times.shape == roots.shape):
        raise ValueError("nccl_table needs aligned arrays of equal length")
    groups: dict[tuple[str, int, int], list[int]] = {}
    for i, key in enumerate(zip(names.tolist(), sizes.tolist(), ranks.tolist(), strict=True)):
        groups.setdefault(key, []).append(i)
    rows: list[NcclRow] = []
    for name, comm_size, n in sorted(groups):
        members = np.asarray(groups[(name, comm_size, n)])
        t = np.sort(times[members])
        mean_ns = float(np.mean(t))
        s_bytes = algbw_bytes(name, comm_size, n)
        alg = float(algbw_gbps(s_bytes, mean_ns))
        rows.append(
            NcclRow(
                collective=name,
                n_ranks=n,
                comm_size_bytes=comm_size,
                size_bytes=s_bytes,
                count=element_count(name, s_bytes, n, dtype_size_bytes),
                instances=int(t.shape[0]),
                time_us=mean_ns / 1e3,
                algbw_gbps=alg,
                busbw_gbps=alg * bus_factor(name, n),
                p50_us=percentile_sorted(t, 50) / 1e3,
                p99_us=percentile_sorted(t, 99) / 1e3,
                max_us=float(t[-1]) / 1e3,
                root=_root_cell(roots[members]),
            )
        )
    return rows


def _root_cell(root_rank: np.ndarray) -> str:
    """The root rank the instances agree on, ``mixed`` when they differ, ``-`` when none is rooted."""
    known = np.unique(root_rank[root_rank >= 0])
    if known.shape[0] == 0:
        return "-"
    return str(int(known[0])) if known.shape[0] == 1 and bool((root_rank >= 0).all()) else "mixed"


def average_busbw_gbps(rows: Sequence[NcclRow]) -> float | None:
    """nccl-tests footer ``# Avg bus bandwidth``: plain mean of the rows' busbw (None if no rows)."""
    vals = [r.busbw_gbps for r in rows if r.busbw_gbps == r.busbw_gbps]
    return sum(vals) / len(vals) if vals else None
