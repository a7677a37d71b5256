"""Chrome trace (timeline.json): phases, tracks per rank and QP, lanes, counters; from the stored results."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from emulator.cli import main
from emulator.report.timeline import FABRIC_PID, CounterSeries, Instant, Slice, chrome_trace
from emulator.results import read_results

STORED = Path(__file__).resolve().parents[1] / "data" / "results_v1"


def _names(events: list[dict], what: str) -> dict[tuple, str]:
    return {(e["pid"], e.get("tid")): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == what}


def test_tracks_lanes_and_phases() -> None:
    slices = [
        Slice(0, 5, "a", 0, 10_000, {"flow": 1, "bytes": 100}),
        Slice(0, 5, "b", 5_000, 20_000, {"flow": 2, "bytes": 100}),  # overlaps a → second lane
        Slice(0, 5, "c", 12_000, 15_000, {"flow": 3, "bytes": 100}),  # fits after a on lane 1
        Slice(1, 7, "d", 1_000, 2_000, {"flow": 4, "bytes": np.int64(7)}),
    ]
    inst = [Instant(0, 5, "rate cut (CNP)", 3_000), Instant(2, 9, "retransmits ×2", 4_000, {"count": 2})]
    ctr = [CounterSeries("queue sw0->host1", "queue_bytes", np.array([0, 1000, 2000]), np.array([0, 4096, 0])),
           CounterSeries("QP 5 rate (Gb/s)", "gbps", np.array([0, 500]), np.array([25.0, 12.5]), rank=0)]
    trace = json.loads(json.dumps(chrome_trace(slices, inst, ctr, {"name": "t"}), allow_nan=False))
    ev = trace["traceEvents"]
    assert trace["displayTimeUnit"] == "ns" and trace["otherData"]["name"] == "t"
    assert {e["ph"] for e in ev} == {"M", "X", "i", "C"}
    procs = _names(ev, "process_name")
    assert procs[(0, None)] == "rank 0" and procs[(1, None)] == "rank 1" and procs[(2, None)] == "rank 2"
    assert procs[(FABRIC_PID, None)].startswith("fabric")
    threads = _names(ev, "thread_name")
    x = {e["name"]: e for e in ev if e["ph"] == "X"}
    assert threads[(0, x["a"]["tid"])] == "QP 5"
    assert threads[(0, x["b"]["tid"])] == "QP 5 ·2"
    assert x["c"]["tid"] == x["a"]["tid"]
    assert threads[(1, x["d"]["tid"])] == "QP 7"
    assert x["a"]["ts"] == 0.0 and x["a"]["dur"] == 10.0 and x["b"]["ts"] == 5.0  # µs
    assert x["d"]["args"] == {"flow": 4, "bytes": 7}
    i = {e["name"]: e for e in ev if e["ph"] == "i"}
    assert i["rate cut (CNP)"]["tid"] == x["a"]["tid"] and i["rate cut (CNP)"]["s"] == "t"
    assert threads[(2, i["retransmits ×2"]["tid"])] == "QP 9"
    c = [e for e in ev if e["ph"] == "C"]
    assert [e["args"]["queue_bytes"] for e in c if e["pid"] == FABRIC_PID] == [0, 4096, 0]
    assert [e["args"]["gbps"] for e in c if e["pid"] == 0] == [25.0, 12.5]


def test_backwards_slice_is_rejected() -> None:
    with pytest.raises(ValueError):
        chrome_trace([Slice(0, 0, "x", 10, 5)])


def test_timeline_of_stored_results(tmp_path, capsys) -> None:
    out = tmp_path / "timeline.json"
    assert main(["report", str(STORED), "--format", "timeline", "-o", str(out)]) == 0
    trace = json.loads(out.read_text())
    ev = trace["traceEvents"]
    res = read_results(STORED)
    flows = res.csv("flows")
    world = len(res.summary.ranks)
    x = [e for e in ev if e["ph"] == "X"]
    assert len(x) == sum(1 for f in flows if int(f["actual_start_ns"]) >= 0)  # every started flow is a slice
    for e in x:
        assert {"flow", "bytes", "coll", "type"} <= set(e["args"]) and e["dur"] >= 0
        f = flows[e["args"]["flow"]]
        assert e["pid"] == int(f["src"]) and e["args"]["bytes"] == int(f["size_bytes"])
        assert e["ts"] == pytest.approx(int(f["actual_start_ns"]) / 1e3)
    # one process per rank, one thread per (rank, QP) lane, slices on a thread never overlap
    assert {e["pid"] for e in x} == set(range(world))
    threads = _names(ev, "thread_name")
    lanes = defaultdict(list)
    for e in x:
        assert threads[(e["pid"], e["tid"])].startswith("QP ")
        lanes[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in lanes.values():
        spans.sort()
        assert all(b[0] >= a[1] - 1e-6 for a, b in zip(spans, spans[1:], strict=False))
    qp_of_thread = {k: v.split()[1] for k, v in threads.items()}
    for e in x:
        assert qp_of_thread[(e["pid"], e["tid"])] == flows[e["args"]["flow"]]["qp"]
    # CNP reactions as instants, queue depth as counters on the fabric process
    assert any(e["ph"] == "i" and e["name"] == "rate cut (CNP)" for e in ev)
    queues = [e for e in ev if e["ph"] == "C" and e["pid"] == FABRIC_PID]
    assert queues and all("queue_bytes" in e["args"] for e in queues)
    port_names = {p.name for p in res.summary.fabric.ports}
    assert {e["name"].removeprefix("queue ") for e in queues} <= port_names
    assert max(e["args"]["queue_bytes"] for e in queues) > 0
