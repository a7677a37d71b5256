"""``emulator generate moe``: expert-parallel (mixture-of-experts) training steps.

Theory of operation: ``ranks = tp × ep × dp`` laid out with tensor parallel innermost:
``rank = (dp_i · ep + ep_i) · tp + tp_i``. Three families of process groups follow, each group a
numeric ``pg_name`` ("1", "2", … as ASTRA-sim's ``stoi`` expects) with a readable ``desc``:
tensor-parallel groups (same dp_i, ep_i), expert-parallel groups (same dp_i, tp_i), data-parallel
groups (same ep_i, tp_i) and, when ``ep > 1``, dense data-parallel groups (same tp_i: all ep × dp
ranks). A family whose degree is 1 has no groups and no collectives.

Expert parameters are sharded over ep and replicated over dp, so expert gradients are all-reduced
over the dp group. Dense (attention) parameters are replicated over every ep and dp rank — each of
them trains on its own tokens, expert parallelism is carved out of data parallelism — so dense
gradients are all-reduced over the ep × dp group (the dp group itself when ``ep == 1``).

Per iteration and layer, forward (one chain of ``data_deps``)::

    attn_fwd → [ALL_REDUCE tp: activations] → ALL_TO_ALL ep: dispatch → expert_fwd → ALL_TO_ALL ep: combine

then backward over the layers in reverse::

    ALL_TO_ALL ep: combine grad → expert_bwd → ALL_TO_ALL ep: dispatch grad → attn_bwd → [ALL_REDUCE tp]

Gradients are all-reduced over the data-parallel group as soon as they exist, off the main chain so
they overlap the remaining backward: the expert gradients (dp group) after ``expert_bwd`` and the
dense (attention) gradients (dense group) after ``attn_bwd``, each chained to the previous gradient all-reduce so the
per-group order is fixed. The optimizer waits for the chain and every gradient all-reduce.
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
from emulator.trace.model import CollectiveType, Node, ProcessGroup

A2A = CollectiveType.ALL_TO_ALL
AR = CollectiveType.ALL_REDUCE


@dataclass(frozen=True, slots=True)
class MoeOptions:
    tp: int = option(1, kind="int", help="tensor-parallel degree (default 1)")
    ep: int = option(1, kind="int", help="expert-parallel degree (default: the rest of --ranks)")
    dp: int = option(1, kind="int", help="data-parallel degree (default 1)")
    layers: int = option(4, kind="int", help="MoE layers (4)")
    a2a_bytes: int = option(4 << 20, name="a2a_size", kind="size", help="all-to-all send buffer per dispatch/combine (4MiB)")
    tp_bytes: int = option(4 << 20, name="tp_size", kind="size", help="tensor-parallel activation all-reduce (4MiB)")
    dense_grad_bytes: int = option(32 << 20, name="dense_grad_size", kind="size",
                                   help="dense gradient bytes per layer (32MiB)")
    expert_grad_bytes: int = option(64 << 20, name="expert_grad_size", kind="size",
                                    help="expert gradient bytes per layer (64MiB)")
    attn_us: int = option(150, name="attn_time", kind="duration", help="attention forward compute per layer (150us)")
    expert_us: int = option(300, name="expert_time", kind="duration", help="expert forward compute per layer (300us)")
    bwd_factor: float = option(2.0, kind="float", help="backward time = factor × forward (2.0)")
    optimizer_us: int = option(100, name="optimizer", kind="duration", help="optimizer step (100us)")
    iterations: int = iterations_option()

    @property
    def ranks(self) -> int:
        return self.tp * self.ep * self.dp


def resolve_degrees(ranks: int | None, tp: int | None, ep: int | None, dp: int | None) -> tuple[int, int, int]:
    """Fill in the missing degree: tp and dp default to 1, ep takes what is left of ``ranks``."""
    for name, v in (("ranks", ranks), ("tp", tp), ("ep", ep), ("dp", dp)):
        if v is not None:
            require_positive(name, v)
    if ranks is None:
        t, e, d = tp or 1, ep or 1, dp or 1
        return t, e, d
    known = [v for v in (tp, ep, dp) if v is not None]
    if len(known) == 3:
        if tp * ep * dp != ranks:  # type: ignore[operator]
            raise GeneratorError(Ref("ranks"), f" {ranks} is not ", Ref("tp"), f" {tp} × ", Ref("ep"), f" {ep} × ",
                                 Ref("dp"), f" {dp}")
        return tp, ep, dp  # type: ignore[return-value]
    t = tp if tp is not None else 1
    d = dp if dp is not None else 1
    if ep is None:
        if ranks % (t * d):
            raise GeneratorError(Ref("ranks"), f" {ranks} is not divisible by ", Ref("tp"), f" {t} × ", Ref("dp"), f" {d}")
        return t, ranks // (t * d), d
    if tp is None and dp is not None:
        t = ranks // (ep * d) if ranks % (ep * d) == 0 else 0
    elif dp is None:
        d = ranks // (ep * t) if ranks % (ep * t) == 0 else 0
    if t * ep * d != ranks or t < 1 or d < 1:
        raise GeneratorError(Ref("ranks"), f" {ranks} does not factor as ", Ref("tp"), " × ", Ref("ep"), f" {ep} × ",
                             Ref("dp"))
    return t, ep, d


def resolve_moe(ranks: int | None, values: dict) -> dict:
    """The options with tp, ep and dp resolved against ``ranks`` (:func:`resolve_degrees`)."""
    tp, ep, dp = resolve_degrees(ranks, values.pop("tp", None), values.pop("ep", None), values.pop("dp", None))
    return {**values, "tp": tp, "ep": ep, "dp": dp}


def moe_groups(o: MoeOptions) -> tuple[dict[str, ProcessGroup], dict[int, dict[str, str]]]:
    """All groups by name, and per rank its group name for each family (``tp``, ``ep``, ``dp``, ``dense``)."""
    groups: dict[str, ProcessGroup] = {}
    member: dict[int, dict[str, str]] = {r: {} for r in range(o.ranks)}

    def rank_of(d: int, e: int, t: int) -> int:
        return (d * o.ep + e) * o.tp + t

    families: list[tuple[str, int, list[tuple[str, list[int]]]]] = []
    families.append(("tp", o.tp, [
        (f"tp dp={d} ep={e}", [rank_of(d, e, t) for t in range(o.tp)]) for d in range(o.dp) for e in range(o.ep)
    ]))
    families.append(("ep", o.ep, [
        (f"ep dp={d} tp={t}", [rank_of(d, e, t) for e in range(o.ep)]) for d in range(o.dp) for t in range(o.tp)
    ]))
    families.append(("dp", o.dp, [
        (f"dp ep={e} tp={t}", [rank_of(d, e, t) for d in range(o.dp)]) for e in range(o.ep) for t in range(o.tp)
    ]))
    families.append(("dense", o.ep * o.dp if o.ep > 1 else 1, [
        (f"dense-dp tp={t}", [rank_of(d, e, t) for d in range(o.dp) for e in range(o.ep)]) for t in range(o.tp)
    ]))
    next_name = 1
    for family, degree, lists in families:
        if degree == 1:
            continue
        for desc, ranks in lists:
            name = str(next_name)
            next_name += 1
            groups[name] = ProcessGroup(name, tuple(sorted(ranks)), desc=desc)
            for r in ranks:
                member[r][family] = name
    if o.ep == 1 and o.dp > 1:  # the dense group is the dp group
        for r in member:
            member[r]["dense"] = member[r]["dp"]
    return groups, member


def moe_trace(o: MoeOptions) -> GeneratedTrace:
    for name in ("tp", "ep", "dp", "layers", "iterations"):
        require_positive(name, getattr(o, name))
    if o.bwd_factor < 0:
        raise GeneratorError(Ref("bwd_factor"), f" must not be negative, got {o.bwd_factor}")
    groups, member = moe_groups(o)
    attn_bwd_us = round(o.attn_us * o.bwd_factor)
    expert_bwd_us = round(o.expert_us * o.bwd_factor)

    def rank_nodes(rank: int) -> Iterator[Node]:
        pg = member[rank]
        chain = Chain(NodeIds())
        for it in range(o.iterations):
            for layer in range(o.layers):
                t = f"it{it}_l{layer}"
                yield chain.comp(f"attn_fwd_{t}", o.attn_us)
                if "tp" in pg:
                    yield chain.coll(f"tp_allreduce_fwd_{t}", AR, o.tp_bytes, pg_name=pg["tp"])
                if "ep" in pg:
                    yield chain.coll(f"dispatch_fwd_{t}", A2A, o.a2a_bytes, pg_name=pg["ep"])
                yield chain.comp(f"expert_fwd_{t}", o.expert_us)
                if "ep" in pg:
                    yield chain.coll(f"combine_fwd_{t}", A2A, o.a2a_bytes, pg_name=pg["ep"])
            grads = Chain(chain.ids)  # gradient all-reduces: their own chain, off the compute chain
            grad_ids: list[int] = []
            for layer in range(o.layers - 1, -1, -1):
                t = f"it{it}_l{layer}"
                if "ep" in pg:
                    yield chain.coll(f"combine_bwd_{t}", A2A, o.a2a_bytes, pg_name=pg["ep"])
                yield chain.comp(f"expert_bwd_{t}", expert_bwd_us)
                if "dp" in pg:
                    yield grads.coll(f"expert_grad_allreduce_{t}", AR, o.expert_grad_bytes, chain.head, pg_name=pg["dp"])
                    grad_ids.append(grads.head)  # type: ignore[arg-type]
                if "ep" in pg:
                    yield chain.coll(f"dispatch_bwd_{t}", A2A, o.a2a_bytes, pg_name=pg["ep"])
                yield chain.comp(f"attn_bwd_{t}", attn_bwd_us)
                if "dense" in pg:
                    yield grads.coll(f"dense_grad_allreduce_{t}", AR, o.dense_grad_bytes, chain.head, pg_name=pg["dense"])
                    grad_ids.append(grads.head)  # type: ignore[arg-type]
                if "tp" in pg:
                    yield chain.coll(f"tp_allreduce_bwd_{t}", AR, o.tp_bytes, pg_name=pg["tp"])
            yield chain.comp(f"optimizer_it{it}", o.optimizer_us, *grad_ids)

    return GeneratedTrace("moe", o.ranks, groups, make_metadata("moe", o), rank_nodes)
