"""The versioned results directory: write, read, upgrade older versions, refuse newer ones.

Layout (``RESULTS_VERSION`` = 1)::

    results.json     metadata + summaries (written last: a directory without it is not a result)
    flows.csv        one row per flow                      } see emulator.results.csvfiles
    collectives.csv  one row per instance × member rank    }
    ranks.csv        one row per rank                      }
    collectives.npz  the collectives.csv columns as arrays (what the report's figures read; derived from
                     the records on read for directories written before it existed)
    records.npz      raw per-rank records: ``rank<r>.<column>`` for every RankRecords column
                     (ready/start/end ns, packets, retx_packets, cnps, timeouts, ce_marks, naks,
                     dup_packets, rate_t_ns, rate_qp, rate_bps, and the event log event_t_ns,
                     event_kind, event_qp, event_psn, event_packets, event_op), ``ranks`` (ranks
                     present) and ``counters`` (JSON text: {rank: endpoint counters})
    schedule.bin     the schedule that ran (warmup + measured iterations; emulator.schedule.io format)
    timeseries.npz   for plots: ``qp_rank, qp, qp_t_ns, qp_rate_bps`` (rate samples of every queue pair)
                     and ``port, port_t_ns, port_queue_bytes`` (sampled switch queue depth; empty
                     arrays when the driver sampled none), and the endpoints' event logs of every rank
                     in time order: ``event_rank, event_t_ns, event_kind, event_qp, event_psn,
                     event_packets, event_op``, ``event_kinds`` (the names of the kind codes,
                     ``emulator.results.events.EVENT_KINDS``) and ``event_dropped_ranks`` /
                     ``event_dropped`` (ranks whose log was full and how many events each lost).
                     Directories written before the event log existed have none of the event_* keys:
                     :meth:`Results.events` returns None for them.

``results.json`` keys: ``results_version``, ``tool`` {name, version}, ``host`` {hostname, kernel,
system, machine, cpu_count, python}, ``started_utc``/``finished_utc`` (ISO 8601, Z), ``wall_s``,
``name``, ``profile`` (the effective profile, ``Profile.to_dict()``), ``fabric_kind``, ``seed``,
``trace_hash`` (sha256 of the trace files, '' if none), ``schedule_hash`` (of schedule.bin),
``workload_schedule_hash`` (of one workload iteration, as ``emulator compile`` would write it),
``workload`` {source, description}, ``iterations`` {warmup, measured, colls_per_iteration,
flows_per_iteration}, ``complete``, ``interrupted``, ``errors``, ``warnings``, ``analysis`` (the
:class:`~emulator.stats.analysis_options.AnalysisOptions`), ``driver`` {name, fabric, health, wall_ns}
(raw driver output minus the queue samples), ``files``, ``slo`` (one entry per profile SLO: text,
metric, op, threshold, value, ok, message) and ``summary`` (:class:`~emulator.stats.summary_types.RunSummary`
dumped; metric paths in :mod:`emulator.stats.run_summary`; :attr:`Results.summary` reads it back typed).
Non-finite floats are written as ``null`` (strict JSON).

Reading: :func:`read_results` checks ``results_version``: newer → one-line :class:`ResultsError`;
older → upgraded step by step through ``UPGRADES`` (version 1 is the first, so the table is empty).
"""

from __future__ import annotations

import json
import os
import platform
import socket
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from emulator import __version__
from emulator.endpoint.records import EVENT_COLUMNS, OP_COLUMNS, PART_COLUMNS, RATE_COLUMNS, RankRecords
from emulator.errors import ResultsError, ScheduleError
from emulator.results.csvfiles import (
    collective_arrays,
    collectives_columns,
    flows_columns,
    read_csv,
    write_collectives_csv,
    write_flows_csv,
    write_ranks_csv,
)
from emulator.results.events import EVENT_KINDS
from emulator.schedule.model import Schedule
from emulator.schema import SchemaError, dump
from emulator.stats.analysis_options import AnalysisOptions
from emulator.stats.jsonsafe import jsonable
from emulator.stats.summary_types import RunSummary
from emulator.stats.tables import flow_table, op_table

