"""Synthetic Chakra trace generators (``emulator generate KIND``).

Each kind has an options dataclass and a function returning a :class:`GeneratedTrace` (a streamed,
deterministic description of the trace set); :func:`write_generated` writes it through the trace writer.
"""

from __future__ import annotations

from emulator.trace.generators.collective import CollectiveOptions, collective_trace, parse_collectives
from emulator.trace.generators.common import GeneratedTrace, WriteReport, write_generated
from emulator.trace.generators.data_parallel import DataParallelOptions, data_parallel_trace
from emulator.trace.generators.moe import MoeOptions, moe_trace, resolve_degrees
from emulator.trace.generators.pipeline import PipelineOptions, pipeline_trace

KINDS = ("collective", "data-parallel", "moe", "pipeline")

__all__ = [
    "KINDS",
    "CollectiveOptions",
    "DataParallelOptions",
    "GeneratedTrace",
    "MoeOptions",
    "PipelineOptions",
    "WriteReport",
    "collective_trace",
    "data_parallel_trace",
    "moe_trace",
    "parse_collectives",
    "pipeline_trace",
    "resolve_degrees",
    "write_generated",
]
