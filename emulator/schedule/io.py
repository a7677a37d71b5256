"""Schedule files: a versioned, deterministic, hash-stamped binary container for a :class:`Schedule`.

Layout (all integers little-endian)::

    offset  size  field
    0       8     magic  b"EMUSCHED"
    8       4     u32 format version (``SCHEDULE_VERSION``)
    12      4     u32 flags (0)
    16      8     u64 length J of the JSON header
    24      32    sha256 of the payload (every byte from offset 56 to the end of the file)
    56      J     JSON header (UTF-8, sorted keys, no whitespace), space-padded so J % 8 == 0
    56+J    ...   arrays, raw little-endian, each starting on an 8-byte boundary (zero padding)

The JSON header holds ``world_size``, ``group_names``, ``algorithm_names``, ``meta`` and ``arrays``: a
list of ``[name, dtype, length, offset]`` (offset relative to the start of the array area) in the
dataclass field order of :class:`Schedule`. Nothing time- or host-dependent is written, so the same
schedule always gives the same bytes, and :func:`schedule_hash` (the payload's sha256) identifies it.

Loading checks, in order: magic, version (a newer version is refused with a clear message), length,
hash (corruption → :class:`ScheduleError` naming the file), header, and the array lengths' mutual
consistency. Arrays are returned writable, backed by one buffer read from the file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from emulator.errors import ScheduleError
from emulator.schedule.model import SCHEDULE_VERSION, Schedule

MAGIC = b"EMUSCHED"
_FIXED = struct.Struct("<8sIIQ32s")  # magic, version, flags, json length, sha256
HEADER_BYTES = _FIXED.size  # 56
#: array columns of :class:`Schedule`, in dataclass field order (the order they are written in)
ARRAY_FIELDS = tuple(f.name for f in dataclasses.fields(Schedule) if "ndarray" in str(f.type))
_PAD = b"\0" * 8


def _jsonable(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, Path):
        return str(value)
    return value


def _encode(schedule: Schedule) -> tuple[bytes, list[memoryview]]:
    """(JSON header bytes, array pieces incl. padding) — together the payload."""
    pieces: list[memoryview] = []
    entries = []
    offset = 0
    for name in ARRAY_FIELDS:
        arr = np.asarray(getattr(schedule, name))
        if arr.ndim != 1:
            arr = arr.reshape(-1)
        dt = arr.dtype.newbyteorder("<")
        arr = np.ascontiguousarray(arr, dtype=dt)
        entries.append([name, dt.str, int(arr.shape[0]), offset])
        mv = memoryview(arr).cast("B")
        pieces.append(mv)
        offset += mv.nbytes
        pad = (-mv.nbytes) % 8
        if pad:
            pieces.append(memoryview(_PAD[:pad]))
            offset += pad
    header = {
        "world_size": int(schedule.world_size),
        "group_names": list(schedule.group_names),
        "algorithm_names": list(schedule.algorithm_names),
        "meta": _jsonable(schedule.meta),
        "arrays": entries,
    }
    try:
        text = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ScheduleError(f"schedule meta cannot be written as JSON: {exc}") from None
    raw = text.encode("ascii")
    raw += b" " * ((-len(raw)) % 8)
    return raw, pieces


def _digest(raw: bytes, pieces: list[memoryview]) -> bytes:
    h = hashlib.sha256(raw)
    for p in pieces:
        h.update(p)
    return h.digest()


def schedule_hash(schedule: Schedule) -> str:
    """sha256 (hex) of the schedule's file payload: equal hashes ⇔ identical schedule files."""
    raw, pieces = _encode(schedule)
    return _digest(raw, pieces).hex()


def save_schedule(schedule: Schedule, path: str | os.PathLike) -> str:
    """Write ``schedule`` to ``path`` (atomically: temp file + rename); returns its hash."""
    path = Path(path)
    raw, pieces = _encode(schedule)
    digest = _digest(raw, pieces)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(_FIXED.pack(MAGIC, SCHEDULE_VERSION, 0, len(raw), digest))
            fh.write(raw)
            for p in pieces:
                fh.write(p)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise ScheduleError(f"{path}: cannot write schedule: {exc.strerror or exc}") from None
    return digest.hex()


