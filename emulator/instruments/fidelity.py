"""The timing verdict of a socket run: how far its times can be trusted, from the lag of senders and switch,
from the ECN marks at queues only the machine's lateness made, from the CNPs acted on and the sends posted
after their model time."""

from __future__ import annotations

from emulator.units import format_duration_ns


def _p(lag: dict | None, key: str) -> int | None:
    v = (lag or {}).get(key)
    return None if v is None else int(v)


def _worst(sender_lag_ns: dict, switch_lag_ns: dict | None, key: str) -> int:
    return max((v for v in (_p(sender_lag_ns, key), _p(switch_lag_ns, key)) if v is not None), default=0)


#: an uncongested run's lag p99.9 beyond this many MTU times is a stall long enough to shift the schedule
STALL_REFERENCES = 8


def timing_fidelity(sender_lag_ns: dict, switch_lag_ns: dict | None, reference_ns: int, *,
                    time_dilation: float = 1.0, behind: tuple[str, ...] = (),
                    congested: bool = False) -> dict[str, object]:
    """How far a socket run's timing can be trusted: the p99 of the senders' lag and of the switch's lag
    (``{"p50", "p99", "p999", "max", ...}`` in emulated ns; ``switch_lag_ns`` None without a software
    switch) against ``reference_ns``, the serialisation time of one MTU packet at the port rate; with
    ``congested`` (the schedule offers some port more than its rate, so it queues for the whole flow and a
    late packet moves the marks and drops of every later one) the p99.9 instead. Without ``congested`` the
    p99.9 is judged too, against :data:`STALL_REFERENCES` MTU times: one stall of the machine that long
    (a stopped vCPU, a frozen process) delays every operation that waits on the late packets, so the rest
    of the run is shifted against the schedule (collectives overlap that did not) while the p99 stays low.
    ``behind``: the plain-language "fell behind" details, kept in the verdict's warning. Returns the
    figures, the quantile judged (``judged``), the lag at it (``lag_judged_ns``) and the bound it was held to
    (``limit_ns``), ``measured`` (False when neither lag has a p99, e.g. a run interrupted before its
    processes reported: then not ``faithful`` and the verdict says the timing was not measured),
    ``faithful`` and the one-line ``verdict``."""
    worst = _worst(sender_lag_ns, switch_lag_ns, "p99")
    tail = _worst(sender_lag_ns, switch_lag_ns, "p999")
    if congested:
        judged, lag, limit, what = "p99.9", tail, int(reference_ns), "one MTU at the port rate; a congested port"
    elif worst <= reference_ns and tail > STALL_REFERENCES * reference_ns:
        judged, lag, limit = "p99.9", tail, STALL_REFERENCES * int(reference_ns)
        what = f"{STALL_REFERENCES} MTU times at the port rate: a stall that shifts the schedule"
    else:
        judged, lag, limit, what = "p99", worst, int(reference_ns), "one MTU at the port rate"
    measured = _p(sender_lag_ns, "p99") is not None or _p(switch_lag_ns, "p99") is not None
    faithful = measured and lag <= limit
    if not measured:
        verdict = "timing not measured: neither senders nor switch reported their lag (times unchecked)"
    elif faithful:
        verdict = "timing faithful"
    else:
        verdict = (f"lag {judged} {format_duration_ns(lag)} exceeds {format_duration_ns(limit)} ({what}): "
                   "times are upper bounds")
    keys = ("p50", "p99", "p999", "max")
    return {
        "reference_ns": int(reference_ns), "time_dilation": float(time_dilation),
        "sender_lag_ns": {k: _p(sender_lag_ns, k) for k in keys},
        "switch_lag_ns": None if switch_lag_ns is None else {k: _p(switch_lag_ns, k) for k in keys},
        "lag_p99_ns": worst, "judged": judged, "lag_judged_ns": lag, "limit_ns": limit, "measured": measured,
        "faithful": faithful,
        "verdict": verdict, "warning": None if faithful else verdict + (f" ({'; '.join(behind)})" if behind else ""),
    }


def with_lag_marks(fid: dict[str, object], lag_marks: list[int], unplaced_late_batches: list[int],
                   marks: int) -> dict[str, object]:
    """``fid`` (:func:`timing_fidelity`) with the queue rule: ``lag_marks[p]`` ECN marks port ``p`` made on a
    queue that, less what late arrivals there left (idle time their port lost because they reached the
    switch after their model time, :mod:`emulator.drivers.loopback.model_port`), was at or below Kmin,
    of ``marks`` in all. Any such mark makes the run not faithful: its marks and the rate cuts they caused
    are partly the machine's. A run judged on its p99 with any mark is also held to one MTU at its largest lag
    (:func:`_marks_with_tail_lag`). Adds ``lag_marks``, ``lag_marks_by_port``, ``unplaced_late_batches``."""
    n = int(sum(lag_marks))
    out = {**fid, "lag_marks": n, "lag_marks_by_port": [int(m) for m in lag_marks],
           "unplaced_late_batches": int(sum(unplaced_late_batches))}
    if not n:
        return _marks_with_tail_lag(out, fid, marks)
    ports = ", ".join(str(p) for p, m in enumerate(lag_marks) if m)
    why = (f"{n} of {marks} ECN marks at queues only late arrivals made (port{'s' if ',' in ports else ''} {ports}): "
           "marks, rate cuts and times are upper bounds")
    return _not_faithful(out, fid, why)


