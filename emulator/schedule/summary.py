"""One-screen summary of a :class:`Schedule` (``emulator compile --summary/--json``, ``emulator inspect``).

:func:`summarize` returns exactly the ``emulator compile --json`` shape::

    {"ranks": n, "flows": total, "bytes": total,
     "per_rank": [{"rank", "flows", "bytes_sent", "bytes_received"}],
     "collectives": [{"type", "count", "algorithm"}],
     "hash": "<sha256 of the schedule file payload>"}

``per_rank[r]["flows"]`` counts the flows rank ``r`` *sends*; ``bytes`` is the sum over all flows (each
counted once). ``collectives`` has one row per (type, algorithm), type spelled in lower case
(``all_reduce``), sorted by type then algorithm. :func:`render_summary` renders the same dict as text.
"""

from __future__ import annotations

import numpy as np

from emulator.schedule.io import schedule_hash
from emulator.schedule.model import OP_DELAY, Schedule
from emulator.trace.model import CollectiveType
from emulator.units import format_bytes, format_duration_ns


def _type_name(value: int) -> str:
    try:
        return CollectiveType(value).name.lower()
    except ValueError:
        return f"unknown_{value}"


def summarize(schedule: Schedule, *, hash_hex: str | None = None) -> dict:
    """The ``--json`` summary; pass ``hash_hex`` when already known (saves re-hashing)."""
    w = schedule.world_size
    sizes = schedule.flow_size_bytes.astype(np.int64)
    sent = np.bincount(schedule.flow_src, weights=sizes, minlength=w) if w else np.zeros(0)
    recv = np.bincount(schedule.flow_dst, weights=sizes, minlength=w) if w else np.zeros(0)
    nsent = np.bincount(schedule.flow_src, minlength=w) if w else np.zeros(0, dtype=np.int64)
    # exact integer sums (bincount weights are float64): recompute where float could round
    if sizes.size and int(sizes.sum()) >= 2**53:
        sent = np.array([int(sizes[schedule.flow_src == r].sum()) for r in range(w)])
        recv = np.array([int(sizes[schedule.flow_dst == r].sum()) for r in range(w)])
    per_rank = [
        {"rank": r, "flows": int(nsent[r]), "bytes_sent": int(sent[r]), "bytes_received": int(recv[r])}
        for r in range(w)
    ]
    counts: dict[tuple[str, str], int] = {}
    for t, a in zip(schedule.coll_type.tolist(), schedule.coll_algorithm.tolist(), strict=True):
        key = (_type_name(t), schedule.algorithm_names[a] if 0 <= a < len(schedule.algorithm_names) else "?")
        counts[key] = counts.get(key, 0) + 1
    collectives = [{"type": t, "count": c, "algorithm": a} for (t, a), c in sorted(counts.items())]
    return {
        "ranks": int(w),
        "flows": schedule.n_flows,
        "bytes": int(sizes.sum()),
        "per_rank": per_rank,
        "collectives": collectives,
        "hash": hash_hex or schedule_hash(schedule),
    }


def render_summary(summary: dict, schedule: Schedule | None = None) -> str:
    """Text rendering of :func:`summarize`'s dict (plus op counts when the schedule is given)."""
    lines = [
        f"schedule {summary['hash'][:16]}…  ranks {summary['ranks']}  flows {summary['flows']}  "
        f"bytes {summary['bytes']} ({format_bytes(summary['bytes'])})"
    ]
    if schedule is not None:
        kinds = np.bincount(schedule.op_kind.astype(np.int64), minlength=3)
        delay_ns = int(schedule.op_duration_ns[schedule.op_kind == OP_DELAY].sum())
        loop = "open" if bool(schedule.meta.get("options", {}).get("open_loop")) else "closed"
        lines.append(
            f"ops {schedule.n_ops} (send {kinds[0]}, recv {kinds[1]}, delay {kinds[2]}, "
            f"delay total {format_duration_ns(delay_ns)}), deps {schedule.dep_idx.shape[0]}, "
            f"queue pairs {int(schedule.flow_qp.max()) + 1 if schedule.n_flows else 0}, {loop} loop"
        )
    if summary["collectives"]:
        lines.append("collectives:")
        for c in summary["collectives"]:
            lines.append(f"  {c['type']:<22} x{c['count']:<6} {c['algorithm']}")
    lines.append("rank  flows sent   bytes sent        bytes received")
    for row in summary["per_rank"]:
        lines.append(
            f"{row['rank']:>4}  {row['flows']:>10}   {row['bytes_sent']:>15}   {row['bytes_received']:>15}"
        )
    return "\n".join(lines)


def render_schedule_file(path: str, *, as_json: bool = False) -> str:
    """What ``emulator inspect SCHEDULE`` prints: the JSON summary (one object) or the text rendering."""
    import json

    from emulator.schedule.io import load_schedule_hashed

    schedule, digest = load_schedule_hashed(path)
    summary = summarize(schedule, hash_hex=digest)
    return json.dumps(summary) if as_json else render_summary(summary, schedule)
