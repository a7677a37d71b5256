"""The nccl-tests table of a run shows the broadcast's real root rank, not nccl-tests' -1."""

from __future__ import annotations

import json
from pathlib import Path

from emulator.cli import main

FAST = ["--set", "iterations=1", "--set", "warmup=0", "--set", "fabric.ports.rate=400Gbps", "--quiet"]


def test_broadcast_root_in_the_nccl_table(tmp_path: Path, capsys) -> None:
    prefix = tmp_path / "bc" / "bc"
    assert main(["generate", "collective", "--ranks", "4", "--collective", "broadcast,all_reduce",
                 "--size", "64KiB", "--root", "2", "-o", str(prefix)]) == 0
    out = tmp_path / "res"
    assert main(["run", "--trace", str(prefix), "--fabric", "sim", "-o", str(out), *FAST]) == 0
    rows = json.loads((out / "results.json").read_text())["summary"]["nccl_table"]
    assert {r["collective"]: r["root"] for r in rows} == {"broadcast": "2", "all_reduce": "-"}
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if ln.lstrip().startswith("broadcast") and "float" in ln)
    assert " 2 " in line and "-1" not in line
