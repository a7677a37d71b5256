"""Collective-algorithm registry: one collective instance → point-to-point transfers with dependencies.

Theory of operation
-------------------
Every algorithm is a pure function of ``(n, size_bytes, root, chunks, window)``: it returns a
deterministic list of :class:`Transfer` between group *positions* ``0..n-1`` (the compiler maps them to
ranks). ``after`` holds indices of earlier transfers of the same list that involve the sender (its own
earlier sends or receives it must have completed): a rank forwards or reduces data only after it
received it, so a dependency-driven replay is causally valid. ``after`` indices are always smaller
than the transfer's own index, so the list is in topological order. ``n == 1`` gives no transfers.
How each algorithm cuts the data and which dependencies it uses is described in its module
(``ring``, ``direct``, ``halving_doubling``, ``tree``, ``rooted``, ``barrier``).

Size conventions (``size_bytes`` argument; the Chakra ``comm_size`` meaning, docs/chakra-format.md §8)
------------------------------------------------------------------------------------------------
* ALL_REDUCE, REDUCE_SCATTER (and REDUCE_SCATTER_BLOCK), ALL_TO_ALL: the full buffer ``S``, the same
  on every rank (all-to-all: ``piece(S, n, j)`` bytes go to peer ``j``).
* ALL_GATHER, GATHER: the per-rank shard ``s`` (the gathered output is ``n·s``).
* BROADCAST, REDUCE: the buffer size.
* SCATTER: the full buffer on the root, cut into ``n`` pieces (piece ``j`` goes to position ``j``).
* BARRIER: ignored; every message is 0 bytes.

Uneven division: piece ``i`` of ``S`` bytes split ``n`` ways is ``S//n + (1 if i < S%n else 0)``,
so byte totals are exact for every ``S`` (no rounding loss); empty pieces still give 0-byte messages.
``chunks = k`` cuts every message into ``k`` chunks (chunk ``c`` carries sub-slice ``c`` of each piece;
it depends only on chunk ``c`` of earlier messages), which pipelines the algorithm without changing any
rank's volume. ``root`` is a group position (rooted collectives only); ``window`` only affects
``all_to_all/direct`` (a window ``>= n-1`` is the same as none). ``expected_bytes_sent`` is each
algorithm's closed formula for a rank's volume, independent of ``transfers()``.

Use :func:`get_algorithm` (``None`` → the default of :data:`DEFAULT_ALGORITHMS`; an unknown name raises
:class:`~emulator.errors.ScheduleError` listing the valid ones) and :func:`available_algorithms`.
"""

from __future__ import annotations

from typing import Protocol

from emulator.errors import ScheduleError
from emulator.schedule.algorithms.barrier import DisseminationBarrier
from emulator.schedule.algorithms.base import BaseAlgorithm, Payload, PlanResult, Transfer
from emulator.schedule.algorithms.direct import (
    DirectAllGather,
    DirectAllReduce,
    DirectAllToAll,
    DirectReduceScatter,
    DirectReduceScatterBlock,
    PairwiseAllToAll,
)
from emulator.schedule.algorithms.halving_doubling import HalvingDoublingAllReduce
from emulator.schedule.algorithms.ring import (
    RingAllGather,
    RingAllReduce,
    RingReduceScatter,
    RingReduceScatterBlock,
)
from emulator.schedule.algorithms.rooted import (
    BinomialBroadcast,
    BinomialReduce,
    ChainBroadcast,
    ChainReduce,
    DirectGather,
    DirectScatter,
)
from emulator.schedule.algorithms.tree import DoubleBinaryTreeAllReduce
from emulator.trace.model import CollectiveType

__all__ = [
    "DEFAULT_ALGORITHMS",
    "Algorithm",
    "Payload",
    "PlanResult",
    "Transfer",
    "all_algorithms",
    "available_algorithms",
    "get_algorithm",
    "normalise_name",
]


class Algorithm(Protocol):
    """What the compiler relies on (every registered object also has ``plan()`` with payloads)."""

    name: str
    collective: CollectiveType

    def transfers(
        self, n: int, size_bytes: int, *, root: int = 0, chunks: int = 1, window: int | None = None
    ) -> list[Transfer]: ...

    def expected_bytes_sent(self, n: int, size_bytes: int, position: int, *, root: int = 0) -> int: ...


def _build_registry() -> dict[CollectiveType, dict[str, BaseAlgorithm]]:
    instances: list[BaseAlgorithm] = [
        RingAllReduce(),
        HalvingDoublingAllReduce(),
        DirectAllReduce(),
        DoubleBinaryTreeAllReduce(),
        RingAllGather(),
        DirectAllGather(),
        RingReduceScatter(),
        DirectReduceScatter(),
        RingReduceScatterBlock(),
        DirectReduceScatterBlock(),
        DirectAllToAll(),
        PairwiseAllToAll(),
        ChainBroadcast(),
        BinomialBroadcast(),
        ChainReduce(),
        BinomialReduce(),
        DirectGather(),
        DirectScatter(),
        DisseminationBarrier(),
    ]
    registry: dict[CollectiveType, dict[str, BaseAlgorithm]] = {}
    for algorithm in instances:
        registry.setdefault(algorithm.collective, {})[algorithm.name] = algorithm
    return registry


_REGISTRY = _build_registry()

#: default algorithm per collective type (ring where a ring exists, as NCCL does for large messages)
DEFAULT_ALGORITHMS: dict[CollectiveType, str] = {
    CollectiveType.ALL_REDUCE: "ring",
    CollectiveType.REDUCE: "ring",
    CollectiveType.ALL_GATHER: "ring",
    CollectiveType.GATHER: "direct",
    CollectiveType.SCATTER: "direct",
    CollectiveType.BROADCAST: "ring",
    CollectiveType.ALL_TO_ALL: "direct",
    CollectiveType.REDUCE_SCATTER: "ring",
    CollectiveType.REDUCE_SCATTER_BLOCK: "ring",
    CollectiveType.BARRIER: "dissemination",
}


def normalise_name(name: str) -> str:
    """How algorithm names are compared: case- and dash-insensitive (``Halving-Doubling`` = ``halving_doubling``)."""
    return name.strip().lower().replace("-", "_")


def available_algorithms(collective: CollectiveType) -> list[str]:
    """Names of the algorithms registered for ``collective`` (sorted; empty if none)."""
    try:
        collective = CollectiveType(collective)
    except ValueError:
        raise ScheduleError(f"unknown collective type {collective!r}") from None
    return sorted(_REGISTRY.get(collective, {}))


def get_algorithm(collective: CollectiveType, name: str | None = None) -> BaseAlgorithm:
    """The algorithm ``name`` for ``collective`` (``None`` → default). Unknown names → ScheduleError."""
    try:
        collective = CollectiveType(collective)
    except ValueError:
        raise ScheduleError(f"unknown collective type {collective!r}") from None
    table = _REGISTRY.get(collective)
    if not table:
        raise ScheduleError(f"no algorithm is registered for {collective.name}")
    key = DEFAULT_ALGORITHMS[collective] if name is None else normalise_name(str(name))
    algorithm = table.get(key)
    if algorithm is None:
        valid = ", ".join(sorted(table))
        raise ScheduleError(f"unknown algorithm {name!r} for {collective.name.lower()} (valid: {valid})")
    return algorithm


def all_algorithms() -> list[BaseAlgorithm]:
    """Every registered algorithm object, in a fixed order (for tests and ``--help`` listings)."""
    return [table[name] for collective in sorted(_REGISTRY) for table in (_REGISTRY[collective],) for name in sorted(table)]
