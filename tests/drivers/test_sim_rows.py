"""The sim's full MIDDLE packets go into a few recycled rows, not a fresh zero-filled 4 KiB buffer each: the
same bytes, the same results."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from support.sim import collective_schedule

from emulator.drivers.sim import SimConfig, run_sim
from emulator.endpoint import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.middles import MiddleRows, MiddleWriter, Row
from emulator.trace.model import CollectiveType

BENCH = Path(__file__).resolve().parents[2] / "bench" / "sim_speed.py"

_packet = st.tuples(st.integers(0, (1 << 24) - 1), st.integers(0, (1 << 25) - 1), st.booleans(),
                    st.integers(0, 1 << 40))


@given(st.lists(st.tuples(_packet, st.booleans()), min_size=1, max_size=12), st.sampled_from([36, 1040, 4112]))
@settings(max_examples=60, deadline=None)
def test_a_recycled_row_holds_the_bytes_a_fresh_middle_packet_has(packets, row_bytes):
    fresh = MiddleWriter(row_bytes)
    free: list[Row] = []
    rows = MiddleRows(row_bytes, free)
    held = []
    for (dest_qp, psn, ack, stamp), give_back in packets:
        row = rows.write(dest_qp, psn, ack, stamp)
        assert type(row) is Row and len(row) == row_bytes
        assert bytes(row) == fresh.write(dest_qp, psn, 1, ack, stamp) == fresh.one(dest_qp, psn, ack, stamp)
        held.append(row)
        if give_back:  # the receiver is done with the oldest row held
            free.append(held.pop(0))


def _ring(monkeypatch, rows: bool):
    made = []
    if rows:
        monkeypatch.setattr(Row, "__init__", lambda self, n: made.append(n) or bytearray.__init__(self, n),
                            raising=False)
    else:
        monkeypatch.setattr(RankEndpoint, "use_rows", lambda self, free: None)
    s = collective_schedule(4, CollectiveType.ALL_REDUCE, 1 << 20, "ring")
    res = run_sim(s, SimConfig(), EndpointConfig(cc="connectx", mtu_bytes=4096), seed=3)
    monkeypatch.undo()
    return res, made


def test_the_sim_sends_its_middle_packets_in_a_few_recycled_rows_with_the_same_results(monkeypatch):
    spec = importlib.util.spec_from_file_location("sim_speed_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    res, made = _ring(monkeypatch, rows=True)
    ref, none = _ring(monkeypatch, rows=False)
    assert res.complete and none == []
    packets = res.health["packets"]
    assert packets > 1500
    assert 0 < len(made) < packets // 20  # rows in flight at once, not one per packet
    assert set(made) == {4096 + 16}
    assert bench.result_digests(res) == bench.result_digests(ref)
    assert res.health["events"] == ref.health["events"]
