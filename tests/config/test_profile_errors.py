"""Every bad input gives one ConfigError line naming the file and the key path."""

from __future__ import annotations

import copy

import pytest

from emulator.config import load_profile, profile_from_dict
from emulator.errors import ConfigError

MINIMAL = {"workload": {"collectives": [{"type": "all_reduce", "group": "0-3", "size": "1MiB"}]}}


def with_(patch: dict) -> dict:
    from emulator.config import deep_merge

    return deep_merge(copy.deepcopy(MINIMAL), patch)


def coll(**kw) -> dict:
    base = {"type": "all_reduce", "group": "0-3", "size": "1MiB"}
    base.update(kw)
    return with_({"workload": {"collectives": [base]}})


CASES = [
    # (profile data, expected text after "<file>: ")
    (with_({"fabric": {"ports": {"rate": "25Gbs"}}}), "fabric.ports.rate: unknown unit 'Gbs' in '25Gbs' for a rate"),
    (with_({"fabric": {"ports": {"rate": "fast"}}}), "fabric.ports.rate: cannot read 'fast' as a rate"),
    (with_({"fabric": {"ports": {"rat": "1Gbps"}}}), "fabric.ports.rat: unknown key (did you mean 'rate'?)"),
    (with_({"fabrik": {}}), "fabrik: unknown key (did you mean 'fabric'?)"),
    (with_({"extend": "base.yaml"}), "extend: unknown key (did you mean 'extends'?)"),
    (with_({"matrx": {}}), "matrx: unknown key (did you mean 'matrix'?)"),
    (with_({"fabric": {"ecn": {"kmin": "300KB", "kmax": "200KB"}}}), "fabric.ecn.kmin: must not exceed kmax"),
    (with_({"fabric": {"ecn": {"pmax": "150%"}}}), "fabric.ecn.pmax: must be between 0 and 1"),
    (with_({"fabric": {"ecn": {"enabled": "yes please"}}}), "fabric.ecn.enabled: expected true or false"),
    (with_({"fabric": {"kind": "lopback"}}), "fabric.kind: 'lopback' is not one of sim, fluid, loopback, direct (did you mean 'loopback'?)"),
    (with_({"fabric": {"mtu": 1500}}), "fabric.mtu: 1500 is not one of 256, 512, 1024, 2048, 4096"),
    (with_({"fabric": {"udp_port": 70000}}), "fabric.udp_port: must be at most 65535"),
    (with_({"fabric": {"dscp": {"data": 64}}}), "fabric.dscp.data: must be at most 63"),
    # 1e21 bit/s passed and the run ended in an int64 OverflowError writing the records (exit 4)
    (with_({"fabric": {"ports": {"rate": "1e9Tbps"}}}), "fabric.ports.rate: must be at most 1000000000000000"),
    (with_({"fabric": {"topology": {"kind": "leaf_spine", "leaves": 2, "uplink_rate": "2000Tbps"}}}),
     "fabric.topology.uplink_rate: must be at most"),
    # 1e30 s passed and the run ended in an int64 OverflowError in the ideal-fabric pass (exit 4)
    (with_({"fabric": {"ports": {"latency": "1e30s"}}}), "fabric.ports.latency: must be at most 1000000000"),
    (with_({"fabric": {"kind": "loopback", "loss": 0.01}}), "fabric.loss: injected loss needs fabric.kind sim"),
    (with_({"fabric": {"kind": "loopback", "switch": {"address": "10.0.0.1"}}}), "fabric.switch.address: 10.0.0.1 is not a loopback address"),
    (with_({"fabric": {"pfc": {"xoff": "2MiB"}}}), "fabric.pfc.xoff: 2097152 bytes exceeds ports.buffer"),
    (with_({"fabric": {"pfc": {"xoff": "100KiB", "xon": "200KiB"}}}), "fabric.pfc.xon: must be below xoff"),
    (with_({"fabric": {"topology": "ring"}}), "fabric.topology.kind: 'ring' is not one of single_switch, leaf_spine"),
    (with_({"fabric": {"topology": {"kind": "leaf_spine", "leaves": 0}}}), "fabric.topology.leaves: must be at least 1"),
    (with_({"fabric": {"topology": {"kind": "leaf_spine", "leaves": 2, "hosts_per_leaf": 1}}}),
     "ranks.count: 4 ranks do not fit fabric.topology (2 host ports)"),
    (with_({"fabric": {"kind": "direct", "direct": {"address_template": "10.0.0.7"}}}),
     "fabric.direct.address_template: '10.0.0.7' needs '{rank}'"),
    (with_({"fabric": {"kind": "direct", "direct": {"address_template": "10.0.{rank+300}.1"}}}),
     "fabric.direct.address_template: '10.0.300.1' is not an IP address"),
    (with_({"fabric": {"kind": "direct", "direct": {"ranks": [{"rank": 0, "address": "127.0.0.2"}]}}}),
     "fabric.direct.ranks: no address for rank 1 (and 2 more)"),
    (with_({"fabric": {"kind": "direct", "direct": {"ranks": [{"rank": 0}]}}}), "fabric.direct.ranks[0].address: required"),
    (with_({"ranks": {"count": 2}}), "workload.collectives[0].group: rank 2 is outside ranks.count = 2"),
    (with_({"ranks": {"count": 0}}), "ranks.count: must be at least 1"),
    (with_({"ranks": {"placement": "rondom"}}), "ranks.placement: 'rondom' is not round_robin, block or a list of host indices (did you mean 'random'"[:60]),
    (with_({"ranks": {"placement": [0, 1]}}), "ranks.placement: lists 2 hosts for 4 ranks"),
    (with_({"ranks": {"placement": [0, 1, 2, 9]}}), "ranks.placement[3]: host 9 does not exist"),
    (with_({"ranks": {"placement": [0, 1, 1, 2]}}),
     "ranks.placement[2]: host 1 already carries rank 1: the sim fabric gives every rank its own NIC port"),
    (with_({"fabric": {"kind": "loopback", "topology": {"kind": "leaf_spine", "leaves": 2}}}),
     "fabric.topology.kind: the loopback software switch is one switch, not leaf_spine (use fabric.kind sim)"),
    (with_({"seed": "abc"}), "seed: expected an integer, got str 'abc'"),
    (with_({"seed": 1.5}), "seed: expected an integer, got 1.5"),
    (with_({"timeout": "10 parsecs"}), "timeout: unknown unit 'parsecs'"),
    (with_({"iterations": 0}), "iterations: must be at least 1"),
    ({"seed": 1}, "workload: required"),
    (with_({"workload": {"trace": {"prefix": "x"}}}), "workload: give exactly one of trace, generate, collectives, schedule, jobs (got trace, collectives)"),
    ({"workload": {}}, "workload: give exactly one of trace, generate, collectives, schedule, jobs (got none)"),
    ({"workload": {"trace": {"dep_policy": "data"}}}, "workload.trace.prefix: required"),
    ({"workload": {"trace": {"prefix": "/nonexistent/tr"}}}, "workload.trace.prefix: no trace files at /nonexistent/tr"),
    ({"workload": {"generate": {"kind": "moe"}}}, "ranks.count: required with workload.generate"),
    ({"workload": {"generate": {"kind": "mixture"}}}, "workload.generate.kind: 'mixture' is not one of"),
    ({"workload": {"generate": {"kind": "moe", "options": {"size": {"a": 1}}}}, "ranks": {"count": 4}},
     "workload.generate.options.size: option values must be scalars"),
    ({"workload": {"collectives": [{"type": "all_reduce", "group": "0-3", "size": "1MiB"}, {"type": "all_to_all", "group": "0-3"}]}},
     "workload.collectives[1].size: required"),
    (coll(type="allreduce"), "workload.collectives[0].type: 'allreduce' is not one of"),
    (coll(group="3-0"), "workload.collectives[0].group: range '3-0' runs backwards"),
    (coll(group="0-3,2"), "workload.collectives[0].group: rank 2 listed twice"),
    (coll(group="zero"), "workload.collectives[0].group: cannot read 'zero' as ranks"),
    (coll(group=[0, -1]), "workload.collectives[0].group[1]: expected a rank"),
    (coll(group=[0]), "workload.collectives[0].group: a collective needs at least 2 ranks"),
    (coll(algorithm="tree"), "workload.collectives[0].algorithm: 'tree' is not an algorithm for all_reduce"),
    (coll(root=0), "workload.collectives[0].root: only rooted collectives take a root"),
    (coll(start_offset="1500ns"), "workload.collectives[0].start_offset: 1500 ns is not a whole number of µs"),
    (coll(gap="0.5us"), "workload.collectives[0].gap: 500 ns is not a whole number of µs"),
    (coll(gap=-1000), "workload.collectives[0].gap: duration must not be negative"),
    (coll(type="broadcast", root=7), "workload.collectives[0].root: rank 7 is not in the group"),
    (coll(start_offset="-5us"), "workload.collectives[0].start_offset: cannot read '-5us' as a duration"),
    (coll(gap=[1]), "workload.collectives[0].gap: expected a duration, got list"),
    (coll(iterations=0), "workload.collectives[0].iterations: must be at least 1"),
    (coll(sise="1MiB"), "workload.collectives[0].sise: unknown key (did you mean 'size'?)"),
    (with_({"workload": {"collectives": [{"type": "barrier", "group": [0, 1], "name": "x"},
                                         {"type": "barrier", "group": [2, 3], "name": "x"}]}}),
     "workload.collectives[1].name: 'x' already names workload.collectives[0]"),
    ({"ranks": {"count": 4}, "workload": {"trace": {"prefix": "pkg:data/traces/microbenchmarks/all_reduce/8npus_1MB/all_reduce"}}},
     "ranks.count: 4, but the trace has 8 rank files"),
    (with_({"workload": {"collectives": {"type": "all_reduce"}}}), "workload.collectives: expected a list, got dict"),
    (with_({"workload": {"compile": {"algorithms": {"all_reduce": "pairwise"}}}}),
     "workload.compile.algorithms.all_reduce: 'pairwise' is not an algorithm for all_reduce"),
    (with_({"workload": {"compile": {"algorithms": {"allreduce": "ring"}}}}),
     "workload.compile.algorithms.allreduce: unknown collective type (did you mean 'all_reduce'?)"),
    (with_({"congestion_control": {"preset": "dcqcn"}}), "congestion_control.preset: 'dcqcn' is not one of"),
    (with_({"congestion_control": {"preset": "fixed"}}), "congestion_control.rate: required with preset fixed"),
    (with_({"congestion_control": {"rate": "1Gbps"}}), "congestion_control.rate: only preset fixed takes a rate"),
    (with_({"congestion_control": {"preset": "none", "overrides": {"g": 0.1}}}),
     "congestion_control.overrides: preset none has no DCQCN knobs"),
    (with_({"congestion_control": {"overrides": {"rpg_ai_rat": 5}}}),
     "congestion_control.overrides.rpg_ai_rat: unknown congestion-control knob (did you mean 'rpg_ai_rate'?)"),
    (with_({"congestion_control": {"overrides": {"dce_tcp_g": 2000}}}), "congestion_control.overrides.dce_tcp_g: must be at most 1023"),
    (with_({"congestion_control": {"overrides": {"clamp_tgt_rate": 1}}}), "congestion_control.overrides.clamp_tgt_rate: expected true or false"),
    (with_({"congestion_control": {"overrides": {"g": "2/1"}}}), "congestion_control.overrides.g: must be between 0 and 1"),
    (with_({"congestion_control": {"overrides": {"alpha_timer": "55us"}}}),
     "congestion_control.overrides.alpha_timer: not a knob of the firmware-form preset connectx"),
    (with_({"congestion_control": {"preset": "paper", "overrides": {"rpg_ai_rate": 5}}}),
     "congestion_control.overrides.rpg_ai_rate: not a knob of the paper-form preset paper"),
    (with_({"congestion_control": {"overrides": {"rate_ai": "5Mbps", "rpg_ai_rate": 5}}}),
     "congestion_control.overrides.rpg_ai_rate: sets the same knob as 'rate_ai'"),
    (with_({"congestion_control": {"preset": "paper", "overrides": {"K": "55us", "alpha_timer": "50us"}}}),
     "congestion_control.overrides.alpha_timer: given twice"),
    (with_({"slo": ["all_reduce.cct.p99 << 5ms"]}), "slo[0]: cannot read '< 5ms' as a threshold"),
    (with_({"slo": ["all_reduce.cct.p99 < 5 parsecs"]}), "slo[0]: unknown unit 'parsecs' in '5 parsecs'"),
    (with_({"slo": ["x < 5zz"]}), "slo[0]: unknown unit 'zz'"),
    (with_({"slo": [{"metric": "x"}]}), "slo[0]: expected a line like"),
    (with_({"output": {"formats": ["json", "pdf"]}}),
     "output.formats[1]: 'pdf' is not one of text, json, csv, html, timeline, plots"),
    (with_({"output": {"formats": "json"}}), "output.formats: expected a list, got str"),
    (with_({"description": ["a"]}), "description: expected a string, got list"),
    (with_({3: "x"}), "3: keys must be strings"),
]


