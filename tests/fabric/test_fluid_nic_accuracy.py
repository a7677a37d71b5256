"""study_a2a_alone's marks on the fluid fabric (emulator.fabric.fluid_nic): eight ranks on the study's 2:1
leaf–spine each send 32 KiB to every peer, instance after instance, the next 150 µs after a rank's own last
flow; the packet sim's figures are measured (seed 7, bench/RESULTS.md, fluidacc6)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.endpoint import make_schedule, recv, send

from emulator.cli import main
from emulator.drivers.fluid import run_fluid
from emulator.drivers.sim import run_sim
from emulator.drivers.sim_types import SimConfig
from emulator.endpoint import EndpointConfig
from emulator.fabric.fluid_calm import Calm
from emulator.fabric.fluid_nic import NicBatch, last_round

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
    The NIC's round robin (``FluidConfig.nic_round_robin``, the default since fluidacc7; emulator.fabric.fluid_nic:
    its own batch in posting order, max-min fair shares, the last round in order): 0, 7, 10, 17, 19 µs at
    instances 0-4 (fluidacc6: the same without max-min shares)."""
    skew_us = np.ptp(_starts(fluid_run), axis=1) / 1e3
    assert skew_us[0] == 0
    assert 10 <= skew_us[-1] <= 30


PKT = 4096.0 + 66


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.floats(0.0, 25e9), st.floats(0.0, 3 * PKT), st.floats(1e9, 25e9)),
                min_size=1, max_size=12), st.lists(st.booleans(), min_size=3, max_size=3))  # fmt: skip
def test_the_last_round_takes_a_nics_pool_in_row_order(rows, sat) -> None:
    """Rows in their last packet at a saturated NIC share out what they had, in row order: none gets more
    than its pacer's rate or what ends it in the slice, a row gets less than that only if every later one of
    its NIC gets nothing, the NIC's total never grows, and every other row keeps its rate."""
    host = np.array([r[0] for r in rows])
    x, left, want = (np.array([r[k] for r in rows]) for k in (1, 2, 3))
    x = np.minimum(x, want)
    saturated = np.array(sat)
    dt_ns = 1_000.0
    out = last_round(x, want, saturated, left, host, PKT, dt_ns)
    last = (left > 0) & (left <= PKT) & saturated[host]
    if last.sum() < 2:
        assert np.array_equal(out, x)
        return
    assert np.array_equal(out[~last], x[~last])
    need = np.minimum(want, left / (dt_ns * 1e-9 / 8))
    assert (out >= 0).all() and (out[last] <= need[last] * (1 + 1e-9)).all()
    for h in np.unique(host[last]):
        mine = np.flatnonzero(last & (host == h))
        assert out[mine].sum() <= x[mine].sum() * (1 + 1e-9) + 1e-6
        short = np.flatnonzero(out[mine] < need[mine] * (1 - 1e-9))
        if short.size:
            assert (out[mine[short[0] + 1:]] <= 1e-6).all()


def test_the_nics_batch_goes_to_the_flows_in_posting_order_and_refills_at_line_rate() -> None:
    """An idle NIC's bucket (one batch) goes to the flows started at it in posting order, each at most its
    credit; it is charged by what the NIC sends other than heads and refills at the line rate, up to a batch
    (the flows' pacers let nothing go beyond their heads: nothing is taken ahead of the wire)."""
    nic = NicBatch(2, 5, 10_000.0, np.array([25e9, 25e9]))
    tx = np.zeros(2)
    nic.give(np.array([0, 1, 2]), np.array([0, 0, 0]), np.array([6_000.0, 6_000.0, 6_000.0]), np.zeros(3), tx)
    assert nic.head[:3].tolist() == [6_000.0, 4_000.0, 0.0]
    x = nic.first(np.full(3, 25e9 / 3), np.full(3, 25e9), np.full(3, 6_000.0), np.arange(3), np.zeros(3, np.int64),
                  np.array([25e9, 25e9]), np.zeros(2, bool), 1_000.0)  # fmt: skip
    assert x.tolist() == [25e9, 0.0, 0.0]  # the first head takes the line rate (3,125 B a µs), the rest wait
    nic.sent(np.arange(3), np.zeros(3, np.int64), np.array([6_000.0, 4_000.0, 2_000.0]), np.full(3, 6_000.0),
             np.array([6_000.0, 4_000.0, 0.0]), np.zeros(3), 1_000.0)  # fmt: skip
    tx[0] = 12_000.0
    assert nic.head[:3].tolist() == [0.0, 0.0, 0.0]
    nic.give(np.array([3]), np.array([0]), np.array([5_000.0]), np.array([1_000.0]), tx)
    assert nic.head[3] == pytest.approx(25e9 / 8e9 * 1_000 - 2_000)  # refilled 3,125, charged 2,000 other bytes
    nic.give(np.array([4]), np.array([0]), np.array([50_000.0]), np.array([1e6]), tx)
    assert nic.head[4] == pytest.approx(10_000.0)  # idle long enough: a full batch


