"""The fluid's congested slice on slow ports: as many bytes of the slowest port per slice as ``step_ns`` carries
at 25 Gb/s, so a 200 Mb/s profile costs what a 25 Gb/s one does (1 µs slices made incast_7to1 time out)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.cli import main
from emulator.drivers.fluid import STEP_RATE_BPS, port_step
from emulator.fabric.fluid import FluidConfig

PROFILES = Path(__file__).parents[2] / "profiles"


def test_25g_and_faster_ports_keep_the_configured_step():
    cfg = FluidConfig()
    assert port_step(cfg, [25e9, 400e9]) is cfg
    assert port_step(cfg, []) is cfg


@pytest.mark.parametrize(("rates", "step_ns"), [([200e6] * 3, 125_000), ([100e9, 10e9], 2_500), ([1e9], 25_000)])
def test_slower_ports_lengthen_the_step_by_the_slowest(rates, step_ns):
    assert port_step(FluidConfig(), rates).step_ns == step_ns
    assert port_step(FluidConfig(step_ns=500), rates).step_ns == step_ns // 2
    assert STEP_RATE_BPS == 25e9


def _run(tmp_path: Path, fabric: str) -> dict:
    out = tmp_path / fabric
    rc = main(["run", str(PROFILES / "incast_7to1.yaml"), "--fabric", fabric, "-o", str(out), "--quiet",
               "--set", "warmup=0", "--set", "iterations=1", "--set", "timeout=30s"])  # fmt: skip
    assert rc == 0, f"{fabric} run of incast_7to1 exited {rc}"
    return json.loads((out / "results.json").read_text())


def test_the_shipped_200mbps_incast_runs_on_the_fluid_in_few_slices(tmp_path):
    fluid = _run(tmp_path, "fluid")
    assert fluid["complete"]
    steps = fluid["driver"]["health"]["steps"]
    assert 100 < steps < 20_000  # 1 µs slices: ~125× as many (and a 30 s wall limit the run does not meet)
    sim = _run(tmp_path, "sim")
    ratio = fluid["summary"]["gather"]["cct"]["p50"] / sim["summary"]["gather"]["cct"]["p50"]
    assert 0.75 < ratio < 1.33, ratio  # a lossy incast (RTO 60 ms): seeds of the packet sim alone move it ±10 %
