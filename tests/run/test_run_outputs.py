"""`emulator run` writes the extra report files the profile's output.formats asks for."""

from __future__ import annotations

import json
from pathlib import Path

from emulator.cli import main


def test_run_writes_html_timeline_and_plots_when_asked(tiny_profile, tmp_path: Path, capsys) -> None:
    out = tmp_path / "res"
    profile = tiny_profile(output={"formats": ["text", "html", "timeline", "plots"]})
    assert main(["run", str(profile), "-o", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "report.html" in printed
    html = (out / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") or html.lower().startswith("<!doctype html>")
    assert "data:image/png;base64," in html
    events = json.loads((out / "timeline.json").read_text())
    assert events["traceEvents"] if isinstance(events, dict) else events
    assert sorted(p.suffix for p in (out / "plots").iterdir()) and all(
        p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in (out / "plots").iterdir())


def test_run_writes_the_timeline_but_no_html_by_default(tiny_profile, tmp_path: Path, capsys) -> None:
    out = tmp_path / "res"
    assert main(["run", str(tiny_profile()), "-o", str(out), "--quiet"]) == 0
    assert (out / "timeline.json").is_file()
    assert not (out / "report.html").exists() and not (out / "plots").exists()
