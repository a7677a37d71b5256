"""From a results directory to plot inputs, PNG figures and the Perfetto timeline.

Theory of operation
-------------------
Everything here reads a :class:`~emulator.results.Results` (never live state): its typed summary and its
stored arrays; it analyses nothing again:

* **instances** (:func:`collective_instances`): the member rows of complete, measured (non-warmup)
  instances in :meth:`~emulator.results.Results.collective_arrays` (the collectives.csv columns): CCT per
  instance and lateness per member as the run judged them (``analysis.straggler_basis``: the excess over
  the algorithm's own finish order, or end − median end), with the collective type of each instance.
* **CCT CDF**: one curve per collective type. **Straggler heatmap**: one per type, rank × instance in
  the order the instances started, colour = lateness.
* **Busiest port**: the port with the highest utilisation (``summary.fabric.busiest_port``); its queue
  samples come from ``timeseries.npz``; the rate curves are those of the queue pairs whose flows cross
  it, read off the port's name: ``X->hostR`` carries flows to rank R, ``hostR->X`` flows from rank R,
  ``leafI->spineJ`` / ``spineJ->leafI`` flows leaving / entering leaf I (ECMP spreads them over the
  spines, so the set is a superset). The busiest QPs (most bytes) are drawn.
* **FCT slowdown by size**: ``summary.flows.slowdown_by_size`` (HPCC 5 % buckets).
* **Timeline**: every flow (:meth:`~emulator.results.Results.flow_arrays`) that started is a slice on (sender rank, QP) from its first
  packet to its last acknowledgement (to the receiver's last byte when no ACK time was recorded).
  Congestion and loss events come from the endpoints' event logs (``Results.events()``, stored in
  ``timeseries.npz``): each row is an instant at its real time on the (rank, QP) track of the rank that
  logged it — ``CNP received``, ``NAK received``, ``retransmit``, ``timeout`` on the sender's track,
  ``CNP sent``, ``NAK sent`` on the receiver's — with ``args`` psn, packets (retransmit: packets re-sent
  from that PSN; timeout / NAK received: packets outstanding) and the flow. Ranks whose log was full
  are listed in ``otherData.events_dropped`` (the instants are then a prefix of the run). Rate cuts are
  visible in the per-QP rate counters. **Fallback** for results written before the event log existed
  (the raw records count CNPs and retransmits per flow, not their times): each DCQCN rate *decrease*
  in the QP's rate samples (the reaction to a CNP) is an instant ``rate cut (CNP)`` at its time, and a
  flow with retransmits gets one instant ``retransmits ×k`` at its end (``args.timing`` says so).
  Queue depth per switch port is a counter; sender rates per QP are counters on the rank's process.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from emulator.report import plots
from emulator.report.timeline import CounterSeries, Instant, Slice, chrome_trace, write_chrome_trace
from emulator.schema import dump
from emulator.stats.nccl import collective_name

_PORT_RANK = re.compile(r"^(?:.*->host(\d+)|host(\d+)->.*)$")
_PORT_LEAF = re.compile(r"^(?:leaf(\d+)->spine\d+|spine\d+->leaf(\d+))$")
#: timeline name and category of each event kind (emulator.results.events.EVENT_KINDS)
EVENT_INSTANTS = {
    "cnp_sent": ("CNP sent", "cnp"), "cnp_received": ("CNP received", "cnp"),
    "nak_sent": ("NAK sent", "nak"), "nak_received": ("NAK received", "nak"),
    "retransmit": ("retransmit", "retransmit"), "timeout": ("timeout", "retransmit"),
}


@dataclass(frozen=True, slots=True, eq=False)
class Instances:
    """Complete measured instances (one entry each, in id order) and their member rows."""

    instance_id: np.ndarray  # int64
    types: np.ndarray  # str, per instance
    cct_ns: np.ndarray  # float64, per instance
    first_start_ns: np.ndarray  # int64, per instance
    member_instance: np.ndarray  # per member row: index into the per-instance arrays
    member_rank: np.ndarray
    lateness_ns: np.ndarray  # float64, per member row


def collective_instances(results: Any) -> Instances | None:
    """Complete, measured collective instances of a results directory (None when there are none)."""
    c = results.collective_arrays()
    keep = ~c["warmup"] & np.isfinite(c["cct_ns"])  # the per-instance figures exist for complete instances only
    if not keep.any():
        return None
    inst = c["instance"][keep]
    ids, first_row, member = np.unique(inst, return_index=True, return_inverse=True)
    start = np.full(ids.shape[0], np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(start, member, c["start_ns"][keep])
    return Instances(ids, c["type"][keep][first_row], c["cct_ns"][keep][first_row], start, member,
                     c["rank"][keep], c["lateness_ns"][keep])


def cct_by_type(inst: Instances | None) -> dict[str, np.ndarray]:
    if inst is None:
        return {}
    return {str(t): inst.cct_ns[inst.types == t] for t in sorted(set(inst.types.tolist()))}


def lateness_matrix(inst: Instances, type_name: str) -> tuple[np.ndarray, list[int]]:
    """(ranks × instances lateness in ns with NaN for non-members, ranks) for one type, by start order."""
    sel = np.flatnonzero(inst.types == type_name)
    order = sel[np.argsort(inst.first_start_ns[sel], kind="stable")]
    col = np.full(inst.instance_id.shape[0], -1, dtype=np.int64)
    col[order] = np.arange(order.shape[0])
    rows = col[inst.member_instance] >= 0
    ranks = sorted(set(inst.member_rank[rows].tolist()))
    row = np.searchsorted(np.asarray(ranks, dtype=np.int64), inst.member_rank[rows])
    mat = np.full((len(ranks), order.shape[0]), np.nan)
    mat[row, col[inst.member_instance[rows]]] = inst.lateness_ns[rows]
    return mat, ranks


def _rate_series(ts: Mapping[str, np.ndarray]) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    rank, qp = ts.get("qp_rank", np.zeros(0)), ts.get("qp", np.zeros(0))
    t, rate = ts.get("qp_t_ns", np.zeros(0)), ts.get("qp_rate_bps", np.zeros(0))
    out: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    if not len(t):
        return out
    keys = rank.astype(np.int64) * (1 << 32) + qp.astype(np.int64)
    order = np.lexsort((t, keys))
    k, tt, rr = keys[order], t[order], rate[order]
    starts = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
    ends = np.append(starts[1:], k.shape[0])
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        out[(int(k[a] >> 32), int(k[a] & 0xFFFFFFFF))] = (tt[a:b], rr[a:b])
    return out


def _qps_through(name: str, flows: Mapping[str, np.ndarray], rank_leaf: tuple[int, ...]) -> np.ndarray:
    """Mask of the flows that cross the port ``name`` (see module docstring)."""
    src, dst = flows["src"], flows["dst"]
    m = _PORT_RANK.match(name)
    if m:
        return dst == int(m.group(1)) if m.group(1) is not None else src == int(m.group(2))
    m = _PORT_LEAF.match(name)
    if m and rank_leaf:
        leaf = np.asarray(rank_leaf, dtype=np.int64)
        ok = (src < leaf.shape[0]) & (dst < leaf.shape[0])
        last = leaf.shape[0] - 1
        ls = np.where(ok, leaf[np.clip(src, 0, last)], -1)
        ld = np.where(ok, leaf[np.clip(dst, 0, last)], -1)
        if m.group(1) is not None:
            i = int(m.group(1))
            return (ls == i) & (ld != i)
        i = int(m.group(2))
        return (ld == i) & (ls != i)
    return np.zeros(src.shape[0], dtype=bool)


def busiest_port_png(results: Any, max_qps: int = 8) -> bytes:
    fab = results.summary.fabric
    port = fab.port(fab.busiest_port)
    ts = results.timeseries()
    if port is None:
        return plots.port_timeseries_png("(none)", np.zeros(0), np.zeros(0), {}, title="Busiest port: no port counters")
    pid, name = port.port, str(port.name if port.name is not None else port.port)
    sel = ts.get("port", np.zeros(0)) == pid
    flows = results.flow_arrays()
    through = _qps_through(name, flows, tuple(getattr(results.analysis, "rank_leaf", ()) or ()))
    weight: dict[tuple[int, int], int] = {}
    for s, q, b in zip(flows["src"][through].tolist(), flows["qp"][through].tolist(),
                       flows["size_bytes"][through].tolist(), strict=True):
        weight[(s, q)] = weight.get((s, q), 0) + b
    series = _rate_series(ts)
    top = sorted((k for k in weight if k in series), key=lambda k: (-weight[k], k))[:max_qps]
    rates = {f"rank {r} QP {q}": series[(r, q)] for r, q in top}
    profile = results.profile or {}
    ecn = ((profile.get("fabric") or {}).get("ecn") or {})
    util = port.utilisation
    title = f"Busiest port {name} ({port.kind or ''}, utilisation {100 * util:.1f}%)" if util is not None else ""
    return plots.port_timeseries_png(
        name, ts.get("port_t_ns", np.zeros(0))[sel], ts.get("port_queue_bytes", np.zeros(0))[sel], rates,
        title=title, kmin_bytes=ecn.get("kmin") if ecn.get("enabled") else None,
        kmax_bytes=ecn.get("kmax") if ecn.get("enabled") else None,
    )


def straggler_figures(inst: Instances | None) -> list[tuple[str, str, bytes]]:
    """One lateness heatmap per collective type as (``stragglers_<type>``, caption, PNG bytes)."""
    if inst is None:
        return []
    out = []
    for t in sorted(set(inst.types.tolist())):
        mat, ranks = lateness_matrix(inst, t)
        out.append((f"stragglers_{t}", f"{t}: lateness of each rank per instance (as judged in collectives.csv)",
                    plots.straggler_heatmap_png(mat, ranks, title=f"{t}: per-rank lateness over instances")))
    return out


def figures(results: Any) -> list[tuple[str, str, bytes]]:
    """Every figure of a run as (file stem, caption, PNG bytes)."""
    inst = collective_instances(results)
    out = [("cct_cdf", "Completion-time CDF per collective type (complete, measured instances)",
            plots.cct_cdf_png(cct_by_type(inst)))]
    out.extend(straggler_figures(inst))
    out.append(("busiest_port", "Queue depth and sender rates over time at the busiest switch port",
                busiest_port_png(results)))
    buckets = [dump(b) for b in results.summary.flows.slowdown_by_size or ()]
    out.append(("fct_slowdown", "FCT slowdown (median, p95, p99) by flow-size bucket", plots.fct_slowdown_png(buckets)))
    return out


def write_pngs(pngs: list[tuple[str, bytes]], out_dir: str | Path) -> list[Path]:
    """Write each ``(stem, png bytes)`` as ``<stem>.png`` into ``out_dir`` (created); returns the paths."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem, png in pngs:
        p = d / f"{stem}.png"
        p.write_bytes(png)
        paths.append(p)
    return paths


