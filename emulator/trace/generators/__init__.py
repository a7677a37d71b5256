"""Synthetic Chakra trace generators (``emulator generate KIND`` and ``workload.generate``).

Each kind has an options dataclass (the schema of its options, :mod:`.options`) and a function returning
a :class:`GeneratedTrace` (a streamed, deterministic description of the trace set). :data:`GENERATORS`
lists the kinds; :func:`generate` turns given options into a trace description, which
:func:`write_generated` writes through the trace writer or :meth:`GeneratedTrace.to_trace` builds in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from emulator.trace.generators.collective import CollectiveOptions, collective_trace
from emulator.trace.generators.common import GeneratedTrace, WriteReport, write_generated
from emulator.trace.generators.data_parallel import DataParallelOptions, data_parallel_trace
from emulator.trace.generators.moe import MoeOptions, moe_trace, resolve_degrees, resolve_moe
from emulator.trace.generators.options import (
    GeneratorError,
    OptionSpec,
    Ref,
    Resolve,
    make_options,
    option_specs,
    option_text,
    parse_collectives,
)
from emulator.trace.generators.pipeline import PipelineOptions, pipeline_trace


@dataclass(frozen=True, slots=True)
class Generator:
    """One generator kind: its options dataclass, its builder and its one-line help and description.

    ``ranks_required`` is False when the options can give the world size (``resolve`` then derives it).
    """

    kind: str
    options: type
    build: Callable[[Any], GeneratedTrace]
    help: str
    description: str
    ranks_required: bool = True
    ranks_help: str = ""
    resolve: Resolve | None = None

    def option_specs(self) -> tuple[OptionSpec, ...]:
        return option_specs(self.options)

    def option_names(self) -> tuple[str, ...]:
        """The option names (profile keys; the CLI flag is ``--`` + the name with ``-`` for ``_``)."""
        return tuple(s.name for s in self.option_specs())


GENERATORS: dict[str, Generator] = {g.kind: g for g in (
    Generator("collective", CollectiveOptions, collective_trace, "collective microbenchmark",
              "Collectives chained by data deps, optionally with a compute gap between them."),
    Generator("data-parallel", DataParallelOptions, data_parallel_trace, "DDP training step with bucketed all-reduces",
              "Forward/backward per layer, gradient buckets all-reduced during backward, then an optimizer step."),
    Generator("moe", MoeOptions, moe_trace, "expert-parallel MoE layers (tp × ep × dp ranks)",
              "All-to-all dispatch/combine around expert compute, tensor-parallel and data-parallel all-reduces; "
              "ranks = tp × ep × dp (a missing degree is inferred).",
              ranks_required=False, ranks_help="default tp × ep × dp", resolve=resolve_moe),
    Generator("pipeline", PipelineOptions, pipeline_trace, "pipeline-parallel stages with SEND/RECV",
              "One stage per rank; activations forward and gradients backward as COMM_SEND/COMM_RECV pairs with "
              "src, dst and tag."),
)}
KINDS: tuple[str, ...] = tuple(GENERATORS)


def generate(kind: str, ranks: int | None, given: Mapping[str, object]) -> GeneratedTrace:
    """The trace of generator ``kind`` from the given options (by option name; values as text or typed)."""
    g = GENERATORS[kind]
    return g.build(make_options(g.options, ranks, given, resolve=g.resolve, kind=kind))


__all__ = [
    "GENERATORS",
    "KINDS",
    "CollectiveOptions",
    "DataParallelOptions",
    "GeneratedTrace",
    "Generator",
    "GeneratorError",
    "MoeOptions",
    "OptionSpec",
    "PipelineOptions",
    "Ref",
    "WriteReport",
    "collective_trace",
    "data_parallel_trace",
    "generate",
    "make_options",
    "moe_trace",
    "option_specs",
    "option_text",
    "parse_collectives",
    "pipeline_trace",
    "resolve_degrees",
    "write_generated",
]
