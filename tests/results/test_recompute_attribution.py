"""recompute() rebuilds the straggler attribution from the perturbations stored in results.json."""

from __future__ import annotations

from pathlib import Path

import yaml

from emulator.cli import main
from emulator.results.io import read_results
from emulator.results.recompute import recompute


def _run(tmp_path: Path, perturbations: list | None) -> Path:
    data = {"name": "p", "seed": 5, "fabric": {"kind": "sim", "ports": {"rate": "25Gbps", "latency": "1us"}},
            "ranks": {"count": 4}, "warmup": 1, "iterations": 3,
            "workload": {"collectives": [{"type": "all_reduce", "size": "64KiB", "iterations": 2}]}}
    if perturbations is not None:
        data["perturbations"] = perturbations
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(data))
    out = tmp_path / "r"
    assert main(["run", str(f), "-o", str(out), "--quiet"]) == 0
    return out


def test_recompute_keeps_the_attribution_of_a_perturbed_run(tmp_path: Path) -> None:
    out = _run(tmp_path, [{"ranks": [2], "delay_before": {"collective": "all_reduce", "fixed": "100us"}}])
    stored = read_results(out).summary
    lines = stored.straggler_attribution["lines"]
    assert lines[0].startswith("rank 2 last to arrive in 100 %") and "injected" in lines[0]
    again = recompute(out)
    assert again.straggler_attribution == stored.straggler_attribution
    assert again == stored
    # another straggler factor changes the summary but keeps the attribution's injected label
    assert recompute(out, slow_factor=3.0).straggler_attribution["lines"][0].endswith(lines[0].rsplit("; ", 1)[1])


def test_recompute_of_an_unperturbed_run_has_no_attribution(tmp_path: Path) -> None:
    out = _run(tmp_path, None)
    assert read_results(out).summary.straggler_attribution is None and recompute(out).straggler_attribution is None
