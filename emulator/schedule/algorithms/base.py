"""Building blocks shared by every collective algorithm: transfers, payloads, plans, piece arithmetic.

Theory of operation
-------------------
An algorithm decomposes one collective instance on a group of ``n`` ranks (addressed by *position*
``0..n-1`` in the group) into **messages**: one point-to-point send from ``src`` to ``dst`` at an
algorithm ``step``, carrying a list of *pieces* of a logical buffer and a data-flow *mode*, and
depending on earlier messages (``after``). :class:`Plan` turns each message into ``chunks``
:class:`Transfer` rows: chunk ``c`` carries sub-slice ``c`` of every piece of the message (a piece of
``L`` bytes is cut ``L//k + (1 if c < L%k else 0)``), and depends on chunk ``c`` of each message the
message depends on, never on other chunks. So ``k`` chunks form ``k`` independent pipelines, bytes are
conserved exactly and per-rank volumes do not depend on ``k``. Because a message is only created after
the messages it depends on, every ``after`` index is smaller than the transfer's own index: the list is
in topological order (and therefore acyclic) by construction.

Payloads (the semantics the tests check, not needed by the compiler): each transfer also has a
:class:`Payload` naming the byte ranges of the collective's logical buffer it carries and what the
receiver does with them: ``reduce`` (adds the sender's partial sum into its own), ``copy`` (overwrites
its copy with the sender's) or ``signal`` (barrier token, 0 bytes, merges knowledge). Logical buffers:

* ALL_REDUCE, REDUCE_SCATTER, REDUCE, BROADCAST, SCATTER: ``[0, S)``; piece ``i`` of ``n`` is
  :func:`piece_range` ``(S, n, i)`` (REDUCE_SCATTER leaves piece ``i`` on position ``i``; SCATTER
  delivers piece ``i`` to position ``i``).
* ALL_GATHER, GATHER: ``[0, n·s)``; position ``j``'s shard is ``[j·s, (j+1)·s)``.
* ALL_TO_ALL: ``[0, n·S)``; the block position ``i`` sends to ``j`` is ``i·S + piece_range(S, n, j)``.
* BARRIER: ``[0, 1)``, a virtual token (messages are 0 bytes).

Uneven division: piece ``i`` of ``S`` split ``n`` ways is ``S//n + (1 if i < S%n else 0)`` bytes, so
every byte is accounted for whatever ``S`` is; empty pieces still produce (0-byte) messages, which keeps
the message count a function of ``n`` and ``chunks`` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from emulator.errors import ScheduleError
from emulator.schedule.algorithms.table import TransferTable, empty_table, table_of_transfers
from emulator.trace.model import CollectiveType

REDUCE = "reduce"
COPY = "copy"
SIGNAL = "signal"

Range = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Transfer:
    """One point-to-point message of a collective (positions are group positions)."""

    src: int
    dst: int
    size_bytes: int
    step: int
    chunk: int
    #: indices into the same list of transfers that must be complete before this one starts; each
    #: involves ``src`` (received by it or sent earlier by it) and is smaller than this transfer's index.
    after: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Payload:
    """What a transfer carries: its mode (``reduce``/``copy``/``signal``) and logical-buffer ranges."""

    mode: str
    ranges: tuple[Range, ...]


def piece_bytes(total: int, n: int, i: int) -> int:
    """Bytes of piece ``i`` when ``total`` bytes are split ``n`` ways (the first ``total % n`` get one more)."""
    return total // n + (1 if i < total % n else 0)


def piece_offset(total: int, n: int, i: int) -> int:
    """Offset of piece ``i`` (``0 <= i <= n``; ``piece_offset(total, n, n) == total``)."""
    return i * (total // n) + min(i, total % n)


def piece_range(total: int, n: int, i: int) -> Range:
    return (piece_offset(total, n, i), piece_offset(total, n, i + 1))


def pieces_bytes(total: int, n: int, first: int, stop: int) -> int:
    """Bytes of pieces ``first .. stop-1`` of ``total`` split ``n`` ways."""
    return piece_offset(total, n, stop) - piece_offset(total, n, first)


def chunk_ranges(pieces: Sequence[Range], chunks: int, chunk: int) -> tuple[Range, ...]:
    """Sub-slice ``chunk`` of every piece (empty sub-slices dropped)."""
    out = []
    for lo, hi in pieces:
        length = hi - lo
        a = lo + piece_offset(length, chunks, chunk)
        b = lo + piece_offset(length, chunks, chunk + 1)
        if b > a:
            out.append((a, b))
    return tuple(out)


class Plan:
    """An algorithm's output under construction: transfers and their payloads, message by message."""

    __slots__ = ("chunks", "transfers", "payloads", "_first")

    def __init__(self, chunks: int) -> None:
        self.chunks = chunks
        self.transfers: list[Transfer] = []
        self.payloads: list[Payload] = []
        self._first: list[int] = []  # message id -> index of its chunk-0 transfer

    def message(
        self, src: int, dst: int, step: int, pieces: Sequence[Range], mode: str, after: Iterable[int | None] = ()
    ) -> int:
        """Add one message (``chunks`` transfers); ``after`` holds message ids (None entries ignored)."""
        first = self._first
        deps = list(dict.fromkeys(first[m] for m in after if m is not None))
        msg = len(first)
        first.append(len(self.transfers))
        for c in range(self.chunks):
            if mode == SIGNAL:
                ranges: tuple[Range, ...] = ((0, 1),)
                size = 0
            elif self.chunks == 1:
                ranges = tuple(piece for piece in pieces if piece[1] > piece[0])
                size = sum(b - a for a, b in ranges)
            else:
                ranges = chunk_ranges(pieces, self.chunks, c)
                size = sum(b - a for a, b in ranges)
            self.transfers.append(Transfer(src, dst, size, step, c, tuple(d + c for d in deps)))
            self.payloads.append(Payload(mode, ranges))
        return msg


