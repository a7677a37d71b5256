"""A switch level in one compiled call (emulator/fabric/fluid_level_kernels.py) gives bit for bit what the slice's
calls one by one give at a level of compiled size, on random inputs: the returned arrays and every array written in
place, with and without a port over the buffer (then nothing but the FIFO tails' drain times and the marks' epochs
is written), with and without the marks' epochs (``FluidConfig.mark_epochs``); and a whole leaf–spine run with
marks ends the same with every level fused as with every level one call at a time."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support.sim import collective_schedule

from emulator.drivers import fluid as fluid_driver
from emulator.drivers.fluid import run_fluid
from emulator.drivers.sim_types import SimConfig
from emulator.endpoint import EndpointConfig
from emulator.fabric import fluid
from emulator.fabric import fluid_kernels as K
from emulator.fabric import fluid_step_kernels as SK
from emulator.fabric.fluid_fifo import marked_fraction
from emulator.fabric.fluid_level_kernels import level_step
from emulator.fabric.topology import TopologyConfig
from emulator.pacing.red import RedParams
from emulator.trace.model import CollectiveType

SEEDS = st.integers(0, 2**32 - 1)
EPOCH_KEYS = ("ep", "ep_head", "ep_used", "ep_tot")


def _one_by_one(s: dict, in_order: bool, t_end: float, dt: float, buffer: float, spans: float) -> tuple:
    """The slice's calls at a level of compiled size, one at a time (emulator/fabric/fluid.py's unfused path)."""
    n_ports = s["rate"].size
    content, at = K.level_in(s["backlog"], s["drain"], s["flows"], s["rows"], s["inflow"])
    stop, dl, bpns = np.zeros(0, bool), np.zeros(0), np.zeros(0, np.float32)
    if at.size:
        stop, dl, bpns = SK.fifo_tail(at, s["flows"], s["rows"], s["ph"], s["inflow"], content, s["qp"], in_order,
                                      s["drain"], s["drain_bpns"], s["queue"], s["rate"], t_end, dt)  # fmt: skip
    out, rest, total, queue = K.serve(s["ph"], content, at, stop, dl, bpns, t_end, dt, s["cap"], n_ports)
    fo = np.zeros(0)
    if spans:
        fo = K.fifo_epochs(s["ph"], s["flows"], s["rows"], content, s["inflow"], *(s[k] for k in EPOCH_KEYS),
                           s["q_before"], s["cap"], n_ports, spans)[0]  # fmt: skip
    if in_order:
        out = SK.qp_in_order(s["qp"][s["flows"]], s["flows"], s["ph"], content, out)
        rest, queue = K.remainder(s["ph"], content, out, n_ports)
    over = bool(queue.max(initial=0.0) > buffer)
    if not over:
        if spans:  # the numpy marked fraction after level_out without marks, as fluid.py had it
            K.level_out(s["backlog"], s["flows"], s["rows"], s["ph"], rest, out, s["inflow"], s["unmarked"],
                        np.zeros_like(s["p_mark"]))  # fmt: skip
            s["unmarked"][s["rows"]] *= 1.0 - marked_fraction(s["p_mark"], s["ph"], fo, out)
        else:
            K.level_out(s["backlog"], s["flows"], s["rows"], s["ph"], rest, out, s["inflow"], s["unmarked"],
                        s["p_mark"])  # fmt: skip
        SK.port_account(total, queue, buffer, s["queue"], s["tx"], s["marked"], 4_160.0, s["p_mark"])
    return over, out, rest, total, queue, fo


@settings(max_examples=80, deadline=None)
@given(SEEDS, st.integers(1, 400), st.integers(1, 30), st.integers(1, 12), st.booleans(), st.booleans(),
       st.sampled_from([0.0, 2.0, 2.5, 3.0]))  # fmt: skip
def test_level_step_is_the_calls_one_by_one(seed: int, n: int, n_qp: int, n_ports: int, in_order: bool,
                                            small_buffer: bool, spans: float) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    n_flows, n_slice = 2 * n + 5, n + 3
    k_slots = int(np.ceil(spans + 1)) if spans else 1
    s = {"rows": np.sort(rng.choice(n_slice, n, replace=False)).astype(np.int64),
         "flows": np.sort(rng.choice(n_flows, n, replace=False)).astype(np.int64),
         "ph": rng.integers(0, n_ports, n).astype(np.int64), "qp": rng.integers(0, n_qp, n_flows).astype(np.int64),
         "backlog": np.where(rng.random(n_flows) < 0.4, 0.0, rng.random(n_flows) * 1e5),
         "drain": np.where(rng.random(n_flows) < 0.6, np.inf, rng.random(n_flows) * 1e6),
         "drain_bpns": (rng.random(n_flows) * 50).astype(np.float32),
         "inflow": np.where(rng.random(n_slice) < 0.4, 0.0, rng.random(n_slice) * 1e4),
         "queue": np.where(rng.random(n_ports) < 0.3, 0.0, rng.random(n_ports) * 1e6),
         "rate": rng.choice([25e9, 100e9, 400e9], n_ports), "unmarked": rng.random(n_slice),
         "tx": rng.random(n_ports) * 1e9, "marked": rng.random(n_ports) * 1e3,
         "p_mark": np.where(rng.random(n_ports) < 0.2, 1.0, rng.random(n_ports) * 0.2),
         # the marks' epochs: a flow's weights in a port's slots in use, the ports' rings (head, slots, bytes)
         "ep": np.where(rng.random((n_flows, k_slots)) < 0.3, 0.0, rng.random((n_flows, k_slots)) * 3e4).astype(np.float32),
         "ep_head": rng.integers(0, k_slots, n_ports).astype(np.int64),
         "ep_used": rng.integers(1, k_slots + 1, n_ports).astype(np.int64),
         "ep_tot": rng.random((n_ports, k_slots)) * 1e5}  # fmt: skip
    s["q_before"] = s["queue"].copy()
    t_end, dt = 5e6 + float(rng.random()) * 1e4, float(rng.choice([1.0, 1000.0, 1e5]))
    s["cap"] = np.where(rng.random(n_ports) < 0.1, 0.0, s["rate"] * dt * 1e-9 / 8)
    buffer = 1e3 if small_buffer else 1e12
    want_s = {k: v.copy() for k, v in s.items()}
    want = _one_by_one(want_s, in_order, t_end, dt, buffer, spans)
    got = level_step(s["backlog"], s["drain"], s["drain_bpns"], s["flows"], s["rows"], s["ph"], in_order, s["inflow"],
                     s["qp"], s["queue"], s["rate"], t_end, dt, s["cap"], buffer, s["tx"], s["marked"], 4_160.0,
                     s["p_mark"], s["unmarked"], *(s[k] for k in EPOCH_KEYS), s["q_before"], spans)  # fmt: skip
    assert bool(got[0]) == want[0]
    for x, y in zip(got[1:], want[1:], strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    for k in s:
        assert s[k].dtype == want_s[k].dtype and np.array_equal(s[k], want_s[k]), k


@settings(max_examples=60, deadline=None)
@given(SEEDS, st.integers(1, 300), st.floats(0.0, 1.0))
def test_level_out_marks_is_the_numpy_marked_fraction(seed: int, n: int, idle: float) -> None:
    """level_out_marks: level_out without marks, then ``unmarked[rows] *= 1 − marked_fraction(...)``, bit for bit:
    rows served nothing (the port's p), a FIFO share above what is served (capped at 1), ports marking all."""
    rng = np.random.default_rng(seed)
    n_ports, n_flows = 7, 2 * n
    rows = np.sort(rng.choice(n + 4, n, replace=False)).astype(np.int64)
    flows = np.sort(rng.choice(n_flows, n, replace=False)).astype(np.int64)
    ph = rng.integers(0, n_ports, n).astype(np.int64)
    rest, out = rng.random(n) * 1e4, np.where(rng.random(n) < idle, 0.0, rng.random(n) * 1e4)
    fo = np.where(rng.random(n) < 0.2, 0.0, out * rng.random(n) * 3)
    p_mark = np.where(rng.random(n_ports) < 0.2, 1.0, rng.random(n_ports) * 0.3)
    got = [rng.random(n_flows), rng.random(n + 4), rng.random(n + 4)]  # backlog, inflow, unmarked
    want = [x.copy() for x in got]
    K.level_out_marks(got[0], flows, rows, ph, rest, out, got[1], got[2], p_mark, fo)
    K.level_out(want[0], flows, rows, ph, rest, out, want[1], want[2], np.zeros(n_ports))
    want[2][rows] *= 1.0 - marked_fraction(p_mark, ph, fo, out)
    for x, y in zip(got, want, strict=True):
        assert x.tobytes() == y.tobytes()


def _leaf_spine_run(compiled_from: int, monkeypatch) -> tuple:
    """A 32-rank All-to-All (4 MiB per rank) on a 2 × 2 leaf–spine at 400 Gb/s, RED marking from 5 kB (~300 marks,
    ~470 CNPs; the default ``mark_epochs``): per rank the records' columns and counters, the ports' counters, the
    run's slices and end, and the fabric's expected CE-marked packets per flow and DCQCN rates per queue pair."""
    monkeypatch.setattr(fluid, "COMPILED_FROM", compiled_from)
    fabs = []
    model = fluid_driver.fluid_model
    monkeypatch.setattr(fluid_driver, "fluid_model", lambda *a, **kw: fabs.append(model(*a, **kw)) or fabs[-1])
    s = collective_schedule(32, CollectiveType.ALL_TO_ALL, 4 << 20, iterations=1)
    topo = TopologyConfig(kind="leaf_spine", leaves=2, spines=2, hosts_per_leaf=16)
    scfg = SimConfig(topology=topo, port_rate_bps=400e9, buffer_bytes=1 << 20, latency_ns=1000,
                     red=RedParams(kmin_bytes=5_000, kmax_bytes=50_000, pmax=0.2))
    res = run_fluid(s, scfg, EndpointConfig(mtu_bytes=4096, cc="connectx", line_rate_bps=400e9), seed=1)
    recs = {r: ({k: v.tobytes() for k, v in rec.to_arrays().items()}, sorted(rec.counters.items()))
            for r, rec in res.records.items()}  # fmt: skip
    fab = fabs[-1]
    return (recs, [p.to_dict() for p in res.fabric.ports], res.health["steps"], res.health["end_ns"],
            fab.flow_ce.tobytes(), fab.cc.rc.tobytes())


def test_a_leaf_spine_run_with_marks_ends_the_same_with_every_level_fused(monkeypatch) -> None:
    """Every switch level in one compiled call (``COMPILED_FROM`` lowered to 0: the marks' epochs inside
    level_step) against every level one call at a time (``COMPILED_FROM`` above the run's flows: level_in, serve,
    fifo_epochs, level_out_marks): the same records, port counters, slices, end, marks per flow and rates, bit for
    bit, with marks. (The records alone may not tell wrong marks: CNPs are drawn per whole packet.)"""
    fused = _leaf_spine_run(0, monkeypatch)
    assert sum(p["marked_packets"] for p in fused[1]) > 0 and fused[2] > 0
    assert fused == _leaf_spine_run(10**9, monkeypatch)
