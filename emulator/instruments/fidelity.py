"""The timing verdict of a socket run: how far its times can be trusted, from the lag of senders and switch."""

from __future__ import annotations

from emulator.units import format_duration_ns


def _p(lag: dict | None, key: str) -> int | None:
    v = (lag or {}).get(key)
    return None if v is None else int(v)


def timing_fidelity(sender_lag_ns: dict, switch_lag_ns: dict | None, reference_ns: int, *,
                    time_dilation: float = 1.0, behind: tuple[str, ...] = ()) -> dict[str, object]:
    """How far a socket run's timing can be trusted: the p99 of the senders' lag and of the switch's lag
    (``{"p50", "p99", "max", ...}`` in emulated ns; ``switch_lag_ns`` None without a software switch)
    against ``reference_ns``, the serialisation time of one MTU packet at the port rate. ``behind``: the
    plain-language "fell behind" details, kept in the verdict's warning. Returns the figures, ``faithful``
    and the one-line ``verdict``."""
    worst = max((v for v in (_p(sender_lag_ns, "p99"), _p(switch_lag_ns, "p99")) if v is not None), default=0)
    faithful = worst <= reference_ns
    verdict = "timing faithful" if faithful else (
        f"lag p99 {format_duration_ns(worst)} exceeds {format_duration_ns(reference_ns)} (one MTU at the port rate): "
        "times are upper bounds")
    return {
        "reference_ns": int(reference_ns), "time_dilation": float(time_dilation),
        "sender_lag_ns": {k: _p(sender_lag_ns, k) for k in ("p50", "p99", "max")},
        "switch_lag_ns": None if switch_lag_ns is None else {k: _p(switch_lag_ns, k) for k in ("p50", "p99", "max")},
        "lag_p99_ns": worst, "faithful": faithful, "verdict": verdict,
        "warning": None if faithful else verdict + (f" ({'; '.join(behind)})" if behind else ""),
    }