RESULTS_VERSION = 1
RESULTS_FILE = "results.json"
FILES = {
    "results": RESULTS_FILE, "flows": "flows.csv", "collectives": "collectives.csv", "ranks": "ranks.csv",
    "records": "records.npz", "schedule": "schedule.bin", "timeseries": "timeseries.npz",
    "collective_arrays": "collectives.npz",
}
#: what reading a missing, truncated or corrupt .npz raises (a cut zip is BadZipFile, neither OSError nor ValueError)
_NPZ_ERRORS = (OSError, EOFError, zipfile.BadZipFile)
#: the event-log keys of timeseries.npz (besides ``event_kinds``)
EVENT_KEYS = ("event_rank", *EVENT_COLUMNS, "event_dropped_ranks", "event_dropped")

#: version → function turning a results.json dict of that version into the next version's
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def host_facts() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "system": platform.system(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


def tool_facts() -> dict[str, str]:
    return {"name": "emulator", "version": __version__}


# ------------------------------------------------------------------------------------ raw records


def save_records(path: Path, records: Mapping[int, RankRecords]) -> None:
    arrays: dict[str, np.ndarray] = {"ranks": np.asarray(sorted(records), dtype=np.int64)}
    counters = {}
    for r in sorted(records):
        for name, arr in records[r].to_arrays().items():
            arrays[f"rank{r}.{name}"] = arr
        counters[str(r)] = {k: int(v) for k, v in records[r].counters.items()}
    arrays["counters"] = np.asarray(json.dumps(counters, sort_keys=True))
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)


def load_records(path: Path) -> dict[int, RankRecords]:
    try:
        with np.load(path, allow_pickle=False) as z:
            ranks = [int(r) for r in z["ranks"]]
            counters = json.loads(str(z["counters"]))
            out = {}
            files = set(z.files)
            for r in ranks:
                arrays = {name: z[f"rank{r}.{name}"] for name in (*OP_COLUMNS, *RATE_COLUMNS)}
                # the event log is optional (older directories have none)
                arrays.update({name: z[f"rank{r}.{name}"] for name in (*EVENT_COLUMNS, *PART_COLUMNS)
                               if f"rank{r}.{name}" in files})
                out[r] = RankRecords.from_arrays(r, arrays, counters.get(str(r), {}))
    except (*_NPZ_ERRORS, KeyError, ValueError) as exc:
        raise ResultsError(f"{path}: cannot read raw records: {exc}") from None
    return out


def save_timeseries(path: Path, records: Mapping[int, RankRecords], fabric: Mapping[str, Any]) -> None:
    ranks = sorted(records)
    qs = fabric.get("queue_samples") or {}
    arrays = {
        "qp_rank": np.concatenate([np.full(len(records[r].rate_t_ns), r, dtype=np.int32) for r in ranks])
        if ranks else np.zeros(0, np.int32),
        "qp": np.asarray([q for r in ranks for q in records[r].rate_qp], dtype=np.int32),
        "qp_t_ns": np.asarray([t for r in ranks for t in records[r].rate_t_ns], dtype=np.int64),
        "qp_rate_bps": np.asarray([b for r in ranks for b in records[r].rate_bps], dtype=np.int64),
        "port": np.asarray(qs.get("port", []), dtype=np.int32),
        "port_t_ns": np.asarray(qs.get("t_ns", []), dtype=np.int64),
        "port_queue_bytes": np.asarray(qs.get("queue_bytes", []), dtype=np.int64),
        **event_arrays(records),
    }
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)


def event_arrays(records: Mapping[int, RankRecords]) -> dict[str, np.ndarray]:
    """The event logs of every rank as flat columns in time order (rank, then log order on ties)."""
    ranks = sorted(records)
    per = [records[r].to_arrays() for r in ranks]
    n = [a["event_t_ns"].shape[0] for a in per]
    out: dict[str, np.ndarray] = {"event_rank": np.repeat(np.asarray(ranks, dtype=np.int32), n)}
    for name, dtype in EVENT_COLUMNS.items():
        out[name] = np.concatenate([a[name] for a in per]) if per else np.zeros(0, dtype)
    order = np.lexsort((np.arange(out["event_rank"].shape[0]), out["event_rank"], out["event_t_ns"]))
    out = {k: v[order] for k, v in out.items()}
    dropped = [(r, int(records[r].counters.get("events_dropped", 0))) for r in ranks]
    dropped = [(r, k) for r, k in dropped if k > 0]
    out["event_dropped_ranks"] = np.asarray([r for r, _ in dropped], dtype=np.int32)
    out["event_dropped"] = np.asarray([k for _, k in dropped], dtype=np.int64)
    out["event_kinds"] = np.asarray(EVENT_KINDS)
    return out


