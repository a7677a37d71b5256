"""extends:, matrix:, --set / EMULATOR_SET precedence, path resolution."""

from __future__ import annotations

import pytest

from emulator.config import ENV_VAR, load_profile, load_profiles, parse_key_path, parse_set
from emulator.errors import ConfigError

BASE = """\
name: base-name
description: from base
seed: 5
fabric:
  kind: sim
  ports: {rate: 10Gbps, buffer: 512KiB}
  ecn: {kmin: 10KB, kmax: 100KB}
workload:
  collectives:
    - {type: all_reduce, group: 0-3, size: 1MiB}
"""


# ------------------------------------------------------------------------------------------ extends


def test_extends_deep_merges_and_child_wins(write):
    write("base.yaml", BASE)
    child = write("child.yaml", "extends: base.yaml\nfabric:\n  ports: {rate: 25Gbps}\n")
    p = load_profile(child, env={})
    assert p.fabric.ports.rate_bps == 25 * 10**9  # child
    assert p.fabric.ports.buffer_bytes == 512 * 1024  # inherited sibling key survives the merge
    assert p.fabric.ecn.kmin_bytes == 10_000
    assert p.seed == 5 and p.description == "from base"
    assert p.name == "child"  # name is not inherited


def test_extends_chain_relative_to_each_file(write):
    write("a/base.yaml", BASE)
    write("a/b/mid.yaml", "extends: ../base.yaml\nseed: 6\nwarmup: 0\n")
    leaf = write("leaf.yaml", "extends: a/b/mid.yaml\nseed: 7\n")
    p = load_profile(leaf, env={})
    assert (p.seed, p.warmup, p.fabric.ports.rate_bps) == (7, 0, 10 * 10**9)


def test_extends_list_later_parent_wins(write):
    write("one.yaml", BASE)
    write("two.yaml", "seed: 9\nfabric: {ports: {rate: 40Gbps}}\n")
    leaf = write("leaf.yaml", "extends: [one.yaml, two.yaml]\n")
    p = load_profile(leaf, env={})
    assert (p.seed, p.fabric.ports.rate_bps, p.fabric.ports.buffer_bytes) == (9, 40 * 10**9, 512 * 1024)


def test_lists_replace_and_null_resets_to_default(write):
    write("base.yaml", BASE)
    leaf = write("leaf.yaml", "extends: base.yaml\nseed: null\nworkload:\n  collectives:\n"
                              "    - {type: all_to_all, group: 0-1, size: 2MiB}\n")
    p = load_profile(leaf, env={})
    assert [c.type for c in p.workload.collectives] == ["all_to_all"]
    assert p.seed == 1  # the schema default, not the base's 5


def test_extends_cycle_is_reported_with_the_chain(write):
    write("a.yaml", "extends: b.yaml\n")
    write("b.yaml", "extends: c.yaml\n")
    c = write("c.yaml", "extends: a.yaml\n")
    with pytest.raises(ConfigError, match=r"extends: cycle: c\.yaml → a\.yaml → b\.yaml → c\.yaml"):
        load_profile(c, env={})


