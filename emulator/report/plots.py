"""PNG plots of a run: CCT CDFs, straggler heatmap, busiest-port time series, FCT slowdown by size.

Theory of operation
-------------------
Every function takes plain arrays (integer ns, bytes, bit/s — the units of the results directory)
and returns the PNG file's bytes; nothing here reads a results directory (see
:mod:`emulator.report.figures` for that). Figures are built on :class:`matplotlib.figure.Figure`
with the Agg canvas directly — no ``pyplot``, no global figure registry, no display — so plotting
works headless, in threads, and never leaks figures. matplotlib is imported lazily, so the rest of
the report package loads without it.

Axes convert units for reading: times in µs (or ms when the span is long), rates in Gb/s, queue
depth in KiB, sizes in bytes on a log axis. Every figure has a title, axis labels with units and,
where several series share an axis, a legend. An empty input gives a figure that says "no data"
rather than an exception: a report of an incomplete run must still render.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

_DPI = 110
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _figure(width_in: float = 7.0, height_in: float = 4.2) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, metadata={"Software": None})
    return buf.getvalue()


def _no_data(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, f"no data: {what}", ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _time_unit(span_ns: float) -> tuple[str, float]:
    """(label, divisor) so that a span of ``span_ns`` reads in µs or ms."""
    return ("ms", 1e6) if span_ns >= 20e6 else ("µs", 1e3)


def cct_cdf_png(cct_ns_by_type: Mapping[str, Sequence[int] | np.ndarray], title: str = "") -> bytes:
    """Empirical CDF of collective completion time, one step curve per collective type."""
    fig = _figure()
    ax = fig.add_subplot()
    series = {k: np.sort(np.asarray(v, dtype=np.float64)) for k, v in cct_ns_by_type.items() if len(v)}
    ax.set_title(title or "Collective completion time (CCT) CDF per collective type")
    if not series:
        _no_data(ax, "no completed collective instances")
        return _png(fig)
    unit, div = _time_unit(max(float(s[-1]) for s in series.values()))
    for name, s in sorted(series.items()):
        n = s.shape[0]
        y = np.arange(1, n + 1, dtype=np.float64) / n
        ax.step(np.concatenate(([s[0]], s)) / div, np.concatenate(([0.0], y)), where="post",
                label=f"{name} (n={n})")
    ax.set_xlabel(f"completion time ({unit})")
    ax.set_ylabel("fraction of instances ≤ x")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    return _png(fig)


def straggler_heatmap_png(
    lateness_ns: np.ndarray,
    ranks: Sequence[int],
    instance_labels: Sequence[str] | None = None,
    title: str = "",
) -> bytes:
    """Rank × instance heatmap of lateness (``end_r − median end`` of the instance, µs).

    ``lateness_ns`` has shape (n_ranks, n_instances); NaN marks a rank that is not a member of an
    instance (drawn blank). The colour scale starts at 0 (on time or early) so late ranks stand out.
    """
    lat = np.asarray(lateness_ns, dtype=np.float64)
    fig = _figure(7.5, max(3.0, min(9.0, 1.2 + 0.28 * max(1, lat.shape[0] if lat.ndim == 2 else 1))))
    ax = fig.add_subplot()
    ax.set_title(title or "Straggler heatmap: lateness per rank and collective instance")
    if lat.ndim != 2 or lat.size == 0 or np.isnan(lat).all():
        _no_data(ax, "no collective instances")
        return _png(fig)
    us = np.clip(lat, 0, None) / 1e3
    finite = us[np.isfinite(us)]
    vmax = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    cmap = _cmap_with_bad("magma_r")
    img = ax.imshow(np.ma.masked_invalid(us), aspect="auto", interpolation="nearest", cmap=cmap,
                    vmin=0.0, vmax=vmax, origin="upper")
    cb = fig.colorbar(img, ax=ax)
    cb.set_label("lateness: end − median end of instance (µs)")
    ax.set_ylabel("rank")
    ax.set_xlabel("collective instance (measured, in start order)")
    n_r, n_i = lat.shape
    step_r = max(1, n_r // 16)
    ax.set_yticks(range(0, n_r, step_r), [str(ranks[i]) for i in range(0, n_r, step_r)])
    if instance_labels is not None and n_i <= 24:
        ax.set_xticks(range(n_i), list(instance_labels), rotation=60, ha="right", fontsize=7)
    else:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return _png(fig)


def _cmap_with_bad(name: str) -> Any:
    import matplotlib

    return matplotlib.colormaps[name].with_extremes(bad="0.92")


def port_timeseries_png(
    port_label: str,
    queue_t_ns: np.ndarray,
    queue_bytes: np.ndarray,
    rates: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None,
    title: str = "",
    kmin_bytes: int | None = None,
    kmax_bytes: int | None = None,
) -> bytes:
    """Queue depth of one switch port (KiB, top) and sender rates of the QPs crossing it (Gb/s, bottom).

    ``rates`` maps a series label (e.g. ``"rank 3 QP 12"``) to ``(t_ns, rate_bps)`` step samples
    (each value holds until the next sample). ECN thresholds are drawn when given.
    """
    fig = _figure(7.5, 5.6)
    ax_q, ax_r = fig.subplots(2, 1, sharex=True)
    fig.suptitle(title or f"Busiest port {port_label}: queue depth and sender rates over time")
    t = np.asarray(queue_t_ns, dtype=np.float64)
    q = np.asarray(queue_bytes, dtype=np.float64)
    spans = [float(t.max()) if t.size else 0.0]
    for rt, _ in (rates or {}).values():
        if len(rt):
            spans.append(float(np.max(rt)))
    unit, div = _time_unit(max(spans))
    if t.size:
        ax_q.step(t / div, q / 1024.0, where="post", color="tab:red", lw=1.0, label="queue depth")
        for thr, name, style in ((kmin_bytes, "ECN Kmin", ":"), (kmax_bytes, "ECN Kmax", "--")):
            if thr:
                ax_q.axhline(thr / 1024.0, ls=style, lw=0.9, color="0.3", label=name)
        ax_q.legend(loc="upper right", fontsize=8)
    else:
        _no_data(ax_q, "no queue samples")
    ax_q.set_ylabel("queue depth (KiB)")
    ax_q.grid(True, alpha=0.3)
    ax_q.set_title(f"egress queue of {port_label}", fontsize=10)
    series = [(k, v) for k, v in (rates or {}).items() if len(v[0])]
    if series:
        shown = series[:12]
        for label, (rt, rb) in shown:
            ax_r.step(np.asarray(rt, dtype=np.float64) / div, np.asarray(rb, dtype=np.float64) / 1e9,
                      where="post", lw=0.9, label=label)
        if len(series) > len(shown):
            ax_r.plot([], [], " ", label=f"(+{len(series) - len(shown)} more QPs)")
        ax_r.legend(loc="upper right", fontsize=7, ncol=2)
    else:
        _no_data(ax_r, "no rate samples")
    ax_r.set_ylabel("sender rate (Gb/s)")
    ax_r.set_xlabel(f"time since run start ({unit})")
    ax_r.grid(True, alpha=0.3)
    ax_r.set_title("DCQCN current rate of the QPs sending through it", fontsize=10)
    return _png(fig)


def fct_slowdown_png(
    buckets: Sequence[Mapping[str, Any]],
    title: str = "",
) -> bytes:
    """Median, p95 and p99 FCT slowdown per flow-size bucket (HPCC convention, log-x by size).

    Each bucket is a mapping with ``min_size_bytes``, ``max_size_bytes``, ``flows``,
    ``median_slowdown``, ``p95_slowdown``, ``p99_slowdown`` (the fields of
    :class:`emulator.stats.SizeBucket`).
    """
    from matplotlib.ticker import LogFormatter

    fig = _figure()
    ax = fig.add_subplot()
    ax.set_title(title or "Flow completion time slowdown by flow size")
    rows = [b for b in buckets if b.get("median_slowdown") is not None]
    if not rows:
        _no_data(ax, "no finished flows")
        return _png(fig)
    x = np.arange(len(rows))
    for key, label, marker in (("median_slowdown", "median", "o"), ("p95_slowdown", "p95", "s"),
                               ("p99_slowdown", "p99", "^")):
        ax.plot(x, [float(b[key]) for b in rows], marker=marker, lw=1.2, label=label)
    ax.set_xticks(x, [_size_label(b) for b in rows], rotation=45, ha="right", fontsize=8)
    ax.set_xlabel("flow size bucket (bytes; flows per bucket in parentheses)")
    ax.set_ylabel("FCT slowdown (FCT / ideal FCT, ≥ 1)")
    ax.set_yscale("log")
    # plain numbers (2, 5, 10), not 2×10^0: matplotlib's LogFormatter still picks which minor ticks to label
    ax.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
    ax.grid(True, alpha=0.3, which="both")
    ax.legend()
    return _png(fig)


def _size_label(b: Mapping[str, Any]) -> str:
    from emulator.units import format_bytes

    lo, hi = int(b["min_size_bytes"]), int(b["max_size_bytes"])
    rng = format_bytes(lo) if lo == hi else f"{format_bytes(lo)}–{format_bytes(hi)}"
    return f"{rng} ({int(b.get('flows', 0))})"


def grouped_bars_png(
    metric_labels: Sequence[str],
    run_labels: Sequence[str],
    values: Sequence[Sequence[float | None]],
    ylabel: str,
    title: str,
) -> bytes:
    """Bars of several metrics (groups) for several runs (bars in a group); used by the study figure.

    ``values[m][r]`` is metric ``m`` of run ``r``; None is left out.
    """
    fig = _figure(7.0, 4.0)
    ax = fig.add_subplot()
    ax.set_title(title)
    n_m, n_r = len(metric_labels), len(run_labels)
    width = 0.8 / max(1, n_r)
    for r in range(n_r):
        xs = [m + (r - (n_r - 1) / 2) * width for m in range(n_m)]
        ys = [values[m][r] for m in range(n_m)]
        keep = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        if keep:
            bars = ax.bar([k[0] for k in keep], [k[1] for k in keep], width=width * 0.95, label=run_labels[r])
            ax.bar_label(bars, fmt="%.3g", fontsize=7)
    ax.set_xticks(range(n_m), list(metric_labels))
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    return _png(fig)
