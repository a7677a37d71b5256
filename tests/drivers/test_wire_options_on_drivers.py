"""Wire options through the drivers: ``icrc: compute`` frames verify; flows cut into several messages run.

* ICRC on real sockets: a packet socket on ``lo`` (root only; skipped otherwise) captures the frames a
  2-rank run sends (one packet per datagram: ``max_segments=1``, so the kernel sends each as its own
  frame) and every RoCE frame's ICRC is checked against its real IP/UDP headers: on ``direct`` all of
  them, on ``loopback`` those from the ranks to the software switch (the switch relays packets as new
  datagrams from its own socket: those copies are not the ranks' frames).
* sim: every datagram the endpoints hand to the sim verifies for the virtual hosts 10.0.0.1 + rank.
* Multi-message flows (a small ``max_message_bytes`` stands in for 2^31 − 1) complete on every driver.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time

import pytest
from support.endpoint import make_schedule, recv, segments, send

from emulator.drivers.direct import DirectConfig, run_direct
from emulator.drivers.loopback import LoopbackConfig, run_loopback
from emulator.drivers.sim import SimConfig, run_sim
from emulator.endpoint.config import EndpointConfig, virtual_addresses
from emulator.endpoint.endpoint import RankEndpoint
from emulator.fabric.port import PortConfig
from emulator.pacing.red import RedParams
from emulator.wire import IcrcContext, check_frame_icrc, udp_source_port

_ETH_P_IP = 0x0800


def _pair_schedule(size_a: int, size_b: int):
    """Rank 0 sends ``size_a`` to rank 1 while rank 1 sends ``size_b`` to rank 0."""
    return make_schedule(2, [(0, 1, size_a, 0), (1, 0, size_b, 1)], {0: [send(0), recv(1)], 1: [recv(0), send(1)]})


class _Capture:
    """IPv4/UDP frames crossing ``lo`` (each seen once) while the context is open."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self._stop = threading.Event()

    def __enter__(self) -> _Capture:
        try:
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_IP))
        except (PermissionError, AttributeError, OSError) as exc:
            pytest.skip(f"no packet socket on lo: {exc}")
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.05)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(1 << 17)
            except TimeoutError:
                continue
            except OSError:
                return
            if len(data) > 42 and data[23] == 17:  # IPv4 protocol UDP
                self.frames.append(data[14:])  # without the Ethernet header

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.2)
        self._stop.set()
        self._t.join(5)
        self.sock.close()

    def udp(self, dport: int | None = None, sport: int | None = None) -> list[bytes]:
        """IP packets of the capture with these UDP ports."""
        out = []
        for ip in self.frames:
            ihl = (ip[0] & 15) * 4
            s, d = struct.unpack_from("!HH", ip, ihl)
            if (dport is None or d == dport) and (sport is None or s == sport):
                out.append(ip)
        return out


def _port() -> int:
    return random.Random(os.getpid() ^ 0x1C2C).randrange(30000, 40000)


def test_direct_frames_carry_a_valid_icrc():
    port = _port()
    s = _pair_schedule(40_000, 1_000)
    ep = EndpointConfig(line_rate_bps=1e9, retransmit_timeout_ns=30_000_000, icrc="compute", max_segments=1)
    cfg = DirectConfig(addresses=("127.0.0.21", "127.0.0.22"), udp_port=port, ranks_per_worker=1)
    with _Capture() as cap:
        res = run_direct(s, cfg, ep, timeout_s=30)
    assert res.complete, res.errors
    frames = cap.udp(dport=port)
    roce = [ip for ip in frames if ip[12:16] in (socket.inet_aton("127.0.0.21"), socket.inet_aton("127.0.0.22"))]
    assert len(roce) >= 12  # 10 + 1 data packets and their ACKs
    bad = [ip[28] for ip in roce if not check_frame_icrc(ip)]
    assert bad == []
    assert {ip[28] for ip in roce} >= {0x06, 0x07, 0x08, 0x0A, 0x11}  # FIRST, MIDDLE, LAST, ONLY, ACK


def test_direct_frames_without_compute_carry_zero():
    """The default stays four zero bytes (what the capture above would otherwise see)."""
    port = _port() + 1
    s = _pair_schedule(5000, 100)
    ep = EndpointConfig(line_rate_bps=1e9, retransmit_timeout_ns=30_000_000, max_segments=1)
    cfg = DirectConfig(addresses=("127.0.0.23", "127.0.0.24"), udp_port=port, ranks_per_worker=1)
    with _Capture() as cap:
        res = run_direct(s, cfg, ep, timeout_s=30)
    assert res.complete, res.errors
    frames = cap.udp(dport=port)
    assert frames and all(ip[-4:] == b"\0\0\0\0" and not check_frame_icrc(ip) for ip in frames)


