"""``emulator generate pipeline``: pipeline-parallel stages exchanging activations with SEND/RECV.

Theory of operation: one stage per rank (stage ``s`` = rank ``s``), ``microbatches`` per iteration,
scheduled GPipe-style (all forwards, then all backwards) or 1F1B (``S - s - 1`` warm-up forwards, then
alternate one forward / one backward, then the remaining backwards). A forward of microbatch ``m`` on
stage ``s``::

    RECV act from s-1 (tag 2m) → fwd COMP → SEND act to s+1 (tag 2m)

and a backward::

    RECV grad from s+1 (tag 2m+1) → bwd COMP → SEND grad to s-1 (tag 2m+1)

(the first stage has no activation RECV, the last no activation SEND, and symmetrically for
gradients). COMP nodes form the stage's program-order chain; a RECV is posted after the previous COMP
(a blocking receive right before it is needed); a SEND depends only on its COMP, so the next compute
does not wait for it (asynchronous send). The optimizer waits for the last COMP and every SEND of the
iteration. Every SEND/RECV carries ``comm_src``, ``comm_dst`` and ``comm_tag``; tags repeat each
iteration, so pairs match by ``(src, dst, tag, k-th occurrence)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from emulator.trace.generators.common import (
    GeneratedTrace,
    NodeIds,
    comp_node,
    make_metadata,
    p2p_node,
)
from emulator.trace.generators.options import GeneratorError, Ref, iterations_option, option, require_positive
from emulator.trace.model import Node, NodeType

SCHEDULES = ("1f1b", "gpipe")
SEND = NodeType.COMM_SEND_NODE
RECV = NodeType.COMM_RECV_NODE


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    ranks: int
    microbatches: int = option(8, kind="int", help="microbatches per iteration (8)")
    activation_bytes: int = option(8 << 20, name="activation_size", kind="size",
                                   help="bytes per activation/gradient transfer (8MiB)")
    fwd_us: int = option(300, name="fwd", kind="duration", help="forward compute per microbatch (300us)")
    bwd_us: int = option(600, name="bwd", kind="duration", help="backward compute per microbatch (600us)")
    optimizer_us: int = option(100, name="optimizer", kind="duration", help="optimizer step (100us)")
    iterations: int = iterations_option()
    schedule: str = option("1f1b", kind="choice", choices=SCHEDULES, help="microbatch schedule (1f1b)")


def stage_program(o: PipelineOptions, stage: int) -> list[tuple[str, int]]:
    """The stage's compute order: ``("F", m)`` / ``("B", m)``."""
    m_total = o.microbatches
    if o.schedule == "gpipe":
        return [("F", m) for m in range(m_total)] + [("B", m) for m in range(m_total)]
    warmup = min(o.ranks - stage - 1, m_total)
    ops: list[tuple[str, int]] = [("F", m) for m in range(warmup)]
    for i in range(m_total - warmup):
        ops.append(("F", warmup + i))
        ops.append(("B", i))
    ops.extend(("B", m) for m in range(m_total - warmup, m_total))
    return ops


def pipeline_trace(o: PipelineOptions) -> GeneratedTrace:
    require_positive("ranks", o.ranks)
    require_positive("microbatches", o.microbatches)
    require_positive("iterations", o.iterations)
    if o.schedule not in SCHEDULES:
        raise GeneratorError(Ref("schedule"), f" must be one of {', '.join(SCHEDULES)}, got {o.schedule!r}")
    last = o.ranks - 1

    def rank_nodes(stage: int) -> Iterator[Node]:
        ids = NodeIds()
        program = stage_program(o, stage)
        head: int | None = None
        for it in range(o.iterations):
            sends: list[int] = []
            for phase, m in program:
                fwd = phase == "F"
                peer_in = stage - 1 if fwd else stage + 1
                peer_out = stage + 1 if fwd else stage - 1
                tag = 2 * m + (0 if fwd else 1)
                what = "act" if fwd else "grad"
                recv_id: int | None = None
                if 0 <= peer_in <= last:
                    recv_id = ids.take()
                    yield p2p_node(recv_id, f"recv_{what}_it{it}_mb{m}", RECV, o.activation_bytes, peer_in, stage, tag,
                                   (head,))
                comp = ids.take()
                yield comp_node(comp, f"{'fwd' if fwd else 'bwd'}_it{it}_mb{m}", o.fwd_us if fwd else o.bwd_us,
                                (head, recv_id))
                head = comp
                if 0 <= peer_out <= last:
                    sid = ids.take()
                    yield p2p_node(sid, f"send_{what}_it{it}_mb{m}", SEND, o.activation_bytes, stage, peer_out, tag,
                                   (comp,))
                    sends.append(sid)
            opt = ids.take()
            yield comp_node(opt, f"optimizer_it{it}", o.optimizer_us, (head, *sends))
            head = opt

    return GeneratedTrace("pipeline", o.ranks, {}, make_metadata("pipeline", o), rank_nodes)
