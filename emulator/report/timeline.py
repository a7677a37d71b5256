"""Chrome trace-event JSON (``timeline.json``) of a run, for Perfetto / chrome://tracing.

Theory of operation
-------------------
The trace-event format is a JSON object ``{"traceEvents": [...], "displayTimeUnit": "ns"}`` whose
events carry a phase ``ph``, a process ``pid``, a thread ``tid`` and a timestamp ``ts`` in µs
(floats: we keep ns precision with three decimals). The layout:

* **process = rank** (``pid = rank``, named ``rank N``), **thread = queue pair** (named ``QP q``).
  A flow is a complete event (``ph = "X"``) on its sender's QP thread from its first packet to its
  last acknowledgement, with ``args`` = flow id, bytes, collective instance and whatever else the
  caller adds. The JSON importers require slices on one thread to nest; flows on one QP may overlap
  (a message starts before the previous one is acknowledged), so overlapping flows are spread over
  extra *lanes* of the same QP (threads ``QP q``, ``QP q ·2``, … sorted together) by greedy interval
  colouring: a slice goes to the first lane whose last slice has ended.
* **CNPs, NAKs, retransmits and timeouts** are instant events (``ph = "i"``, thread scope) on the QP's
  first lane of the rank that logged them (the endpoints' event logs; see ``emulator.report.figures``).
* **Queue depth** is a counter (``ph = "C"``) per switch port on a separate ``fabric`` process
  (``pid = FABRIC_PID``), one counter track per port; per-QP sender rates may be added as counters on
  the rank's process.
* Metadata events (``ph = "M"``) name processes and threads and fix their sort order.

:func:`chrome_trace` builds the dict from plain records (:class:`Slice`, :class:`Instant`,
:class:`CounterSeries`); :func:`write_chrome_trace` writes it. Reading a results directory and
choosing what goes in lives in :mod:`emulator.report.figures` (``write_timeline``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FABRIC_PID = 1_000_000


@dataclass(frozen=True, slots=True)
class Slice:
    """One flow on a rank's queue pair, ``start_ns`` ≤ ``end_ns``."""

    rank: int
    qp: int
    name: str
    start_ns: int
    end_ns: int
    args: Mapping[str, Any] = field(default_factory=dict)
    category: str = "flow"


@dataclass(frozen=True, slots=True)
class Instant:
    """A point event (CNP, retransmit) on a rank's queue pair."""

    rank: int
    qp: int
    name: str
    t_ns: int
    args: Mapping[str, Any] = field(default_factory=dict)
    category: str = "congestion"


@dataclass(frozen=True, slots=True, eq=False)
class CounterSeries:
    """Samples of one value over time; ``rank`` None = a fabric counter (switch port)."""

    name: str
    key: str  # the value's name in the counter's args, e.g. "queue_bytes"
    t_ns: np.ndarray
    values: np.ndarray
    rank: int | None = None


def _us(t_ns: float) -> float:
    return round(float(t_ns) / 1e3, 3)


def _meta(pid: int, tid: int | None, what: str, value: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {"ph": "M", "pid": pid, "name": what, "args": {}}
    if tid is not None:
        ev["tid"] = tid
    ev["args"]["name" if what.endswith("_name") else "sort_index"] = value
    return ev


def _lanes(slices: list[Slice]) -> list[int]:
    """Lane of each slice (input sorted by start) so slices of one lane never overlap."""
    ends: list[int] = []
    out = []
    for s in slices:
        for lane, end in enumerate(ends):
            if end <= s.start_ns:
                ends[lane] = s.end_ns
                out.append(lane)
                break
        else:
            ends.append(s.end_ns)
            out.append(len(ends) - 1)
    return out


def _jsonable(args: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in args.items():
        if isinstance(v, np.generic):
            v = v.item()
        out[str(k)] = v
    return out


def chrome_trace(
    slices: Iterable[Slice],
    instants: Iterable[Instant] = (),
    counters: Iterable[CounterSeries] = (),
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The trace-event dict (see module docstring)."""
    by_track: dict[tuple[int, int], list[Slice]] = {}
    for s in slices:
        if s.end_ns < s.start_ns:
            raise ValueError(f"slice {s.name!r} on rank {s.rank} ends before it starts")
        by_track.setdefault((s.rank, s.qp), []).append(s)
    inst = list(instants)
    ctrs = list(counters)
    ranks = sorted({r for r, _ in by_track} | {i.rank for i in inst} | {c.rank for c in ctrs if c.rank is not None})

    tids: dict[tuple[int, int, int], int] = {}  # (rank, qp, lane) → tid
    body: list[dict[str, Any]] = []
    for (rank, qp), items in sorted(by_track.items()):
        items.sort(key=lambda s: (s.start_ns, s.end_ns))
        for s, lane in zip(items, _lanes(items), strict=True):
            tid = tids.setdefault((rank, qp, lane), len(tids) + 1)
            body.append({"ph": "X", "pid": rank, "tid": tid, "name": s.name, "cat": s.category,
                         "ts": _us(s.start_ns), "dur": _us(s.end_ns - s.start_ns), "args": _jsonable(s.args)})
    for i in inst:
        tid = tids.setdefault((i.rank, i.qp, 0), len(tids) + 1)
        body.append({"ph": "i", "s": "t", "pid": i.rank, "tid": tid, "name": i.name, "cat": i.category,
                     "ts": _us(i.t_ns), "args": _jsonable(i.args)})
    has_fabric = False
    for c in ctrs:
        pid = FABRIC_PID if c.rank is None else c.rank
        has_fabric |= c.rank is None
        t = np.asarray(c.t_ns)
        v = np.asarray(c.values)
        if t.shape != v.shape:
            raise ValueError(f"counter {c.name!r}: {t.shape[0]} times for {v.shape[0]} values")
        for tt, vv in zip(t.tolist(), v.tolist(), strict=True):
            body.append({"ph": "C", "pid": pid, "name": c.name, "ts": _us(tt), "args": {c.key: vv}})
    body.sort(key=lambda e: e["ts"])

    meta: list[dict[str, Any]] = []
    for rank in ranks:
        meta.append(_meta(rank, None, "process_name", f"rank {rank}"))
        meta.append(_meta(rank, None, "process_sort_index", rank))
    for (rank, qp, lane), tid in sorted(tids.items()):
        meta.append(_meta(rank, tid, "thread_name", f"QP {qp}" if lane == 0 else f"QP {qp} ·{lane + 1}"))
        meta.append(_meta(rank, tid, "thread_sort_index", qp * 64 + min(lane, 63)))
    if has_fabric:
        meta.append(_meta(FABRIC_PID, None, "process_name", "fabric (switch egress queues)"))
        meta.append(_meta(FABRIC_PID, None, "process_sort_index", -1))
    out: dict[str, Any] = {"traceEvents": meta + body, "displayTimeUnit": "ns"}
    if metadata:
        out["otherData"] = _jsonable(metadata)
    return out


def write_chrome_trace(trace: Mapping[str, Any], path: str | Path) -> Path:
    """Write a trace dict as compact JSON; returns the path."""
    p = Path(path)
    with p.open("w", encoding="utf-8") as f:
        json.dump(trace, f, separators=(",", ":"), allow_nan=False)
        f.write("\n")
    return p