@dataclass(frozen=True, slots=True)
class PlanResult:
    """An immutable, cacheable plan: transfers and the parallel payloads."""

    transfers: tuple[Transfer, ...]
    payloads: tuple[Payload, ...]


class BaseAlgorithm:
    """Validation, the ``n == 1`` case and caching around ``_build`` / ``_expected``.

    Subclasses set ``name`` and ``collective``; ``uses_root`` / ``uses_window`` say whether ``root`` /
    ``window`` mean anything (others are ignored); ``chunkable = False`` forces one chunk (barrier).
    """

    name: ClassVar[str]
    collective: ClassVar[CollectiveType]
    uses_root: ClassVar[bool] = False
    uses_window: ClassVar[bool] = False
    chunkable: ClassVar[bool] = True

    def __repr__(self) -> str:
        return f"<algorithm {self.label}>"

    @property
    def label(self) -> str:
        return f"{self.collective.name.lower()}/{self.name}"

    def _check(self, n: int, size_bytes: int, root: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ScheduleError(f"{self.label}: group size must be an integer >= 1, got {n!r}")
        if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
            raise ScheduleError(f"{self.label}: size_bytes must be an integer >= 0, got {size_bytes!r}")
        if self.uses_root and (not isinstance(root, int) or not 0 <= root < n):
            raise ScheduleError(f"{self.label}: root position {root!r} is outside the group of {n} ranks")

    def plan(
        self, n: int, size_bytes: int, *, root: int = 0, chunks: int = 1, window: int | None = None
    ) -> PlanResult:
        """Transfers plus payloads (cached per arguments)."""
        root, chunks, window = self._arguments(n, size_bytes, root, chunks, window)
        return _cached_plan(self, n, size_bytes, root, chunks, window)

    def table(
        self, n: int, size_bytes: int, *, root: int = 0, chunks: int = 1, window: int | None = None
    ) -> TransferTable:
        """The transfers of :meth:`transfers` as columns (the algorithm's ``_table`` where it has one)."""
        root, chunks, window = self._arguments(n, size_bytes, root, chunks, window)
        if n == 1:
            return empty_table()
        table = self._table(n, size_bytes, root, chunks, window)
        return table if table is not None else table_of_transfers(_cached_plan(self, n, size_bytes, root, chunks, window).transfers)

    def _arguments(self, n: int, size_bytes: int, root: int, chunks: int, window: int | None) -> tuple[int, int, int | None]:
        """Checked ``(root, chunks, window)``, normalised: ignored arguments take their neutral value."""
        self._check(n, size_bytes, root)
        if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
            raise ScheduleError(f"{self.label}: chunks must be an integer >= 1, got {chunks!r}")
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ScheduleError(f"{self.label}: window must be an integer >= 1, got {window!r}")
        if not self.uses_root:
            root = 0
        if not self.uses_window or (window is not None and window >= n - 1):
            window = None
        if not self.chunkable:
            chunks = 1
        return root, chunks, window

    def transfers(
        self, n: int, size_bytes: int, *, root: int = 0, chunks: int = 1, window: int | None = None
    ) -> list[Transfer]:
        return list(self.plan(n, size_bytes, root=root, chunks=chunks, window=window).transfers)

    def expected_bytes_sent(self, n: int, size_bytes: int, position: int, *, root: int = 0) -> int:
        """Theoretical bytes sent by ``position`` (closed formula, independent of chunks and window)."""
        self._check(n, size_bytes, root)
        if not isinstance(position, int) or not 0 <= position < n:
            raise ScheduleError(f"{self.label}: position {position!r} is outside the group of {n} ranks")
        if n == 1:
            return 0
        return self._expected(n, size_bytes, position, root if self.uses_root else 0)

    # -- subclass hooks ------------------------------------------------------------------------------
    def _build(self, plan: Plan, n: int, size_bytes: int, root: int, window: int | None) -> None:
        raise NotImplementedError

    def _expected(self, n: int, size_bytes: int, position: int, root: int) -> int:
        raise NotImplementedError

    def _table(self, n: int, size_bytes: int, root: int, chunks: int, window: int | None) -> TransferTable | None:
        """The transfer table built with array operations (``n >= 2``); None: made from ``_build``'s transfers."""
        return None


@lru_cache(maxsize=512)
def _cached_plan(
    algorithm: BaseAlgorithm, n: int, size_bytes: int, root: int, chunks: int, window: int | None
) -> PlanResult:
    plan = Plan(chunks)
    if n > 1:
        algorithm._build(plan, n, size_bytes, root, window)
    return PlanResult(tuple(plan.transfers), tuple(plan.payloads))


def ceil_log2(n: int) -> int:
    """Smallest ``k`` with ``2**k >= n`` (0 for n == 1)."""
    return (n - 1).bit_length()
