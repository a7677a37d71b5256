"""Every shipped profile validates (every matrix expansion too); docs and bundled traces stay in step."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from emulator.config import load_profile, load_profiles
from emulator.config.docs import BEGIN, END, render, rows
from emulator.config.resolve import trace_rank_files

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "profiles"
TRACES = ROOT / "emulator" / "data" / "traces"
SHARED = ROOT.parent / "shared" / "traces" / "astra-sim" / "examples"
SHIPPED = sorted(PROFILES.glob("*.yaml"))
REQUIRED = ["quickstart", "ring_allreduce_8", "alltoall_8", "incast_7to1", "mixed_ar_a2a", "trace_custom_ring",
            "study_ar_alone", "study_a2a_alone", "study_mixed"]


def test_required_profiles_are_shipped():
    names = {p.stem for p in SHIPPED}
    assert set(REQUIRED) <= names, set(REQUIRED) - names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_profile_and_expansion_validates(path):
    profiles = load_profiles(path, env={})
    assert profiles
    for prof in profiles:
        assert prof.name.startswith(path.stem)
        assert prof.ranks.count and len(prof.ranks.hosts) == prof.ranks.count
        assert prof.description, "shipped profiles say what they are"
    assert len({p.name for p in profiles}) == len(profiles)


def test_matrix_profiles_expand_as_documented():
    assert len(load_profiles(PROFILES / "sweep_sim_mixed_cc.yaml", env={})) == 6
    assert len(load_profiles(PROFILES / "sim_trace_microbenchmarks.yaml", env={})) == 2


def _parents(path: Path) -> list[str]:
    parents = yaml.safe_load(path.read_text()).get("extends") or []
    return [parents] if isinstance(parents, str) else parents


def test_fragments_are_extended_by_some_profile():
    used = {parent for p in SHIPPED for parent in _parents(p)}
    for fragment in sorted((PROFILES / "base").glob("*.yaml")):
        assert f"base/{fragment.name}" in used, fragment.name


def test_quickstart_is_what_the_issue_asks():
    p = load_profile(PROFILES / "quickstart.yaml", env={})
    assert p.fabric.kind == "loopback" and p.ranks.count == 8
    assert p.fabric.topology.kind == "single_switch"
    assert {c.type for c in p.workload.collectives} == {"all_reduce", "all_to_all"}
    assert p.congestion_control.preset in ("connectx", "paper", "hpcc-ns3")
    assert p.fabric.ports.rate_bps <= 4 * 10**9  # the software switch must keep up on 2 cores
    total = sum(c.size_bytes * c.iterations for c in p.workload.collectives) * (p.warmup + p.iterations)
    assert total <= 64 * 2**20


def test_study_profiles_differ_only_in_the_mix():
    alone_ar = load_profile(PROFILES / "study_ar_alone.yaml", env={})
    alone_a2a = load_profile(PROFILES / "study_a2a_alone.yaml", env={})
    mixed = load_profile(PROFILES / "study_mixed.yaml", env={})
    for p in (alone_ar, alone_a2a, mixed):
        assert p.fabric == mixed.fabric and p.ranks == mixed.ranks
        assert p.congestion_control == mixed.congestion_control and p.seed == mixed.seed
        assert p.iterations == mixed.iterations and p.warmup == mixed.warmup
    assert mixed.fabric.kind == "sim" and mixed.fabric.topology.kind == "leaf_spine"
    assert mixed.fabric.topology.oversubscription > 1
    by_type = {c.type: c for c in mixed.workload.collectives}
    assert alone_ar.workload.collectives == (by_type["all_reduce"],)
    assert alone_a2a.workload.collectives == (by_type["all_to_all"],)


def test_sim_variants_keep_the_workload():
    for sim in PROFILES.glob("sim_*.yaml"):
        twin = PROFILES / sim.name.removeprefix("sim_")
        if twin.exists():
            a, b = load_profile(sim, env={}), load_profile(twin, env={})
            assert a.fabric.kind == "sim" and a.workload == b.workload, sim.name
            # ranks.hosts is derived from the topology (a sim twin may run on a leaf-spine)
            assert (a.warmup, a.iterations, a.ranks.count, a.ranks.placement, a.seed) == (
                b.warmup, b.iterations, b.ranks.count, b.ranks.placement, b.seed), sim.name


def test_sim_profiles_do_not_inherit_the_socket_fabrics_tuning():
    """Whatever the loopback base tunes for 200 Mbps software ports, the sim profiles run 25 Gbps ports
    with stock ConnectX DCQCN and the sim's own retransmit timeout."""
    sims = [p for p in SHIPPED if p.stem.startswith("sim_")]
    assert sims
    for path in sims:
        for prof in load_profiles(path, env={}):
            cc = prof.congestion_control
            assert (cc.preset, cc.overrides, cc.rate_bps) == ("connectx", (), None), path.name
            assert prof.fabric.ports.rate_bps == 25 * 10**9 and prof.fabric.ecn.enabled, path.name
            assert prof.fabric.transport.retransmit_timeout_ns is None, path.name  # sim default (1 ms)


