"""Runs on real hosts, NICs and switches through the controller; skipped without ``--lab`` (README.md)."""

from __future__ import annotations

import pytest

from emulator.commands.agent import read_token
from emulator.endpoint.config import EndpointConfig
from emulator.remote.controller import ControllerConfig, run_remote
from emulator.remote.hosts import parse_hosts
from emulator.schedule.compiler import compile_trace
from emulator.trace.generators.common import coll_node, p2p_node
from emulator.trace.model import CollectiveType, NodeType, ProcessGroup, RankGraph, Trace
from emulator.units import parse_duration_ns, parse_rate_bps, parse_size_bytes


def _run(lab: dict, schedule):
    plan = parse_hosts({"hosts": lab["hosts"]}, lab["source"])
    ep = EndpointConfig(line_rate_bps=float(parse_rate_bps(lab.get("line_rate", "25Gbps"))),
                        data_dscp=int(lab.get("dscp", 26)), retransmit_timeout_ns=5_000_000)
    cfg = ControllerConfig(token=read_token(lab["token_file"], "token_file"), ca_file=lab.get("ca_file"),
                           linger_s=3.0)
    timeout_s = parse_duration_ns(lab.get("timeout", "120s")) / 1e9
    return run_remote(schedule, plan, ep, udp_port=int(lab.get("udp_port", 4792)), timeout_s=timeout_s, cfg=cfg)


def _world(lab: dict) -> int:
    return parse_hosts({"hosts": lab["hosts"]}, lab["source"]).world_size


def _size(lab: dict) -> int:
    return parse_size_bytes(lab.get("size", "4MiB"))


def test_hw_mixed_run(lab):
    n = _world(lab)
    evens, odds = tuple(range(0, n, 2)), tuple(range(1, n, 2))
    if len(evens) < 2 or len(odds) < 2:
        pytest.skip("needs at least 4 ranks")
    ranks = {r: RankGraph(r, [coll_node(0, "c", CollectiveType.ALL_REDUCE if r % 2 == 0 else CollectiveType.ALL_TO_ALL,
                                        _size(lab), pg_name="e" if r % 2 == 0 else "o")]) for r in range(n)}
    s = compile_trace(Trace(ranks=ranks, groups={"e": ProcessGroup("e", evens), "o": ProcessGroup("o", odds)}))
    res = _run(lab, s)
    assert res.complete, (res.errors, res.health["warnings"])
    for r in range(n):
        assert res.records[r].counters["bytes_received"] == int(s.flow_size_bytes[s.flow_dst == r].sum())
    for h in res.health["hosts"]:
        assert h["uncertainty_ns"] < 1_000_000, f"clock offset of {h['agent']} uncertain by {h['uncertainty_ns']} ns"


def test_hw_incast(lab):
    """Every other rank sends to rank 0 at once. With ``expect.ecn_marking`` rank 0 must see CE marks and
    send CNPs; with ``expect.pfc`` the fabric is lossless: no NAK and no retransmit timeout anywhere."""
    n = _world(lab)
    senders = range(1, n)
    size = _size(lab)
    ranks = {0: RankGraph(0, [p2p_node(i, f"r{i}", NodeType.COMM_RECV_NODE, size, i, 0, 0) for i in senders])}
    for i in senders:
        ranks[i] = RankGraph(i, [p2p_node(0, "s", NodeType.COMM_SEND_NODE, size, i, 0, 0)])
    res = _run(lab, compile_trace(Trace(ranks=ranks)))
    assert res.complete, (res.errors, res.health["warnings"])
    expect = lab.get("expect") or {}
    if expect.get("ecn_marking"):
        rx = res.records[0]
        assert int(rx.ce_marks.sum()) > 0, "no CE marks arrived: is ECN marking on for the data DSCP?"
        assert rx.counters["cnps_sent"] > 0
    if expect.get("pfc"):
        lossy = {r: (rec.counters.get("naks_received", 0), rec.counters.get("timeouts", 0))
                 for r, rec in res.records.items() if rec.counters.get("naks_received", 0) or rec.counters.get("timeouts", 0)}
        assert not lossy, f"PFC expected lossless, but ranks saw (NAKs, timeouts): {lossy}"
