"""A ring All-Reduce next to an All-to-All on the same 8 ranks, loopback against the sim on the same schedule:
each rank shares its NIC between the two collectives' queue pairs as the sim's endpoint does (an idle NIC
hands one queue pair a full batch; then one packet per line-rate gap, round-robin), so the ring's steps end
when the sim's do (loose bounds: a loaded CI machine still passes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from support.profile_run import run_summary

from emulator.schedule.io import load_schedule
from emulator.schedule.model import OP_RECV

REPO = Path(__file__).resolve().parents[2]
PROFILE = f"""\
extends: {REPO / "profiles" / "base" / "loopback_8.yaml"}
description: ring All-Reduce and All-to-All at once, 8 ranks
timeout: 10s
warmup: 0
iterations: 1
fabric:
  time_dilation: 20
workload:
  collectives:
    - type: all_reduce
      group: 0-7
      size: 512KiB
      algorithm: ring
      iterations: 1
    - type: all_to_all
      group: 0-7
      size: 512KiB
      algorithm: direct
      iterations: 1
      start_offset: 200us
"""


def _first_ring_receive_ns(out: Path) -> list[int]:
    """Per rank, when its first receive of the ring (its first RECV op) completed."""
    s = load_schedule(out / "schedule.bin")
    rec = np.load(out / "records.npz")
    ends = []
    for r in range(s.world_size):
        lo, hi = int(s.rank_op_ptr[r]), int(s.rank_op_ptr[r + 1])
        first = int(np.flatnonzero(s.op_kind[lo:hi] == OP_RECV)[0])
        ends.append(int(rec[f"rank{r}.end_ns"][first]))
    return ends


def test_the_ring_steps_next_to_an_alltoall_end_when_the_sims_do(tmp_path):
    (sim, sim_out), (lb, lb_out) = run_summary(tmp_path, PROFILE, "sim"), run_summary(tmp_path, PROFILE, "loopback")
    assert lb["totals"]["bytes_delivered"] == sim["totals"]["bytes_delivered"] == lb["totals"]["bytes_scheduled"]
    # one packet per visit from the start gave the ring 1/8 of the NIC instead of the sim's head start
    # (a full batch from the idle NIC): its first step ended 23 % later than the sim's
    for a, b in zip(_first_ring_receive_ns(sim_out), _first_ring_receive_ns(lb_out), strict=True):
        assert 0.9 <= b / a <= 1.15, (a, b)
    for c in ("all_reduce", "all_to_all"):
        ratio = lb[c]["cct"]["p50"] / sim[c]["cct"]["p50"]
        assert 0.85 <= ratio <= 1.2, (c, ratio)
