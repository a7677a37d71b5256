"""The options dataclasses are the one schema of `emulator generate` and `workload.generate`.

Every option field is a CLI flag and every flag is a field; the profile path builds the same trace in
memory that the CLI writes to files (same nodes, groups, schedule and hash).
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.cli import main
from emulator.config import profile_from_dict
from emulator.config.model import GENERATOR_KINDS, GENERATOR_OPTIONS
from emulator.run.workload import load_workload
from emulator.schedule.compiler import compile_trace
from emulator.trace.digest import files_digest
from emulator.trace.generators import GENERATORS, KINDS, GeneratorError, Ref, generate, option_specs
from emulator.trace.io import read_trace

COMMON_FLAGS = {"-h", "--help", "--ranks", "-o", "--output", "--compress"}


def _kind_parsers() -> dict[str, argparse.ArgumentParser]:
    from emulator.commands.generate import register

    top = argparse.ArgumentParser()
    register(top.add_subparsers(), "generate", "")
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices["generate"]
    kinds = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction))
    return dict(kinds.choices)


def test_the_kinds_are_one_list() -> None:
    assert tuple(_kind_parsers()) == KINDS == GENERATOR_KINDS


@pytest.mark.parametrize("kind", KINDS)
def test_every_option_field_is_a_cli_flag_and_back(kind: str) -> None:
    g = GENERATORS[kind]
    specs = option_specs(g.options)
    fields = {f.name for f in dataclasses.fields(g.options)} - {"ranks"}
    assert {s.field for s in specs} == fields  # every field but ranks is an option
    flags = {o for a in _kind_parsers()[kind]._actions for o in a.option_strings} - COMMON_FLAGS
    assert flags == {s.flag for s in specs}
    assert {f[2:].replace("-", "_") for f in flags} == set(GENERATOR_OPTIONS[kind]) == set(g.option_names())
    helps = {a.option_strings[-1]: a.help for a in _kind_parsers()[kind]._actions}
    assert all(helps[s.flag] == s.help for s in specs)


def test_a_generator_error_names_options_for_each_audience() -> None:
    e = GeneratorError(Ref("group_size"), " 3 does not divide ", Ref("ranks"), " 8")
    assert str(e) == "--group-size 3 does not divide --ranks 8" and e.option is None
    assert e.detail(lambda n: "ranks.count" if n == "ranks" else n) == "group_size 3 does not divide ranks.count 8"
    e = GeneratorError("cannot read 'x' as a size", option="a2a_size")
    assert str(e) == "--a2a-size: cannot read 'x' as a size"


CASES = [
    ("collective", 4, {"collective": "all_reduce,broadcast,all_to_all,gather,barrier", "size": "64KiB",
                       "gap": "25us", "root": "1", "iterations": "2"}),
    ("collective", 8, {"collective": "all_gather", "size": "4KiB", "group_size": "4"}),
    ("data-parallel", 3, {"layers": "5", "params_per_layer": "1MiB", "bucket_size": "2MiB", "iterations": "2"}),
    ("moe", 8, {"tp": "2", "ep": "2", "layers": "2", "a2a_size": "64KiB", "tp_size": "64KiB",
                "dense_grad_size": "128KiB", "expert_grad_size": "128KiB"}),
    ("pipeline", 4, {"microbatches": "4", "activation_size": "64KiB", "schedule": "gpipe"}),
]


def _argv(kind: str, ranks: int, options: dict, prefix) -> list[str]:
    argv = ["generate", kind, "--ranks", str(ranks), "-o", str(prefix)]
    for name, text in options.items():
        argv += [f"--{name.replace('_', '-')}", text]
    return argv


@pytest.mark.parametrize(("kind", "ranks", "options"), CASES)
def test_the_in_memory_trace_is_the_trace_the_files_hold(tmp_path, kind, ranks, options) -> None:
    assert main(_argv(kind, ranks, options, tmp_path / "t")) == 0
    read = read_trace(str(tmp_path / "t"))
    generated = generate(kind, ranks, options)
    mem = generated.to_trace()
    assert generated.digest() == files_digest(sorted(tmp_path.glob("t.*.et"), key=lambda p: int(p.name.split(".")[1])))
    assert sorted(mem.ranks) == sorted(read.ranks)
    for r in read.ranks:
        assert mem.ranks[r].nodes == read.ranks[r].nodes
        assert mem.ranks[r].dep_policy == read.ranks[r].dep_policy
    assert mem.groups == read.groups
    a, b = compile_trace(mem), compile_trace(read)
    assert a.meta == b.meta
    for name in ("flow_src", "flow_dst", "flow_size_bytes", "rank_op_ptr", "dep_idx"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


@settings(max_examples=12, deadline=None)
@given(ranks=st.integers(2, 6), size_kib=st.integers(1, 512), iterations=st.integers(1, 3),
       gap_us=st.integers(0, 50), collective=st.sampled_from(["all_reduce", "all_to_all", "broadcast,reduce"]))
def test_profile_and_cli_give_the_same_trace_hash(tmp_path_factory, ranks, size_kib, iterations, gap_us,
                                                  collective) -> None:
    """A profile's generated workload carries the hash of the files `emulator generate` writes."""
    options = {"collective": collective, "size": f"{size_kib}KiB", "iterations": iterations, "gap": f"{gap_us}us"}
    prefix = tmp_path_factory.mktemp("g") / "t"
    assert main(_argv("collective", ranks, {k: str(v) for k, v in options.items()}, prefix)) == 0
    p = profile_from_dict({"name": "g", "ranks": {"count": ranks},
                           "workload": {"generate": {"kind": "collective", "options": options}}})
    w = load_workload(p)
    assert w.trace_hash == files_digest([f"{prefix}.{r}.et" for r in range(ranks)])


def test_the_profile_path_writes_no_files_and_imports_no_command(tmp_path, monkeypatch) -> None:
    import sys
    import tempfile

    import emulator.trace.io as trace_io

    def refuse(*args, **kwargs):
        raise AssertionError("the profile path wrote a trace file")

    monkeypatch.setattr(trace_io, "write_rank", refuse)
    monkeypatch.setattr(tempfile, "TemporaryDirectory", refuse)
    for name in [m for m in sys.modules if m.startswith("emulator.commands")]:
        monkeypatch.delitem(sys.modules, name)
    p = profile_from_dict({"name": "g", "ranks": {"count": 4},
                           "workload": {"generate": {"kind": "moe", "options": {"tp": 2, "layers": 1}}}})
    assert load_workload(p).schedule.n_flows > 0
    assert not [m for m in sys.modules if m.startswith("emulator.commands")]
