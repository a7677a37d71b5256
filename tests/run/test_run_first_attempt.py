"""A driver's replaced first attempt (the loopback re-run under time_dilation auto) is written whole, as a
results directory of its own in first_attempt/; the summary line says so; --overwrite removes an old one."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from emulator.config import profile_from_dict
from emulator.drivers.contract import DriverResult
from emulator.errors import ConfigError
from emulator.instruments.fidelity import timing_fidelity
from emulator.results import read_results
from emulator.run.pipeline import FIRST_ATTEMPT_DIR, run_profile
from emulator.run.runner import make_driver

PROFILE = {"name": "ring", "ranks": {"count": 4}, "warmup": 0, "iterations": 1, "seed": 1,
           "fabric": {"kind": "sim", "ports": {"rate": "10Gbps"}},
           "workload": {"collectives": [{"name": "ar", "type": "all_reduce", "group": "0-3", "size": "64KiB",
                                         "algorithm": "ring"}]}}


@dataclass(frozen=True)
class TwiceDriver:
    """The sim run twice, the second replacing the first as the loopback driver's re-run does."""

    inner: object
    name: str = "sim"

    def run(self, schedule, progress=None) -> DriverResult:
        first = self.inner.run(schedule, progress)
        first.health["fidelity"] = timing_fidelity({"p99": 0}, {"p99": 588_000}, 167_120, time_dilation=10)
        again = self.inner.run(schedule, progress)
        again.health["fidelity"] = timing_fidelity({"p99": 0}, {"p99": 40_000}, 167_120, time_dilation=53)
        again.health["time_dilation_rerun"] = {"first_time_dilation": 10.0, "time_dilation": 53.0,
                                               "text": "re-run at K = 53: the first attempt at K = 10 was not "
                                                       "faithful; its results are kept"}
        return replace(again, previous_attempt=first)


def test_the_first_attempt_is_written_whole_beside_the_rerun(tmp_path: Path, capsys) -> None:
    p = profile_from_dict(PROFILE)
    rep = run_profile(p, out_dir=tmp_path / "r", driver=TwiceDriver(make_driver(p)))
    printed = capsys.readouterr().out
    assert rep.exit_code == 0
    main, first = read_results(tmp_path / "r"), read_results(tmp_path / "r" / FIRST_ATTEMPT_DIR)
    assert first.doc["complete"] and first.doc["schedule_hash"] == main.doc["schedule_hash"]
    assert not first.doc["driver"]["health"]["fidelity"]["faithful"] and main.doc["driver"]["health"]["fidelity"][
        "faithful"]
    assert first.doc["summary"]["all_reduce"]["cct"] == main.doc["summary"]["all_reduce"]["cct"]  # the sim: same
    assert "time_dilation_rerun" in main.doc["driver"]["health"]
    line = next(x for x in printed.splitlines() if x.startswith("fidelity: "))
    assert line.startswith("fidelity: timing faithful") and "re-run at K = 53" in line and "first_attempt/" in line
    # a later run into the same directory: refused, and --overwrite leaves no stale first attempt behind
    with pytest.raises(ConfigError):
        run_profile(p, out_dir=tmp_path / "r", quiet=True)
    (tmp_path / "r" / "results.json").unlink()  # only the first attempt's files left: still refused
    with pytest.raises(ConfigError, match="first_attempt"):
        run_profile(p, out_dir=tmp_path / "r", quiet=True)
    assert run_profile(p, out_dir=tmp_path / "r", quiet=True, overwrite=True).exit_code == 0
    assert not (tmp_path / "r" / FIRST_ATTEMPT_DIR / "results.json").exists()


class Killed(BaseException):
    """The process killed outright during the re-run (nothing after it runs)."""


@dataclass(frozen=True)
class DiesInRerunDriver:
    """The sim run once, handed to ``on_first_attempt`` as the loopback driver does before its re-run, then a
    re-run that never returns."""

    inner: object
    on_first_attempt: object = None
    name: str = "sim"

    def run(self, schedule, progress=None) -> DriverResult:
        first = self.inner.run(schedule, progress)
        first.health["fidelity"] = timing_fidelity({"p99": 0}, {"p99": 588_000}, 167_120, time_dilation=10)
        if self.on_first_attempt is not None:
            self.on_first_attempt(first)
        raise Killed


def test_the_first_attempt_is_on_disk_before_the_rerun_starts(tmp_path: Path) -> None:
    p = profile_from_dict(PROFILE)
    with pytest.raises(Killed):
        run_profile(p, out_dir=tmp_path / "r", driver=DiesInRerunDriver(make_driver(p)), quiet=True)
    first = read_results(tmp_path / "r" / FIRST_ATTEMPT_DIR)
    assert first.doc["complete"] and not first.doc["driver"]["health"]["fidelity"]["faithful"]
    assert first.doc["started_utc"] <= first.doc["finished_utc"] and first.doc["name"] == "ring"


@dataclass(frozen=True)
class NoRoomDriver:
    """The sim run once, not faithful, with the re-run the loopback driver's budget had no room for."""

    inner: object
    name: str = "sim"

    def run(self, schedule, progress=None) -> DriverResult:
        res = self.inner.run(schedule, progress)
        res.health["fidelity"] = timing_fidelity({"p99": 0}, {"p99": 588_000}, 167_120, time_dilation=31)
        res.health["time_dilation_rerun"] = {
            "first_time_dilation": 31.0, "skipped": True, "budget_s": 60.0, "wall_left_s": 28.5,
            "text": "not re-run at K = 62: it would take about 62 s, more than the 28 s left of "
                    "fabric.time_dilation_budget (60 s)"}
        return res


def test_a_skipped_rerun_is_said_without_a_first_attempt(tmp_path: Path, capsys) -> None:
    p = profile_from_dict(PROFILE)
    rep = run_profile(p, out_dir=tmp_path / "r", driver=NoRoomDriver(make_driver(p)))
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("fidelity: "))
    assert rep.exit_code == 0 and not (tmp_path / "r" / FIRST_ATTEMPT_DIR).exists()
    assert "times are upper bounds" in line and line.endswith(
        "; not re-run at K = 62: it would take about 62 s, more than the 28 s left of fabric.time_dilation_budget "
        "(60 s))")


def test_the_budget_is_the_profiles() -> None:
    lb = {**PROFILE, "fabric": {"kind": "loopback", "time_dilation": "auto"}}
    assert make_driver(profile_from_dict(lb)).budget_s == 180.0
    lb["fabric"] = {**lb["fabric"], "time_dilation_budget": "4min"}
    assert make_driver(profile_from_dict(lb)).budget_s == 240.0
