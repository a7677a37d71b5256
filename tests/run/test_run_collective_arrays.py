"""collectives.npz: the collectives.csv columns as arrays, what the report's figures read (no CSV parsing)."""

from __future__ import annotations

import csv
import math
import shutil
from pathlib import Path

import numpy as np

from emulator.cli import main
from emulator.report.figures import collective_instances, figures, timeline_trace
from emulator.results import read_results

MAIN = Path(__file__).resolve().parents[1] / "data" / "results_main"


def _csv_columns(path: Path) -> dict[str, list[str]]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {k: [r[k] for r in rows] for k in rows[0]}


def _same(arrays: dict[str, np.ndarray], cols: dict[str, list[str]]) -> None:
    assert set(arrays) == set(cols)
    for k, cells in cols.items():
        a = arrays[k]
        if a.dtype.kind == "f":
            assert all(math.isnan(x) if c == "" else x == float(c) for x, c in zip(a.tolist(), cells, strict=True)), k
        elif a.dtype.kind == "b":
            assert [int(x) for x in a.tolist()] == [int(c) for c in cells], k
        else:
            assert [str(x) for x in a.tolist()] == cells, k


def test_a_directory_written_before_the_arrays_existed_derives_them_on_read() -> None:
    res = read_results(MAIN)
    assert not (MAIN / "collectives.npz").exists()
    _same(res.collective_arrays(), _csv_columns(MAIN / "collectives.csv"))


def test_a_new_run_stores_them_and_the_figures_read_no_csv(tiny_profile, tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert main(["run", str(tiny_profile()), "-o", str(out), "--quiet"]) == 0
    assert (out / "collectives.npz").is_file()
    res = read_results(out)
    _same(res.collective_arrays(), _csv_columns(out / "collectives.csv"))
    for name in ("collectives.csv", "flows.csv"):  # the figures and the timeline never open the CSV files
        (out / name).unlink()
    res = read_results(out)
    inst = collective_instances(res)
    assert inst is not None and inst.cct_ns.shape[0] == sum(c.count for c in res.summary.collectives.values())
    for t, c in res.summary.collectives.items():  # the stored CCTs are the ones the summary was computed from
        cct = inst.cct_ns[inst.types == t]
        assert (cct.shape[0], int(cct.min()), int(cct.max())) == (c.count, c.cct.min, c.cct.max), t
    stems = {stem for stem, _, _ in figures(res)}
    assert {"cct_cdf", "busiest_port", "fct_slowdown"} | {f"stragglers_{t}" for t in res.summary.collectives} <= stems
    assert timeline_trace(res)["traceEvents"]


def test_the_golden_directory_renders_without_its_csv_files(tmp_path: Path) -> None:
    d = tmp_path / "m"
    shutil.copytree(MAIN, d)
    (d / "collectives.csv").unlink()
    (d / "flows.csv").unlink()
    assert main(["report", str(d), "--format", "plots", "-o", str(tmp_path / "plots")]) == 0
    assert len(list((tmp_path / "plots").glob("*.png"))) == 6
