"""The run summary of ``results.json`` as frozen dataclasses declared with the profile schema machinery.

:func:`emulator.schema.build` reads a summary dict into a :class:`RunSummary` (unknown keys are an
error naming their path), :func:`emulator.schema.dump` writes it back to the same plain JSON data
(``None`` is ``null``: no samples, never zero), and :func:`metric_path_error` checks a metric path (an SLO,
``emulator compare --metric``) against the declaration before any run or read, with a did-you-mean.
Attribute names are the JSON keys, so a metric path is also an attribute path. The collective types sit at
the top level of the JSON (``all_reduce.cct.p99``) and in :attr:`RunSummary.collectives` here.
The metric paths and their meaning are documented in :mod:`emulator.stats.run_summary`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from emulator.instruments.percentiles import Distribution, Number
from emulator.schema import SchemaError, build, dump, opt, path_error
from emulator.stats.flows import SizeBucket
from emulator.stats.nccl import NcclRow
from emulator.trace.model import CollectiveType

#: collective type names that may head a metric path (``all_reduce.cct.p99``)
COLLECTIVE_NAMES: tuple[str, ...] = tuple(c.name.lower() for c in CollectiveType)

_EMPTY = Distribution.empty()


@dataclass(frozen=True, slots=True)
class CctSize:
    """CCT of one (collective, comm size, group, ranks) row of ``<type>.sizes``."""

    DUMP_NULLS = True
    collective: str = opt("")
    comm_size_bytes: int = opt(0)
    group: int = opt(0)
    n_ranks: int = opt(0)
    cct_ns: Distribution = opt(_EMPTY)
    busbw_at_median_gbps: Number | None = opt(None)
    group_name: str = opt("")


@dataclass(frozen=True, slots=True)
class CollectiveSummary:
    """``<type>.*``: one collective type over its complete measured instances."""

    DUMP_NULLS = True
    count: int = opt(0)
    incomplete: int = opt(0)
    warmup: int = opt(0)
    cct: Distribution = opt(_EMPTY)
    completion: Distribution = opt(_EMPTY)
    algbw_gbps: Number | None = opt(None)
    busbw_gbps: Number | None = opt(None)
    algbw_weighted_gbps: Number | None = opt(None)
    busbw_weighted_gbps: Number | None = opt(None)
    sizes: tuple[CctSize, ...] = opt(())


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """``groups.<name>.*``: one process group."""

    DUMP_NULLS = True
    collectives: tuple[str, ...] = opt(())
    count: int = opt(0)
    incomplete: int = opt(0)
    cct: Distribution = opt(_EMPTY)
    completion: Distribution = opt(_EMPTY)


@dataclass(frozen=True, slots=True)
class StragglerFigures:
    """``stragglers.*`` (or ``iteration.stragglers.*``); the distributions are None when nothing was measured."""

    DUMP_NULLS = True
    instances: int = opt(0)
    ranks: int | None = opt(None)
    slow_factor: Number | None = opt(None)
    skew_ns: Distribution | None = opt(None)
    skew_fraction: Distribution | None = opt(None)
    end_spread_ns: Distribution | None = opt(None)
    straggler_delay: Distribution | None = opt(None)
    straggler_slowdown: Distribution | None = opt(None)
    instances_with_slow_rank: int | None = opt(None)
    last_finisher_histogram: dict[str, int] | None = opt(None)
    most_often_last_rank: int | None = opt(None)
    most_often_last_count: int | None = opt(None)
    basis: str | None = opt(None)
    excess_skew_ns: Distribution | None = opt(None)
    max_skew: Number | None = opt(None)
    median_skew: Number | None = opt(None)
    p99_skew: Number | None = opt(None)
    median_skew_ns: Number | None = opt(None)
    p99_skew_ns: Number | None = opt(None)
    max_skew_ns: Number | None = opt(None)
    slow_ranks: tuple[int, ...] = opt(())
    last_finisher_counts: dict[str, int] | None = opt(None)

    def dump(self) -> dict[str, Any]:
        """Plain data; the keys a run with nothing measured never had stay out."""
        return {k: v for k, v in _dump_fields(self).items() if v is not None or k in _STRAGGLER_ALWAYS}


_STRAGGLER_ALWAYS = frozenset({"instances", "max_skew", "median_skew", "p99_skew", "slow_ranks", "slow_factor"})


def _dump_fields(obj: Any) -> dict[str, Any]:
    return {name: dump(getattr(obj, name)) for name in obj.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class RankSummary:
    """``ranks.<rank>.*``: the endpoint's counters and the rank's straggler figures."""

    DUMP_NULLS = True
    bytes_sent: int = opt(0)
    bytes_received: int = opt(0)
    packets_sent: int = opt(0)
    retransmits: int = opt(0)
    cnps_sent: int = opt(0)
    cnps_received: int = opt(0)
    ce_marks: int = opt(0)
    timeouts: int = opt(0)
    events_dropped: int | None = opt(None)  # absent where the records have no event log
    reported: bool = opt(True)
    ops: int = opt(0)
    ops_done: int = opt(0)
    instances: int = opt(0)
    last_count: int = opt(0)
    slow_count: int = opt(0)
    mean_lateness_ns: Number | None = opt(None)
    completion: Distribution = opt(_EMPTY)

    def dump(self) -> dict[str, Any]:
        out = _dump_fields(self)
        if self.events_dropped is None:
            del out["events_dropped"]
        return out


@dataclass(frozen=True, slots=True)
class FlowFigures:
    """``flows.*`` (measured flows) and ``p2p.*`` (measured point-to-point flows)."""

    DUMP_NULLS = True
    flows: int = opt(0)
    finished: int = opt(0)
    unfinished: int = opt(0)
    fct_scheduled_ns: Distribution = opt(_EMPTY)
    fct_actual_ns: Distribution = opt(_EMPTY)
    slowdown: Distribution = opt(_EMPTY)
    achieved_rate_bps: Distribution = opt(_EMPTY)
    slowdown_by_size: tuple[SizeBucket, ...] | None = opt(None)
    all_unfinished: int | None = opt(None)
    inconsistent_times: int | None = opt(None)
    bytes: int | None = opt(None)
    bytes_delivered: int | None = opt(None)

    def dump(self) -> dict[str, Any]:
        return {k: v for k, v in _dump_fields(self).items() if v is not None}


@dataclass(frozen=True, slots=True)
class IterationRow:
    """One entry of ``iteration.per_iteration``."""

    iteration: int = opt(0)
    jct_ns: int = opt(0)
    first_start_ns: int = opt(0)
    last_end_ns: int = opt(0)
    ranks: int = opt(0)
    slowest_rank: int = opt(0)
    skew_ns: int = opt(0)
    straggler_delay: Number = opt(0.0)


@dataclass(frozen=True, slots=True)
class IterationRank:
    """``iteration.ranks.<rank>.*``."""

    DUMP_NULLS = True
    iterations: int = opt(0)
    last_count: int = opt(0)
    slow_count: int = opt(0)
    mean_lateness_ns: Number | None = opt(None)
    max_lateness_ns: Number | None = opt(None)
    completion: Distribution = opt(_EMPTY)


@dataclass(frozen=True, slots=True)
class IterationSummary:
    """``iteration.*``: every run iteration as one job step over the ranks."""

    DUMP_NULLS = True
    count: int = opt(0)
    incomplete: int = opt(0)
    warmup: int = opt(0)
    jct: Distribution = opt(_EMPTY)
    completion: Distribution = opt(_EMPTY)
    per_iteration: tuple[IterationRow, ...] = opt(())
    stragglers: StragglerFigures = opt(StragglerFigures())
    ranks: dict[str, IterationRank] = opt({})
    per_iteration_total: int | None = opt(None)
    per_iteration_omitted: int | None = opt(None)

    def dump(self) -> dict[str, Any]:
        return {k: v for k, v in _dump_fields(self).items()
                if v is not None or k not in ("per_iteration_total", "per_iteration_omitted")}


@dataclass(frozen=True, slots=True)
class PortSummary:
    """One entry of ``fabric.ports`` as the driver counted it (keys a driver adds are kept in ``extra``)."""

    EXTRA_KEY = "extra"
    PATH_OPEN = True
    port: int | None = opt(None)
    name: str | None = opt(None)
    kind: str | None = opt(None)
    rate_bps: Number | None = opt(None)
    peak_queue_bytes: Number | None = opt(None)
    mean_queue_bytes: Number | None = opt(None)
    marked_packets: int | None = opt(None)
    dropped_packets: int | None = opt(None)
    paused_time_ns: Number | None = opt(None)
    utilisation: Number | None = opt(None)
    extra: dict[str, Any] = opt({})

    def dump(self) -> dict[str, Any]:
        """The port's keys in the driver's order (the declared fields first)."""
        out = {k: dump(v) for k, v in self.extra.items()}
        out.update({k: dump(getattr(self, k)) for k in self.__dataclass_fields__
                    if k != "extra" and getattr(self, k) is not None})
        return {k: out[k] for k in sorted(out, key=lambda k: _PORT_ORDER.get(k, len(_PORT_ORDER)))}


_PORT_ORDER = {k: i for i, k in enumerate((
    "port", "name", "kind", "rate_bps", "dequeued_packets", "dequeued_bytes", "peak_queue_bytes", "mean_queue_bytes",
    "marked_packets", "dropped_packets", "dropped_bytes", "loss_packets", "paused_time_ns", "xoff_time_ns",
    "utilisation"))}


@dataclass(frozen=True, slots=True)
class FabricSummary:
    """``fabric.*`` over the switch ports; the driver's own scalar facts are kept in ``extra``."""

    DUMP_NULLS = True
    EXTRA_KEY = "extra"
    ports: tuple[PortSummary, ...] = opt(())
    switch_ports: int = opt(0)
    max_peak_queue_bytes: Number | None = opt(None)
    mean_queue_bytes: Number | None = opt(None)
    ecn_marks: int | None = opt(None)
    drops: int | None = opt(None)
    lost_packets: int | None = opt(None)
    pause_time_ns: Number | None = opt(None)
    max_utilisation: Number | None = opt(None)
    busiest_port: int | None = opt(None)
    busiest_port_name: str | None = opt(None)
    extra: dict[str, Any] = opt({})

    def port(self, port_id: int | None) -> PortSummary | None:
        """The port with id ``port_id`` (None when there is none)."""
        return next((p for p in self.ports if port_id is not None and p.port == port_id), None)


