"""The agent: an aiohttp server that runs the endpoints of its ranks for a controller (API in
:mod:`emulator.remote.api`).

Theory of operation
-------------------
Every request passes :meth:`Agent.guard` first: token (401), API version (409), body size (413); a
refusal is a JSON ``{"error": reason}`` with its status. A schedule arrives as file bytes under its
hash and is kept in memory (the last :data:`KEEP_SCHEDULES`). Arming a run validates it against the
policy (:func:`~emulator.remote.api.parse_arm`: allow-list, caps) before any socket is opened, then forks
one *run process* that calls :func:`~emulator.drivers.direct.run_direct` for the local ranks; once they
are ready it says so (a ``ready`` event) and waits for ``POST /v1/start`` with the common t0 on this
host's monotonic clock. The run process reports progress (at most every ``progress_interval_s`` of the
arm request, :class:`ProgressGate`) and, at the end, the result (JSON) through a pipe the event loop
watches. While the run is live the agent process only wakes for those events, the controller's
heartbeats and one status tick per :data:`_TICK_S` without other events: the data plane keeps the CPU. The run process dies with the agent (``PR_SET_PDEATHSIG``)
and its workers die with it, so no port stays bound behind a dead agent.

Abort (``POST /v1/abort``, or no heartbeat from the controller for the run's ``heartbeat_timeout_s``):
SIGINT to the run process — the direct driver ends the run and returns what was measured, with the
reason as its error — then SIGKILL if it has not ended within :data:`_ABORT_GRACE_S`. Every request of
the controller, and every message on the events WebSocket, is a heartbeat. The events WebSocket carries
``progress`` events, a ``status`` event after :data:`_TICK_S` without other events (so a controller
notices a stopped agent), and one ``done`` event.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import multiprocessing as mp
import os
import signal
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from emulator import __version__
from emulator.drivers.contract import INTERRUPTED_TEXT
from emulator.errors import EmulatorError, RunError
from emulator.remote.api import (
    API_VERSION,
    HASH_RE,
    MAX_JSON_BYTES,
    MAX_SCHEDULE_BYTES,
    PREFIX,
    ArmRequest,
    Policy,
    Refusal,
    check_version,
    parse_arm,
    parse_start,
    token_ok,
)
from emulator.remote.codec import jsonable, result_to_json, schedule_from_bytes
from emulator.remote.metrics import delivery_rates, metrics_text
from emulator.schedule.model import SCHEDULE_VERSION, Schedule

KEEP_SCHEDULES = 4
_TICK_S = 2.0  # above the default progress interval: a live run sends its progress and nothing else
_ABORT_GRACE_S = 5.0


@dataclass
class RunState:
    """The agent's one run: its request, run process, latest progress and, when done, its result."""

    arm: ArmRequest
    proc: Any
    conn: Any
    state: str = "running"
    ready: bool = False
    started: bool = False
    progress: dict[str, Any] = field(default_factory=dict)
    rates: dict[str, tuple[float, float]] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    abort_reason: str | None = None
    records_served: bool = False
    last_heartbeat: float = field(default_factory=time.monotonic)
    subscribers: list[asyncio.Queue] = field(default_factory=list)


@dataclass
class ProgressGate:
    """Passes a progress snapshot on at most once per ``interval_s`` (the one with every rank done always)."""

    interval_s: float
    next_s: float = float("-inf")

    def admit(self, now_s: float, doc: dict[str, Any]) -> bool:
        if now_s < self.next_s and doc.get("ranks_done") != doc.get("ranks"):
            return False
        self.next_s = now_s + self.interval_s
        return True


def _run_child(conn: Any, schedule: Schedule, arm: ArmRequest) -> None:
    """The run process: run the local ranks, send progress and the result through ``conn``."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # die with the agent
    from emulator.drivers.direct import DirectConfig, run_direct

    def start_at() -> int:
        conn.send(("ready", None))
        if not conn.poll(arm.start_timeout_s):
            raise RunError(f"no start from the controller within {arm.start_timeout_s:g} s of arming")
        return int(conn.recv()[1])

    gate = ProgressGate(arm.progress_interval_s)

    def progress(doc: dict) -> None:
        if gate.admit(time.monotonic(), doc):
            conn.send(("progress", jsonable(doc)))

    try:
        cfg = DirectConfig(addresses=arm.addresses, ports=arm.ports, local_ranks=arm.local_ranks,
                           ranks_per_worker=arm.ranks_per_worker, linger_s=arm.linger_s)
        res = run_direct(schedule, cfg, arm.endpoint, timeout_s=arm.timeout_s, start_at=start_at,
                         progress=progress)
        conn.send(("result", result_to_json(res)))
    except KeyboardInterrupt:
        conn.send(("error", "aborted before the run started"))
    except EmulatorError as exc:
        conn.send(("error", str(exc)))
    except Exception as exc:  # reported to the controller as the host's error
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()
    os._exit(0)


def local_addresses() -> list[str]:
    """IPv4 addresses of this host's interfaces (``SIOCGIFADDR`` per interface)."""
    import fcntl
    import struct

    out = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                res = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            out.append(socket.inet_ntoa(res[20:24]))
    return out


