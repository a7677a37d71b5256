"""The study's three runs (profiles/study_*.yaml on the sim), made once per test session; they write the
results files the study reads (text, json, csv) and not the profile's per-run plots (rendering plots is
tested in tests/report)."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.cli import main

PROFILES = Path(__file__).resolve().parents[2] / "profiles"
STUDY_RUNS = ("study_ar_alone", "study_a2a_alone", "study_mixed")
NO_PLOTS = "output.formats=[text,json,csv]"


@pytest.fixture(scope="session")
def study(tmp_path_factory) -> dict[str, Path]:
    """Profile name -> results directory of its run (default seed)."""
    out = tmp_path_factory.mktemp("study")
    dirs = {}
    for name in STUDY_RUNS:
        dirs[name] = out / name
        assert main(["run", str(PROFILES / f"{name}.yaml"), "-o", str(dirs[name]), "--quiet",
                     "--set", NO_PLOTS]) == 0, name
    return dirs