@pytest.mark.parametrize("data,expected", CASES, ids=[c[1][:50] for c in CASES])
def test_error_names_file_and_key_path_on_one_line(write, data, expected):
    path = write("bad.yaml", data)
    with pytest.raises(ConfigError) as info:
        load_profile(path, env={})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: "), message
    assert expected in message, message
    if "is not one of" in message:
        assert "known:" not in message, "the choices are listed once"


def test_dict_errors_name_the_source():
    with pytest.raises(ConfigError, match=r"^results\.json: fabric\.ports\.buffer: cannot read"):
        profile_from_dict(with_({"fabric": {"ports": {"buffer": "lots"}}}), source="results.json")


@pytest.mark.parametrize("text,expected", [
    ("fabric: [1, 2\n", "line 2: not valid YAML"),
    ("- a\n- b\n", "a profile is a mapping of keys, got a list"),
    ("workload: {collectives: [{type: all_reduce, size: 1MiB}]}\n", "ranks.count: required when no collective names its group"),
])
def test_file_level_errors(write, text, expected):
    path = write("f.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_profile(path, env={})
    assert str(info.value).startswith(f"{path}: ") and expected in str(info.value)


def test_missing_profile_file(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml: no such profile file"):
        load_profile(tmp_path / "nope.yaml", env={})
