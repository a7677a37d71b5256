"""to_dict round trips, canonical units, and unit parsing/formatting properties."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator.config import load_profile, load_profiles, profile_from_dict
from emulator.schema import UNIT_PARSERS, format_exact

PROFILES = Path(__file__).resolve().parents[2] / "profiles"


def _all_shipped():
    for path in sorted(PROFILES.glob("*.yaml")):
        yield from load_profiles(path, env={})


@pytest.mark.parametrize("profile", list(_all_shipped()), ids=lambda p: p.name)
def test_shipped_profiles_round_trip_through_to_dict(profile):
    data = profile.to_dict()
    text = json.dumps(data)  # plain JSON-able data
    again = profile_from_dict(json.loads(text))
    assert again == profile
    assert again.to_dict() == data


def test_to_dict_uses_canonical_integer_units(write):
    p = write("p.yaml", """
timeout: 1.5s
fabric:
  ports: {rate: 2.5Gbps, buffer: 4KiB, latency: 10us}
  ecn: {kmin: 1KB, kmax: 2KiB, pmax: 5%}
congestion_control: {preset: paper, overrides: {K: 55us, R_AI: 40Mbps, g: 1/256, B: 10MB}}
workload:
  collectives: [{type: all_to_all, group: '0-2', size: 1.5MiB, start_offset: 2ms, gap: 3us}]
""")
    d = load_profile(p, env={}).to_dict()
    assert d["timeout"] == 1_500_000_000
    assert d["fabric"]["ports"] == {"rate": 2_500_000_000, "buffer": 4096, "latency": 10_000}
    assert d["fabric"]["ecn"] == {"enabled": True, "kmin": 1000, "kmax": 2048, "pmax": 0.05}
    assert d["congestion_control"]["overrides"] == {"alpha_timer": 55_000, "rate_ai": 40_000_000, "g": 1 / 256,
                                                    "byte_counter": 10_000_000}
    c = d["workload"]["collectives"][0]
    assert (c["group"], c["size"], c["start_offset"], c["gap"]) == ([0, 1, 2], 1_572_864, 2_000_000, 3000)
    assert d["ranks"]["count"] == 3 and "hosts" not in d["ranks"]
    assert "matrix" not in d and "extends" not in d


def test_derived_values_are_filled(write):
    p = write("p.yaml", """
fabric:
  kind: direct
  udp_port: 5000
  topology: {kind: leaf_spine, leaves: 2, spines: 2, oversubscription: 2}
  ports: {rate: 10Gbps, buffer: 1MiB}
ranks: {count: 8}
workload: {collectives: [{type: all_reduce, size: 1MiB}]}
""")
    prof = load_profile(p, env={})
    topo = prof.fabric.topology
    assert (topo.hosts_per_leaf, topo.uplink_rate_bps) == (4, 10 * 10**9)  # 4 × 10G / (2 × 2)
    assert prof.ranks.hosts == (0, 4, 1, 5, 2, 6, 3, 7)  # round robin over the leaves
    assert [prof.leaf_of(r) for r in range(8)] == [0, 1] * 4
    assert prof.fabric.pfc.xoff_bytes == 786_432 and prof.fabric.pfc.xon_bytes == 524_288
    assert prof.fabric.direct.endpoints[0] == ("127.0.0.2", 5000)
    assert prof.fabric.direct.endpoints[7] == ("127.0.0.9", 5000)
    block = load_profile(p, overrides=["ranks.placement=block"], env={})
    assert block.ranks.hosts == tuple(range(8))
    explicit = load_profile(p, overrides=["ranks.placement=[0,0,1,1,4,4,5,5]"], env={})
    assert explicit.ranks.hosts == (0, 0, 1, 1, 4, 4, 5, 5)


def test_inline_collectives_are_made_explicit(write):
    p = write("p.yaml", """
ranks: {count: 6}
workload:
  compile: {algorithms: {all_to_all: pairwise}, chunks: 2}
  collectives:
    - {type: all_to_all, size: 1MiB}
    - {type: broadcast, group: '3-5', size: 1MiB, name: bcast}
    - {type: all_reduce, group: '0-1', size: 1MiB, chunks: 1, algorithm: halving-doubling}