def test_loopback_frames_from_the_ranks_carry_a_valid_icrc():
    base = _port() + 2
    s = _pair_schedule(30_000, 5_000)
    ep = EndpointConfig(line_rate_bps=1e9, retransmit_timeout_ns=30_000_000, icrc="compute", max_segments=1)
    cfg = LoopbackConfig(port=PortConfig(rate_bps=1e9, buffer_bytes=1 << 20, red=RedParams()), port_base=base,
                         ranks_per_worker=2)  # fmt: skip
    with _Capture() as cap:
        res = run_loopback(s, cfg, ep, seed=1, timeout_s=30)
    assert res.complete, res.errors
    to_switch = cap.udp(dport=base)
    assert len(to_switch) >= 10
    assert [ip[28] for ip in to_switch if not check_frame_icrc(ip)] == []


def test_sim_datagrams_carry_the_icrc_of_the_virtual_hosts(monkeypatch):
    seen: list[tuple[int, object]] = []
    orig = RankEndpoint.poll_transmit

    def tap(self, now_ns, max_batches=64):
        out = orig(self, now_ns, max_batches)
        seen.extend((self.rank, tx) for tx in out)
        return out

    monkeypatch.setattr(RankEndpoint, "poll_transmit", tap)
    s = _pair_schedule(200_000, 10_000)
    res = run_sim(s, SimConfig(port_rate_bps=25e9, buffer_bytes=1 << 20, latency_ns=1000, red=RedParams()),
                  EndpointConfig(line_rate_bps=25e9, icrc="compute", max_message_bytes=50_000), seed=1,
                  time_limit_ns=10**9)  # fmt: skip
    assert res.complete
    addrs = virtual_addresses(2)
    checked = firsts = 0
    for src, tx in seen:
        for k, pkt in enumerate(segments(tx)):
            dqpn = int.from_bytes(pkt[5:8], "big")
            lqpn = dqpn + 1 if dqpn % 2 == 0 else dqpn - 1  # data to a receiver QPN (even), else to a sender
            sport = udp_source_port(lqpn, dqpn)
            assert IcrcContext(addrs[src], addrs[tx.dst_rank], ip_id=k).check(sport, 4791, pkt), (src, k, pkt[0])
            checked += 1
            firsts += pkt[0] == 0x06
    assert checked > 50 and firsts == 5  # 200 kB in 49152-byte messages: 4 FIRST (+ an ONLY); 10 kB: 1


@pytest.mark.parametrize("driver", ["sim", "loopback", "direct"])
def test_flows_of_several_messages_complete_on_every_driver(driver):
    """8000-byte messages: a 50 kB flow is 7 messages, a 3 kB one 1; every byte arrives, one op per flow."""
    s = _pair_schedule(50_000, 3_000)
    ep = EndpointConfig(line_rate_bps=1e9, retransmit_timeout_ns=30_000_000, max_message_bytes=8000, mtu_bytes=1024)
    if driver == "sim":
        res = run_sim(s, SimConfig(port_rate_bps=1e9, buffer_bytes=1 << 20, latency_ns=1000, red=RedParams()), ep,
                      seed=1, time_limit_ns=10**9)  # fmt: skip
        recs = res.records
    elif driver == "loopback":
        cfg = LoopbackConfig(port=PortConfig(rate_bps=1e9, buffer_bytes=1 << 20, red=RedParams()), ranks_per_worker=2)
        res = run_loopback(s, cfg, ep, seed=1, timeout_s=30)
        assert res.complete, res.errors
        recs = res.records
    else:
        cfg = DirectConfig(addresses=("127.0.0.25", "127.0.0.26"), udp_port=_port() + 3, ranks_per_worker=1)
        res = run_direct(s, cfg, ep, timeout_s=30)
        assert res.complete, res.errors
        recs = res.records
    assert recs[1].counters["bytes_received"] == 50_000 and recs[0].counters["bytes_received"] == 3_000
    assert recs[1].counters["bad_packets"] == 0 and recs[1].counters["opcode_errors"] == 0
    for rec in recs.values():
        assert (rec.end_ns >= 0).all()
    assert int(recs[0].packets[0]) >= 49  # the SEND op's record counts the packets of all 7 messages


@pytest.mark.slow
def test_a_flow_just_above_2_gib_crosses_real_sockets():
    """2^31 + 4096 bytes rank 0 → rank 1 on direct (two messages: 2^31 − 4096 and 8192 bytes)."""
    size = (1 << 31) + 4096
    s = make_schedule(2, [(0, 1, size, 0)], {0: [send(0)], 1: [recv(0)]})
    ep = EndpointConfig(cc="none", line_rate_bps=100e9, retransmit_timeout_ns=50_000_000)
    cfg = DirectConfig(addresses=("127.0.0.27", "127.0.0.28"), udp_port=_port() + 4, ranks_per_worker=1)
    res = run_direct(s, cfg, ep, timeout_s=120)
    assert res.complete, res.errors
    rx = res.records[1]
    assert rx.counters["bytes_received"] == size and rx.counters["bad_packets"] == 0
    assert int(rx.packets[0]) == size // 4096  # 524287 + 2 packets