def _marks_with_tail_lag(out: dict[str, object], fid: dict[str, object], marks: int) -> dict[str, object]:
    """The marks rule for a run judged on its p99 (a schedule that offers no port more than its rate): with
    any ECN mark, the largest lag (senders' or switch's) is held to the reference too. At ports loaded near
    their rate one packet that late leaves a queue that stays, and the marks, cuts and re-ordered sends that
    follow look like the model's to every other rule (measured: 26-79 marks, the sim's 0, All-Reduce CCT p99
    1.24-1.32x, with lag p99.9 162-287 us and no mark the lag-marks rule could place); with no mark nothing
    of the kind happened."""
    worst = _worst(fid["sender_lag_ns"], fid["switch_lag_ns"], "max")  # type: ignore[arg-type]
    ref = int(fid["reference_ns"])  # type: ignore[call-overload]
    if not marks or fid.get("judged") != "p99" or worst <= ref:
        return out
    why = (f"{marks} ECN marks with lag max {format_duration_ns(worst)} beyond {format_duration_ns(ref)} (one MTU at "
           "the port rate): late packets may have made the queues: marks, rate cuts and times are upper bounds")
    return _not_faithful(out, fid, why)


def with_cnp_lag(fid: dict[str, object], cnps_timed: int, cnps_acted_late: int, cnp_lag_max_ns: int,
                 congested: bool = False) -> dict[str, object]:
    """``fid`` (:func:`timing_fidelity`) with the feedback rule: of ``cnps_timed`` CNPs the senders acted on at
    their model delivery time, ``cnps_acted_late`` came after the sender's service had passed that time by
    more than the reference (one MTU at the port rate): a rate cut that late acts on packets the model would
    have sent slower, lag like a late packet's. Judged as the lag is: more than 1 % of them that late (0.1 %
    on a congested run) puts the CNPs' lag p99 (p99.9) past the reference and the run is not faithful.
    Adds ``cnps_timed``, ``cnps_acted_late``, ``cnp_lag_max_ns``."""
    out = {**fid, "cnps_timed": int(cnps_timed), "cnps_acted_late": int(cnps_acted_late),
           "cnp_lag_max_ns": int(cnp_lag_max_ns)}
    if not _too_many_late(cnps_acted_late, cnps_timed, congested):
        return out
    ref = format_duration_ns(int(fid["reference_ns"]))  # type: ignore[call-overload]
    why = (f"{cnps_acted_late} of {cnps_timed} CNPs acted on more than {ref} after their model time (CNP lag "
           f"{'p99.9' if congested else 'p99'} exceeds {ref}, max {format_duration_ns(int(cnp_lag_max_ns))}): "
           "rate cuts came late: marks, CNPs and times are upper bounds")
    return _not_faithful(out, fid, why)


def with_post_lag(fid: dict[str, object], posts_timed: int, posts_late: int, post_lag_max_ns: int,
                  congested: bool = False) -> dict[str, object]:
    """``fid`` (:func:`timing_fidelity`) with the start rule: of ``posts_timed`` SENDs posted on model time,
    ``posts_late`` were made ready (their delivery read) after the sender's service had passed their time by
    more than the reference: each joined its rank's round robin later than the model's, so the rank's send
    order and stamps left the model's (queues and marks the model would not have), lag like a late packet's.
    Judged as the CNPs are (:func:`with_cnp_lag`): more than 1 % of them (0.1 % on a congested run) and the
    run is not faithful. Adds ``posts_timed``, ``posts_late``, ``post_lag_max_ns``."""
    out = {**fid, "posts_timed": int(posts_timed), "posts_late": int(posts_late),
           "post_lag_max_ns": int(post_lag_max_ns)}
    if not _too_many_late(posts_late, posts_timed, congested):
        return out
    ref = format_duration_ns(int(fid["reference_ns"]))  # type: ignore[call-overload]
    why = (f"{posts_late} of {posts_timed} sends posted more than {ref} after their model time (max "
           f"{format_duration_ns(int(post_lag_max_ns))}): flows started late, the send order left the model's: "
           "marks, CNPs and times are upper bounds")
    return _not_faithful(out, fid, why)


def _too_many_late(late: int, timed: int, congested: bool) -> bool:
    """More than 1 % of ``timed`` events ``late`` (0.1 % on a congested run): their lag p99 (p99.9) is past
    the reference."""
    return late > (0.001 if congested else 0.01) * timed


def _not_faithful(out: dict[str, object], fid: dict[str, object], why: str) -> dict[str, object]:
    """``out`` judged not faithful for ``why``: the verdict and warning, or ``fid``'s with ``why`` added."""
    if fid["faithful"]:
        return {**out, "faithful": False, "verdict": why, "warning": why}
    return {**out, "verdict": f"{fid['verdict']}; {why}", "warning": f"{fid['warning']}; {why}"}
