"""`emulator compile` end to end on traces written by `emulator generate`: every registered algorithm is
reachable from ``--algo`` and gives its theoretical per-rank volume; options reach the schedule; bad
values are one line; ``--root`` is a group position."""

from __future__ import annotations

import json

import pytest

from emulator.cli import main
from emulator.schedule.algorithms import all_algorithms
from emulator.schedule.io import load_schedule
from emulator.trace.model import CollectiveType

N = 5
SIZE = 10_001  # not divisible by N: uneven pieces must still match the closed formulas


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """One generated N-rank trace per collective type (one instance each, root position 0)."""
    base = tmp_path_factory.mktemp("gen")
    out = {}
    for ctype in CollectiveType:
        name = ctype.name.lower()
        prefix = base / name
        assert main(["generate", "collective", "--ranks", str(N), "-o", str(prefix), "--collective", name,
                     "--size", str(SIZE)]) == 0
        out[ctype] = prefix
    return out


def _compile_json(capsys, *argv) -> dict:
    assert main(["compile", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("alg", all_algorithms(), ids=lambda a: a.label)
def test_every_registered_algorithm_is_reachable_from_the_cli(alg, traces, tmp_path, capsys):
    ctype = alg.collective
    name = ctype.name.lower()
    summary = _compile_json(capsys, traces[ctype], "-o", tmp_path / "s.sched", "--algo", f"{name}={alg.name}")
    # exactly the documented shape
    assert list(summary) == ["ranks", "flows", "bytes", "per_rank", "collectives", "hash"]
    assert summary["collectives"] == [{"type": name, "count": 1, "algorithm": alg.name}]
    assert all(list(row) == ["rank", "flows", "bytes_sent", "bytes_received"] for row in summary["per_rank"])
    size = 0 if ctype == CollectiveType.BARRIER else SIZE
    sent = [row["bytes_sent"] for row in summary["per_rank"]]
    assert sent == [alg.expected_bytes_sent(N, size, r, root=0) for r in range(N)]
    assert summary["bytes"] == sum(sent) == sum(row["bytes_received"] for row in summary["per_rank"])
    assert len(summary["hash"]) == 64 and load_schedule(tmp_path / "s.sched").algorithm_names == (alg.name,)


def test_options_reach_the_schedule_and_output_is_deterministic(traces, tmp_path, capsys):
    ar = traces[CollectiveType.ALL_REDUCE]
    argv = [ar, "--algo", "All-Reduce=Halving-Doubling", "--chunks", "3", "--compute-scale", "0.5",
            "--open-loop", "--keep-idle", "--p2p-pairing", "group"]
    one = _compile_json(capsys, *argv, "-o", tmp_path / "a.sched")
    two = _compile_json(capsys, *argv, "-o", tmp_path / "b.sched")
    assert one == two and (tmp_path / "a.sched").read_bytes() == (tmp_path / "b.sched").read_bytes()
    s = load_schedule(tmp_path / "a.sched")
    opts = s.meta["options"]
    assert opts["chunks"] == 3 and opts["compute_scale"] == 0.5 and opts["open_loop"] and opts["keep_idle"]
    assert opts["algorithms"] == {"all_reduce": "halving_doubling"} and opts["p2p_pairing"] == "group"
    assert sorted(set(s.flow_chunk.tolist())) == [0, 1, 2] and s.dep_idx.shape[0] == 0
    default = _compile_json(capsys, ar, "-o", tmp_path / "c.sched")
    assert default["hash"] != one["hash"] and default["bytes"] == one["bytes"]


def test_replicate_a_single_rank_trace(tmp_path, capsys):
    prefix = tmp_path / "dp"
    assert main(["generate", "data-parallel", "--ranks", "1", "--layers", "4", "-o", str(prefix)]) == 0
    capsys.readouterr()
    summary = _compile_json(capsys, f"{prefix}.0.et", "-o", tmp_path / "r.sched", "--replicate", "4")
    assert summary["ranks"] == 4 and summary["flows"] > 0
    assert len({row["bytes_sent"] for row in summary["per_rank"]}) == 1  # data-parallel ranks are alike


def test_root_is_a_group_position(tmp_path, capsys):
    prefix = tmp_path / "bc"
    assert main(["generate", "collective", "--ranks", "6", "--group-size", "3", "--collective", "broadcast",
                 "--size", "3000", "-o", str(prefix)]) == 0
    capsys.readouterr()
    # groups {0,1,2} and {3,4,5}: position 1 is rank 1 and rank 4, which receive nothing
    summary = _compile_json(capsys, prefix, "-o", tmp_path / "b.sched", "--root", "broadcast=1")
    received = [row["bytes_received"] for row in summary["per_rank"]]
    assert [r for r, b in enumerate(received) if b == 0] == [1, 4]
    rc = main(["compile", str(prefix), "-o", str(tmp_path / "x.sched"), "--root", "broadcast=3"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    assert "root position 3 of BROADCAST (from the roots option (--root)) is outside group" in err


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--chunks", "0"], "--chunks 0: must be an integer >= 1"),
        (["--chunks", "two"], "--chunks two: must be an integer >= 1"),
        (["--window", "-3"], "--window -3: must be an integer >= 1"),
        (["--replicate", "0"], "--replicate 0: must be an integer >= 1"),
        (["--compute-scale", "-1"], "--compute-scale -1: must be a finite number >= 0"),
        (["--compute-scale", "nan"], "--compute-scale nan: must be a finite number >= 0"),
        (["--compute-scale", "fast"], "--compute-scale 'fast': must be a number"),
        (["--root", "all_reduce=1"], "--root all_reduce=1: all_reduce has no root"),
        (["--root", "broadcast=-1"], "--root broadcast=-1: must be an integer group position >= 0"),
        (["--root", "broadcast=x"], "--root broadcast=x: must be an integer group position >= 0"),
        (["--algo", "all_reduce=bogus"], "--algo all_reduce=bogus: unknown algorithm (available: direct, "),
        (["--algo", "allreduce=ring"], "unknown collective 'allreduce'"),
        (["--algo", "all_reduce"], "expected COLLECTIVE=VALUE"),
    ],
)
def test_bad_option_values_are_one_line_without_usage(traces, tmp_path, capsys, extra, fragment):
    rc = main(["compile", str(traces[CollectiveType.ALL_REDUCE]), "-o", str(tmp_path / "x.sched"), *extra])
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert rc == 2 and err.count("\n") == 0 and err.startswith("error: ") and fragment in err
    assert "usage:" not in err and not (tmp_path / "x.sched").exists()


def test_help_lists_every_algorithm(capsys):
    with pytest.raises(SystemExit):
        main(["compile", "--help"])
    text = capsys.readouterr().out
    for alg in all_algorithms():
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(alg.collective.name.lower() + " "))
        assert alg.name in line
    assert "GROUP" in text and "POSITION" in text


def test_cli_pairing_choices_are_the_compilers():
    from emulator.commands import compile as compile_cmd
    from emulator.schedule.compiler import P2P_PAIRINGS

    assert compile_cmd._P2P_PAIRINGS == P2P_PAIRINGS


def test_compile_and_run_stamp_the_same_trace_digest(traces, tmp_path, capsys):
    """One helper, emulator.trace.digest: `compile`'s schedule and `run`'s workload carry the same hash."""
    import hashlib

    from emulator.config import profile_from_dict
    from emulator.run.workload import load_workload
    from emulator.trace.digest import files_digest, trace_digest
    from emulator.trace.io import read_trace
    from emulator.trace.model import RankGraph, Trace

    prefix = traces[CollectiveType.ALL_REDUCE]
    files = [prefix.parent / f"{prefix.name}.{r}.et" for r in range(N)]
    expected = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()
    assert main(["compile", str(prefix), "-o", str(tmp_path / "s.bin")]) == 0
    capsys.readouterr()
    assert load_schedule(tmp_path / "s.bin").meta["trace_sha256"] == expected
    wl = load_workload(profile_from_dict({"name": "d", "workload": {"trace": {"prefix": str(prefix)}}}))
    assert wl.trace_hash == wl.schedule.meta["trace_sha256"] == expected
    assert trace_digest(read_trace(str(prefix))) == files_digest(files) == expected
    assert files_digest(files[:1]) != expected
    assert files_digest([]) == "" and trace_digest(Trace(ranks={0: RankGraph(0, [])})) == ""


@pytest.mark.parametrize("size", [2**53 + 1, 2**63 + 7])
@pytest.mark.parametrize("p2p", [False, True])
def test_a_comm_size_no_run_can_carry_is_one_error_line(tmp_path, capsys, size, p2p):
    """Above 2^53 bytes compile stops with one line naming the node (it ran on, or crashed as exit 4)."""
    from emulator.trace.io import write_rank
    from emulator.trace.model import CommInfo, Node, NodeType

    for r in range(2):
        if p2p:
            node = Node(id=9, type=NodeType.COMM_SEND_NODE if r == 0 else NodeType.COMM_RECV_NODE,
                        comm=CommInfo(collective=None, size_bytes=size, src=0, dst=1))
        else:
            node = Node(id=9, type=NodeType.COMM_COLL_NODE,
                        comm=CommInfo(collective=CollectiveType.ALL_REDUCE, size_bytes=size))
        write_rank(tmp_path / f"big.{r}.et", [node])
    assert main(["compile", str(tmp_path / "big"), "-o", str(tmp_path / "b.sched")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "node 9" in err[0] and f"comm_size {size}" in err[0]