def write_plots(results: Any, out_dir: str | Path) -> list[Path]:
    """Write every figure as ``<stem>.png`` into ``out_dir`` (created); returns the paths."""
    return write_pngs([(stem, png) for stem, _, png in figures(results)], out_dir)


# ------------------------------------------------------------------------------------ timeline


def _op_flows(results: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """(rank_op_ptr, op_flow) of the stored schedule, to name an event's flow (None if unreadable)."""
    try:
        sched = results.schedule()
    except Exception:  # noqa: BLE001 - the timeline still renders, only without flow ids on events
        return None
    return np.asarray(sched.rank_op_ptr, dtype=np.int64), np.asarray(sched.op_flow, dtype=np.int64)


def event_instants(results: Any, events: Mapping[str, np.ndarray]) -> list[Instant]:
    """One instant per logged event (see module docstring)."""
    from emulator.results.events import EVENT_KINDS

    ops = _op_flows(results)
    rank, op = events["event_rank"].astype(np.int64), events["event_op"].astype(np.int64)
    flow = np.full(rank.shape[0], -1, dtype=np.int64)
    if ops is not None and rank.size:
        ptr, op_flow = ops
        n_ranks = ptr.shape[0] - 1
        ok = (op >= 0) & (rank >= 0) & (rank < n_ranks)
        glob = ptr[np.clip(rank, 0, max(n_ranks - 1, 0))] + op
        ok &= glob < op_flow.shape[0]
        flow[ok] = op_flow[glob[ok]]
    out = []
    cols = (rank.tolist(), events["event_t_ns"].tolist(), events["event_kind"].tolist(), events["event_qp"].tolist(),
            events["event_psn"].tolist(), events["event_packets"].tolist(), flow.tolist())
    for r, t, k, q, psn, pkts, f in zip(*cols, strict=True):
        if not 0 <= k < len(EVENT_KINDS):
            continue
        kind = EVENT_KINDS[k]
        name, cat = EVENT_INSTANTS.get(kind, (kind, "event"))
        args: dict[str, Any] = {"psn": psn}
        if kind in ("retransmit", "timeout", "nak_received"):
            args["packets"] = pkts
        if f >= 0:
            args["flow"] = f
        out.append(Instant(r, q, name, t, args, cat))
    return out


def timeline_trace(results: Any) -> dict[str, Any]:
    """The Chrome trace dict of a results directory (see module docstring)."""
    events = results.events() if hasattr(results, "events") else None
    flows = results.flow_arrays()
    started = flows["actual_start_ns"] >= 0
    slices, instants = [], []
    sched = results.schedule()
    colls = {i: collective_name(int(t)) for i, t in enumerate(sched.coll_type.tolist())}
    for i in np.flatnonzero(started).tolist():
        start = int(flows["actual_start_ns"][i])
        end = int(flows["acked_ns"][i]) if flows["acked_ns"][i] >= 0 else int(flows["end_ns"][i])
        done = end >= start
        end = end if done else start
        coll = int(flows["coll"][i])
        ctype = colls.get(coll, "p2p") if coll >= 0 else "p2p"
        rank, qp = int(flows["src"][i]), int(flows["qp"][i])
        args = {"flow": int(flows["flow"][i]), "bytes": int(flows["size_bytes"][i]), "dst": int(flows["dst"][i]),
                "coll": coll, "type": ctype, "warmup": bool(flows["warmup"][i]),
                "scheduled_start_ns": int(flows["scheduled_start_ns"][i]), "finished": bool(done),
                "cnps": int(flows["cnps_received"][i]), "ce_marks": int(flows["ce_marks"][i]),
                "retransmits": int(flows["retransmits"][i])}
        slices.append(Slice(rank, qp, f"{ctype} flow {args['flow']}", start, end, args))
        k = int(flows["retransmits"][i])
        if k > 0 and events is None:  # fallback: no event log, only a per-flow count
            instants.append(Instant(rank, qp, f"retransmits ×{k}", end,
                                    {"flow": args["flow"], "count": k, "timing": "per-flow count, shown at flow end"},
                                    "retransmit"))
    counters = []
    ts = results.timeseries()
    for (rank, qp), (t, rate) in sorted(_rate_series(ts).items()):
        cuts = np.flatnonzero(rate[1:] < rate[:-1]) + 1 if events is None else np.zeros(0, np.int64)
        for j in cuts.tolist():  # fallback: no event log, the rate decreases stand for the CNPs
            instants.append(Instant(rank, qp, "rate cut (CNP)", int(t[j]),
                                    {"rate_bps": int(rate[j]), "previous_bps": int(rate[j - 1])}, "cnp"))
        counters.append(CounterSeries(f"QP {qp} rate (Gb/s)", "gbps", t, np.round(rate / 1e9, 4), rank))
    names = {p.port: str(p.name) for p in results.summary.fabric.ports}
    port = ts.get("port", np.zeros(0))
    for pid in np.unique(port).tolist():
        sel = port == pid
        counters.append(CounterSeries(f"queue {names.get(pid, pid)}", "queue_bytes", ts["port_t_ns"][sel],
                                      ts["port_queue_bytes"][sel]))
    meta = {"name": results.doc.get("name", ""), "results_version": results.doc.get("results_version"),
            "tool": (results.doc.get("tool") or {}).get("version", ""), "source": str(results.path),
            "events": "endpoint event log" if events is not None else "approximated (no event log)"}
    if events is not None:
        instants.extend(event_instants(results, events))
        dropped = {str(r): k for r, k in zip(events["event_dropped_ranks"].tolist(),
                                             events["event_dropped"].tolist(), strict=True)}
        if dropped:
            meta["events_dropped"] = dropped
    return chrome_trace(slices, instants, counters, meta)


def write_timeline(results: Any, path: str | Path) -> Path:
    """Write ``timeline.json`` (Chrome trace for Perfetto) of ``results`` to ``path``."""
    return write_chrome_trace(timeline_trace(results), path)
