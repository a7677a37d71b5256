"""Run a profile text through the CLI on one fabric and read its results summary (the fidelity tests)."""

from __future__ import annotations

import json
from pathlib import Path

from emulator.cli import main


def run_summary(tmp_path: Path, profile_text: str, fabric: str) -> tuple[dict, Path]:
    """``emulator run`` of ``profile_text`` with ``--fabric fabric`` into ``tmp_path/fabric``: its summary and
    its results directory (exit 0 or 1: an SLO may fail, the run must complete)."""
    prof = tmp_path / "profile.yaml"
    prof.write_text(profile_text)
    out = tmp_path / fabric
    assert main(["run", str(prof), "--fabric", fabric, "-o", str(out), "--quiet"]) in (0, 1)
    return json.loads((out / "results.json").read_text())["summary"], out
