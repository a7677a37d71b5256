"""``emulator generate data-parallel``: DDP-style training steps with bucketed gradient all-reduces.

Theory of operation: each iteration on every rank is

    fwd_l0 → fwd_l1 → … → fwd_l(L-1) → bwd_l(L-1) → … → bwd_l0 → optimizer

(COMP nodes chained by ``data_deps``). Backward produces the gradient of layer ``l`` when ``bwd_l``
finishes; gradients are packed into buckets in the order they are produced (last layer first, as
PyTorch DDP does), a bucket closing as soon as it holds at least ``bucket_bytes``; the last, possibly
smaller, bucket closes with ``bwd_l0``. Each bucket becomes one ALL_REDUCE of the bucket's bytes whose
parents are the backward node that produced the bucket's last gradient and the previous all-reduce
(NCCL runs them on one stream, in order) — never a later backward node, so the all-reduces overlap the
remaining backward compute. The optimizer depends on every all-reduce (and on ``bwd_l0``); the next
iteration's ``fwd_l0`` depends on the optimizer. All all-reduces use the default all-rank group.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from emulator.trace.generators.common import (
    Chain,
    GeneratedTrace,
    NodeIds,
    coll_node,
    make_metadata,
)
from emulator.trace.generators.options import GeneratorError, Ref, iterations_option, option, require_positive
from emulator.trace.model import CollectiveType, Node


@dataclass(frozen=True, slots=True)
class DataParallelOptions:
    ranks: int
    layers: int = option(24, kind="int", help="number of layers (24)")
    #: gradient bytes per layer: one value for every layer, or one per layer (layer 0 first)
    params_per_layer_bytes: tuple[int, ...] = option(
        (16 << 20,), name="params_per_layer", kind="sizes",
        help="gradient bytes per layer, or a comma list with one size per layer (16MiB)")
    fwd_us: int = option(200, name="fwd", kind="duration", help="forward compute per layer (200us)")
    bwd_us: int = option(400, name="bwd", kind="duration", help="backward compute per layer (400us)")
    optimizer_us: int = option(100, name="optimizer", kind="duration", help="optimizer step (100us)")
    bucket_bytes: int = option(25 << 20, name="bucket_size", kind="size",
                               help="gradient bucket size (25MiB, PyTorch DDP default)")
    iterations: int = iterations_option()


def layer_bytes(o: DataParallelOptions) -> tuple[int, ...]:
    p = o.params_per_layer_bytes
    if len(p) == 1:
        return p * o.layers
    if len(p) != o.layers:
        raise GeneratorError(Ref("params_per_layer"), f" lists {len(p)} sizes for {o.layers} layers "
                                                      f"(give 1 or {o.layers})")
    return p


def buckets(o: DataParallelOptions) -> list[tuple[int, int]]:
    """``(last_layer, bytes)`` per bucket in backward order: the bucket closes after ``bwd_<last_layer>``."""
    sizes = layer_bytes(o)
    out: list[tuple[int, int]] = []
    acc = 0
    for layer in range(o.layers - 1, -1, -1):
        acc += sizes[layer]
        if acc >= o.bucket_bytes or layer == 0:
            if acc > 0:
                out.append((layer, acc))
            acc = 0
    return out


def data_parallel_trace(o: DataParallelOptions) -> GeneratedTrace:
    require_positive("ranks", o.ranks)
    require_positive("layers", o.layers)
    require_positive("iterations", o.iterations)
    plan = buckets(o)
    closes_at = {layer: (b, size) for b, (layer, size) in enumerate(plan)}

    def rank_nodes(rank: int) -> Iterator[Node]:
        chain = Chain(NodeIds())  # fwd → bwd → optimizer → next iteration's fwd
        for it in range(o.iterations):
            for layer in range(o.layers):
                yield chain.comp(f"fwd_it{it}_l{layer}", o.fwd_us)
            allreduces: list[int] = []
            for layer in range(o.layers - 1, -1, -1):
                yield chain.comp(f"bwd_it{it}_l{layer}", o.bwd_us)
                if layer in closes_at:
                    b, size = closes_at[layer]
                    ar = chain.ids.take()
                    last_ar = allreduces[-1] if allreduces else None
                    yield coll_node(ar, f"allreduce_it{it}_b{b}", CollectiveType.ALL_REDUCE, size, (chain.head, last_ar))
                    allreduces.append(ar)
            yield chain.comp(f"optimizer_it{it}", o.optimizer_us, *allreduces)

    return GeneratedTrace("data-parallel", o.ranks, {}, make_metadata("data-parallel", o), rank_nodes)
