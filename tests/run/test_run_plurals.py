"""Console and report text: counts agree with their noun (``1 rank``, ``2 ranks``); a one-rank generate warns."""

from __future__ import annotations

from pathlib import Path

from emulator.cli import main
from emulator.report.build import build_document
from emulator.report.console import counted
from emulator.report.text import render_text
from emulator.results import read_results

FAST = ["--set", "iterations=1", "--set", "warmup=0", "--set", "fabric.ports.rate=400Gbps"]


def test_counted() -> None:
    assert [counted(n, "rank") for n in (0, 1, 2)] == ["0 ranks", "1 rank", "2 ranks"]
    assert counted(1, "leaf", "leaves") == "1 leaf" and counted(3, "leaf", "leaves") == "3 leaves"


def test_one_of_a_kind_is_singular(tmp_path: Path, capsys) -> None:
    one = tmp_path / "one"
    assert main(["generate", "collective", "--ranks", "1", "-o", str(one)]) == 0
    assert main(["compile", str(one), "-o", str(tmp_path / "one.sched")]) == 0
    out = capsys.readouterr().out
    assert "wrote 1 rank file " in out and ": 1 node, " in out and "0 process groups" in out
    assert ": 1 rank, 0 ops, 0 flows, 0 bytes" in out
    bc = tmp_path / "bc"  # a broadcast on 2 ranks is one flow
    assert main(["generate", "collective", "--ranks", "2", "--collective", "broadcast", "--size", "4KiB",
                 "-o", str(bc)]) == 0
    res = tmp_path / "res"
    assert main(["run", "--trace", str(bc), "--fabric", "sim", "-o", str(res), *FAST]) == 0
    out = capsys.readouterr().out
    assert "totals: 1 flow (0 unfinished)" in out and "2 ranks" in out
    # the start delay says what it is (ready → first packet, emulated time, sender queueing included)
    delay = next(ln for ln in out.splitlines() if ln.startswith("flow start delay ("))
    assert "first packet − ready, emulated time" in delay and "DCQCN pacing" in delay and "0 of 1 flow > " in delay
    assert "generator: lag" not in out
    text = render_text(build_document(read_results(res)))
    assert "1 instance (" in text and "incomplete), 1 flow, " in text
    assert "flow start delay (first packet − ready, emulated time)" in text and "not the machine's lateness" in text
    for wrong in ("1 flows", "1 ranks", "1 instances", "1 nodes", "1 rank files"):
        assert wrong not in out + text, wrong


def test_generate_one_rank_warns_once_on_stderr(tmp_path: Path, capsys) -> None:
    assert main(["generate", "collective", "--ranks", "1", "-o", str(tmp_path / "one")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("warning: ") and "no traffic" in err[0] and "--ranks 2" in err[0]
    assert main(["generate", "collective", "--ranks", "2", "-o", str(tmp_path / "two")]) == 0
    assert capsys.readouterr().err == ""
