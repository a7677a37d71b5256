"""``emulator generate KIND --ranks N -o PREFIX [options]``: write a synthetic Chakra trace.

One ``PREFIX.<rank>.et`` per rank (``.et.gz`` with ``--compress``), streamed through the trace writer,
so very large traces need bounded memory. Same options → byte-identical files. Sizes take units
(``16MiB``), durations too (``250us``; bare numbers are microseconds). Every usage error is one line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from emulator.errors import ConfigError
from emulator.report.console import counted
from emulator.trace import generators as gen
from emulator.trace.generators.common import require_positive
from emulator.trace.generators.moe import add_routing_arguments, routing_fields
from emulator.units import format_bytes, parse_duration_us, parse_size_bytes


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one ``error: ...`` line (exit 2), like every other error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"error: {self.prog}: {message}", file=sys.stderr)
        sys.exit(2)


def _size(option: str, text: str) -> int:
    from emulator.config.model import MAX_SIZE_BYTES

    try:
        size = parse_size_bytes(text)
    except ValueError as exc:
        raise ConfigError(f"{option}: {exc}") from None
    if size > MAX_SIZE_BYTES:
        raise ConfigError(f"{option}: {text} is more than 2^53 bytes (8 PiB), the largest size a run can hold")
    return size


def _sizes(option: str, text: str) -> tuple[int, ...]:
    return tuple(_size(option, part) for part in text.split(",") if part.strip())


def _dur(option: str, text: str) -> int:
    """Duration in µs; a bare number (also as a string: ``"50"``) is microseconds."""
    try:
        return parse_duration_us(text)
    except ValueError as exc:
        raise ConfigError(f"{option}: {exc}") from None


def _ranks(args: argparse.Namespace) -> int:
    if args.ranks is None:
        raise ConfigError(f"generate {args.kind}: --ranks is required")
    return require_positive("ranks", args.ranks)


def _collective(args: argparse.Namespace) -> gen.GeneratedTrace:
    return gen.collective_trace(gen.CollectiveOptions(
        ranks=_ranks(args),
        collectives=gen.parse_collectives(args.collective),
        size_bytes=_size("--size", args.size),
        iterations=args.iterations,
        gap_us=_dur("--gap", args.gap),
        root=args.root,
        group_size=args.group_size,
        size_convention=args.size_convention,
    ))


def _data_parallel(args: argparse.Namespace) -> gen.GeneratedTrace:
    return gen.data_parallel_trace(gen.DataParallelOptions(
        ranks=_ranks(args),
        layers=args.layers,
        params_per_layer_bytes=_sizes("--params-per-layer", args.params_per_layer),
        fwd_us=_dur("--fwd", args.fwd),
        bwd_us=_dur("--bwd", args.bwd),
        optimizer_us=_dur("--optimizer", args.optimizer),
        bucket_bytes=_size("--bucket-size", args.bucket_size),
        iterations=args.iterations,
    ))


def _moe(args: argparse.Namespace) -> gen.GeneratedTrace:
    tp, ep, dp = gen.resolve_degrees(args.ranks, args.tp, args.ep, args.dp)
    return gen.moe_trace(gen.MoeOptions(
        tp=tp, ep=ep, dp=dp,
        layers=args.layers,
        a2a_bytes=_size("--a2a-size", args.a2a_size),
        tp_bytes=_size("--tp-size", args.tp_size),
        dense_grad_bytes=_size("--dense-grad-size", args.dense_grad_size),
        expert_grad_bytes=_size("--expert-grad-size", args.expert_grad_size),
        attn_us=_dur("--attn-time", args.attn_time),
        expert_us=_dur("--expert-time", args.expert_time),
        bwd_factor=args.bwd_factor,
        optimizer_us=_dur("--optimizer", args.optimizer),
        iterations=args.iterations,
        **routing_fields(args),
    ))


def _pipeline(args: argparse.Namespace) -> gen.GeneratedTrace:
    return gen.pipeline_trace(gen.PipelineOptions(
        ranks=_ranks(args),
        microbatches=args.microbatches,
        activation_bytes=_size("--activation-size", args.activation_size),
        fwd_us=_dur("--fwd", args.fwd),
        bwd_us=_dur("--bwd", args.bwd),
        optimizer_us=_dur("--optimizer", args.optimizer),
        iterations=args.iterations,
        schedule=args.schedule,
    ))


BUILDERS: dict[str, Callable[[argparse.Namespace], gen.GeneratedTrace]] = {
    "collective": _collective,
    "data-parallel": _data_parallel,
    "moe": _moe,
    "pipeline": _pipeline,
}


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = subparsers.add_parser(
        name, help=help_text,
        description="Write a synthetic Chakra execution trace, one PREFIX.<rank>.et per rank. "
                    "Sizes take units (16MiB, 4KB), durations too (250us, 1ms; bare numbers are µs).",
    )
    parser.error = _OneLineParser.error.__get__(parser)  # type: ignore[method-assign]
    kinds = parser.add_subparsers(dest="kind", metavar="KIND", parser_class=_OneLineParser, required=True)

    def add_kind(kind: str, *, ranks_required: bool = True, **kw: str) -> argparse.ArgumentParser:
        """The parser of one KIND with the options every kind takes (required ones in their own group)."""
        p = kinds.add_parser(kind, **kw)
        required = p.add_argument_group("required arguments")
        ranks = required if ranks_required else p
        ranks.add_argument("--ranks", type=int, required=ranks_required, default=None, metavar="N",
                           help="number of ranks (files)" + ("" if ranks_required else "; default tp × ep × dp"))
        required.add_argument("-o", "--output", required=True, metavar="PREFIX", help="write PREFIX.<rank>.et")
        p.add_argument("--iterations", type=int, default=1, help="repetitions of the pattern (default 1)")
        p.add_argument("--compress", action="store_true", help="gzip the files (PREFIX.<rank>.et.gz)")
        return p

    p = add_kind("collective", help="collective microbenchmark",
                         description="Collectives chained by data deps, optionally with a compute gap between them.")
    p.add_argument("--collective", default="all_reduce",
                   help="comma list: all_reduce, reduce, all_gather, gather, scatter, broadcast, all_to_all, "
                        "reduce_scatter, reduce_scatter_block, barrier (default all_reduce)")
    p.add_argument("--size", default="1MiB", help="comm_size per collective (ALL_GATHER: per-rank shard) (1MiB)")
    p.add_argument("--gap", default="0", help="compute delay between consecutive collectives (default 0)")
    p.add_argument("--root", type=int, default=0, help="root (index in the group) of rooted collectives (0)")
    p.add_argument("--group-size", type=int, default=0,
                   help="split ranks into consecutive groups of this size (default: one group of all ranks)")
    p.add_argument("--size-convention", default="chakra", choices=("chakra", "nccl"),
                   help="chakra: --size is comm_size as written; nccl: --size is the total output (AG writes size/N)")

    p = add_kind("data-parallel", help="DDP training step with bucketed all-reduces",
                         description="Forward/backward per layer, gradient buckets all-reduced during backward, "
                                     "then an optimizer step.")
    p.add_argument("--layers", type=int, default=24, help="number of layers (24)")
    p.add_argument("--params-per-layer", default="16MiB",
                   help="gradient bytes per layer, or a comma list with one size per layer (16MiB)")
    p.add_argument("--fwd", default="200us", help="forward compute per layer (200us)")
    p.add_argument("--bwd", default="400us", help="backward compute per layer (400us)")
    p.add_argument("--optimizer", default="100us", help="optimizer step (100us)")
    p.add_argument("--bucket-size", default="25MiB", help="gradient bucket size (25MiB, PyTorch DDP default)")

    p = add_kind("moe", ranks_required=False, help="expert-parallel MoE layers (tp × ep × dp ranks)",
                         description="All-to-all dispatch/combine around expert compute, tensor-parallel and "
                                     "data-parallel all-reduces; ranks = tp × ep × dp (a missing degree is inferred).")
    p.add_argument("--tp", type=int, default=None, help="tensor-parallel degree (default 1)")
    p.add_argument("--ep", type=int, default=None, help="expert-parallel degree (default: the rest of --ranks)")
    p.add_argument("--dp", type=int, default=None, help="data-parallel degree (default 1)")
    p.add_argument("--layers", type=int, default=4, help="MoE layers (4)")
    p.add_argument("--a2a-size", default="4MiB", help="all-to-all send buffer per dispatch/combine (4MiB)")
    p.add_argument("--tp-size", default="4MiB", help="tensor-parallel activation all-reduce (4MiB)")
    p.add_argument("--dense-grad-size", default="32MiB", help="dense gradient bytes per layer (32MiB)")
    p.add_argument("--expert-grad-size", default="64MiB", help="expert gradient bytes per layer (64MiB)")
    p.add_argument("--attn-time", default="150us", help="attention forward compute per layer (150us)")
    p.add_argument("--expert-time", default="300us", help="expert forward compute per layer (300us)")
    p.add_argument("--bwd-factor", type=float, default=2.0, help="backward time = factor × forward (2.0)")
    p.add_argument("--optimizer", default="100us", help="optimizer step (100us)")
    add_routing_arguments(p)

    p = add_kind("pipeline", help="pipeline-parallel stages with SEND/RECV",
                         description="One stage per rank; activations forward and gradients backward as "
                                     "COMM_SEND/COMM_RECV pairs with src, dst and tag.")
    p.add_argument("--microbatches", type=int, default=8, help="microbatches per iteration (8)")
    p.add_argument("--activation-size", default="8MiB", help="bytes per activation/gradient transfer (8MiB)")
    p.add_argument("--fwd", default="300us", help="forward compute per microbatch (300us)")
    p.add_argument("--bwd", default="600us", help="backward compute per microbatch (600us)")
    p.add_argument("--optimizer", default="100us", help="optimizer step (100us)")
    p.add_argument("--schedule", default="1f1b", choices=("1f1b", "gpipe"), help="microbatch schedule (1f1b)")

    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    trace = BUILDERS[args.kind](args)
    report = gen.write_generated(trace, args.output, compress=args.compress)
    total_nodes = sum(report.node_counts)
    total_bytes = sum(p.stat().st_size for p in report.paths)
    suffix = ".et.gz" if args.compress else ".et"
    print(f"wrote {counted(len(report.paths), 'rank file')} {args.output}.{{0..{len(report.paths) - 1}}}{suffix}: "
          f"{counted(total_nodes, 'node')}, {format_bytes(total_bytes)}, {counted(len(trace.groups), 'process group')}")
    if len(report.paths) == 1:
        print(f"warning: generate {args.kind} --ranks 1: one rank's collectives have no peer and make no traffic; "
              f"use --ranks 2 or more (or run this trace with --replicate N)", file=sys.stderr)
    return 0