def is_schedule_file(path: str | os.PathLike) -> bool:
    """True when ``path`` starts with the schedule magic bytes."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _iter_checks(schedule: Schedule) -> Iterator[tuple[str, bool]]:
    nf, no, nc, w = schedule.n_flows, schedule.n_ops, schedule.n_colls, schedule.world_size
    for name in ("flow_dst", "flow_size_bytes", "flow_qp", "flow_coll", "flow_step", "flow_chunk"):
        yield name, getattr(schedule, name).shape[0] == nf
    for name in ("op_kind", "op_flow", "op_duration_ns", "op_not_before_ns", "op_node"):
        yield name, getattr(schedule, name).shape[0] == no
    yield "dep_ptr", schedule.dep_ptr.shape[0] == no + 1 and int(schedule.dep_ptr[-1]) == schedule.dep_idx.shape[0]
    yield "rank_op_ptr", schedule.rank_op_ptr.shape[0] == w + 1 and int(schedule.rank_op_ptr[-1]) == no
    for name in ("coll_group", "coll_seq", "coll_size_bytes", "coll_algorithm"):
        yield name, getattr(schedule, name).shape[0] == nc
    yield "coll_rank_ptr", (
        schedule.coll_rank_ptr.shape[0] == nc + 1 and int(schedule.coll_rank_ptr[-1]) == schedule.coll_rank_idx.shape[0]
    )


def load_schedule(path: str | os.PathLike) -> Schedule:
    """Read a schedule file written by :func:`save_schedule` (verifies version, hash and shapes)."""
    return load_schedule_hashed(path)[0]


def load_schedule_hashed(path: str | os.PathLike) -> tuple[Schedule, str]:
    """:func:`load_schedule` plus the file's verified hash (= :func:`schedule_hash` of it, not recomputed)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        buf = bytearray(size)
        with open(path, "rb") as fh:
            got = fh.readinto(buf)
    except OSError as exc:
        raise ScheduleError(f"{path}: cannot read schedule: {exc.strerror or exc}") from None
    if got != size or size < HEADER_BYTES or bytes(buf[:8]) != MAGIC:
        if size >= 8 and bytes(buf[:8]) == MAGIC:
            raise ScheduleError(f"{path}: truncated schedule file ({size} bytes, header needs {HEADER_BYTES})")
        raise ScheduleError(f"{path}: not a schedule file (bad magic at byte offset 0)")
    _magic, version, _flags, jlen, digest = _FIXED.unpack_from(buf, 0)
    if version > SCHEDULE_VERSION:
        raise ScheduleError(
            f"{path}: schedule format version {version} is newer than this emulator reads "
            f"(up to {SCHEDULE_VERSION}); upgrade the emulator or recompile the trace"
        )
    if version < 1:
        raise ScheduleError(f"{path}: invalid schedule format version {version} at byte offset 8")
    payload = memoryview(buf)[HEADER_BYTES:]
    if hashlib.sha256(payload).digest() != digest:
        raise ScheduleError(f"{path}: content hash mismatch (file corrupted or truncated)")
    if HEADER_BYTES + jlen > size:
        raise ScheduleError(f"{path}: JSON header length {jlen} at byte offset 16 runs past the end of the file")
    try:
        header = json.loads(bytes(payload[:jlen]).decode("ascii"))
        entries = header["arrays"]
    except (ValueError, KeyError, UnicodeDecodeError) as exc:
        raise ScheduleError(f"{path}: bad JSON header at byte offset {HEADER_BYTES}: {exc}") from None
    base = HEADER_BYTES + jlen
    arrays: dict[str, np.ndarray] = {}
    for entry in entries:
        try:
            name, dtype_str, length, off = entry
            dt = np.dtype(dtype_str)
            start = base + int(off)
            if start + dt.itemsize * int(length) > size or int(length) < 0:
                raise ValueError("runs past the end of the file")
            arr = np.frombuffer(buf, dtype=dt, count=int(length), offset=start)
        except (ValueError, TypeError) as exc:
            raise ScheduleError(f"{path}: array entry {entry!r} in the header is invalid: {exc}") from None
        arrays[str(name)] = arr if dt.isnative else arr.astype(dt.newbyteorder("="))
    missing = [n for n in ARRAY_FIELDS if n not in arrays]
    if missing:
        raise ScheduleError(f"{path}: header lacks array {missing[0]!r}")
    try:
        schedule = Schedule(
            world_size=int(header["world_size"]),
            group_names=tuple(header["group_names"]),
            algorithm_names=tuple(header["algorithm_names"]),
            meta=dict(header["meta"]),
            **{n: arrays[n] for n in ARRAY_FIELDS},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ScheduleError(f"{path}: header key {exc} missing or invalid") from None
    for name, ok in _iter_checks(schedule):
        if not ok:
            raise ScheduleError(f"{path}: array {name!r} has an inconsistent length")
    return schedule, digest.hex()
