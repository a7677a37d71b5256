"""The endpoints' event logs in a results directory: written, read back, absent in older directories."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import emulator.results.io as rio
from emulator.endpoint.records import EV_CNP_RECEIVED, EV_CNP_SENT, EV_RETRANSMIT, EVENT_COLUMNS, RankRecords
from emulator.errors import ResultsError
from emulator.results import read_results

STORED = Path(__file__).resolve().parents[1] / "data" / "results_v1"


def _records() -> dict[int, RankRecords]:
    a, b = RankRecords(rank=0, n_ops=2), RankRecords(rank=1, n_ops=1, max_events=1)
    a.log_event(500, EV_CNP_RECEIVED, 3, 7, 0, 1)
    a.log_event(900, EV_RETRANSMIT, 3, 5, 4, 1)
    b.log_event(400, EV_CNP_SENT, 3, 6, 0, 0)
    assert b.log_event(450, EV_CNP_SENT, 3, 8, 0, 0) == -1  # over the cap: counted only
    return {0: a, 1: b}


def test_event_arrays_are_flat_and_in_time_order() -> None:
    ev = rio.event_arrays(_records())
    assert ev["event_rank"].tolist() == [1, 0, 0]
    assert ev["event_t_ns"].tolist() == [400, 500, 900]
    assert ev["event_kind"].tolist() == [EV_CNP_SENT, EV_CNP_RECEIVED, EV_RETRANSMIT]
    assert ev["event_psn"].tolist() == [6, 7, 5] and ev["event_packets"].tolist() == [0, 0, 4]
    assert ev["event_op"].tolist() == [0, 1, 1] and ev["event_qp"].tolist() == [3, 3, 3]
    assert ev["event_dropped_ranks"].tolist() == [1] and ev["event_dropped"].tolist() == [1]
    assert ev["event_kinds"].tolist()[EV_RETRANSMIT] == "retransmit"
    empty = rio.event_arrays({})
    assert all(empty[k].shape == (0,) for k in rio.EVENT_KEYS)


def test_records_and_timeseries_round_trip(tmp_path: Path) -> None:
    recs = _records()
    rio.save_records(tmp_path / "records.npz", recs)
    back = rio.load_records(tmp_path / "records.npz")
    for r, rec in recs.items():
        for name in EVENT_COLUMNS:
            assert getattr(back[r], name) == getattr(rec, name), name
    assert back[1].counters["events_dropped"] == 1
    rio.save_timeseries(tmp_path / "timeseries.npz", recs, {})
    with np.load(tmp_path / "timeseries.npz", allow_pickle=False) as z:
        assert z["event_t_ns"].tolist() == [400, 500, 900] and z["event_kind"].dtype == np.int8


def test_stored_results_without_events_still_read() -> None:
    res = read_results(STORED)
    assert res.events() is None
    recs = res.records()
    assert all(rec.event_t_ns == [] for rec in recs.values())


def test_events_read_back_by_kind_name(stored_copy: Path) -> None:
    d = stored_copy
    recs = _records()
    ts = dict(read_results(d).timeseries())
    ev = rio.event_arrays(recs)
    # a writer whose kind table was ordered differently: codes are mapped through the names
    names = ev["event_kinds"].tolist()
    perm = list(reversed(range(len(names))))
    ev["event_kinds"] = np.asarray([names[i] for i in perm])
    ev["event_kind"] = np.asarray([perm.index(k) for k in ev["event_kind"].tolist()], dtype=np.int8)
    np.savez_compressed(d / "timeseries.npz", **{**ts, **ev})
    out = read_results(d).events()
    assert out is not None
    assert out["event_kind"].tolist() == [EV_CNP_SENT, EV_CNP_RECEIVED, EV_RETRANSMIT]
    # an event kind the writer knew and this reader does not: -1 (the timeline skips it)
    ev["event_kinds"] = np.asarray(["future_kind", *names[1:]])
    ev["event_kind"] = np.asarray([0, 0, 0], dtype=np.int8)
    np.savez_compressed(d / "timeseries.npz", **{**ts, **ev})
    assert read_results(d).events()["event_kind"].tolist() == [-1, -1, -1]


def test_incomplete_event_log_is_a_one_line_error(stored_copy: Path) -> None:
    d = stored_copy
    ts = dict(read_results(d).timeseries())
    ev = rio.event_arrays(_records())
    del ev["event_psn"]
    np.savez_compressed(d / "timeseries.npz", **{**ts, **ev})
    with pytest.raises(ResultsError, match="event log incomplete.*event_psn"):
        read_results(d).events()


def test_the_stored_kind_table_matches_the_endpoint_codes() -> None:
    """``event_kind`` is written as the endpoint's code; the format's table names each code."""
    from emulator.endpoint.events import FlowEventKind
    from emulator.results.events import EVENT_KINDS

    assert [k.name.lower() for k in sorted(FlowEventKind)] == list(EVENT_KINDS)
    assert [int(k) for k in sorted(FlowEventKind)] == list(range(len(EVENT_KINDS)))