def test_a_nic_sending_heads_takes_what_the_pacers_let_go_behind_them() -> None:
    """While a NIC sends a head at line rate, it takes behind it, as fast as its bucket refills, what the other
    queue pairs' pacers let go (a pacer's credit at once): its bucket stays empty and a flow started meanwhile
    gets no head; the bytes taken ahead leave when the heads are out, and are not charged again."""
    nic = NicBatch(1, 4, 10_000.0, np.array([25e9]))
    tx, two, rc = np.zeros(1), np.zeros(2, np.int64), np.zeros(2)
    nic.give(np.array([0, 1]), two, np.array([10_000.0, 10_000.0]), np.zeros(2), tx)
    assert nic.head[:2].tolist() == [10_000.0, 0.0]
    nic.sent(np.arange(2), two, np.array([3_125.0, 0.0]), np.full(2, 50_000.0), np.full(2, 10_000.0), rc, 1_000.0)
    assert nic.took[:2].tolist() == [0.0, 3_125.0]  # flow 1's credit, at most the head bytes the NIC sent
    tx[0] = 3_125.0
    nic.give(np.array([2]), np.array([0]), np.array([10_000.0]), np.array([1_000.0]), tx)
    assert nic.head[2] == 0.0  # refilled 3,125 B, charged the 3,125 B taken ahead
    nic.sent(np.arange(2), two, np.array([6_875.0, 0.0]), np.array([46_875.0, 50_000.0]), np.array([6_875.0, 1e4]),
             rc, 2_200.0)  # fmt: skip
    assert nic.took[1] == 10_000.0 and nic.ahead[0] == 10_000.0 and nic.pending == 0.0  # all of flow 1's credit
    nic.sent_ahead(np.arange(2), two, np.array([0.0, 10_000.0]))  # no head pending
    assert nic.took[1] == 0.0 and nic.ahead[0] == 0.0 and nic.ahead_total == 0.0  # sent: no longer ahead


def test_a_flow_started_while_the_nics_batch_drains_waits_its_turn(monkeypatch):
    """Rank 0 posts 64 KiB to rank 1 and 1 MB to rank 2 at 0, 256 KiB to rank 3 at 10 µs. In the packet sim
    the first flow's batch leaves at line rate while the round robin takes the 1 MB flow's packets (its NIC's
    bucket stays empty), and the third flow joins the round robin: it is not handed a batch that goes before
    them. Stepped (the calm regime drops the batches), each flow ends within 5 % of the packet sim's time."""
    flows = [(0, 1, 65_536, 0), (0, 2, 1_000_000, 1), (0, 3, 262_144, 2)]
    ops = {0: [send(0), send(1), send(2, nb=10_000)], 1: [recv(0)], 2: [recv(1)], 3: [recv(2)]}
    s = make_schedule(4, flows, ops)
    cfg, ecfg = SimConfig(), EndpointConfig(cc="connectx")
    packet = run_sim(s, cfg, ecfg, seed=1)
    monkeypatch.setattr(Calm, "try_enter", lambda *a, **k: False)
    fluid = run_fluid(s, cfg, ecfg, seed=1)
    for r in (1, 2, 3):
        assert float(fluid.records[r].end_ns[0]) == pytest.approx(float(packet.records[r].end_ns[0]), rel=0.05)


@pytest.mark.parametrize("cnps", [1, 4])
def test_a_queue_pair_cut_by_dcqcn_keeps_its_turn_at_the_nic(cnps: int) -> None:
    """The packet sim's case of tests/endpoint/test_sender_round_robin.py (bench/RESULTS.md, rr12): eight
    backlogged queue pairs on one 200 Mbit/s NIC, DCQCN with T = K = 1 ms and R_AI 1 Mbit/s, CNPs to queue
    pair 3 at 5 ms. The NIC's round robin keeps the cut queue pair's turn: every slice it gets what its
    rate allows up to the others' share (one CNP: a cut to 100 Mbit/s, still above the equal 25 — it sends
    as much as each other queue pair; four: below it, the others share the rest), never less."""
    from emulator.fabric.fluid_cc import FluidDcqcn
    from emulator.fabric.fluid_nic import max_min_share
    from emulator.pacing.params import DcqcnPaperParams

    line, n, dt_ns = 200e6, 8, 100_000.0
    params = DcqcnPaperParams(alpha_timer_us=1000.0, rate_increase_timer_us=1000.0, rate_ai_mbps=1.0,
                              min_rate_mbps=1.0)  # fmt: skip
    cc = FluidDcqcn(n, line, params)
    idx, host, nic = np.arange(n), np.zeros(n, np.int64), np.array([line])
    sent = np.zeros(n)
    t = 0.0
    while t < 60e6:
        if t == 5e6:
            for k in range(cnps):
                cc.on_cnp(np.array([3]), t + 1000.0 * k)
        x = max_min_share(cc.rc.copy(), host, nic, np.zeros(1, bool))[0]
        others = np.delete(x, 3)
        assert np.allclose(others, others[0]) and x.sum() == pytest.approx(line)
        assert x[3] == pytest.approx(min(cc.rc[3], others[0]))  # its turn, as far as its rate goes
        if t >= 5e6:
            sent += x * dt_ns / 8e9
        t += dt_ns
        cc.advance(idx, x * dt_ns / 8e9, t)
    per_other = np.delete(sent, 3).mean()
    if cnps == 1:  # the packet sim after rr12: 41 packets of 4 KiB in 5–60 ms, the others 41.3 on average
        assert sent[3] == pytest.approx(per_other)
    else:
        assert 0.25 * per_other < sent[3] < per_other