@dataclass(frozen=True, slots=True)
class GeneratorSummary:
    """``generator.*``: whether the traffic started when the schedule said, and the driver's own health."""

    DUMP_NULLS = True
    flows: int = opt(0)
    started: int = opt(0)
    not_started: int = opt(0)
    late_threshold_ns: int = opt(0)
    flows_late: int = opt(0)
    late_fraction: Number | None = opt(None)
    lag_ns: Distribution = opt(_EMPTY)
    packets_late: int = opt(0)
    packets_skipped: int = opt(0)
    packets_unsent: int = opt(0)
    late_ops: int = opt(0)
    driver: dict[str, Any] = opt({})


@dataclass(frozen=True, slots=True)
class Totals:
    """``totals.*``: the whole run, warmup included."""

    instances: int = opt(0)
    instances_measured: int = opt(0)
    instances_warmup: int = opt(0)
    instances_incomplete: int = opt(0)
    flows: int = opt(0)
    flows_incomplete: int = opt(0)
    bytes_scheduled: int = opt(0)
    bytes_delivered: int = opt(0)
    ops: int = opt(0)
    ops_incomplete: int = opt(0)


@dataclass(frozen=True, slots=True)
class JobStragglers:
    """``jobs.<name>.stragglers``: straggler figures of the job's collective instances."""

    instances: int = opt(0)
    max_skew: Number | None = opt(None)
    p99_skew_ns: Number | None = opt(None)
    slow_ranks: tuple[int, ...] = opt(())


