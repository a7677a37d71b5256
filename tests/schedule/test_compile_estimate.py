"""The compile's size before it runs (emulator.schedule.estimate): every algorithm's message and edge counts
against its table, the estimate against real compiles, and a compile or run too large for the memory
available refused with one error line before the walk (the limit is faked: nothing large is built)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import emulator.schedule.estimate as estimate
from emulator.cli import main
from emulator.schedule.algorithms import all_algorithms, get_algorithm
from emulator.schedule.compiler import CompileOptions, _Compiler, compile_trace
from emulator.schedule.estimate import estimate_compile, instance_counts
from emulator.trace.io import read_trace

QUICKSTART = str(Path(__file__).resolve().parents[2] / "profiles" / "quickstart.yaml")
#: the algorithms whose edge count is exact (the others' is an upper bound)
EXACT_EDGES = {"all_reduce/ring", "all_reduce/direct", "reduce_scatter/ring", "reduce_scatter/direct",
               "reduce_scatter_block/ring", "reduce_scatter_block/direct", "all_gather/ring", "all_gather/direct",
               "all_to_all/direct", "all_to_all/pairwise", "broadcast/ring", "reduce/ring", "gather/direct",
               "scatter/direct"}


@pytest.mark.parametrize("alg", all_algorithms(), ids=lambda a: a.label)
def test_instance_counts_are_the_tables(alg) -> None:
    for n in [*range(1, 34), 64, 100]:
        for chunks in (1, 3):
            for window in ((None, 1, 3, 200) if alg.uses_window else (None,)):
                t = alg.table(n, 10_001, root=0, chunks=chunks, window=window)
                got = instance_counts(alg.collective, alg.name, n, chunks if alg.chunkable else 1, window)
                assert got is not None
                assert got[0] == len(t), (n, chunks, window)
                edges = int(t.after_idx.shape[0])
                assert got[1] == edges if alg.label in EXACT_EDGES else got[1] >= edges, (n, chunks, window)


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("est")
    out = {}
    for name, argv in {
        "one": ["collective", "--ranks", "1", "--collective", "all_reduce", "--size", "1MiB"],
        "mixed": ["collective", "--ranks", "6", "--collective", "all_reduce,all_to_all,broadcast,barrier",
                  "--iterations", "3", "--group-size", "3"],
        "dp": ["data-parallel", "--ranks", "8", "--layers", "6"],
        "moe": ["moe", "--ranks", "8"],
        "pipeline": ["pipeline", "--ranks", "4"],
    }.items():
        assert main(["generate", *argv, "-o", str(base / name)]) == 0
        out[name] = base / name
    return out


@pytest.mark.parametrize("name", ["mixed", "dp", "moe", "pipeline"])
@pytest.mark.parametrize("chunks", [1, 2])
def test_the_estimate_counts_the_compiles_flows(traces, name, chunks) -> None:
    trace = read_trace(str(traces[name]))
    options = CompileOptions(chunks=chunks)
    est = estimate_compile(_Compiler(trace, options, get_algorithm))
    s = compile_trace(trace, options)
    assert est.flows == s.n_flows  # exact: collectives by the algorithms' counts, SEND nodes one flow each
    assert est.ops >= s.n_ops
    assert 0 < est.bytes


def test_replicate_counts_one_graph_per_rank(traces) -> None:
    trace = read_trace(str(traces["one"]))
    est = estimate_compile(_Compiler(trace, CompileOptions(replicate=100_000), get_algorithm))
    assert est.flows == 2 * 100_000 * 99_999 and "replicate=100,000" in est.largest


def _limit(monkeypatch, mib: int) -> None:
    monkeypatch.setattr(estimate, "memory_limit", lambda: (mib << 20, "a test's limit"))


def test_a_compile_too_large_is_one_error_line_before_the_walk(traces, tmp_path, capsys, monkeypatch) -> None:
    _limit(monkeypatch, 50)
    monkeypatch.setattr(_Compiler, "walk", lambda *a: pytest.fail("the walk started"))
    out = tmp_path / "x.sched"
    rc = main(["compile", str(traces["one"]), "--replicate", "600", "-o", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    line = err[0]
    assert line.startswith("error: ") and "compiling 718.8 k flows, 1.4 M ops" in line
    assert "all_reduce/ring on 600 ranks" in line and "replicate=600" in line
    assert "52.4 MB are available (a test's limit)" in line
    assert not out.exists()


def test_chunks_are_named_when_they_make_it_large(traces, tmp_path, capsys, monkeypatch) -> None:
    _limit(monkeypatch, 50)
    rc = main(["compile", str(traces["mixed"]), "--chunks", "20000", "-o", str(tmp_path / "x.sched")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "× 20,000 chunks" in err[0], err


def test_a_large_compile_says_so_on_stderr(traces, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(estimate, "NOTICE_FLOWS", 1000)
    assert main(["compile", str(traces["one"]), "--replicate", "40", "-o", str(tmp_path / "x.sched"), "--json"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["flows"] == 2 * 40 * 39  # stdout stays the JSON object alone
    assert cap.err.startswith("compiling 3.1 k flows, ") and cap.err.count("\n") == 1


def test_a_run_too_large_stops_before_its_compile(traces, tmp_path, capsys, monkeypatch) -> None:
    _limit(monkeypatch, 1024)  # the compile (~260 MB) fits, four fluid iterations of it (~4 GB) do not
    monkeypatch.setattr(_Compiler, "walk", lambda *a: pytest.fail("the walk started"))
    rc = main(["run", "--trace", str(traces["one"]), "--replicate", "600", "--fabric", "fluid",
               "-o", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "the run on fluid of 3 iteration(s) + 1 warmup × about 718.8 k flows" in err[0]
    assert "replicate=600" in err[0] and "a test's limit" in err[0]
    assert not (tmp_path / "r" / "results.json").exists()


def test_a_schedule_files_run_too_large_stops_before_its_iterations(traces, tmp_path, capsys, monkeypatch) -> None:
    sched = tmp_path / "s.sched"
    assert main(["compile", str(traces["mixed"]), "-o", str(sched)]) == 0
    capsys.readouterr()
    _limit(monkeypatch, 0)
    import emulator.schedule.compose as compose

    monkeypatch.setattr(compose, "repeat_schedule", lambda *a, **k: pytest.fail("the iterations were built"))
    rc = main(["run", QUICKSTART, "--schedule", str(sched), "--fabric", "sim",
               "-o", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "the run on sim of" in err[0] and "flows needs about" in err[0], err


def test_the_memory_limit_counts_the_address_space_ulimit() -> None:
    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]));"
            "from emulator.schedule.estimate import memory_limit; print(repr(memory_limit()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    room, what = eval(out)  # noqa: S307 (our own repr)
    assert 0 < room < 1 << 30 and what == "ulimit -v 1048576 kB, less what is mapped"


def test_a_group_error_names_the_groups_file(tmp_path, capsys) -> None:
    prefix = tmp_path / "moe"
    assert main(["generate", "moe", "--ranks", "8", "-o", str(prefix)]) == 0
    groups = tmp_path / "g.json"
    groups.write_text('{"1": [0, 1, 2, 3, 4, 5, 6, 7], "2": [4, 5, 6, 7]}')
    capsys.readouterr()
    assert main(["compile", str(prefix), "--groups", str(groups), "-o", str(tmp_path / "x.sched")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert err == [f"error: {prefix}: rank 0 node 21: rank is not a member of process group '2' "
                   f"(its ranks in {groups}: 4-7)"]


def test_generated_ranks_share_one_process_group_text() -> None:
    """The pg_init text lists every group (it grows with the ranks): made once, not once per rank."""
    from emulator.trace.generators import generate
    from emulator.trace.io import encode_rank

    gen = generate("moe", 16, {})
    trace = gen.to_trace()
    texts = {id(g.nodes[-1].inputs.values) for g in trace.ranks.values()}
    assert len(texts) == 1
    values = trace.ranks[0].nodes[-1].inputs.values
    assert (b"".join(encode_rank(gen.nodes(3), metadata=gen.metadata, groups=gen.groups, pg_values=values))
            == b"".join(encode_rank(gen.nodes(3), metadata=gen.metadata, groups=gen.groups)))


def test_a_large_run_says_so_before_its_iterations(traces, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(estimate, "NOTICE_FLOWS", 100)
    sched = tmp_path / "s.sched"
    assert main(["compile", str(traces["mixed"]), "-o", str(sched)]) == 0
    capsys.readouterr()
    assert main(["run", QUICKSTART, "--schedule", str(sched), "--fabric", "fluid",
                 "-o", str(tmp_path / "r"), "--quiet", "--set", "iterations=2", "--set", "warmup=0"]) == 0
    err = capsys.readouterr().err
    assert "building 2 iterations: " in err and " flows (~" in err


def test_a_jobs_repeats_too_large_stop_before_they_are_built(tmp_path, capsys, monkeypatch) -> None:
    """A job's ``iterations`` copies of its workload are checked before :func:`sequence_schedules` builds them."""
    import emulator.run.workload as workload

    prof = tmp_path / "big.yaml"
    prof.write_text(f"extends: {Path(QUICKSTART).parent / 'jobs_dp_alone.yaml'}\n"
                    "workload:\n  jobs:\n    - name: a\n      placement: round_robin\n      iterations: 3000000\n"
                    "      workload:\n        collectives: [{type: all_reduce, group: 0-3, size: 1MiB, algorithm: ring,"
                    " iterations: 4, gap: 20us}]\n")  # fmt: skip
    _limit(monkeypatch, 1024)
    monkeypatch.setattr(workload, "sequence_schedules", lambda *a, **k: pytest.fail("the repeats were built"))
    rc = main(["run", str(prof), "--fabric", "fluid", "-o", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "workload.jobs[0] repeats 96 flows 3,000,000 times = 288.0 M flows" in err[0] and "a test's limit" in err[0]


def _cgroup_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_the_cgroup_limit_is_the_least_room_of_the_process_cgroup_and_its_ancestors(tmp_path) -> None:
    """v2: a limit on a parent (the leaf says ``max``) counts; v1: the ``memory`` controller's line, not the first
    line, and its ``limit_in_bytes``; v1's ~2**63 and v2's ``max`` are no limit."""
    fs = tmp_path / "fs"
    _cgroup_files(fs, {"a/memory.max": str(1 << 30), "a/memory.current": str(900 << 20),
                       "a/b/memory.max": "max", "a/b/memory.current": str(10 << 20)})  # fmt: skip
    (tmp_path / "v2").write_text("0::/a/b\n")
    assert estimate._cgroup_room(tmp_path / "v2", fs) == 124 << 20
    _cgroup_files(fs, {"memory/x/memory.limit_in_bytes": str(2 << 30), "memory/x/memory.usage_in_bytes": str(1 << 30),
                       "memory/memory.limit_in_bytes": "9223372036854771712", "memory/memory.usage_in_bytes": "5"})
    (tmp_path / "v1").write_text("9:name=systemd:/\n4:cpu,memory:/x\n")
    assert estimate._cgroup_room(tmp_path / "v1", fs) == 1 << 30
    (tmp_path / "none").write_text("9:name=systemd:/\n0::/\n")
    assert estimate._cgroup_room(tmp_path / "none", tmp_path / "empty") is None
