"""study_a2a_alone's marks on the fluid fabric (emulator.fabric.fluid_nic): eight ranks on the study's 2:1
leaf–spine each send 32 KiB to every peer, instance after instance, the next 150 µs after a rank's own last
flow; the packet sim's figures are measured (seed 7, bench/RESULTS.md, fluidacc6)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from emulator.cli import main

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = """
workload:
  collectives:
    - name: alltoall
      type: all_to_all
      group: 0-7
      size: 256KiB
      algorithm: direct
      iterations: 8
      start_offset: 50us
      gap: 150us
"""


@pytest.fixture(scope="module")
def fluid_run(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("a2a")
    text = (ROOT / "profiles/base/study_fabric.yaml").read_text()
    profile = d / "a2a.yaml"
    profile.write_text(text.replace("formats: [text, json, csv, plots]", "formats: [json, csv]") + WORKLOAD)
    out = d / "out"
    assert main(["run", str(profile), "--fabric", "fluid", "--set", "warmup=0", "--set", "iterations=1",
                 "-o", str(out), "--quiet"]) == 0  # fmt: skip
    return out


def _starts(d: Path) -> np.ndarray:
    """Per instance (rows) and rank (columns), when the rank started its flows of the instance."""
    with open(d / "flows.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    per = [sorted({int(r["scheduled_start_ns"]) for r in rows if r["src"] == str(k)}) for k in range(8)]
    return np.array(per).T


def test_the_ranks_fall_out_of_step_as_on_the_packet_sim(fluid_run) -> None:
    """On the packet sim a rank's flows that share its NIC end one packet time apart in the order its queue
    pairs were posted (the NIC's round robin; the first batch of bytes leaves in that order before it), so
    the ranks' ends differ by where their slowest flows (the ones behind the congested uplink) sit in that
    order; the next instance starts 150 µs after each rank's own end, and from the third instance on the
    ranks start 17-18 µs apart (0, 8, 16, 17 µs at instances 0-3). Out of step, the ranks' cross-leaf bursts
    overlap less: the busiest uplink's queue peaks at 54-62 kB after the first instance (96 kB in it), and
    11 packets of 21,504 are marked. Processor sharing at the NIC (4112d2f) ended all of a rank's flows
    together and every rank of a leaf alike: 4 µs apart forever, 91-99 kB at every instance, 5.8× the marks.
    The NIC's own batch in posting order and its last round in order (emulator.fabric.fluid_nic): 0, 7, 10,
    17, 19 µs at instances 0-4."""
    skew_us = np.ptp(_starts(fluid_run), axis=1) / 1e3
    assert skew_us[0] == 0
    assert 10 <= skew_us[-1] <= 30
