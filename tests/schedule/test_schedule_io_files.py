"""Schedule files: round trip, determinism, hash, corruption, truncation, version refusal."""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

from emulator.errors import ScheduleError
from emulator.schedule.compiler import CompileOptions, compile_trace
from emulator.schedule.io import (
    HEADER_BYTES,
    MAGIC,
    is_schedule_file,
    load_schedule,
    load_schedule_hashed,
    save_schedule,
    schedule_hash,
)
from emulator.schedule.model import SCHEDULE_VERSION
from emulator.trace.model import CollectiveType, CommInfo, Node, NodeType, ProcessGroup, RankGraph, Trace


def _trace() -> Trace:
    groups = {"g": ProcessGroup("g", (0, 2))}
    ranks = {}
    for r in range(3):
        nodes = [
            Node(id=1, type=NodeType.COMP_NODE, duration_micros=5 + r),
            Node(id=2, type=NodeType.COMM_COLL_NODE, data_deps=(1,),
                 comm=CommInfo(collective=CollectiveType.ALL_REDUCE, size_bytes=3001)),
        ]
        if r != 1:
            nodes.append(Node(id=3, type=NodeType.COMM_COLL_NODE, data_deps=(1,),
                              comm=CommInfo(collective=CollectiveType.ALL_TO_ALL, size_bytes=64, pg_name="g")))
        ranks[r] = RankGraph(r, nodes)
    return Trace(ranks=ranks, groups=groups)


def _assert_same(a, b):
    for f in dataclasses.fields(a):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if isinstance(va, np.ndarray):
            assert va.dtype == vb.dtype, f.name
            assert np.array_equal(va, vb), f.name
        else:
            assert va == vb, f.name


def test_round_trip_is_exact_and_writable(tmp_path):
    s = compile_trace(_trace(), CompileOptions(chunks=2), provenance={"trace_sha256": "abc"})
    path = tmp_path / "x.sched"
    digest = save_schedule(s, path)
    assert is_schedule_file(path) and not is_schedule_file(tmp_path / "missing")
    loaded = load_schedule(path)
    _assert_same(s, loaded)
    assert schedule_hash(loaded) == digest == schedule_hash(s)
    again, stored = load_schedule_hashed(path)  # the verified hash from the file, as inspect shows it
    assert stored == digest
    _assert_same(s, again)
    assert loaded.meta["trace_sha256"] == "abc" and loaded.group_names == ("default", "g")
    loaded.op_duration_ns[0] = 1  # arrays are ordinary writable arrays
    assert path.read_bytes()[:8] == MAGIC


def test_deterministic_bytes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    save_schedule(compile_trace(_trace()), a)
    save_schedule(compile_trace(_trace()), b)
    assert a.read_bytes() == b.read_bytes()
    # a resave of a loaded file is byte-identical too
    save_schedule(load_schedule(a), b)
    assert a.read_bytes() == b.read_bytes()
    assert schedule_hash(compile_trace(_trace(), CompileOptions(chunks=2))) != schedule_hash(compile_trace(_trace()))


def test_corruption_is_detected(tmp_path):
    path = tmp_path / "c.sched"
    save_schedule(compile_trace(_trace()), path)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ScheduleError, match=r"c\.sched: content hash mismatch"):
        load_schedule(path)


def test_truncated_and_foreign_files(tmp_path):
    path = tmp_path / "t.sched"
    save_schedule(compile_trace(_trace()), path)
    data = path.read_bytes()
    path.write_bytes(data[:-8])
    with pytest.raises(ScheduleError, match="t.sched: content hash mismatch"):
        load_schedule(path)
    path.write_bytes(data[:20])
    with pytest.raises(ScheduleError, match="truncated"):
        load_schedule(path)
    other = tmp_path / "trace.0.et"
    other.write_bytes(b"\x05\x0a\x03abc")
    assert not is_schedule_file(other)
    with pytest.raises(ScheduleError, match=r"trace\.0\.et: not a schedule file"):
        load_schedule(other)
    with pytest.raises(ScheduleError, match="cannot read schedule"):
        load_schedule(tmp_path / "nope.sched")


def test_newer_version_is_refused(tmp_path):
    path = tmp_path / "v.sched"
    save_schedule(compile_trace(_trace()), path)
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, 8, SCHEDULE_VERSION + 1)
    path.write_bytes(bytes(data))
    with pytest.raises(ScheduleError, match=rf"version {SCHEDULE_VERSION + 1} is newer than this emulator reads"):
        load_schedule(path)


def test_inconsistent_header_is_reported(tmp_path):
    import hashlib
    import json

    path = tmp_path / "h.sched"
    save_schedule(compile_trace(_trace()), path)
    data = path.read_bytes()
    jlen = struct.unpack_from("<Q", data, 16)[0]
    header = json.loads(data[HEADER_BYTES : HEADER_BYTES + jlen])
    for entry in header["arrays"]:
        if entry[0] == "op_kind":
            entry[2] -= 1
    raw = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    raw += b" " * ((-len(raw)) % 8)
    payload = raw + data[HEADER_BYTES + jlen :]
    # keep the array offsets valid: only lengths changed, the header may have shrunk/grown by padding
    fixed = struct.pack("<8sIIQ32s", MAGIC, SCHEDULE_VERSION, 0, len(raw), hashlib.sha256(payload).digest())
    path.write_bytes(fixed + payload)
    with pytest.raises(ScheduleError, match="h.sched: array 'op_kind' has an inconsistent length"):
        load_schedule(path)


def test_unwritable_target(tmp_path):
    with pytest.raises(ScheduleError, match="cannot write schedule"):
        save_schedule(compile_trace(_trace()), tmp_path / "no" / "dir" / "x.sched")


def test_render_schedule_file_for_inspect(tmp_path):
    import json

    from emulator.schedule.summary import render_schedule_file, summarize

    path = tmp_path / "i.sched"
    s = compile_trace(_trace())
    digest = save_schedule(s, path)
    data = json.loads(render_schedule_file(str(path), as_json=True))
    assert data == summarize(s) and data["hash"] == digest
    text = render_schedule_file(str(path))
    assert digest[:16] in text and "all_to_all" in text