# ----------------------------------------------------------------------------------------- write


def write_results(
    out_dir: str | os.PathLike[str],
    meta: Mapping[str, Any],
    schedule: Schedule,
    records: Mapping[int, RankRecords],
    fabric: Mapping[str, Any],
    summary: RunSummary,
    analysis: AnalysisOptions,
) -> Results:
    """Write every file of a results directory; ``meta`` holds the metadata keys (see module docstring).

    Returns the directory as :func:`read_results` would open it (``doc`` is the results.json just
    written, so a caller need not read it back)."""
    from emulator.schedule.io import save_schedule

    d = Path(out_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
        (d / RESULTS_FILE).unlink(missing_ok=True)
        schedule_hash = save_schedule(schedule, d / FILES["schedule"])
        save_records(d / FILES["records"], records)
        save_timeseries(d / FILES["timeseries"], records, fabric)
        ops = op_table(schedule, records)
        transport = ((meta.get("profile") or {}).get("fabric") or {}).get("transport") or {}
        write_flows_csv(d / FILES["flows"], schedule, ops, analysis, int(transport.get("qps_per_peer", 1)), records)
        write_collectives_csv(d / FILES["collectives"], schedule, ops, options=analysis,
                              arrays_path=d / FILES["collective_arrays"])
        write_ranks_csv(d / FILES["ranks"], summary)
        doc = jsonable({"results_version": RESULTS_VERSION, "tool": tool_facts(), **meta,
                        "schedule_hash": schedule_hash, "analysis": analysis.to_dict(), "files": dict(FILES),
                        "summary": dump(summary)})
        text = json.dumps(doc, indent=1, allow_nan=False)
        tmp = d / f".{RESULTS_FILE}.tmp"
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, d / RESULTS_FILE)
    except OSError as exc:
        raise ResultsError(f"{d}: cannot write results: {exc.strerror or exc}") from None
    except ScheduleError as exc:
        raise ResultsError(f"{d}: {exc}") from None
    res = Results(d, doc)
    res._cache["summary"] = summary
    return res


# ------------------------------------------------------------------------------------------ read