def test_readme_key_reference_is_generated_from_the_schema():
    text = (PROFILES / "README.md").read_text()
    block = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()
    assert block == render().strip(), "run: python -m emulator.config.docs and paste between the markers"
    for key, *_ in rows():
        assert f"`{key}`" in block


def test_readme_mentions_every_shipped_profile():
    text = (PROFILES / "README.md").read_text()
    for path in SHIPPED:
        name = path.name
        covered = name in text or (name.startswith("sim_") and "sim_*.yaml" in text)
        assert covered, name


@pytest.mark.parametrize("prefix,ranks,size", [
    ("custom_ring_allreduce_8npus_1MB/custom_allreduce", 8, 29_581),
    ("microbenchmarks/all_reduce/8npus_1MB/all_reduce", 8, None),
    ("microbenchmarks/all_to_all/8npus_1MB/all_to_all", 8, None),
])
def test_bundled_traces_are_present(prefix, ranks, size):
    files = trace_rank_files(str(TRACES / prefix))
    assert sorted(files) == list(range(ranks))
    if size is not None:
        assert {f.stat().st_size for f in files.values()} == {size}


def test_bundled_traces_carry_the_mit_notice():
    text = (TRACES / "README.md").read_text()
    assert "MIT License" in text and "Copyright (c) 2023 Georgia Institute of Technology" in text
    assert "Permission is hereby granted" in text


@pytest.mark.skipif(not SHARED.exists(), reason="the shared sample traces are not on this machine")
def test_bundled_traces_are_byte_identical_to_the_checked_copies():
    pairs = [(TRACES / "custom_ring_allreduce_8npus_1MB", SHARED / "system/custom_collectives/custom_ring_allreduce_8npus_1MB")]
    for coll in ("all_reduce", "all_to_all"):
        pairs.append((TRACES / "microbenchmarks" / coll / "8npus_1MB", SHARED / "workload/microbenchmarks" / coll / "8npus_1MB"))
    for ours, theirs in pairs:
        mine = sorted(p.name for p in ours.glob("*.et"))
        assert mine and mine == sorted(p.name for p in theirs.glob("*.et"))
        for name in mine:
            assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name


def test_every_shipped_trace_workload_reads_with_the_trace_reader():
    from emulator.trace.io import read_trace

    seen = 0
    for path in SHIPPED:
        for prof in load_profiles(path, env={}):
            if prof.workload.trace is None:
                continue
            trace = read_trace(prof.workload.trace.prefix, dep_policy=prof.workload.trace.dep_policy)
            assert sorted(trace.ranks) == list(range(prof.ranks.count)), prof.name
            seen += 1
    assert seen >= 3


DIRECT_DEFAULTS = [p for p in SHIPPED if p.name.startswith("direct_")] + [
    ROOT / "emulator" / "data" / "profiles" / "trace_direct.yaml"]


@pytest.mark.parametrize("path", DIRECT_DEFAULTS, ids=lambda p: p.name)
def test_shipped_direct_profiles_build_a_direct_config(path):
    """The direct fabric refuses time dilation; the shipped direct profiles (and `run --trace --fabric direct`'s
    defaults) extend the loopback base, whose `time_dilation: auto` made them fail before any traffic."""
    from emulator.run.runner import direct_config

    prof = load_profile(path, env={}, overrides=["ranks.count=8", "workload.collectives=[{type: all_reduce, size: 1MiB}]"])
    assert prof.fabric.kind == "direct"
    assert direct_config(prof, 8).udp_port == prof.fabric.udp_port
