"""``EndpointConfig.line_rate_burst_batches``: in a socket driver's mode the line-rate pacers (the NIC's, a
queue pair's under ``cc: none``) hold at least that many whole GSO batches, so a late visit sends that many;
pacers below the line rate, and every other mode (the sim's, the loopback's model time), keep their bursts.
The direct driver sets it (``DirectConfig.line_rate_burst_batches``)."""

from __future__ import annotations

import os
import random
from dataclasses import replace

import pytest
from support.endpoint import make_schedule, recv, send

from emulator.drivers import direct as direct_mod
from emulator.drivers.direct import DirectConfig, run_direct
from emulator.endpoint.config import EndpointConfig
from emulator.endpoint.endpoint import RankEndpoint
from emulator.errors import ConfigError

_SOCKET = {"pace_full_batches": True, "defer_acks": True, "socket_sends": True}
_RATE = 25e9  # the collectives' line rate: a 20 µs burst is 62,500 B, so 2 batches without the floor


def _sender(cc: str = "none", qps: int = 1, **kw) -> RankEndpoint:
    sched = make_schedule(2, [(0, 1, 64 << 20, 0)], {0: [send(0)], 1: [recv(0)]})
    cfg = EndpointConfig(mtu_bytes=4096, cc=cc, line_rate_bps=_RATE, qps_per_peer=qps, retransmit_timeout_ns=10**12,
                         cc_overrides=(("rate_bps", 1e9),) if cc == "fixed" else (), **kw)  # fmt: skip
    a = RankEndpoint(0, sched, cfg)
    a.start(0)
    return a


def _bursts(a: RankEndpoint) -> tuple[int, int, int]:
    tx = a._tx
    return tx.nic.burst_bytes, next(iter(tx.qps.values())).pacer.burst_bytes, tx.burst


@pytest.mark.parametrize("n", [4, 8])
def test_line_rate_pacers_hold_the_batches_asked_and_a_late_visit_sends_them_within_the_buckets_bound(n):
    a = _sender(**_SOCKET, line_rate_burst_batches=n)
    nic, qp, batch = _bursts(a)
    assert nic == qp == n * batch
    a.poll_transmit(1)  # the message's FIRST packet goes in a send of its own
    polls = []
    for now in range(1_000_000, 6_000_000, 1_000_000):  # a driver short of CPU: every poll is late
        txs = a.poll_transmit(now)
        polls.append((now, len(txs), sum(len(tx.data) + len(tx.data) // 4112 * 66 for tx in txs)))
    assert [k for _, k, _ in polls] == [n] * len(polls)  # the whole floor per visit, never more
    for i in range(len(polls)):  # over every window: no more than the bucket plus the line rate
        for j in range(i, len(polls)):
            sent = sum(c for _, _, c in polls[i : j + 1])
            assert sent <= nic + _RATE * (polls[j][0] - polls[i][0]) / 8e9 + 1


def test_without_the_floor_a_25_gbit_nic_holds_two_batches():
    nic, qp, batch = _bursts(_sender(**_SOCKET))
    assert nic == qp == 2 * batch


@pytest.mark.parametrize("mode", [{}, {"pace_full_batches": True}, {**_SOCKET, "model_time_service": True}])
def test_outside_socket_sends_the_floor_changes_no_burst(mode):
    """The sim's modes and the loopback's model-time service keep their buckets (sim digests unchanged)."""
    assert _bursts(_sender(**mode, line_rate_burst_batches=8)) == _bursts(_sender(**mode))


def test_a_queue_pair_paced_below_the_line_rate_keeps_its_burst():
    with_floor = _sender("fixed", **_SOCKET, line_rate_burst_batches=8)
    plain = _sender("fixed", **_SOCKET)
    nic, qp, batch = _bursts(with_floor)
    assert nic == 8 * batch  # the NIC runs at the line rate
    assert qp == _bursts(plain)[1] < nic  # a 1 Gbit/s queue pair does not


@pytest.mark.parametrize("bad", [-1, 65, True, 2.0])
def test_direct_config_rejects_a_floor_out_of_range(bad):
    with pytest.raises(ConfigError, match="line_rate_burst_batches"):
        DirectConfig(addresses=("127.0.0.1", "127.0.0.2"), line_rate_burst_batches=bad)


def test_the_direct_driver_hands_its_floor_to_the_endpoints_unless_they_set_one(monkeypatch):
    seen = []
    real = direct_mod.launch_workers

    def spy(sup, schedule, endpoint_config, *args, **kw):
        seen.append(endpoint_config.line_rate_burst_batches)
        return real(sup, schedule, endpoint_config, *args, **kw)

    monkeypatch.setattr(direct_mod, "launch_workers", spy)
    size = 1 << 20
    sched = make_schedule(2, [(0, 1, size, 0)], {0: [send(0)], 1: [recv(0)]})
    ep = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=_RATE, retransmit_timeout_ns=200_000_000)
    port = random.Random(os.getpid() + 61).randrange(30000, 40000)
    for cfg_n, ep_n, want in ((None, 0, 8), (0, 0, 0), (8, 3, 3)):
        kw = {} if cfg_n is None else {"line_rate_burst_batches": cfg_n}
        cfg = DirectConfig(addresses=("127.0.0.61", "127.0.0.62"), udp_port=port, ranks_per_worker=1, **kw)
        res = run_direct(sched, cfg, replace(ep, line_rate_burst_batches=ep_n), timeout_s=30)
        assert res.errors == [] and res.complete and res.bytes_counter("bytes_received") == size
        assert seen[-1] == want


@pytest.mark.parametrize(("rate", "batches"), [(1e9, 2), (10e9, 3), (25e9, 8), (100e9, 8)])
def test_the_floor_lasts_at_most_200_us_at_the_line_rate(rate, batches):
    """A slow link keeps its bursts: the floor is cut to the whole batches 200 µs at the line rate holds (the
    bucket never falls below its own burst: 2 batches in this mode)."""
    sched = make_schedule(2, [(0, 1, 64 << 20, 0)], {0: [send(0)], 1: [recv(0)]})
    cfg = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=rate, retransmit_timeout_ns=10**12, **_SOCKET,
                         line_rate_burst_batches=8)  # fmt: skip
    a = RankEndpoint(0, sched, cfg)
    a.start(0)
    nic, qp, batch = _bursts(a)
    assert nic == qp == max(batches * batch, -(-int(rate * 20_000 // 8e9) // batch) * batch)