def upgrade(doc: dict[str, Any], source: str) -> dict[str, Any]:
    """Bring a results.json dict up to ``RESULTS_VERSION`` (or refuse a newer one)."""
    version = doc.get("results_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ResultsError(f"{source}: key 'results_version' is missing or not a version number ({version!r})")
    if version > RESULTS_VERSION:
        raise ResultsError(f"{source}: results version {version} is newer than this emulator reads "
                           f"(up to {RESULTS_VERSION}); upgrade the emulator")
    while version < RESULTS_VERSION:
        step = UPGRADES.get(version)
        if step is None:
            raise ResultsError(f"{source}: no upgrade from results version {version}")
        doc = step(doc)
        version = doc["results_version"]
    return doc


@dataclass
class Results:
    """A results directory read back: ``doc`` is results.json (upgraded); files load on demand."""

    path: Path
    doc: dict[str, Any]
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def summary(self) -> RunSummary:
        """The typed summary (ResultsError naming results.json and the key path when it does not read)."""
        if "summary" not in self._cache:
            try:
                self._cache["summary"] = RunSummary.from_dict(self.doc.get("summary") or {})
            except SchemaError as exc:
                raise ResultsError(f"{self.path / RESULTS_FILE}: key {exc.path}: {exc.reason}") from None
        return self._cache["summary"]

    @property
    def version(self) -> int:
        return int(self.doc["results_version"])

    @property
    def profile(self) -> dict[str, Any]:
        return self.doc.get("profile", {})

    @property
    def analysis(self) -> AnalysisOptions:
        return AnalysisOptions.from_dict(self.doc.get("analysis", {}))

    def file(self, key: str) -> Path:
        return self.path / self.doc.get("files", FILES).get(key, FILES[key])

    def schedule(self) -> Schedule:
        if "schedule" not in self._cache:
            from emulator.schedule.io import load_schedule

            try:
                self._cache["schedule"] = load_schedule(self.file("schedule"))
            except ScheduleError as exc:
                raise ResultsError(f"{self.path}: {exc}") from None
        return self._cache["schedule"]

    def records(self) -> dict[int, RankRecords]:
        if "records" not in self._cache:
            self._cache["records"] = load_records(self.file("records"))
        return self._cache["records"]

    def timeseries(self) -> dict[str, np.ndarray]:
        try:
            with np.load(self.file("timeseries"), allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except (*_NPZ_ERRORS, ValueError) as exc:
            raise ResultsError(f"{self.file('timeseries')}: cannot read time series: {exc}") from None

    def events(self) -> dict[str, np.ndarray] | None:
        """The event log columns of ``timeseries.npz`` (:data:`EVENT_KEYS`, ``event_kind`` re-coded to the
        current :data:`~emulator.results.events.EVENT_KINDS` by name), or None for a directory written
        before the event log existed."""
        ts = self.timeseries()
        if "event_t_ns" not in ts:
            return None
        try:
            out = {k: ts[k] for k in EVENT_KEYS}
            names = [str(x) for x in ts["event_kinds"]]
            code = {name: EVENT_KINDS.index(name) if name in EVENT_KINDS else -1 for name in names}
            remap = np.asarray([code[name] for name in names] or [0], dtype=np.int8)
            kind = out["event_kind"].astype(np.int64)
            if kind.size and (kind.min() < 0 or kind.max() >= len(names)):
                raise KeyError("event_kind outside event_kinds")
            out["event_kind"] = remap[kind]
        except KeyError as exc:
            raise ResultsError(f"{self.file('timeseries')}: event log incomplete: {exc}") from None
        return out

    def op_table(self) -> dict[str, np.ndarray]:
        """Every op column of every rank in global op order (:func:`emulator.stats.tables.op_table`)."""
        if "ops" not in self._cache:
            try:
                self._cache["ops"] = op_table(self.schedule(), self.records())
            except ResultsError as exc:
                raise ResultsError(f"{self.path}: {exc}") from None
        return self._cache["ops"]

    def flow_arrays(self) -> dict[str, np.ndarray]:
        """One row per flow as numpy columns (:func:`emulator.stats.tables.flow_table`: the flows.csv ids and
        times) from the stored schedule and records."""
        if "flows" not in self._cache:
            self._cache["flows"] = flow_table(self.schedule(), self.op_table())
        return self._cache["flows"]

    def flow_columns(self) -> dict[str, np.ndarray]:
        """The flows.csv columns as arrays (:func:`~emulator.results.csvfiles.flows_columns`: the flow table plus
        FCT, ideal FCT and slowdown) from the stored schedule and records with the stored analysis options."""
        if "flow_columns" not in self._cache:
            self._cache["flow_columns"] = flows_columns(self.schedule(), self.op_table(), self.analysis)
        return self._cache["flow_columns"]

    def collective_arrays(self) -> dict[str, np.ndarray]:
        """The collectives.csv columns as arrays (:func:`~emulator.results.csvfiles.collective_arrays`), read
        from ``collectives.npz``; a directory written before that file existed is upgraded on read: the
        columns are derived from its records and schedule with its stored analysis options."""
        if "collectives" not in self._cache:
            f = self.file("collective_arrays")
            if f.is_file():
                try:
                    with np.load(f, allow_pickle=False) as z:
                        self._cache["collectives"] = {k: z[k] for k in z.files}
                except (*_NPZ_ERRORS, ValueError) as exc:
                    raise ResultsError(f"{f}: cannot read collective arrays: {exc}") from None
            else:
                cols = collectives_columns(self.schedule(), self.op_table(), options=self.analysis)
                self._cache["collectives"] = collective_arrays(cols)
        return self._cache["collectives"]

    def csv(self, key: str) -> list[dict[str, str]]:
        """Rows of ``flows``, ``collectives`` or ``ranks`` CSV as dicts of strings."""
        try:
            return read_csv(self.file(key))
        except OSError as exc:
            raise ResultsError(f"{self.file(key)}: cannot read: {exc.strerror or exc}") from None


def read_results(path: str | os.PathLike[str]) -> Results:
    """Open a results directory (or its results.json); newer versions are refused with one line."""
    p = Path(path)
    d = p.parent if p.name == RESULTS_FILE and p.is_file() else p
    f = d / RESULTS_FILE
    try:
        text = f.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{d}: not a results directory (no {RESULTS_FILE})") from None
    except OSError as exc:
        raise ResultsError(f"{f}: cannot read: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ResultsError(f"{f}: not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ResultsError(f"{f}: expected a JSON object at the top level")
    return Results(d, upgrade(doc, str(f)))
