"""``emulator generate collective``: collective microbenchmarks, like ASTRA-sim's examples.

Theory of operation: every rank issues the same sequence, ``iterations`` × (the listed collectives in
order), chained by ``data_deps`` so the issue order (which is how ranks match collectives, chakra-format
§8) is fixed. With a ``gap`` a COMP node of that duration sits between consecutive collectives. With
``group_size`` < ranks the ranks are split into consecutive groups (``pg_name`` "1", "2", … — numeric,
as ASTRA-sim's ``stoi`` expects) and each rank runs the collectives on its own group; otherwise the
default all-rank group is used and ``pg_name`` is left unset, exactly like the microbenchmarks.

``comm_size`` follows chakra-format §8: ``size_bytes`` is written as-is, so for ALL_GATHER it is the
per-rank shard. With ``size_convention="nccl"`` the size is read as nccl-tests' "size" (the total
output) and ALL_GATHER/GATHER write ``size // group_size``. BARRIER carries no payload: comm_size 0.
Rooted collectives (REDUCE, GATHER, SCATTER, BROADCAST) carry the ``root`` attribute, a rank index
within the group.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from emulator.trace.generators.common import (
    Chain,
    GeneratedTrace,
    NodeIds,
    make_metadata,
)
from emulator.trace.generators.options import GeneratorError, Ref, iterations_option, option, require_positive
from emulator.trace.model import ROOTED, CollectiveType, Node, ProcessGroup

SIZE_CONVENTIONS = ("chakra", "nccl")


@dataclass(frozen=True, slots=True)
class CollectiveOptions:
    ranks: int
    collectives: tuple[CollectiveType, ...] = option(
        (CollectiveType.ALL_REDUCE,), name="collective", kind="collectives",
        help=f"comma list: {', '.join(c.name.lower() for c in CollectiveType)} (default all_reduce)")
    size_bytes: int = option(1 << 20, name="size", kind="size",
                             help="comm_size per collective (ALL_GATHER: per-rank shard) (1MiB)")
    iterations: int = iterations_option()
    gap_us: int = option(0, name="gap", kind="duration", help="compute delay between consecutive collectives (default 0)")
    root: int = option(0, kind="int", help="root (index in the group) of rooted collectives (0)")
    group_size: int = option(0, kind="int",  # 0 = all ranks (default group)
                             help="split ranks into consecutive groups of this size (default: one group of all ranks)")
    size_convention: str = option("chakra", kind="choice", choices=SIZE_CONVENTIONS,
                                  help="chakra: --size is comm_size as written; nccl: --size is the total output "
                                       "(AG writes size/N)")


def _validate(o: CollectiveOptions) -> int:
    require_positive("ranks", o.ranks)
    require_positive("iterations", o.iterations)
    gsize = o.group_size or o.ranks
    if gsize < 1 or o.ranks % gsize:
        raise GeneratorError(Ref("group_size"), f" {o.group_size} does not divide ", Ref("ranks"), f" {o.ranks}")
    if not 0 <= o.root < gsize:
        raise GeneratorError(Ref("root"), f" {o.root} is not a rank of a group of size {gsize}")
    if o.size_convention not in SIZE_CONVENTIONS:
        raise GeneratorError(Ref("size_convention"),
                             f" must be one of {', '.join(SIZE_CONVENTIONS)}, got {o.size_convention!r}")
    if o.size_convention == "nccl" and o.size_bytes % gsize and any(
        c in (CollectiveType.ALL_GATHER, CollectiveType.GATHER) for c in o.collectives
    ):
        raise GeneratorError(Ref("size"), f" {o.size_bytes} is not divisible by the group size {gsize} (nccl convention)")
    return gsize


def comm_size_for(o: CollectiveOptions, collective: CollectiveType, group_size: int) -> int:
    if collective == CollectiveType.BARRIER:
        return 0
    if o.size_convention == "nccl" and collective in (CollectiveType.ALL_GATHER, CollectiveType.GATHER):
        return o.size_bytes // group_size
    return o.size_bytes


def collective_trace(o: CollectiveOptions) -> GeneratedTrace:
    gsize = _validate(o)
    groups: dict[str, ProcessGroup] = {}
    if gsize != o.ranks:
        for g in range(o.ranks // gsize):
            name = str(g + 1)
            groups[name] = ProcessGroup(name, tuple(range(g * gsize, (g + 1) * gsize)), desc=f"collective group {g}")

    def rank_nodes(rank: int) -> Iterator[Node]:
        pg_name = str(rank // gsize + 1) if groups else None
        chain = Chain(NodeIds())
        for it in range(o.iterations):
            for k, coll in enumerate(o.collectives):
                if o.gap_us and chain.head is not None:
                    yield chain.comp(f"gap_it{it}_{k}", o.gap_us)
                root = o.root if coll in ROOTED else None
                yield chain.coll(f"{coll.name.lower()}_it{it}_{k}", coll, comm_size_for(o, coll, gsize),
                                 pg_name=pg_name, root=root)

    return GeneratedTrace("collective", o.ranks, groups, make_metadata("collective", o), rank_nodes)