def test_extends_self_is_a_cycle(write):
    p = write("self.yaml", "extends: self.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_profile(p, env={})


def test_extends_missing_file(write):
    p = write("leaf.yaml", "extends: nowhere.yaml\n")
    with pytest.raises(ConfigError, match=r"leaf\.yaml: extends: no such file 'nowhere\.yaml'"):
        load_profile(p, env={})


def test_extends_bad_type(write):
    p = write("leaf.yaml", "extends: {a: 1}\n")
    with pytest.raises(ConfigError, match="extends: expected a path or a list of paths"):
        load_profile(p, env={})


def test_error_in_parent_names_the_leaf_file_and_key(write):
    write("base.yaml", BASE.replace("10Gbps", "10Gbs"))
    leaf = write("leaf.yaml", "extends: base.yaml\n")
    with pytest.raises(ConfigError, match=r"leaf\.yaml: fabric\.ports\.rate: unknown unit 'Gbs'"):
        load_profile(leaf, env={})


def test_trace_prefix_is_relative_to_the_file_that_sets_it(write, tmp_path):
    (tmp_path / "traces").mkdir()
    for r in range(3):
        (tmp_path / "traces" / f"t.{r}.et").write_bytes(b"")
    write("sub/base.yaml", "workload: {trace: {prefix: ../traces/t}}\n")
    leaf = write("leaf.yaml", "extends: sub/base.yaml\n")
    p = load_profile(leaf, env={})
    assert p.workload.trace.prefix == str(tmp_path / "traces" / "t")
    assert p.ranks.count == 3  # from the rank files


def test_pkg_prefix_names_the_bundled_traces(write):
    p = load_profile(write("t.yaml", "workload: {trace: {prefix: pkg:data/traces/custom_ring_allreduce_8npus_1MB/custom_allreduce}}\n"),
                     env={})
    assert p.workload.trace.prefix.endswith("emulator/data/traces/custom_ring_allreduce_8npus_1MB/custom_allreduce")
    assert p.ranks.count == 8


# ------------------------------------------------------------------------------------------- matrix


def test_matrix_expands_to_the_cartesian_product_in_order(write):
    write("base.yaml", BASE)
    p = write("sweep.yaml", "extends: base.yaml\nmatrix:\n  fabric.ports.rate: [10Gbps, 25Gbps, 100Gbps]\n"
                            "  congestion_control.preset: [paper, none]\n")
    profiles = load_profiles(p, env={})
    assert len(profiles) == 6
    assert profiles[0].name == "sweep[rate=10Gbps,preset=paper]"
    assert profiles[5].name == "sweep[rate=100Gbps,preset=none]"
    combos = {(x.fabric.ports.rate_bps, x.congestion_control.preset) for x in profiles}
    assert len(combos) == 6
    assert len({x.name for x in profiles}) == 6


def test_matrix_values_of_any_type_and_list_indices(write):
    p = write("m.yaml", BASE + "matrix:\n  seed: [1, 2]\n  workload.collectives[0].group: ['0-1', [0, 1, 2]]\n")
    profiles = load_profiles(p, env={})
    assert [x.name for x in profiles] == [
        "base-name[seed=1,group=0-1]", "base-name[seed=1,group=[0,1,2]]",
        "base-name[seed=2,group=0-1]", "base-name[seed=2,group=[0,1,2]]",
    ]
    assert profiles[1].workload.collectives[0].group == (0, 1, 2)


def test_matrix_names_use_the_shortest_unambiguous_keys_and_values(write):
    both_rates = "matrix:\n  fabric.ports.rate: [1Gbps]\n  congestion_control.rate: [2Gbps]\n"
    p = write("r.yaml", BASE + "congestion_control: {preset: fixed}\n" + both_rates)
    assert load_profile(p, env={}).name == "base-name[ports.rate=1Gbps,congestion_control.rate=2Gbps]"
    write("a/x/t.0.et", "")
    write("b/x/t.0.et", "")
    traces = "matrix:\n  workload.trace.prefix: [a/x/t, b/x/t]\n"
    p = write("t.yaml", "ranks: {count: 1}\nworkload: {trace: {prefix: a/x/t}}\n" + traces)
    # the last path components are equal, so the names keep the full keys and values
    assert [x.name for x in load_profiles(p, env={})] == ["t[workload.trace.prefix=a/x/t]",
                                                          "t[workload.trace.prefix=b/x/t]"]


def test_load_profile_refuses_a_multi_combination_matrix(write):
    p = write("m.yaml", BASE + "matrix: {seed: [1, 2]}\n")
    with pytest.raises(ConfigError, match="matrix: sweeps 2 combinations"):
        load_profile(p, env={})
    assert load_profile(write("one.yaml", BASE + "matrix: {seed: [3]}\n"), env={}).name == "base-name[seed=3]"


@pytest.mark.parametrize("matrix,expected", [
    ("matrix: [1, 2]", "matrix: expected a mapping"),
    ("matrix: {seed: []}", "matrix.seed: expected a non-empty list"),
    ("matrix: {seed: 3}", "matrix.seed: expected a non-empty list"),
    ("matrix: {'fabric..x': [1]}", "is not a key path"),
    ("matrix: {name: [a, b]}", "matrix.name: name cannot be swept"),
    ("matrix: {fabric.ports.rat: [1Gbps]}", "fabric.ports.rat (from matrix): unknown key (did you mean 'rate'?)"),
    ("matrix: {fabric.ports.rate: [1Gbps, lots]}", "fabric.ports.rate (from matrix): cannot read 'lots' as a rate"),
])
def test_matrix_errors(write, matrix, expected):
    p = write("m.yaml", BASE + matrix + "\n")
    with pytest.raises(ConfigError) as info:
        load_profiles(p, env={})
    assert str(info.value).startswith(f"{p}: ") and expected in str(info.value)


def test_matrix_in_a_parent_is_inherited_and_can_be_dropped(write):
    write("base.yaml", BASE + "matrix: {seed: [1, 2, 3]}\n")
    assert len(load_profiles(write("keep.yaml", "extends: base.yaml\n"), env={})) == 3
    assert len(load_profiles(write("drop.yaml", "extends: base.yaml\nmatrix: null\n"), env={})) == 1


# --------------------------------------------------------------------------------------- overrides


def test_set_overrides_profile_and_values_are_yaml(write):
    p = write("p.yaml", BASE)
    prof = load_profile(p, overrides=["fabric.ports.rate=40Gbps", "seed=11", "workload.collectives[0].group=[0, 1]",
                                      "fabric.ecn.enabled=false", "description=a b c"], env={})
    assert prof.fabric.ports.rate_bps == 40 * 10**9
    assert prof.seed == 11
    assert prof.workload.collectives[0].group == (0, 1)
    assert prof.fabric.ecn.enabled is False
    assert prof.description == "a b c"


def test_precedence_default_profile_env_cli(write):
    p = write("p.yaml", BASE)  # seed 5 in the profile, default 1
    assert load_profile(write("d.yaml", "workload: {collectives: [{type: barrier, group: 0-1}]}\n"), env={}).seed == 1
    assert load_profile(p, env={}).seed == 5
    env = {ENV_VAR: "seed=6; fabric.ports.rate=1Gbps"}
    prof = load_profile(p, env=env)
    assert (prof.seed, prof.fabric.ports.rate_bps) == (6, 10**9)
    prof = load_profile(p, overrides=["seed=7"], env=env)
    assert (prof.seed, prof.fabric.ports.rate_bps) == (7, 10**9)  # CLI beats env; env still beats the profile


def test_cli_and_env_beat_the_matrix(write):
    p = write("m.yaml", BASE + "matrix: {seed: [1, 2]}\n")
    assert {x.seed for x in load_profiles(p, overrides=["seed=9"], env={})} == {9}
    assert {x.seed for x in load_profiles(p, env={ENV_VAR: "seed=8"})} == {8}


def test_env_defaults_to_os_environ(write, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "seed=42")
    assert load_profile(write("p.yaml", BASE)).seed == 42


def test_set_creates_missing_sections_and_expands_topology_shorthand(write):
    p = write("p.yaml", BASE + "  \n")
    prof = load_profile(p, overrides=["fabric.pfc.enabled=true"], env={})
    assert prof.fabric.pfc.enabled and prof.fabric.pfc.xoff_bytes == 512 * 1024 * 3 // 4
    p2 = write("t.yaml", BASE.replace("kind: sim", "kind: sim\n  topology: leaf_spine"))
    prof = load_profile(p2, overrides=["fabric.topology.leaves=4"], env={})
    assert (prof.fabric.topology.kind, prof.fabric.topology.leaves) == ("leaf_spine", 4)


@pytest.mark.parametrize("item,where,expected", [
    ("seed=abc", "--set", "seed (from --set): expected an integer, got str 'abc'"),
    ("fabric.ports.rat=1Gbps", "--set", "fabric.ports.rat (from --set): unknown key (did you mean 'rate'?)"),
    ("workload.collectives[3].size=1MiB", "--set", "workload.collectives[3].size (from --set): workload.collectives[3] index out of range"),
    ("seed.x=1", "--set", "seed.x (from --set): seed is not a mapping"),
    ("seed=1", ENV_VAR, None),
    ("fabric.kind=wire", ENV_VAR, "fabric.kind (from EMULATOR_SET): 'wire' is not one of"),
])
def test_override_errors_say_where_the_value_came_from(write, item, where, expected):
    p = write("p.yaml", BASE)
    kwargs = {"overrides": [item], "env": {}} if where == "--set" else {"env": {ENV_VAR: item}}
    if expected is None:
        load_profile(p, **kwargs)
        return
    with pytest.raises(ConfigError) as info:
        load_profile(p, **kwargs)
    assert str(info.value).startswith(f"{p}: ") and expected in str(info.value), str(info.value)


@pytest.mark.parametrize("text,expected", [
    ("seed", "--set 'seed': expected KEY=VALUE"),
    ("=3", "expected KEY=VALUE"),
    ("a..b=1", "is not a key path"),
    ("a[x]=1", "is not a key path"),
])
def test_malformed_set_items(text, expected):
    with pytest.raises(ConfigError, match=expected.replace("[", r"\[")):
        parse_set(text)


def test_parse_key_path():
    assert parse_key_path("workload.collectives[1].size") == ["workload", "collectives", 1, "size"]
    assert parse_key_path("a[0][2]") == ["a", 0, 2]
    assert parse_set("x.y=") == (["x", "y"], "", "x.y", "--set")
    assert parse_set("x=1=2")[1] == "1=2"


def test_set_path_relative_to_cwd(write, tmp_path, monkeypatch):
    (tmp_path / "tr.0.et").write_bytes(b"")
    (tmp_path / "tr.1.et").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    prof = load_profile(write("sub/p.yaml", BASE), overrides=["workload={trace: {prefix: tr}}"], env={})
    assert prof.workload.trace.prefix == str(tmp_path / "tr")
