"""The congestion study (issue 6; Keysight's finding, docs/dcqcn.md §7.1) reproduced on the deterministic sim.

Runs profiles/study_ar_alone.yaml, study_a2a_alone.yaml and study_mixed.yaml through the CLI, then reads
the claim off ``emulator compare --json``: mixing All-Reduce with All-to-All under DCQCN on the shared,
oversubscribed leaf-spine fabric makes the All-Reduce completion time *variable* (higher coefficient of
variation) and gives the All-to-All a *long tail* (higher p99/p50), compared with each alone.

Margins (seeds 1, 2, 3, 7, 11, 42, 99, 1234, measured with ``python -m emulator.report.study`` over the
24 runs): All-Reduce CCT cv alone 0.013-0.018, mixed 0.152-0.186 (>= 9.2x); All-to-All CCT p99/p50
alone 1.000-1.011, mixed 1.077-1.197; per-member completion p99/p50 alone 1.000-1.026, mixed
1.117-1.171. The thresholds below sit well inside those ranges, so the test fails only if the effect
itself goes away.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.cli import main

RUNS = ("study_ar_alone", "study_a2a_alone", "study_mixed")  # the ``study`` fixture (conftest.py) runs them
AR_CV = "all_reduce.cct.cv"
A2A_TAIL = "all_to_all.cct.p99/all_to_all.cct.p50"
A2A_MEMBER_TAIL = "all_to_all.completion.p99/all_to_all.completion.p50"


def _compare(study: dict[str, Path], capsys, *metrics: str) -> dict:
    capsys.readouterr()
    argv = ["compare", *(str(study[n]) for n in RUNS), "--labels", "ar,a2a,mixed", "--json"]
    for m in metrics:
        argv += ["--metric", m]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)["metrics"]


def test_runs_are_complete_and_comparable(study, capsys) -> None:
    m = _compare(study, capsys, "all_reduce.count", "all_to_all.count", "all_reduce.incomplete",
                 "all_to_all.incomplete", "fabric.ecn_marks")
    assert m["all_reduce.count"]["values"] == {"ar": 32, "a2a": None, "mixed": 32}
    assert m["all_to_all.count"]["values"] == {"ar": None, "a2a": 32, "mixed": 32}
    assert m["all_reduce.incomplete"]["values"]["mixed"] == 0 and m["all_to_all.incomplete"]["values"]["mixed"] == 0
    ecn = m["fabric.ecn_marks"]["values"]
    assert ecn["mixed"] > ecn["ar"] and ecn["mixed"] > ecn["a2a"]  # the mix congests the shared fabric more


def test_mixing_makes_all_reduce_variable_and_all_to_all_long_tailed(study, capsys) -> None:
    m = _compare(study, capsys, AR_CV, A2A_TAIL, A2A_MEMBER_TAIL, "all_reduce.cct.p50")
    cv = m[AR_CV]
    assert cv["baseline"] == "ar"
    assert cv["values"]["mixed"] > 4 * cv["values"]["ar"], cv
    assert cv["ratios"]["mixed"] == pytest.approx(cv["values"]["mixed"] / cv["values"]["ar"])
    tail = m[A2A_TAIL]
    assert tail["baseline"] == "a2a"  # All-to-All rows are compared with the All-to-All-alone run
    assert tail["values"]["ar"] is None
    assert tail["ratios"]["mixed"] > 1.04, tail
    member = m[A2A_MEMBER_TAIL]
    assert member["ratios"]["mixed"] > 1.06, member
    assert m["all_reduce.cct.p50"]["ratios"]["mixed"] > 1.0  # and All-Reduce got slower, not only noisier


def test_study_figures(study, tmp_path) -> None:
    from emulator.report.study import main as study_main

    assert study_main([str(study[n]) for n in RUNS] + ["-o", str(tmp_path)]) == 0
    names = {p.name for p in tmp_path.iterdir()}
    assert {"study_summary.png", "study_all_reduce_cdf.png", "study_all_to_all_cdf.png",
            "mixed_busiest_port.png", "mixed_stragglers_all_to_all.png"} <= names
    assert all(p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for p in tmp_path.iterdir())
