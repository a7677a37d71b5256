"""Merged and repeated schedules keep the root rank of every rooted collective instance."""

from __future__ import annotations

from emulator.config import profile_from_dict
from emulator.run.workload import load_workload
from emulator.schedule.compose import repeat_schedule


def test_merged_and_repeated_schedules_keep_roots() -> None:
    p = profile_from_dict({"name": "r", "ranks": {"count": 4}, "workload": {"collectives": [
        {"name": "ar", "type": "all_reduce", "group": "0-3", "size": "4KiB"},
        {"name": "bc", "type": "broadcast", "group": [1, 2, 3], "size": "4KiB", "root": 2, "iterations": 2},
        {"name": "ga", "type": "gather", "group": [0, 3], "size": "4KiB", "root": 3}]}})
    s = load_workload(p).schedule
    assert s.coll_root_ranks().tolist() == [-1, 2, 2, 3]
    r = repeat_schedule(s, iterations=2, warmup=1)
    assert r.coll_root_ranks().tolist() == [-1, 2, 2, 3] * 3
