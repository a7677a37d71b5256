"""Statistics core: raw records (numpy arrays) in, distributions and straggler figures out.

Pure functions and small classes, no I/O and no knowledge of how records are produced. Definitions
follow ``docs/metrics.md``: nearest-rank percentiles (:mod:`.percentiles`), mergeable log-linear
histograms (:mod:`.histogram`), memory-bounded distributions (:mod:`.bounded`), nccl-tests bandwidths and table (:mod:`.nccl`), collective completion
time (:mod:`.collectives`), stragglers (:mod:`.stragglers`), flow completion time and slowdown
(:mod:`.flows`), generator lag (:mod:`.generator`) and SLO evaluation (:mod:`.slo`).
"""

from emulator.instruments.histogram import FloatLogHistogram, LogLinearHistogram
from emulator.instruments.percentiles import (
    Distribution,
    nearest_rank,
    percentile,
    percentiles,
    summarize,
    summarize_by,
)
from emulator.stats.bounded import SummaryPolicy, summarize_bounded, summarize_by_bounded
from emulator.stats.collectives import (
    CctRow,
    CollectiveRecords,
    InstanceTimes,
    cct_distributions,
    cct_report,
    instance_bandwidths_gbps,
    instance_times,
    rank_completion_distributions,
)
from emulator.stats.flows import (
    FlowStats,
    FlowSummary,
    SizeBucket,
    flow_stats,
    ideal_fct_ns,
    slowdown_by_size,
)
from emulator.stats.generator import GeneratorHealth, generator_health, lag_ns
from emulator.stats.nccl import (
    NcclRow,
    algbw_bytes,
    algbw_gbps,
    average_busbw_gbps,
    bus_factor,
    busbw_gbps,
    collective_name,
    element_count,
    nccl_table,
)
from emulator.stats.slo import SloResult, check_slo, check_slos, lookup_metric
from emulator.stats.stragglers import (
    InstanceStragglers,
    MemberStragglers,
    RankStragglers,
    StragglerAnalysis,
    StragglerSummary,
    analyze_stragglers,
)

__all__ = [
    "CctRow", "CollectiveRecords", "Distribution", "FloatLogHistogram", "FlowStats", "FlowSummary", "GeneratorHealth",
    "InstanceStragglers", "InstanceTimes", "LogLinearHistogram", "MemberStragglers", "NcclRow",
    "RankStragglers", "SizeBucket", "SloResult", "StragglerAnalysis", "StragglerSummary",
    "SummaryPolicy", "algbw_bytes", "algbw_gbps", "analyze_stragglers", "average_busbw_gbps", "bus_factor", "busbw_gbps",
    "cct_distributions", "cct_report", "check_slo", "check_slos", "collective_name", "element_count",
    "flow_stats", "generator_health", "ideal_fct_ns", "instance_bandwidths_gbps",
    "instance_times", "lag_ns", "lookup_metric", "nccl_table", "nearest_rank", "percentile", "percentiles",
    "rank_completion_distributions", "slowdown_by_size", "summarize", "summarize_bounded", "summarize_by",
    "summarize_by_bounded",
]
