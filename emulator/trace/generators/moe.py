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

**Routing** (``--routing``): without it every dispatch/combine is an even all-to-all of ``--a2a-size``.
With ``--routing uniform|zipf:S|hot:EXPERT:FRACTION --tokens N --hidden H`` the all-to-alls are uneven
(all-to-all-v): there is one expert per expert-parallel rank; each rank routes each of its ``N`` tokens
to one expert (top-1), drawn with probability ``p`` — uniform; Zipf (``p ∝ 1/k^S`` for the k-th most
popular expert, ``S > 0``; which expert is k-th is a per-layer permutation, so a layer keeps its hot
experts while the tokens are drawn anew); or ``hot`` (expert ``EXPERT`` gets ``FRACTION`` of the tokens,
the others share the rest). The counts of position ``i`` are a multinomial draw seeded by
``(--seed, iteration, layer, expert group)``, so routing changes every iteration and layer and every
rank of the group computes the same matrix ``M`` (tokens × ``H`` × 2 bytes, bf16). Dispatch forward and
combine backward send ``M``, combine forward and dispatch backward its transpose. Each ALL_TO_ALL node
carries its row as ``in_split_sizes`` and its column as ``out_split_sizes`` (int64 lists, bytes per group
position; :mod:`emulator.schedule.alltoallv`), and ``comm_size`` = the row's sum.

Gradients are all-reduced over the data-parallel group as soon as they exist, off the main chain so
they overlap the remaining backward: the expert gradients (dp group) after ``expert_bwd`` and the
dense (attention) gradients (dense group) after ``attn_bwd``, each chained to the previous gradient all-reduce so the
per-group order is fixed. The optimizer waits for the chain and every gradient all-reduce.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emulator.trace.generators.common import (
    Chain,
    GeneratedTrace,
    NodeIds,
    make_metadata,
)
from emulator.trace.generators.options import GeneratorError, Ref, iterations_option, option, require_positive
from emulator.trace.model import CollectiveType, Node, ProcessGroup

if TYPE_CHECKING:  # pragma: no cover - numpy loads only when routing is drawn
    import numpy as np

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
    routing: str = option("", kind="str", help="uneven all-to-alls: route --tokens per rank to experts uniformly "
                          "(uniform), by Zipf(S) (zipf:S), or with fraction F to expert E (hot:E:F) (default: even "
                          "all-to-alls of --a2a-size)")
    tokens: int = option(0, kind="int", help="tokens per rank and layer (with --routing)")
    hidden: int = option(0, kind="int", help="hidden size: elements per token, 2 bytes each (with --routing)")
    seed: int = option(1, kind="int", help="seed of the routing draws (1)")

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


#: bytes per hidden element of a routed token (bf16)
TOKEN_ELEMENT_BYTES = 2


@dataclass(frozen=True, slots=True)
class Routing:
    """A parsed ``--routing``: ``kind`` uniform, zipf (``exponent``) or hot (``expert``, ``fraction``)."""

    kind: str
    exponent: float = 0.0
    expert: int = 0
    fraction: float = 0.0


def parse_routing(text: str, ep: int) -> Routing:
    """``uniform``, ``zipf:1.2`` or ``hot:3:0.5`` → :class:`Routing`; ConfigError naming ``--routing``."""
    t = text.strip().lower()
    if t == "uniform":
        return Routing("uniform")
    m = re.fullmatch(r"zipf:([^:]+)", t)
    if m:
        try:
            s = float(m.group(1))
        except ValueError:
            s = float("nan")
        if not s > 0 or s == float("inf"):
            raise GeneratorError(f"{text}: the Zipf exponent must be a number > 0", option="routing")
        return Routing("zipf", exponent=s)
    m = re.fullmatch(r"hot:(\d+):([^:]+)", t)
    if m:
        expert = int(m.group(1))
        try:
            fraction = float(m.group(2))
        except ValueError:
            fraction = float("nan")
        if expert >= ep:
            raise GeneratorError(f"{text}: expert {expert} does not exist (experts 0-{ep - 1}, one per "
                                 "expert-parallel rank)", option="routing")
        if not 0 < fraction <= 1:
            raise GeneratorError(f"{text}: the hot fraction must be in (0, 1]", option="routing")
        return Routing("hot", expert=expert, fraction=fraction)
    raise GeneratorError(f"{text}: expected uniform, zipf:EXPONENT or hot:EXPERT:FRACTION", option="routing")


def expert_probabilities(r: Routing, ep: int, layer_rng: np.random.Generator) -> np.ndarray:
    """Probability of each expert (position in the expert-parallel group)."""
    import numpy as np

    if r.kind == "uniform" or ep == 1:
        return np.full(ep, 1.0 / ep)
    if r.kind == "zipf":
        w = 1.0 / np.arange(1, ep + 1, dtype=np.float64) ** r.exponent
        p = np.empty(ep)
        p[layer_rng.permutation(ep)] = w / w.sum()
        return p
    p = np.full(ep, (1.0 - r.fraction) / (ep - 1))
    p[r.expert] = r.fraction
    return p