""")
    a2a, bcast, ar = load_profile(p, env={}).workload.collectives
    assert (a2a.group, a2a.algorithm, a2a.chunks, a2a.name, a2a.root) == (tuple(range(6)), "pairwise", 2, "all_to_all#0", None)
    assert (bcast.root, bcast.algorithm, bcast.name) == (3, "ring", "bcast")  # first group member; compiler default
    assert (ar.algorithm, ar.chunks) == ("halving_doubling", 1)


def test_direct_rank_list(write):
    p = write("p.yaml", """
fabric:
  kind: direct
  direct:
    ranks: [{rank: 1, address: '::1', port: 7000}, {rank: 0, address: 127.0.0.5}]
workload: {collectives: [{type: all_reduce, group: [0, 1], size: 1MiB}]}
""")
    prof = load_profile(p, env={})
    assert prof.fabric.direct.endpoints == (("127.0.0.5", 4791), ("::1", 7000))
    assert profile_from_dict(prof.to_dict()) == prof
    # several direct ranks may live on one host (machine); leaf analysis follows the host
    shared = load_profile(p, overrides=["ranks.placement=[1,1]"], env={})
    assert shared.ranks.hosts == (1, 1)


def test_cc_overrides_translate_to_pacing_kwargs(write):
    p = write("p.yaml", """
congestion_control:
  preset: connectx
  overrides: {dce_tcp_rtt: 2us, rpg_ai_rate: 10Gbps, T: 55us, min_time_between_cnps: 8, fast_recovery_steps: 5}
