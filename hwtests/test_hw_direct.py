"""Direct-driver tests on real NICs and hosts; skipped unless EMULATOR_HW_ADDRESSES is set (README.md)."""

from __future__ import annotations

import os
import socket

import pytest

from emulator.drivers.direct import DirectConfig, run_direct
from emulator.endpoint.config import EndpointConfig
from emulator.schedule.compiler import compile_trace
from emulator.trace.generators.common import coll_node, p2p_node
from emulator.trace.model import CollectiveType, NodeType, ProcessGroup, RankGraph, Trace
from emulator.units import parse_rate_bps, parse_size_bytes

ADDRESSES = tuple(a.strip() for a in os.environ.get("EMULATOR_HW_ADDRESSES", "").split(",") if a.strip())
pytestmark = pytest.mark.skipif(len(ADDRESSES) < 2, reason="set EMULATOR_HW_ADDRESSES (hwtests/README.md)")


def _local_ranks() -> tuple[int, ...]:
    text = os.environ.get("EMULATOR_HW_LOCAL_RANKS")
    if text:
        return tuple(int(x) for x in text.split(",") if x.strip())
    mine = []
    for r, addr in enumerate(ADDRESSES):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind((addr, 0))
            mine.append(r)
        except OSError:
            pass
        finally:
            s.close()
    return tuple(mine)


def _config() -> DirectConfig:
    local = _local_ranks()
    if not local:
        pytest.skip("none of EMULATOR_HW_ADDRESSES is configured on this host")
    return DirectConfig(addresses=ADDRESSES, udp_port=int(os.environ.get("EMULATOR_HW_PORT", "4792")),
                        local_ranks=local, linger_s=3.0, stall_timeout_s=30.0)


def _endpoint() -> EndpointConfig:
    return EndpointConfig(line_rate_bps=parse_rate_bps(os.environ.get("EMULATOR_HW_LINE_RATE", "25Gbps")),
                          data_dscp=int(os.environ.get("EMULATOR_HW_DSCP", "26")),
                          retransmit_timeout_ns=5_000_000)


def _size() -> int:
    return parse_size_bytes(os.environ.get("EMULATOR_HW_SIZE", "4MiB"))


def _timeout() -> float:
    return float(os.environ.get("EMULATOR_HW_TIMEOUT_S", "120"))


def _expected_rx(schedule, rank: int) -> int:
    return int(schedule.flow_size_bytes[schedule.flow_dst == rank].sum())


def test_hw_mixed_run():
    n = len(ADDRESSES)
    evens, odds = tuple(range(0, n, 2)), tuple(range(1, n, 2))
    if len(evens) < 2 or len(odds) < 2:
        pytest.skip("needs at least 4 ranks")
    ranks = {}
    for r in range(n):
        coll = CollectiveType.ALL_REDUCE if r % 2 == 0 else CollectiveType.ALL_TO_ALL
        ranks[r] = RankGraph(r, [coll_node(0, "c", coll, _size(), pg_name="e" if r % 2 == 0 else "o")])
    s = compile_trace(Trace(ranks=ranks, groups={"e": ProcessGroup("e", evens), "o": ProcessGroup("o", odds)}))
    cfg = _config()
    res = run_direct(s, cfg, _endpoint(), timeout_s=_timeout())
    assert res.complete, (res.errors, res.health["warnings"])
    for r in cfg.local_ranks:
        assert res.records[r].counters["bytes_received"] == _expected_rx(s, r)


def test_hw_incast_ecn():
    n = len(ADDRESSES)
    senders = range(1, n)
    ranks = {0: RankGraph(0, [p2p_node(i, f"r{i}", NodeType.COMM_RECV_NODE, _size(), i, 0, 0) for i in senders])}
    for i in senders:
        ranks[i] = RankGraph(i, [p2p_node(0, "s", NodeType.COMM_SEND_NODE, _size(), i, 0, 0)])
    s = compile_trace(Trace(ranks=ranks))
    cfg = _config()
    res = run_direct(s, cfg, _endpoint(), timeout_s=_timeout())
    assert res.complete, (res.errors, res.health["warnings"])
    if os.environ.get("EMULATOR_HW_EXPECT_ECN") == "1" and 0 in cfg.local_ranks:
        rx = res.records[0]
        assert int(rx.ce_marks.sum()) > 0, "no CE marks arrived: is ECN marking on for the data DSCP?"
        assert rx.counters["cnps_sent"] > 0
