"""Injected loss (``fabric.loss``, sim) is a figure of the summary, the text, HTML and CSV reports and compare:
it was only in ``fabric.ports[*].loss_packets``, so a run with 1 % loss printed "drops 78" (tail drops) and
nowhere the 122 packets the links lost, though its retransmits went 4x."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from emulator.cli import main


def _run(tmp_path: Path, name: str, loss: float) -> Path:
    profile = tmp_path / f"{name}.yaml"
    profile.write_text(yaml.safe_dump({
        "name": name, "seed": 3, "warmup": 0, "iterations": 1, "ranks": {"count": 4},
        "fabric": {"kind": "sim", "loss": loss, "ports": {"rate": "25Gbps", "latency": "1us"}},
        "workload": {"collectives": [{"name": "a2a", "type": "all_to_all", "group": "0-3", "size": "1MiB"}]}}))
    out = tmp_path / name
    assert main(["run", str(profile), "-o", str(out)]) == 0
    return out


def test_injected_loss_is_in_every_output(tmp_path: Path, capsys) -> None:
    lossy = _run(tmp_path, "lossy", 0.02)
    text = capsys.readouterr().out
    fabric = json.loads((lossy / "results.json").read_text())["summary"]["fabric"]
    lost = sum(p["loss_packets"] for p in fabric["ports"])
    assert lost > 0 and fabric["lost_packets"] == lost
    assert f"injected loss {lost}," in text
    assert main(["report", str(lossy), "--format", "csv"]) == 0
    assert f"fabric.lost_packets,{lost}" in capsys.readouterr().out.splitlines()
    assert main(["report", str(lossy), "--format", "html"]) == 0
    capsys.readouterr()
    assert "injected loss" in (lossy / "report.html").read_text()
    clean = _run(tmp_path, "clean", 0.0)
    assert "injected loss" not in capsys.readouterr().out
    assert main(["compare", str(clean), str(lossy), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["metrics"]["fabric.lost_packets"]
    assert row["values"] == {"clean": 0, "lossy": lost}
