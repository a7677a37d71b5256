"""The direct data path's syscall economy on 127.0.0.x: whole GSO batches, few ACKs, every byte delivered.

The counts come from ``bench/goodput_direct.py``'s :func:`datapath_counts` (what the benches report per
GB), checked against the endpoint configuration: packets per ``sendmsg`` bounded by the GSO batch, and
one ACK per eighth of the window (:func:`emulator.drivers.direct.direct_ack_every`).
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
from pathlib import Path

import pytest

from emulator.drivers.direct import DirectConfig, direct_ack_every, run_direct
from emulator.endpoint.config import EndpointConfig

BENCH = Path(__file__).resolve().parents[2] / "bench" / "goodput_direct.py"


@pytest.fixture(scope="module")
def goodput():
    spec = importlib.util.spec_from_file_location("goodput_direct_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


def test_one_flow_goes_in_whole_gso_batches_with_an_ack_per_eighth_of_the_window(goodput):
    size = 24 << 20
    ep = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=10e9, retransmit_timeout_ns=200_000_000)
    port = random.Random(os.getpid() + 23).randrange(30000, 40000)
    cfg = DirectConfig(addresses=("127.0.0.41", "127.0.0.42"), udp_port=port, ranks_per_worker=1,
                       rcvbuf_bytes=4 << 20)
    res = run_direct(goodput._schedule(size), cfg, ep, timeout_s=60)
    assert res.errors == [] and res.complete, res.errors
    assert res.bytes_counter("bytes_received") == size and res.bytes_counter("retx_bytes") == 0
    counts = goodput.datapath_counts(res)
    # a GSO send never holds more than one batch, and nearly all of them are full (15 × 4112 B)
    assert 14.0 <= counts["packets_per_send"] <= ep.batch_packets
    window = res.health["receiver_overrun"]["max_outstanding_bytes"]
    spacing = direct_ack_every(EndpointConfig(max_outstanding_bytes=window), window)
    assert spacing == 64
    packets = size // 4096
    acks = res.bytes_counter("acks_sent")
    # every ACK-requesting batch at most (one per `spacing` packets, rounded up to whole batches) + the last
    assert acks <= packets // (spacing - ep.batch_packets + 1) + 2, counts
    assert counts["acks_per_gb"] == pytest.approx(acks / (size / 1e9))
