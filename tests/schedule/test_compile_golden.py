"""Golden checks: the bundled sample traces, generated traces against stored summaries, the CLI.

Regenerate the stored summaries (after an intended change of algorithms or file format) with
``EMULATOR_UPDATE_GOLDEN=1 python -m pytest tests/schedule/test_compile_golden.py``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from emulator.cli import main
from emulator.schedule.algorithms import get_algorithm
from emulator.schedule.compiler import CompileOptions, compile_trace
from emulator.schedule.io import load_schedule
from emulator.schedule.model import OP_DELAY, OP_RECV, OP_SEND
from emulator.schedule.summary import render_summary, summarize
from emulator.trace.generators.collective import CollectiveOptions, collective_trace
from emulator.trace.generators.data_parallel import DataParallelOptions, data_parallel_trace
from emulator.trace.model import CollectiveType, RankGraph, Trace

AR = CollectiveType.ALL_REDUCE
TRACES = Path(os.environ.get("EMULATOR_SAMPLE_TRACES", Path(__file__).resolve().parents[3] / "shared" / "traces"))
MICRO_AR8 = TRACES / "astra-sim/examples/workload/microbenchmarks/all_reduce/8npus_1MB/all_reduce"
CUSTOM_RING = TRACES / "astra-sim/examples/system/custom_collectives/custom_ring_allreduce_8npus_1MB/custom_allreduce"
PYTORCH = TRACES / "chakra/tests/data/chakra.0.et"
GOLDEN = Path(__file__).parent / "golden"

needs_samples = pytest.mark.skipif(not TRACES.is_dir(), reason=f"sample traces not found at {TRACES}")


def _read(path):
    from emulator.trace.io import read_trace

    return read_trace(str(path))


def sends_per_rank(s) -> dict[int, Counter]:
    """rank → Counter of (peer, size) over its SEND ops."""
    out: dict[int, Counter] = {}
    for r in range(s.world_size):
        ops = [i for i in s.rank_ops(r) if s.op_kind[i] == OP_SEND]
        flows = s.op_flow[ops]
        out[r] = Counter(zip(s.flow_dst[flows].tolist(), s.flow_size_bytes[flows].tolist(), strict=True))
    return out


@needs_samples
def test_ring_all_reduce_matches_the_hand_lowered_custom_ring():
    compiled = compile_trace(_read(MICRO_AR8), CompileOptions(algorithms={AR: "ring"}))
    custom = compile_trace(_read(CUSTOM_RING))
    expected = {r: Counter({((r + 1) % 8, 131072): 14}) for r in range(8)}
    assert sends_per_rank(compiled) == expected
    assert sends_per_rank(custom) == expected
    assert compiled.n_colls == 1 and compiled.coll_ranks(0).tolist() == list(range(8))


@needs_samples
def test_custom_ring_compiles_as_paired_point_to_point_chain():
    s = compile_trace(_read(CUSTOM_RING))
    assert s.world_size == 8 and s.n_flows == 112 and s.n_colls == 0
    assert (s.flow_coll == -1).all() and (s.flow_size_bytes == 131072).all()
    assert ((s.flow_dst - s.flow_src) % 8 == 1).all()
    for r in range(8):
        ops = list(s.rank_ops(r))
        kinds = Counter(s.op_kind[ops].tolist())
        assert kinds == {OP_SEND: 14, OP_RECV: 14, OP_DELAY: 7}
        assert int(s.op_duration_ns[ops].sum()) == 7 * 7000
        # strictly sequential: every op but the first depends on exactly the previous one
        assert [s.parents(i).tolist() for i in ops[1:]] == [[i] for i in ops[:-1]]
    # k-th SEND r→r+1 pairs with the k-th RECV on r+1: both ops carry the same node order
    for f in range(s.n_flows):
        ops = np.flatnonzero(s.op_flow == f)
        assert sorted(s.op_kind[ops].tolist()) == [OP_SEND, OP_RECV]


@needs_samples
def test_pytorch_rank0_trace_replicated_to_eight_ranks():
    t = _read(PYTORCH)
    # rank 0 alone: every collective is a group of one, hence no traffic; replicate is what gives traffic
    alone = compile_trace(t)
    assert alone.world_size == 1 and alone.n_colls == 7 and alone.n_flows == 0
    s = compile_trace(t, CompileOptions(replicate=8))
    assert s.world_size == 8 and s.n_colls == 7
    bc, ar = CollectiveType.BROADCAST, AR
    assert s.coll_type.tolist() == [bc, bc, ar, ar, ar, ar, ar]
    sizes = [212480, 424, 8196000, 31502336, 26255360, 26550272, 9724160]
    assert s.coll_size_bytes.tolist() == sizes
    nodes = [sorted(set(s.op_node[s.op_flow >= 0][s.flow_coll[s.op_flow[s.op_flow >= 0]] == i].tolist())) for i in range(7)]
    assert nodes == [[435], [622], [3256], [3512], [3686], [4486], [5700]]
    total = sum(
        get_algorithm(CollectiveType(int(c)), None).expected_bytes_sent(8, int(z), p)
        for c, z in zip(s.coll_type, s.coll_size_bytes, strict=True)
        for p in range(8)
    )
    assert int(s.flow_size_bytes.sum()) == total
    # CPU-side wrappers produce no ops of their own; every compute node becomes a delay on every rank
    n_comp = sum(1 for n in t.ranks[0].nodes if n.type == 4)
    for r in range(8):
        ops = list(s.rank_ops(r))
        assert int(((s.op_kind[ops] == OP_DELAY) & (s.op_node[ops] >= 0)).sum()) == n_comp


def _generated(kind: str) -> Trace:
    if kind == "dp4":
        gen = data_parallel_trace(
            DataParallelOptions(ranks=4, layers=4, params_per_layer_bytes=(1 << 20,), bucket_bytes=2 << 20, iterations=2)
        )
    else:
        gen = collective_trace(
            CollectiveOptions(
                ranks=6,
                collectives=(AR, CollectiveType.ALL_GATHER, CollectiveType.ALL_TO_ALL, CollectiveType.BROADCAST),
                size_bytes=30000,
                gap_us=5,
                root=1,
                group_size=3,
            )
        )
    return Trace(ranks={r: RankGraph(r, list(gen.nodes(r))) for r in range(gen.world_size)}, groups=dict(gen.groups))


@pytest.mark.parametrize(
    "kind, options",
    [("dp4", CompileOptions()), ("groups6", CompileOptions(chunks=2, algorithms={AR: "halving_doubling"}))],
)
def test_generated_trace_summary_matches_golden(kind, options):
    s = compile_trace(_generated(kind), options)
    summary = summarize(s)
    path = GOLDEN / f"{kind}_summary.json"
    if os.environ.get("EMULATOR_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(summary, indent=1) + "\n")
    assert summary == json.loads(path.read_text())
    assert "collectives:" in render_summary(summary, s)


@needs_samples
def test_cli_compile_json_and_reload(tmp_path, capsys):
    out = tmp_path / "ar8.sched"
    assert main(["compile", str(MICRO_AR8), "-o", str(out), "--algo", "all_reduce=ring", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary) == {"ranks", "flows", "bytes", "per_rank", "collectives", "hash"}
    assert summary["ranks"] == 8 and summary["flows"] == 112 and summary["bytes"] == 8 * 1835008
    assert summary["per_rank"][3] == {"rank": 3, "flows": 14, "bytes_sent": 1835008, "bytes_received": 1835008}
    assert summary["collectives"] == [{"type": "all_reduce", "count": 1, "algorithm": "ring"}]
    assert summarize(load_schedule(out))["hash"] == summary["hash"]
    again = tmp_path / "again.sched"
    assert main(["compile", str(MICRO_AR8), "-o", str(again), "--algo", "all_reduce=ring", "--summary"]) == 0
    assert "all_reduce" in capsys.readouterr().out
    assert again.read_bytes() == out.read_bytes()
