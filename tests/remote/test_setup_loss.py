"""An agent that stops answering before t0 (info, clock, upload, arm) ends the run within the agent timeout
with one line naming the host and its ranks (exit 3: the agent is lost, not refusing), and the agents
already armed are told to abort."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from aiohttp import WSMsgType, web

from emulator.cli import main
from emulator.endpoint.config import EndpointConfig
from emulator.errors import AgentLostError
from emulator.remote.api import API_VERSION
from emulator.remote.controller import ControllerConfig, run_remote_async
from emulator.remote.hosts import HostSpec, HostsPlan
from emulator.schedule.model import SCHEDULE_VERSION

STEPS = ("info", "clock", "upload", "arm")
TOKEN = "fake-agents-do-not-check-it"


class FakeAgent:
    """An agent API that answers like a real one until ``hang_at``, where it says nothing (for an hour)."""

    def __init__(self, hang_at: str | None) -> None:
        self.hang_at = hang_at
        self.aborts: list[str] = []
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def _hang(self, step: str) -> None:
        if self.hang_at == step:
            await asyncio.sleep(3600)

    async def info(self, request: web.Request) -> web.Response:
        await self._hang("info")
        return web.json_response({"api": API_VERSION, "schedule_format": SCHEDULE_VERSION, "busy": False})

    async def clock(self, request: web.Request) -> web.WebSocketResponse:
        await self._hang("clock")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                break
            t1 = int(msg.json()["t1_ns"])
            now = time.monotonic_ns()
            await ws.send_str(f'{{"t1_ns":{t1},"t2_ns":{now},"t3_ns":{now}}}')
        return ws

    async def upload(self, request: web.Request) -> web.Response:
        await request.read()
        await self._hang("upload")
        return web.json_response({"stored": "new"}, status=201)

    async def arm(self, request: web.Request) -> web.Response:
        await request.read()
        await self._hang("arm")
        return web.json_response({"armed": True}, status=201)

    async def abort(self, request: web.Request) -> web.Response:
        self.aborts.append((await request.json()).get("reason", ""))
        return web.json_response({"aborted": True})

    def __enter__(self) -> FakeAgent:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_get("/v1/info", self.info)
        app.router.add_get("/v1/clock", self.clock)
        app.router.add_put("/v1/schedules/{sha}", self.upload)
        app.router.add_post("/v1/runs", self.arm)
        app.router.add_post("/v1/abort", self.abort)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        self._thread.start()

        async def start() -> int:
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            return site._server.sockets[0].getsockname()[1]

        port = asyncio.run_coroutine_threadsafe(start(), self._loop).result(10)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            await self._runner.cleanup()
            hung = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in hung:
                t.cancel()
            await asyncio.gather(*hung, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A TCP port that accepts connections and never answers: an agent stopped before info."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        srv.close()


@pytest.mark.parametrize("step", STEPS)
def test_an_agent_silent_during_setup_is_lost_within_the_timeout(step, make_mixed):
    timeout_s = 1.0
    with FakeAgent(None) as good, FakeAgent(step) as silent:
        plan = HostsPlan((HostSpec(good.url, (0, 1), ("127.0.0.40",) * 2),
                          HostSpec(silent.url, (2, 3), ("127.0.0.41",) * 2)))
        cfg = ControllerConfig(token=TOKEN, agent_timeout_s=timeout_s, clock_samples=4)
        t = time.monotonic()
        with pytest.raises(AgentLostError) as err:
            asyncio.run(run_remote_async(make_mixed(2, 2, 1 << 16), plan, EndpointConfig(), udp_port=14791,
                                         timeout_s=10.0, cfg=cfg))
        elapsed_s = time.monotonic() - t
        assert elapsed_s < timeout_s + 2.0, elapsed_s
        assert err.value.exit_code == 3
        msg = str(err.value)
        assert f"host {silent.url} (ranks 2-3)" in msg and step in msg and "\n" not in msg
        assert good.url not in msg
        # the armed agent is told to abort; an agent that never got armed has nothing to abort
        assert bool(good.aborts) == (step == "arm")


def test_cli_exit_3_naming_the_silent_host_within_the_agent_timeout(start_agent, token_file, tmp_path, capsys,
                                                                     profiles, silent_listener):
    real = start_agent()

    class Silent:
        url = silent_listener

    profile, hosts = profiles
    prof = profile(tmp_path / "p.yaml", "mixed:1MiB")
    hf = hosts(tmp_path / "hosts.yaml", [real, Silent], ["127.0.0.40", "127.0.0.41"], ["0-3", "4-7"])
    t = time.monotonic()
    code = main(["run", str(prof), "--hosts", str(hf), "--token-file", str(token_file),
                 "-o", str(tmp_path / "out"), "--quiet"])
    elapsed_s = time.monotonic() - t
    err = capsys.readouterr().err
    assert code == 3, err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert f"host {silent_listener} (ranks 4-7) stopped answering during info" in err
    assert elapsed_s < ControllerConfig(token="").agent_timeout_s + 8.0, elapsed_s