class Agent:
    """State and handlers of one agent (module docstring)."""

    def __init__(self, token: str, policy: Policy, *, metrics_public: bool = False,
                 max_schedule_bytes: int = MAX_SCHEDULE_BYTES, rendezvous: Any = None) -> None:
        if not token:
            raise EmulatorError("agent: the token is empty")
        self.token = token
        self.policy = policy
        self.metrics_public = metrics_public
        self.max_schedule_bytes = max_schedule_bytes
        self.schedules: dict[str, Schedule] = {}
        self.run: RunState | None = None
        self.runs_total = 0
        #: rank 0 of a launcher-started run: serves ``POST /v1/register``
        #: (:class:`~emulator.remote.launch.Rendezvous`)
        self.rendezvous = rendezvous
        self._ctx = mp.get_context("fork")
        # imported once here, so every forked run process and worker starts with them loaded
        import emulator.drivers.direct  # noqa: F401
        import emulator.endpoint.endpoint  # noqa: F401
        from emulator.drivers.sockets.rx_compiled import warm as warm_drain
        from emulator.drivers.sockets.tx_compiled import warm as warm_send
        from emulator.wire.kernels import warm

        warm()  # the direct path's compiled kernels too: arming a run never waits for numba
        warm_drain()
        warm_send()

    # -- the app -------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.guard], client_max_size=self.max_schedule_bytes)
        app.add_routes([
            web.get(f"{PREFIX}/info", self.info),
            web.get(f"{PREFIX}/clock", self.clock),
            web.put(f"{PREFIX}/schedules/{{sha256}}", self.upload),
            web.post(f"{PREFIX}/runs", self.arm),
            web.post(f"{PREFIX}/start", self.start),
            web.get(f"{PREFIX}/status", self.status),
            web.get(f"{PREFIX}/events", self.events),
            web.post(f"{PREFIX}/heartbeat", self.heartbeat),
            web.get(f"{PREFIX}/records", self.records),
            web.post(f"{PREFIX}/abort", self.abort),
            web.get("/metrics", self.metrics),
        ])
        if self.rendezvous is not None:
            app.router.add_post(f"{PREFIX}/register", self.rendezvous.handle)
        app.on_shutdown.append(self._shutdown)
        return app

    @web.middleware
    async def guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            public = request.path == "/metrics" and self.metrics_public
            if not public and not token_ok(request.headers.get("Authorization"), self.token):
                raise Refusal(401, "missing or wrong token")
            check_version(request.path, request.headers.get("X-Emulator-Api"))
            if request.content_length is not None and request.content_length > self.max_schedule_bytes:
                raise Refusal(413, f"body of {request.content_length} bytes is above the limit "
                                   f"of {self.max_schedule_bytes}")
            if self.run is not None and request.path.startswith(PREFIX):  # /metrics is no heartbeat
                self.run.last_heartbeat = time.monotonic()
            return await handler(request)
        except Refusal as r:
            return web.json_response({"error": r.reason}, status=r.status)
        except web.HTTPRequestEntityTooLarge:
            return web.json_response({"error": "body above the size limit"}, status=413)

    async def _json(self, request: web.Request) -> Any:
        too_big = Refusal(413, f"JSON body above the limit of {MAX_JSON_BYTES} bytes")
        if request.content_length is not None and request.content_length > MAX_JSON_BYTES:
            raise too_big
        raw = b""
        while len(raw) <= MAX_JSON_BYTES:
            chunk = await request.content.read(MAX_JSON_BYTES + 1 - len(raw))
            if not chunk:
                break
            raw += chunk
        if len(raw) > MAX_JSON_BYTES:
            raise too_big
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise Refusal(400, f"malformed JSON body: {exc}") from None

    # -- handlers ------------------------------------------------------------------------------------
    async def info(self, request: web.Request) -> web.Response:
        return web.json_response({
            "tool": "emulator", "version": __version__, "api": API_VERSION, "schedule_format": SCHEDULE_VERSION,
            "host": socket.gethostname(), "addresses": local_addresses(), "cores": os.cpu_count(),
            "busy": self.busy, "allow": [str(n) for n in self.policy.allow],
            "max_rate_bps": self.policy.max_rate_bps, "max_duration_s": self.policy.max_duration_s})

    async def clock(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse()
        if not ws.can_prepare(request).ok:
            raise Refusal(400, "the clock is a WebSocket")
        await ws.prepare(request)
        mono = time.monotonic_ns
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                break
            t2 = mono()
            try:
                t1 = int(json.loads(msg.data)["t1_ns"])
            except (ValueError, KeyError, TypeError):
                break
            await ws.send_str(f'{{"t1_ns":{t1},"t2_ns":{t2},"t3_ns":{mono()}}}')
        return ws

    async def upload(self, request: web.Request) -> web.Response:
        sha = request.match_info["sha256"]
        if not HASH_RE.match(sha):
            raise Refusal(400, "the schedule hash must be 64 lowercase hex digits")
        if sha in self.schedules:
            return web.json_response({"sha256": sha, "stored": "already"})
        data = await request.read()
        try:
            sched, digest = await asyncio.get_running_loop().run_in_executor(None, schedule_from_bytes, data)
        except EmulatorError as exc:
            raise Refusal(400, str(exc)) from None
        if digest != sha:
            raise Refusal(400, f"schedule hash mismatch: the body's hash is {digest}, not {sha}")
        self.schedules[sha] = sched
        while len(self.schedules) > KEEP_SCHEDULES:
            self.schedules.pop(next(iter(self.schedules)))
        return web.json_response({"sha256": sha, "stored": "new"}, status=201)

    @property
    def busy(self) -> bool:
        return self.run is not None and self.run.state == "running"

    async def arm(self, request: web.Request) -> web.Response:
        doc = await self._json(request)
        if self.busy:
            raise Refusal(409, "busy: one run at a time (abort the current one first)")
        arm = parse_arm(doc, self.policy)
        sched = self.schedules.get(arm.schedule_sha256)
        if sched is None:
            raise Refusal(404, f"schedule {arm.schedule_sha256} was not uploaded")
        if sched.world_size != len(arm.addresses):
            raise Refusal(400, f"'addresses' lists {len(arm.addresses)} ranks, the schedule has {sched.world_size}")
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_run_child, args=(child, sched, arm), name="emulator-run", daemon=False)
        proc.start()
        child.close()
        self.run = run = RunState(arm=arm, proc=proc, conn=parent)
        self.runs_total += 1
        loop = asyncio.get_running_loop()
        loop.add_reader(parent.fileno(), self._on_child, run)
        loop.create_task(self._watch(run))
        return web.json_response({"armed": True, "local_ranks": list(arm.local_ranks)}, status=201)

    async def start(self, request: web.Request) -> web.Response:
        doc = await self._json(request)
        run = self.run
        if run is None or not self.busy or not run.ready or run.started:
            raise Refusal(409, "no armed run waiting for its start")
        t0 = parse_start(doc, time.monotonic_ns())
        run.started = True
        run.conn.send(("go", t0))
        return web.json_response({"t0_ns": t0})

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response(self._status_doc())

    async def heartbeat(self, request: web.Request) -> web.Response:
        return web.json_response({"state": self.run.state if self.run else "idle"})

    async def events(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(heartbeat=None)
        if not ws.can_prepare(request).ok:
            raise Refusal(400, "events are a WebSocket")
        await ws.prepare(request)
        run = self.run
        if run is None:
            await ws.send_json({"type": "done", "state": "idle", "complete": False, "errors": ["no run armed"]})
            await ws.close()
            return ws
        queue: asyncio.Queue = asyncio.Queue()
        run.subscribers.append(queue)
        if run.state != "running":
            queue.put_nowait(self._done_event(run))
        elif run.ready and not run.started:
            queue.put_nowait({"type": "ready"})

        async def reader() -> None:
            async for _ in ws:  # every message of the controller is a heartbeat
                run.last_heartbeat = time.monotonic()

        rtask = asyncio.get_running_loop().create_task(reader())
        try:
            while True:
                try:
                    ev = await asyncio.wait_for(queue.get(), _TICK_S)
                except asyncio.TimeoutError:
                    ev = {"type": "status", **self._status_doc()}
                await ws.send_json(ev)
                if ev["type"] == "done":
                    break
        except (ConnectionResetError, RuntimeError):
            pass
        finally:
            rtask.cancel()
            with contextlib.suppress(ValueError):
                run.subscribers.remove(queue)
            await ws.close()
        return ws

    async def records(self, request: web.Request) -> web.Response:
        run = self.run
        if run is None or run.state == "running":
            raise Refusal(409, "no finished run")
        run.records_served = True
        return web.json_response(run.result or {"driver": "direct", "complete": False, "records": {},
                                                "errors": ["the run returned nothing"], "health": {}})

    async def abort(self, request: web.Request) -> web.Response:
        doc = await self._json(request) if request.can_read_body else {}
        reason = doc.get("reason") if isinstance(doc, dict) and isinstance(doc.get("reason"), str) else None
        if self.busy:
            self._abort(self.run, f"aborted by the controller ({reason[:200]})" if reason
                        else "aborted by the controller")
        return web.json_response({"state": self.run.state if self.run else "idle"})

    async def metrics(self, request: web.Request) -> web.Response:
        body, ctype = metrics_text(self)
        return web.Response(body=body, headers={"Content-Type": ctype})

    # -- the run process -----------------------------------------------------------------------------
    def _status_doc(self) -> dict[str, Any]:
        run = self.run
        if run is None:
            return {"state": "idle"}
        return {"state": run.state, "ready": run.ready, "started": run.started,
                "local_ranks": list(run.arm.local_ranks), "progress": run.progress,
                "abort_reason": run.abort_reason}

    def _publish(self, run: RunState, ev: dict[str, Any]) -> None:
        for q in run.subscribers:
            q.put_nowait(ev)

    def _done_event(self, run: RunState) -> dict[str, Any]:
        res = run.result or {}
        return {"type": "done", "state": run.state, "complete": bool(res.get("complete")),
                "errors": list(res.get("errors", []))}

    def _on_child(self, run: RunState) -> None:
        try:
            while run.conn.poll():
                kind, payload = run.conn.recv()
                if kind == "ready":
                    run.ready = True
                    self._publish(run, {"type": "ready"})
                elif kind == "progress":
                    run.rates = delivery_rates(run.progress, payload)
                    run.progress = payload
                    self._publish(run, {"type": "progress", **payload})
                elif kind == "result":
                    if run.abort_reason:  # the reason, in place of the driver's "interrupted by the user"
                        errors = [e for e in payload["errors"] if not e.startswith(INTERRUPTED_TEXT)]
                        payload["errors"] = [run.abort_reason, *errors]
                        payload["complete"] = False
                    run.result = payload
                elif kind == "error":
                    run.result = {"driver": "direct", "complete": False, "records": {}, "health": {},
                                  "errors": [run.abort_reason or payload] if run.abort_reason else [payload]}
        except (EOFError, OSError):
            self._finish(run)

    def _finish(self, run: RunState) -> None:
        asyncio.get_running_loop().remove_reader(run.conn.fileno())
        run.conn.close()
        run.proc.join(1.0)
        if run.result is None:
            run.result = {"driver": "direct", "complete": False, "records": {}, "health": {},
                          "errors": [run.abort_reason or f"run process died: exit code {run.proc.exitcode}"]}
        run.state = "done" if run.result.get("complete") else "failed"
        self._publish(run, self._done_event(run))

    def _abort(self, run: RunState, reason: str) -> None:
        if run.abort_reason or run.state != "running":
            return
        run.abort_reason = reason
        with contextlib.suppress(ProcessLookupError):
            os.kill(run.proc.pid, signal.SIGINT)
        asyncio.get_running_loop().call_later(_ABORT_GRACE_S, self._kill, run)

    def _kill(self, run: RunState) -> None:
        if run.state == "running" and run.proc.is_alive():
            run.proc.kill()

    async def _watch(self, run: RunState) -> None:
        """Abort the run when the controller's heartbeats stop."""
        while run.state == "running":  # wakes when the last heartbeat's timeout is due, not before
            due_s = run.last_heartbeat + run.arm.heartbeat_timeout_s - time.monotonic()
            await asyncio.sleep(max(0.05, due_s + 0.01))
            silent = time.monotonic() - run.last_heartbeat
            if silent > run.arm.heartbeat_timeout_s and run.state == "running":
                self._abort(run, f"aborted: no heartbeat from the controller for {silent:.1f} s")

    async def _shutdown(self, app: web.Application) -> None:
        if self.busy:
            self._abort(self.run, "aborted: the agent is shutting down")
            self.run.proc.join(_ABORT_GRACE_S)
            if self.run.proc.is_alive():
                self.run.proc.kill()


async def serve(agent: Agent, host: str, port: int, ssl_context: Any = None) -> tuple[web.AppRunner, int]:
    """Start ``agent`` listening on ``host:port`` (0 = any free port); returns the runner and the port."""
    runner = web.AppRunner(agent.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    sock = site._server.sockets[0]  # the bound port (port 0 asks the kernel for one)
    return runner, sock.getsockname()[1]