def routing_matrix(o: MoeOptions, routing: Routing, iteration: int, layer: int, group: int) -> np.ndarray:
    """Bytes from position i to position j of expert group ``group`` in (``iteration``, ``layer``)."""
    import numpy as np

    p = expert_probabilities(routing, o.ep, np.random.default_rng([o.seed, layer, group, 1]))
    rng = np.random.default_rng([o.seed, iteration, layer, group])
    counts = np.stack([rng.multinomial(o.tokens, p) for _ in range(o.ep)])
    return counts.astype(np.int64) * (o.hidden * TOKEN_ELEMENT_BYTES)


def check_routing(o: MoeOptions) -> Routing | None:
    """The parsed routing (None: even all-to-alls); --tokens and --hidden come with --routing and only then."""
    routing = o.routing.strip()
    if not routing:
        for name in ("tokens", "hidden"):
            if getattr(o, name):
                raise GeneratorError(Ref(name), " needs ", Ref("routing"))
        return None
    for name in ("tokens", "hidden"):
        if not getattr(o, name):
            raise GeneratorError(Ref("routing"), " needs ", Ref(name))
        require_positive(name, getattr(o, name))
    if o.seed < 0:
        raise GeneratorError(Ref("seed"), f" must not be negative, got {o.seed}")
    return parse_routing(routing, o.ep)


def _split_node(node: Node, row: np.ndarray, col: np.ndarray) -> Node:
    attrs = (("in_split_sizes", ("int64_list", tuple(row.tolist()))),
             ("out_split_sizes", ("int64_list", tuple(col.tolist()))))
    comm = node.comm
    assert comm is not None
    return node._replace(comm=dataclasses.replace(comm, size_bytes=int(row.sum())), attrs=attrs)


def moe_trace(o: MoeOptions) -> GeneratedTrace:
    for name in ("tp", "ep", "dp", "layers", "iterations"):
        require_positive(name, getattr(o, name))
    routing = check_routing(o)
    if o.bwd_factor < 0:
        raise GeneratorError(Ref("bwd_factor"), f" must not be negative, got {o.bwd_factor}")
    groups, member = moe_groups(o)
    attn_bwd_us = round(o.attn_us * o.bwd_factor)
    expert_bwd_us = round(o.expert_us * o.bwd_factor)

    def rank_nodes(rank: int) -> Iterator[Node]:
        pg = member[rank]
        chain = Chain(NodeIds())
        pos = groups[pg["ep"]].position(rank) if "ep" in pg else 0

        def a2a(name: str, it: int, layer: int, transpose: bool) -> Node:
            node = chain.coll(name, A2A, o.a2a_bytes, pg_name=pg["ep"])
            if routing is None:
                return node
            m = routing_matrix(o, routing, it, layer, int(pg["ep"]))
            if transpose:
                m = m.T
            return _split_node(node, m[pos], m[:, pos])

        for it in range(o.iterations):
            for layer in range(o.layers):
                t = f"it{it}_l{layer}"
                yield chain.comp(f"attn_fwd_{t}", o.attn_us)
                if "tp" in pg:
                    yield chain.coll(f"tp_allreduce_fwd_{t}", AR, o.tp_bytes, pg_name=pg["tp"])
                if "ep" in pg:
                    yield a2a(f"dispatch_fwd_{t}", it, layer, False)
                yield chain.comp(f"expert_fwd_{t}", o.expert_us)
                if "ep" in pg:
                    yield a2a(f"combine_fwd_{t}", it, layer, True)
            grads = Chain(chain.ids)  # gradient all-reduces: their own chain, off the compute chain
            grad_ids: list[int] = []
            for layer in range(o.layers - 1, -1, -1):
                t = f"it{it}_l{layer}"
                if "ep" in pg:
                    yield a2a(f"combine_bwd_{t}", it, layer, False)
                yield chain.comp(f"expert_bwd_{t}", expert_bwd_us)
                if "dp" in pg:
                    yield grads.coll(f"expert_grad_allreduce_{t}", AR, o.expert_grad_bytes, chain.head, pg_name=pg["dp"])
                    grad_ids.append(grads.head)  # type: ignore[arg-type]
                if "ep" in pg:
                    yield a2a(f"dispatch_bwd_{t}", it, layer, True)
                yield chain.comp(f"attn_bwd_{t}", attn_bwd_us)
                if "dense" in pg:
                    yield grads.coll(f"dense_grad_allreduce_{t}", AR, o.dense_grad_bytes, chain.head, pg_name=pg["dense"])
                    grad_ids.append(grads.head)  # type: ignore[arg-type]
                if "tp" in pg:
                    yield chain.coll(f"tp_allreduce_bwd_{t}", AR, o.tp_bytes, pg_name=pg["tp"])
            yield chain.comp(f"optimizer_it{it}", o.optimizer_us, *grad_ids)

    return GeneratedTrace("moe", o.ranks, groups, make_metadata("moe", o), rank_nodes)
