"""Every refusal of the agent, against a real agent process: 401 (no or wrong token), 403 (destination
outside --allow), 409 (unknown version, busy), 413 (oversized body), 400 (malformed), 422 (rate or
duration above the caps), 404 (schedule not uploaded). Each time a UDP socket on every would-be
destination receives nothing. Plus TLS (trustme certificates), heartbeat loss and /metrics."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time

import aiohttp
import pytest
import trustme

from emulator.endpoint.config import EndpointConfig
from emulator.remote.api import ArmRequest
from emulator.remote.codec import schedule_bytes

AUTH: dict[str, str] = {}
EP = EndpointConfig(line_rate_bps=1e9, retransmit_timeout_ns=30_000_000)
ADDRS = ("127.0.0.21", "127.0.0.22", "127.0.0.23", "127.0.0.24")


class Listeners:
    """UDP sockets on the would-be destinations: anything they receive was sent by a refused run."""

    def __init__(self, addrs, port):
        self.socks = []
        for a in addrs:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((a, port))
            s.setblocking(False)
            self.socks.append(s)

    def received(self) -> int:
        n = 0
        for s in self.socks:
            while True:
                try:
                    s.recv(65536)
                    n += 1
                except BlockingIOError:
                    break
        return n

    def close(self):
        for s in self.socks:
            s.close()


def _arm(sha, port, *, addrs=ADDRS, **kw) -> dict:
    a = ArmRequest(schedule_sha256=sha, local_ranks=tuple(range(len(addrs))), addresses=addrs,
                   ports=(port,) * len(addrs), endpoint=kw.pop("endpoint", EP), timeout_s=kw.pop("timeout_s", 20.0),
                   **kw)
    return a.to_json()


async def _req(method, url, *, headers=None, ssl_ctx=None, **kw):
    headers = AUTH if headers is None else headers
    async with aiohttp.ClientSession() as s, s.request(method, url, headers=headers, ssl=ssl_ctx, **kw) as r:
        text = await r.text()
        return r.status, (json.loads(text) if text.startswith("{") else text)


def call(method, url, **kw):
    return asyncio.run(_req(method, url, **kw))


@pytest.fixture(autouse=True)
def _auth(token_file):
    AUTH["Authorization"] = f"Bearer {token_file.read_text().strip()}"


@pytest.fixture
def sched(make_mixed):
    s = make_mixed(2, 2, 256 * 1024)
    data, sha = schedule_bytes(s)
    return data, sha


def _port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.21", 0))
        return s.getsockname()[1]


def test_every_refusal_sends_nothing(start_agent, sched):
    data, sha = sched
    agent = start_agent("--allow", "127.0.0.21/32,127.0.0.22/32,127.0.0.23/32,127.0.0.24/32",
                        "--max-rate", "3Gbps", "--max-duration", "30s")
    port = _port()
    lis = Listeners(ADDRS + ("127.0.0.25",), port)
    try:
        u = agent.url
        # 401: no token, a wrong one, a wrong scheme — on every path, /metrics too
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": AUTH["Authorization"][7:]}):
            for method, path in (("GET", "/v1/info"), ("POST", "/v1/runs"), ("PUT", f"/v1/schedules/{sha}"),
                                 ("POST", "/v1/abort"), ("GET", "/v1/records"), ("GET", "/metrics")):
                status, body = call(method, u + path, headers=headers)
                assert status == 401, (headers, path, body)
                assert body == {"error": "missing or wrong token"}
        # upload: a hash that is not the body's is refused; the right one is stored, and again idempotently
        assert call("PUT", f"{u}/v1/schedules/{'0' * 64}", data=data)[0] == 400
        assert call("PUT", f"{u}/v1/schedules/{sha}", data=b"not a schedule")[0] == 400
        assert call("PUT", f"{u}/v1/schedules/{sha}", data=data)[0] == 201
        assert call("PUT", f"{u}/v1/schedules/{sha}", data=data) == (200, {"sha256": sha, "stored": "already"})
        # 403: one destination outside --allow, named
        status, body = call("POST", f"{u}/v1/runs", json=_arm(sha, port, addrs=ADDRS[:3] + ("127.0.0.25",)))
        assert status == 403 and "127.0.0.25" in body["error"]
        # 422: above the rate cap (4 ranks × 1 Gbit/s > 3 Gbit/s) and the duration cap, each named
        status, body = call("POST", f"{u}/v1/runs", json=_arm(sha, port))
        assert status == 422 and "--max-rate" in body["error"]
        status, body = call("POST", f"{u}/v1/runs", json=_arm(sha, port, endpoint=EndpointConfig(line_rate_bps=5e8),
                                                               timeout_s=60.0))
        assert status == 422 and "--max-duration" in body["error"]
        # 409: unknown API versions (path, header, body), unknown schedule format
        assert call("GET", f"{u}/v2/info")[0] == 409
        assert call("GET", f"{u}/v1/info", headers={**AUTH, "X-Emulator-Api": "7"})[0] == 409
        for key, value in (("api", 2), ("schedule_format", 99)):
            doc = _arm(sha, port, endpoint=EndpointConfig(line_rate_bps=5e8))
            doc[key] = value
            assert call("POST", f"{u}/v1/runs", json=doc)[0] == 409
        # 413: a JSON body above 1 MiB
        status, body = call("POST", f"{u}/v1/runs", data=b"{" + b" " * (2 << 20) + b"}")
        assert status == 413
        # 400: malformed JSON, a wrong type, an unknown key — each with a one-line reason naming it
        status, body = call("POST", f"{u}/v1/runs", data=b"{nope")
        assert status == 400 and body["error"].startswith("malformed JSON")
        doc = _arm(sha, port, endpoint=EndpointConfig(line_rate_bps=5e8))
        doc["local_ranks"] = "all"
        assert call("POST", f"{u}/v1/runs", json=doc) == (400, {"error": "'local_ranks' must be a list of integers"})
        doc = _arm(sha, port, endpoint=EndpointConfig(line_rate_bps=5e8))
        doc["schedule_path"] = "/etc/passwd"  # no file path is taken over the API
        assert call("POST", f"{u}/v1/runs", json=doc) == (400, {"error": "unknown key 'schedule_path'"})
        # 404: a schedule never uploaded
        doc = _arm("f" * 64, port, endpoint=EndpointConfig(line_rate_bps=5e8))
        assert call("POST", f"{u}/v1/runs", json=doc)[0] == 404
        time.sleep(0.5)
        assert lis.received() == 0
        assert call("GET", f"{u}/v1/status") == (200, {"state": "idle"})
    finally:
        lis.close()


def test_oversized_upload_is_refused_with_413(start_agent, sched):
    agent = start_agent("--max-body", "1MiB")
    status, body = call("PUT", f"{agent.url}/v1/schedules/{'a' * 64}", data=b"x" * ((1 << 20) + 1))
    assert status == 413 and "limit" in body["error"]


def test_one_run_at_a_time_and_heartbeat_loss_aborts_and_frees_the_ports(start_agent, sched):
    data, sha = sched
    agent = start_agent()
    u = agent.url
    port = _port()
    assert call("PUT", f"{u}/v1/schedules/{sha}", data=data)[0] == 201
    # ranks 0-1 here, 2-3 "elsewhere" (nobody): the run cannot finish; no heartbeat comes after arming
    doc = _arm(sha, port, heartbeat_timeout_s=1.0, endpoint=EndpointConfig(line_rate_bps=5e8))
    doc["local_ranks"] = [0, 1]
    assert call("POST", f"{u}/v1/runs", json=doc)[0] == 201
    status, body = call("POST", f"{u}/v1/runs", json=doc)  # this request is a heartbeat too
    assert status == 409 and "busy" in body["error"]
    t = time.monotonic()
    while time.monotonic() - t < 15:  # /metrics is no heartbeat: watch the run through it
        time.sleep(0.2)
        if "emulator_agent_busy 0.0" in call("GET", f"{u}/metrics")[1]:
            break
    st = call("GET", f"{u}/v1/status")[1]
    assert st["state"] == "failed" and "no heartbeat" in st["abort_reason"]
    assert time.monotonic() - t < 10
    status, res = call("GET", f"{u}/v1/records")
    assert status == 200 and any("no heartbeat" in e for e in res["errors"]), res["errors"]
    assert set(res["records"]) <= {"0", "1"}
    for a in ADDRS[:2]:  # the ports are free again
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((a, port))


def test_tls_with_trustme_certificates(start_agent, tmp_path, sched):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "agent.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    agent = start_agent("--tls-cert", str(tmp_path / "agent.pem"), "--tls-key", str(tmp_path / "agent.pem"))
    assert agent.url.startswith("https://")
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    status, info = call("GET", f"{agent.url}/v1/info", ssl_ctx=ctx)
    assert status == 200 and info["api"] == 1
    with pytest.raises(aiohttp.ClientConnectorCertificateError):  # a client without the CA refuses it
        call("GET", f"{agent.url}/v1/info")


def test_metrics_need_the_token_unless_public(start_agent):
    agent = start_agent("--metrics-public")
    status, text = call("GET", f"{agent.url}/metrics", headers={})
    assert status == 200 and "emulator_agent_busy 0.0" in text and "emulator_agent_runs_total 0.0" in text
    assert call("GET", f"{agent.url}/v1/info", headers={})[0] == 401