@dataclass(frozen=True, slots=True)
class JobSummary:
    """``jobs.<name>``: one job of ``workload.jobs`` (see :mod:`emulator.stats.jobs`)."""

    hosts: tuple[int, ...] = opt(())
    count: int = opt(0)
    incomplete: int = opt(0)
    jct: Distribution = opt(_EMPTY)
    instances: int = opt(0)
    cct: Distribution = opt(_EMPTY)
    stragglers: JobStragglers = opt(JobStragglers())
    flows: int = opt(0)
    flows_unfinished: int = opt(0)
    bytes_scheduled: int = opt(0)
    bytes_finished: int = opt(0)


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The ``summary`` of results.json. ``iteration`` and ``p2p`` are None in directories written before
    they existed, ``straggler_attribution`` in runs without perturbations."""

    DUMP_NULLS = True
    #: the collective type names stand at the top level of a metric path
    PATH_KEYS = {name: CollectiveSummary for name in COLLECTIVE_NAMES}
    PATH_HIDDEN = ("collectives",)
    totals: Totals = opt(Totals())
    collectives: dict[str, CollectiveSummary] = opt({})
    nccl_table: tuple[NcclRow, ...] = opt(())
    nccl_avg_busbw_gbps: Number | None = opt(None)
    groups: dict[str, GroupSummary] = opt({})
    stragglers: StragglerFigures = opt(StragglerFigures())
    ranks: dict[str, RankSummary] = opt({})
    flows: FlowFigures = opt(FlowFigures())
    p2p: FlowFigures | None = opt(None)
    iteration: IterationSummary | None = opt(None)
    jobs: dict[str, JobSummary] | None = opt(None)
    fabric: FabricSummary = opt(FabricSummary())
    generator: GeneratorSummary = opt(GeneratorSummary())
    warnings: tuple[str, ...] = opt(())
    #: which ranks were last and what was injected on them (runs with perturbations only): ``ranks``, ``lines``
    straggler_attribution: dict[str, Any] | None = opt(None)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str = "summary") -> RunSummary:
        """Build from results.json's ``summary`` (SchemaError naming the key path on a bad value)."""
        if not isinstance(data, Mapping):
            raise SchemaError(path, f"expected a mapping, got {type(data).__name__}")
        plain = {k: v for k, v in data.items() if k not in COLLECTIVE_NAMES}
        colls = {k: v for k, v in data.items() if k in COLLECTIVE_NAMES}
        if "collectives" in plain:
            raise SchemaError(f"{path}.collectives", "unknown key")
        try:
            return build(cls, {**plain, "collectives": colls}, path)
        except SchemaError as exc:  # the collectives stand at the top level of the JSON
            where = exc.path.replace(f"{path}.collectives.", f"{path}.", 1) if path else exc.path
            raise SchemaError(where, exc.reason) from None

    def dump(self) -> dict[str, Any]:
        """Plain JSON data: the collective types at the top level after ``totals``; absent parts left out."""
        out: dict[str, Any] = {"totals": dump(self.totals)}
        out.update((k, dump(v)) for k, v in self.collectives.items())
        for name in self.__dataclass_fields__:
            if name in ("totals", "collectives"):
                continue
            value = getattr(self, name)
            if value is None and name in ("p2p", "iteration", "jobs", "straggler_attribution"):
                continue
            out[name] = dump(value)
        return out

    def metric_child(self, key: str) -> Any:
        """The child a metric path segment names (a collective type or a field)."""
        if key in self.collectives:
            return self.collectives[key]
        if key.startswith("_") or key not in self.__dataclass_fields__ or key == "collectives":
            raise KeyError(key)
        return getattr(self, key)

    def collective_types(self) -> list[str]:
        """The collective types the run has, in the stored order."""
        return list(self.collectives)

    def items(self) -> Iterator[tuple[str, Any]]:
        """(metric path head, child) of every top-level part, as in the JSON."""
        yield "totals", self.totals
        yield from self.collectives.items()
        for name in self.__dataclass_fields__:
            if name not in ("totals", "collectives"):
                yield name, getattr(self, name)


def metric_path_error(path: str, *, wildcard: bool = False) -> str | None:
    """Why ``path`` can name no metric of a run summary (one line with a did-you-mean), or None.

    Only the declaration is consulted: a path the workload may not fill (a collective type it does not
    run) passes here; :func:`emulator.stats.slo.missing_metric` checks that against a summary."""
    why = path_error(RunSummary, path.split("."), wildcard=wildcard)
    return None if why is None else f"no metric {path!r} ({why})"
