"""`emulator run --trace PREFIX` without a profile: packaged per-fabric defaults, the run named after
the trace, ranks from the trace, --replicate / --ranks for one-rank traces, trace options as on inspect;
and every bundled and shared trace set runs on the sim with every byte delivered."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from emulator.cli import build_parser, main
from emulator.commands.run import load_run_profiles, trace_run_name
from emulator.config.loader import package_dir
from emulator.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "traces"
BUNDLED = package_dir() / "data" / "traces"
MICRO_4 = SHARED / "astra-sim/examples/workload/microbenchmarks/all_reduce/4npus_1MB/all_reduce"
AR_8 = BUNDLED / "microbenchmarks/all_reduce/8npus_1MB/all_reduce"
FAST = ["--set", "iterations=1", "--set", "warmup=0", "--set", "fabric.ports.rate=400Gbps", "--quiet"]
_RANK_FILE = re.compile(r"^(.*)\.(\d+)\.(et|json)(\.gz)?$")


def trace_sets(root: Path) -> list[tuple[str, int]]:
    """(prefix, number of rank files) of every trace set under ``root`` (JSON rank files by prefix too)."""
    sets: dict[str, set[int]] = {}
    for path in sorted(root.rglob("*")):
        m = _RANK_FILE.match(str(path))
        if m and path.is_file():
            sets.setdefault(m.group(1), set()).add(int(m.group(2)))
    return [(prefix, len(ranks)) for prefix, ranks in sorted(sets.items())]


def args_of(*argv: str):
    return build_parser().parse_args(["run", *argv])


ALL_SETS = trace_sets(BUNDLED) + (trace_sets(SHARED) if SHARED.is_dir() else [])


def test_the_sets_are_found() -> None:
    assert (str(AR_8), 8) in ALL_SETS and len(trace_sets(BUNDLED)) == 3
    if SHARED.is_dir():
        assert len(trace_sets(SHARED)) == 15  # 12 microbenchmarks, the custom ring, chakra.0.et, the JSON excerpt


@pytest.mark.slow
@pytest.mark.parametrize("prefix,ranks", ALL_SETS, ids=[Path(p).relative_to(p.split("/traces/")[0]).as_posix()
                                                        for p, _ in ALL_SETS])
def test_every_trace_set_runs_on_the_sim_with_every_byte_delivered(prefix: str, ranks: int, tmp_path: Path,
                                                                   capsys) -> None:
    extra = ["--replicate", "2"] if ranks == 1 else []
    out = tmp_path / "res"
    assert main(["run", "--trace", prefix, "--fabric", "sim", "-o", str(out), *extra, *FAST]) == 0
    doc = json.loads((out / "results.json").read_text())
    totals = doc["summary"]["totals"]
    assert doc["complete"] and totals["flows_incomplete"] == 0
    assert totals["bytes_delivered"] == totals["bytes_scheduled"]
    assert doc["profile"]["ranks"]["count"] == max(ranks, 2)
    assert "one-rank trace" not in capsys.readouterr().err


def test_run_is_named_after_the_trace_with_ranks_from_it(tmp_path: Path) -> None:
    (p,) = load_run_profiles(args_of("--trace", str(AR_8)))
    assert p.name == "all_reduce" and p.ranks.count == 8 and p.fabric.kind == "sim"
    assert p.workload.trace.prefix == str(AR_8) and p.source == f"run --trace {AR_8}"
    assert trace_run_name("/x/chakra.0.et") == "chakra" and trace_run_name("a/small.0.json") == "small"


@pytest.mark.parametrize("fabric,rate_bps", [("sim", 25e9), ("fluid", 25e9), ("loopback", 200e6), ("direct", 2e9)])
def test_fabric_defaults_come_from_the_shipped_bases(fabric: str, rate_bps: float) -> None:
    (p,) = load_run_profiles(args_of("--trace", str(AR_8), "--fabric", fabric, "--set", "seed=9"))
    assert p.fabric.kind == fabric and p.fabric.ports.rate_bps == rate_bps and p.ranks.count == 8
    assert p.seed == 9  # --set still applies
    assert p.timeout_ns == 30 * 60 * 10**9  # not the 60 s of the 8-rank loopback base: real traces run long
    if fabric == "direct":
        assert p.fabric.udp_port != 4791


def test_packaged_bases_are_the_shipped_profiles_base_files() -> None:
    for name in ("loopback_8.yaml", "sim_25g.yaml"):
        packaged = package_dir() / "data" / "profiles" / "base" / name
        assert packaged.read_text() == (REPO / "profiles" / "base" / name).read_text()


def test_one_rank_trace_takes_replicate_or_ranks(tmp_path: Path) -> None:
    one = AR_8.parent / "all_reduce.0.et"
    (p,) = load_run_profiles(args_of("--trace", str(one), "--replicate", "4"))
    assert p.workload.trace.replicate == 4 and p.ranks.count == 4
    (p,) = load_run_profiles(args_of("--trace", str(one), "--ranks", "3"))
    assert p.workload.trace.replicate == 3 and p.ranks.count == 3
    # both, agreeing: was "--ranks 4: the trace ... has 0 rank files"
    (p,) = load_run_profiles(args_of("--trace", str(one), "--ranks", "4", "--replicate", "4"))
    assert p.workload.trace.replicate == 4 and p.ranks.count == 4
    with pytest.raises(ConfigError, match=r"^--ranks 3 and --replicate 4 disagree: on the one-rank trace"):
        load_run_profiles(args_of("--trace", str(one), "--ranks", "3", "--replicate", "4"))


def test_trace_options_become_profile_keys(tmp_path: Path) -> None:
    groups = tmp_path / "g.json"
    groups.write_text('{"1": [0, 1, 2, 3, 4, 5, 6, 7]}')
    (p,) = load_run_profiles(args_of("--trace", str(AR_8), "--dep-policy", "ctrl", "--legacy-collectives", "yes",
                                     "--groups", str(groups)))
    t = p.workload.trace
    assert (t.dep_policy, t.legacy_collectives, t.groups) == ("ctrl", "yes", str(groups))


def test_trace_replaces_a_profile_workload_and_its_rank_count(tmp_path: Path) -> None:
    profile = REPO / "profiles" / "sim_ring_allreduce_8.yaml"
    (p,) = load_run_profiles(args_of(str(profile), "--trace", str(MICRO_4) if SHARED.is_dir() else str(AR_8)))
    assert p.workload.kind == "trace" and p.name == "sim_ring_allreduce_8"
    assert p.ranks.count == (4 if SHARED.is_dir() else 8)


@pytest.mark.parametrize("argv,message", [
    ([], "give a PROFILE, or --trace PREFIX"),
    (["--trace", "/nonexistent/t"], "--trace /nonexistent/t: no trace files"),
    (["--trace", str(AR_8), "--ranks", "4"], "--ranks 4: the trace .* has 8 rank files"),
    (["--trace", str(AR_8), "--ranks", "x"], "--ranks x: must be an integer >= 1"),
    (["--trace", str(AR_8), "--groups", "/nonexistent/g.json"], r"^--groups /nonexistent/g.json: no such file$"),
    (["--trace", str(AR_8), "--set", "ranks.count=4"],
     r"^run --trace .*: ranks.count \(from --set\): 4, but the trace has 8 rank files: set ranks.count: 8, "
     r"or ranks.count: null"),
])
def test_bad_trace_options_are_one_error_line(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_run_profiles(args_of(*argv))


def test_copied_profile_with_an_inherited_rank_count_gets_the_right_advice(tmp_path: Path) -> None:
    copied = tmp_path / "mine.yaml"
    copied.write_text(f"extends: {REPO / 'profiles' / 'sim_trace_custom_ring.yaml'}\n"
                      f"workload:\n  trace:\n    prefix: {AR_8.parent / 'all_reduce.0.et'}\n")
    with pytest.raises(ConfigError, match=r"ranks.count: 8, but the trace has one rank file: set "
                                          r"workload.trace.replicate: 8"):
        load_run_profiles(args_of(str(copied)))
    four = AR_8.parent.parent.parent / "all_to_all" / "8npus_1MB" / "all_to_all"
    copied.write_text(f"extends: {REPO / 'profiles' / 'sim_trace_custom_ring.yaml'}\nranks:\n  count: 4\n"
                      f"workload:\n  trace:\n    prefix: {four}\n")
    with pytest.raises(ConfigError, match=r"ranks.count: 4, but the trace has 8 rank files: set ranks.count: 8, "
                                          r"or ranks.count: null to take it from the trace"):
        load_run_profiles(args_of(str(copied)))


@pytest.mark.serial  # a loopback run
def test_loopback_trace_run_delivers_every_byte(tmp_path: Path) -> None:
    out = tmp_path / "res"
    assert main(["run", "--trace", str(AR_8), "--fabric", "loopback", "-o", str(out), "--quiet",
                 "--set", "iterations=1", "--set", "warmup=0"]) == 0
    totals = json.loads((out / "results.json").read_text())["summary"]["totals"]
    assert totals["bytes_delivered"] == totals["bytes_scheduled"] > 0
