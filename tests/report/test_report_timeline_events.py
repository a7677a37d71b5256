"""timeline.json from the endpoints' event logs: CNPs, NAKs, retransmits and timeouts at their real times."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from emulator.cli import main
from emulator.results import read_results

ROOT = Path(__file__).resolve().parents[2]
INCAST = ROOT / "profiles" / "sim_incast_7to1.yaml"
STORED = ROOT / "tests" / "data" / "results_v1"


@pytest.fixture(scope="module")
def incast(tmp_path_factory) -> Path:
    """A deterministic sim incast with a small buffer: ECN marks (CNPs) and tail drops (NAKs, timeouts)."""
    out = tmp_path_factory.mktemp("incast") / "r"
    assert main(["run", str(INCAST), "-o", str(out), "--quiet", "--set", "fabric.ports.buffer=300KB"]) == 0
    return out


def _trace(d: Path, tmp_path: Path) -> dict:
    out = tmp_path / "timeline.json"
    assert main(["report", str(d), "--format", "timeline", "-o", str(out)]) == 0
    return json.loads(out.read_text())


def _totals(res, key: str) -> int:
    """Sum over ranks of an endpoint counter, from the raw records."""
    return sum(int(rec.counters[key]) for rec in res.records().values())


def test_event_instants_match_the_counters(incast: Path, tmp_path: Path) -> None:
    res = read_results(incast)
    trace = _trace(incast, tmp_path)
    ev = trace["traceEvents"]
    inst = [e for e in ev if e["ph"] == "i"]
    n = Counter(e["name"] for e in inst)
    assert _totals(res, "cnps_sent") > 0 and _totals(res, "retransmits") > 0 and _totals(res, "timeouts") > 0
    assert n["CNP sent"] == _totals(res, "cnps_sent")
    assert n["CNP received"] == _totals(res, "cnps_received")
    assert n["NAK sent"] == _totals(res, "naks_sent") and n["NAK received"] == _totals(res, "naks_received")
    assert n["timeout"] == _totals(res, "timeouts")
    assert sum(e["args"]["packets"] for e in inst if e["name"] == "retransmit") == _totals(res, "retransmits")
    # the approximations are gone when the real events are there
    assert not any(e["name"] == "rate cut (CNP)" or e["name"].startswith("retransmits ×") for e in inst)
    assert trace["otherData"]["events"] == "endpoint event log" and "events_dropped" not in trace["otherData"]
    assert all(e["s"] == "t" and "psn" in e["args"] for e in inst)
    # the rate cuts stay visible as the per-QP rate counters
    assert any(e["ph"] == "C" and e["name"].endswith("rate (Gb/s)") for e in ev)


def test_event_instants_sit_on_their_rank_and_qp_at_their_times(incast: Path, tmp_path: Path) -> None:
    res = read_results(incast)
    ev = _trace(incast, tmp_path)["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    flows = {int(f["flow"]): f for f in res.csv("flows")}
    for e in (e for e in ev if e["ph"] == "i"):
        f = flows[e["args"]["flow"]]
        assert threads[(e["pid"], e["tid"])] == f"QP {f['qp']}"
        # sender-side events on the flow's source rank, receiver-side ones on its destination
        side = "dst" if e["name"] in ("CNP sent", "NAK sent") else "src"
        assert e["pid"] == int(f[side]), e
    stored = res.events()
    times = sorted(round(t / 1e3, 3) for t in stored["event_t_ns"].tolist())
    assert sorted(e["ts"] for e in ev if e["ph"] == "i") == pytest.approx(times)
    # a CNP is received after the first one was sent, on the same QP
    first_sent = min(e["ts"] for e in ev if e["ph"] == "i" and e["name"] == "CNP sent")
    assert min(e["ts"] for e in ev if e["ph"] == "i" and e["name"] == "CNP received") > first_sent


def test_truncated_logs_are_named_in_the_trace(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert main(["run", str(INCAST), "-o", str(out), "--quiet"]) == 0
    # cap the logs after the fact, as a run with EndpointConfig(max_events=3) would have left them
    import numpy as np

    import emulator.results.io as rio

    res = read_results(out)
    recs = res.records()
    for rec in recs.values():
        extra = max(0, len(rec.event_t_ns) - 3)
        for name in ("event_t_ns", "event_kind", "event_qp", "event_psn", "event_packets", "event_op"):
            setattr(rec, name, getattr(rec, name)[:3])
        rec.counters["events_dropped"] = extra
    ts = dict(res.timeseries())
    ts.update(rio.event_arrays(recs))
    np.savez_compressed(out / "timeseries.npz", **ts)
    trace = _trace(out, tmp_path)
    dropped = trace["otherData"]["events_dropped"]
    assert dropped and all(v > 0 for v in dropped.values())
    assert sum(1 for e in trace["traceEvents"] if e["ph"] == "i") <= 3 * len(recs)


def test_old_results_fall_back_to_the_approximations(tmp_path: Path) -> None:
    trace = _trace(STORED, tmp_path)
    inst = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert trace["otherData"]["events"].startswith("approximated")
    assert any(e["name"] == "rate cut (CNP)" for e in inst)
    assert not any(e["name"] in ("CNP sent", "CNP received", "retransmit") for e in inst)
