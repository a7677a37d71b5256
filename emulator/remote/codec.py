"""JSON forms of what crosses the agent API: a :class:`~emulator.drivers.contract.DriverResult` with its
rank records (arrays as lists), and schedules as file bytes (sans-IO but for a private temp file)."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np

from emulator.drivers.contract import DriverResult
from emulator.endpoint.records import RankRecords
from emulator.errors import EmulatorError
from emulator.schedule.io import load_schedule_hashed, save_schedule
from emulator.schedule.model import Schedule


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars and arrays, tuples and int keys made JSON-friendly."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def result_to_json(res: DriverResult) -> dict[str, Any]:
    records = {str(r): {"arrays": jsonable(rec.to_arrays()), "counters": jsonable(dict(rec.counters))}
               for r, rec in res.records.items()}
    return {"driver": res.driver, "complete": bool(res.complete), "errors": list(res.errors),
            "wall_ns": int(res.wall_ns), "interrupted": bool(res.interrupted), "health": jsonable(res.health), "records": records}


def result_from_json(doc: dict[str, Any]) -> DriverResult:
    records = {}
    for r, rec in doc.get("records", {}).items():
        arrays = {k: np.asarray(v) for k, v in rec["arrays"].items()}
        records[int(r)] = RankRecords.from_arrays(int(r), arrays, {k: int(v) for k, v in rec["counters"].items()})
    return DriverResult(driver=doc.get("driver", "direct"), records=records, health=doc.get("health", {}),
                        complete=bool(doc.get("complete")), errors=list(doc.get("errors", [])),
                        wall_ns=int(doc.get("wall_ns", 0)), interrupted=bool(doc.get("interrupted")))


def schedule_bytes(schedule: Schedule) -> tuple[bytes, str]:
    """The schedule file's bytes and its hash."""
    fd, path = tempfile.mkstemp(prefix="emulator-schedule-")
    os.close(fd)
    try:
        digest = save_schedule(schedule, path)
        with open(path, "rb") as fh:
            return fh.read(), digest
    finally:
        os.unlink(path)


def schedule_from_bytes(data: bytes) -> tuple[Schedule, str]:
    """A schedule and its verified hash from file bytes (EmulatorError when they are no valid schedule)."""
    fd, path = tempfile.mkstemp(prefix="emulator-upload-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        sched, digest = load_schedule_hashed(path)
    except EmulatorError as exc:
        raise EmulatorError(str(exc).replace(path, "uploaded schedule")) from None
    finally:
        os.unlink(path)
    return sched, digest
