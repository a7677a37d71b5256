"""The control plane stays off the data path: a live run's agent passes progress on no faster than the
arm request's ``progress_interval_s`` (and always the last one), refuses a shorter interval, and the
controller asks for the configured interval."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import aiohttp
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from emulator.endpoint.config import EndpointConfig
from emulator.remote.agent import _TICK_S, ProgressGate
from emulator.remote.api import (
    DEFAULT_PROGRESS_INTERVAL_S,
    MIN_PROGRESS_INTERVAL_S,
    ArmRequest,
    Policy,
    Refusal,
    parse_arm,
)
from emulator.remote.controller import ControllerConfig, run_remote, start_lead_s
from emulator.remote.hosts import load_hosts

from .conftest import TOKEN


@given(st.floats(0.1, 5.0), st.lists(st.tuples(st.floats(0.0, 0.3), st.booleans()), max_size=200))
@example(0.10532546412829817, [(0.10532546412829817, False)] * 3)  # 3x − 2x < x in floating point
def test_the_gate_admits_one_snapshot_per_interval_and_always_the_last(interval_s, steps):
    gate = ProgressGate(interval_s)
    now_s = 0.0
    admitted = []
    for dt_s, last in steps:
        now_s += dt_s
        doc = {"ranks_done": 4 if last else 1, "ranks": 4}
        if gate.admit(now_s, doc):
            admitted.append((now_s, last))
        elif last:
            pytest.fail("the snapshot with every rank done was held back")
    regular = [t for t, last in admitted if not last]
    assert all(b >= a + interval_s for a, b in zip(regular, regular[1:], strict=False))
    if steps and not steps[0][1]:
        assert admitted and admitted[0][0] == steps[0][0]  # the first one goes at once


def _arm_doc(**kw) -> dict:
    a = ArmRequest(schedule_sha256="a" * 64, local_ranks=(0,), addresses=("127.0.0.1", "127.0.0.2"),
                   ports=(4791, 4791), endpoint=EndpointConfig(), timeout_s=10.0, **kw)
    return a.to_json()


def test_arm_request_carries_the_interval_and_refuses_one_too_short():
    assert parse_arm(_arm_doc(), Policy()).progress_interval_s == DEFAULT_PROGRESS_INTERVAL_S
    assert parse_arm(_arm_doc(progress_interval_s=2.5), Policy()).progress_interval_s == 2.5
    doc = _arm_doc()
    del doc["progress_interval_s"]  # an older controller: the default
    assert parse_arm(doc, Policy()).progress_interval_s == DEFAULT_PROGRESS_INTERVAL_S
    with pytest.raises(Refusal) as exc:
        parse_arm(_arm_doc(progress_interval_s=MIN_PROGRESS_INTERVAL_S / 2), Policy())
    assert exc.value.status == 400 and "progress_interval_s" in exc.value.reason


def _port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.46", 0))
        return s.getsockname()[1]


def test_a_live_run_reports_progress_no_faster_than_its_interval(start_agent, tmp_path, make_mixed):
    agent = start_agent()
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(f"hosts:\n  - agent: {agent.url}\n    ranks: 0-3\n    addresses: [127.0.0.46]\n")
    interval_s = 0.5
    seen: list[tuple[float, dict]] = []
    res = run_remote(make_mixed(2, 2, 48 << 20), load_hosts(hosts), EndpointConfig(line_rate_bps=200e6),
                     udp_port=_port(), timeout_s=60.0,
                     cfg=ControllerConfig(token=TOKEN, progress_interval_s=interval_s, linger_s=0.0),
                     progress=lambda d: seen.append((time.monotonic(), d)))
    assert res.complete, res.errors
    # one snapshot per distinct elapsed_s on the agent: every progress event the agent sent
    events = sorted({d["elapsed_s"]: d for _, d in seen if d["elapsed_s"] > 0}.items())
    regular = [t for t, d in events if d["ranks_done"] < d["ranks"]]
    assert len(regular) >= 3, f"a run of {events[-1][0]:.1f} s gave {len(regular)} progress events"
    gaps = [b - a for a, b in zip(regular, regular[1:], strict=False)]
    assert min(gaps) >= interval_s * 0.98, gaps  # the run process's clock, to its float rounding
    assert events[-1][1]["ranks_done"] == 4  # the last one: every rank done


async def _listen(url: str, stop: threading.Event) -> list[tuple[float, str]]:
    """Every message of the agent's events WebSocket while its run is live: (arrival, type)."""
    got: list[tuple[float, str]] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=headers) as s:
        while not stop.is_set():
            async with s.ws_connect(f"{url}/v1/events", heartbeat=None) as ws:
                async for msg in ws:
                    ev = json.loads(msg.data)
                    if ev["type"] == "done" and ev.get("state") == "idle":
                        break  # not armed yet
                    got.append((time.monotonic(), ev["type"]))
                    if ev["type"] == "done":
                        return got
            await asyncio.sleep(0.05)
    return got


def test_a_live_runs_event_stream_is_one_message_per_interval(start_agent, tmp_path, make_mixed):
    agent = start_agent()
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(f"hosts:\n  - agent: {agent.url}\n    ranks: 0-3\n    addresses: [127.0.0.46]\n")
    interval_s = 1.0
    out: dict = {}
    stop = threading.Event()

    def run() -> None:
        try:
            out["res"] = run_remote(make_mixed(2, 2, 48 << 20), load_hosts(hosts), EndpointConfig(line_rate_bps=200e6),
                                    udp_port=_port(), timeout_s=60.0,
                                    cfg=ControllerConfig(token=TOKEN, progress_interval_s=interval_s, linger_s=0.0))
        finally:
            stop.set()

    t = threading.Thread(target=run)
    t.start()
    got = asyncio.run(asyncio.wait_for(_listen(agent.url, stop), 90))
    t.join(90)
    assert out["res"].complete, out["res"].errors
    live = [(at, kind) for at, kind in got if kind in ("progress", "status")]
    assert len(live) >= 3, got
    span_s = live[-1][0] - live[0][0]
    # progress once per interval and, as that is below _TICK_S, no status tick: about one message per
    # interval (plus the snapshot with every rank done)
    assert interval_s < _TICK_S
    assert len(live) <= span_s / interval_s + 2, (len(live), span_s)
    assert not [kind for _, kind in live if kind == "status"], got


@given(st.floats(0.0, 1.0), st.floats(0.0, 2.0), st.floats(0.0, 2.0), st.floats(0.0, 2.0))
def test_the_start_lead_covers_twice_the_slowest_parallel_round(min_s, info_s, upload_s, arm_s):
    phases = {"info": info_s, "clock": info_s + 0.1, "upload": info_s + 0.1 + upload_s,
              "arm": info_s + 0.1 + upload_s + arm_s}
    lead = start_lead_s(min_s, phases)
    assert lead >= min_s and lead >= 2 * info_s - 1e-9 and lead >= 2 * arm_s - 1e-6
    assert lead <= max(min_s, 2 * info_s, 2 * arm_s) + 1e-6  # the upload and clock rounds are not in it
