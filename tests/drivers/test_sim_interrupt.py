"""Ctrl-C during a sim run: the driver stops as "interrupted" and returns what was measured."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from support.sim import collective_schedule

from emulator.cli import main
from emulator.drivers.sim import SimConfig, run_sim
from emulator.endpoint import EndpointConfig, RankEndpoint
from emulator.results import read_results
from emulator.trace.model import CollectiveType


def _interrupt_at(monkeypatch, method: str, n: int) -> list[int]:
    """Make the ``n``-th call of ``RankEndpoint.<method>`` (over all ranks) raise KeyboardInterrupt."""
    calls = [0]
    orig = getattr(RankEndpoint, method)

    def patched(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == n:
            raise KeyboardInterrupt
        return orig(self, *args, **kwargs)

    monkeypatch.setattr(RankEndpoint, method, patched)
    return calls


@pytest.mark.parametrize(("method", "n"), [("receive", 400), ("visit_one", 50), ("start", 3)])
def test_interrupted_run_returns_partial_records(monkeypatch, method, n):
    s = collective_schedule(4, CollectiveType.ALL_REDUCE, 1 << 20, "ring")
    calls = _interrupt_at(monkeypatch, method, n)
    res = run_sim(s, SimConfig(), EndpointConfig(cc="paper"), seed=1)
    assert calls[0] == n  # nothing ran after the interrupt
    assert res.health["stop_reason"] == "interrupted" and res.interrupted and not res.complete
    assert set(res.records) == set(range(4)) and res.incomplete_ranks()
    assert len(res.fabric.ports) > 0 and res.health["wall_s"] >= 0
    done = sum(int((r.end_ns >= 0).sum()) for r in res.records.values())
    total = sum(r.n_ops for r in res.records.values())
    assert done < total
    if method != "start":  # the run was under way: something was measured, up to the interrupt's time
        assert sum(r.counters["bytes_received"] for r in res.records.values()) > 0
        assert 0 < res.health["end_ns"] and all(int(r.end_ns.max()) <= res.health["end_ns"] for r in res.records.values())


def test_emulator_run_writes_partial_results_when_the_sim_is_interrupted(monkeypatch, tmp_path):
    profile = {
        "name": "interrupted", "seed": 3, "fabric": {"kind": "sim", "ports": {"rate": "25Gbps", "latency": "1us"}},
        "ranks": {"count": 4}, "warmup": 0, "iterations": 2,
        "workload": {"collectives": [{"name": "ar", "type": "all_reduce", "group": "0-3", "size": "256KiB",
                                      "algorithm": "ring", "iterations": 2}]},
    }  # fmt: skip
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    _interrupt_at(monkeypatch, "receive", 300)
    out = tmp_path / "r"
    assert main(["run", str(path), "-o", str(out), "--quiet"]) == 130
    res = read_results(out)
    assert res.doc["interrupted"] is True and res.doc["complete"] is False
    recs = res.records()
    assert set(recs) == set(range(4))
    ends = np.concatenate([r.end_ns for r in recs.values()])
    assert (ends >= 0).any() and (ends < 0).any()


def test_events_of_the_interrupted_step_reach_the_records(monkeypatch):
    """Ctrl-C between an endpoint's step and the driver feeding its events: those events are recorded too."""
    from emulator.drivers import sim

    s = collective_schedule(4, CollectiveType.ALL_REDUCE, 1 << 18, "ring")
    orig = sim._Sim.served  # every step's transmits and events reach the driver here (after the endpoint's call)
    seen = [0, 0]

    def served(self, r, t, txs, top=False):
        done = sum(ep.ops_completed for ep in self.eps)
        if done > seen[0] and t > 0:  # this step completed an op: stop before the driver records it
            seen[1] = done
            raise KeyboardInterrupt
        seen[0] = done
        return orig(self, r, t, txs, top)

    monkeypatch.setattr(sim._Sim, "served", served)
    res = run_sim(s, SimConfig(), EndpointConfig(cc="paper"), seed=1)
    assert res.interrupted and seen[1] > 0
    assert sum(int((r.end_ns >= 0).sum()) for r in res.records.values()) == seen[1]