workload: {collectives: [{type: all_reduce, group: [0, 1], size: 1MiB}]}
""")
    rp, np_ = load_profile(p, env={}).congestion_control.pacing_kwargs()
    assert rp == {"dce_tcp_rtt_us": 2, "rpg_ai_rate_mbps": 10_000, "rpg_time_reset_us": 55.0, "rpg_threshold": 5}
    assert np_ == {"min_time_between_cnps_ns": 8000}
    from emulator.pacing import get_params

    params = get_params("connectx", 25e9, **rp)
    assert params.rpg_time_reset_us == 55.0 and params.rpg_threshold == 5


def test_paper_overrides_translate_to_pacing_kwargs():
    prof = profile_from_dict({"congestion_control": {"preset": "paper", "overrides": {
        "g": "1/16", "K": "50us", "R_HAI": "100Mbps", "N": "50us", "max_rate": "10Gbps"}},
        "workload": {"collectives": [{"type": "barrier", "group": [0, 1]}]}})
    rp, np_ = prof.congestion_control.pacing_kwargs()
    assert rp == {"g": 1 / 16, "alpha_timer_us": 50.0, "rate_hai_mbps": 100.0, "max_rate_mbps": 10_000.0}
    assert np_ == {"min_time_between_cnps_ns": 50_000}


def test_slo_records(write):
    prof = profile_from_dict({"slo": ["all_reduce.cct.p99 < 5ms", "stragglers.max_skew<20%", "busbw.min >= 10Gbps",
                                      "flows.incomplete == 0", "x.bytes <= 4MiB"],
                              "workload": {"collectives": [{"type": "barrier", "group": [0, 1]}]}})
    got = [(s.metric, s.op, s.value, s.unit) for s in prof.slo]
    assert got == [("all_reduce.cct.p99", "<", 5e6, "ns"), ("stragglers.max_skew", "<", 0.2, "fraction"),
                   ("busbw.min", ">=", 1e10, "bps"), ("flows.incomplete", "==", 0.0, ""),
                   ("x.bytes", "<=", 4 * 2**20, "bytes")]
    assert prof.slo[0].holds(4e6) and not prof.slo[0].holds(6e6)
    assert prof.to_dict()["slo"][1] == "stragglers.max_skew < 20%"


# ------------------------------------------------------------------------------------ properties

UNITS = {"bytes": ["", "B", "KB", "KiB", "MB", "MiB", "GiB"], "bps": ["", "bps", "Kbps", "Mbps", "Gbps", "Gb/s"],
         "ns": ["", "ns", "us", "ms", "s"]}
FACTORS = {"": 1, "B": 1, "KB": 10**3, "KiB": 2**10, "MB": 10**6, "MiB": 2**20, "GiB": 2**30, "bps": 1, "Kbps": 10**3,
           "Mbps": 10**6, "Gbps": 10**9, "Gb/s": 10**9, "ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9}


@given(unit=st.sampled_from(sorted(UNITS)), value=st.integers(min_value=0, max_value=10**15))
def test_format_exact_parses_back_to_the_same_integer(unit, value):
    text = format_exact(value, unit)
    assert UNIT_PARSERS[unit](text, "k") == value


@given(data=st.data(), n=st.integers(min_value=0, max_value=10**6))
def test_integer_with_unit_parses_exactly(data, n):
    unit = data.draw(st.sampled_from(sorted(UNITS)))
    suffix = data.draw(st.sampled_from(UNITS[unit]))
    assert UNIT_PARSERS[unit](f"{n}{suffix}", "k") == n * FACTORS[suffix]


_rate = st.integers(min_value=1, max_value=400).map(lambda g: f"{g}Gbps")
_size = st.one_of(st.integers(min_value=1, max_value=64).map(lambda k: f"{k}KiB"),
                  st.integers(min_value=1, max_value=10**7))
_dur = st.integers(min_value=0, max_value=10**6).map(lambda n: f"{n}ns")
_us = st.integers(min_value=0, max_value=10**3).map(lambda n: f"{n * 1000}ns")  # inline delays: whole µs
_coll = st.fixed_dictionaries(
    {"type": st.sampled_from(["all_reduce", "all_to_all", "all_gather", "reduce_scatter"]),
     "group": st.sampled_from(["0-3", "0-7", [1, 3, 5], "4-7"]), "size": _size},
    optional={"iterations": st.integers(1, 5), "start_offset": _us, "gap": _us, "chunks": st.integers(1, 4),
              "name": st.text("abc", min_size=1, max_size=4)})
_raw = st.fixed_dictionaries(
    {"workload": st.fixed_dictionaries({"collectives": st.lists(_coll, min_size=1, max_size=3, unique_by=lambda c: c.get("name") or object())})},
    optional={
        "seed": st.integers(0, 2**31), "timeout": _dur.map(lambda d: d.replace("ns", "ms") if d != "0ns" else "1s"),
        "fabric": st.fixed_dictionaries({}, optional={
            "kind": st.sampled_from(["sim", "loopback", "direct"]),
            "ports": st.fixed_dictionaries({}, optional={"rate": _rate, "latency": _dur}),
            "ecn": st.fixed_dictionaries({}, optional={"pmax": st.sampled_from(["1%", 0.5, "1/4"])}),
            "mtu": st.sampled_from([1024, "2KiB", 4096]),
            "topology": st.sampled_from(["single_switch", {"kind": "leaf_spine", "leaves": 2, "oversubscription": 3}]),
        }),
        "congestion_control": st.sampled_from([{"preset": "none"}, {"preset": "fixed", "rate": "3Gbps"},
                                               {"preset": "paper", "overrides": {"F": 3, "T": "40us"}},
                                               {"preset": "hpcc-ns3", "overrides": {"rpg_gd": 9}}]),
    })


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=_raw)
def test_generated_profiles_round_trip(raw):
    fabric = raw.get("fabric", {})
    if fabric.get("kind") == "loopback" and isinstance(fabric.get("topology"), dict):
        return  # the loopback software switch is a single switch (an error, tested in test_profile_errors)
    prof = profile_from_dict(yaml.safe_load(yaml.safe_dump(raw)))
    data = prof.to_dict()
    again = profile_from_dict(json.loads(json.dumps(data)))
    assert again == prof
    assert again.to_dict() == data
