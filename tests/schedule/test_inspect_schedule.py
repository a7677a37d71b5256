"""``emulator inspect`` summarises a compiled schedule file as well as a trace."""

import json
from pathlib import Path

from emulator.cli import main

BUNDLED = Path(__file__).resolve().parents[2] / "emulator/data/traces/microbenchmarks/all_reduce/8npus_1MB"


def _ring_trace() -> str:
    """The 8-rank 1 MiB ASTRA-sim all-reduce microbenchmark shipped inside the package."""
    return str(BUNDLED / "all_reduce")


def test_inspect_schedule_json_matches_compile_json(tmp_path, capsys):
    out = tmp_path / "ar.sched"
    assert main(["compile", _ring_trace(), "-o", str(out), "--json"]) == 0
    compiled = json.loads(capsys.readouterr().out)
    assert main(["inspect", str(out), "--json"]) == 0
    inspected = json.loads(capsys.readouterr().out)
    assert inspected == compiled
    assert inspected["ranks"] == 8
    assert all(r["bytes_sent"] == 1_835_008 for r in inspected["per_rank"])


def test_inspect_schedule_text(tmp_path, capsys):
    out = tmp_path / "ar.sched"
    assert main(["compile", _ring_trace(), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "all_reduce" in text.lower() and "1835008" in text
