"""The controller of a multi-host run: agents in, one :class:`~emulator.drivers.contract.DriverResult` out.

Theory of operation
-------------------
:func:`run_remote` drives every agent of a :class:`~emulator.remote.hosts.HostsPlan` through the API
(:mod:`emulator.remote.api`), all hosts at once in each step:

1. ``info``: the agent's API and schedule-format versions must be this controller's (else one error
   naming the host);
2. clock, one host after the other: :data:`ControllerConfig.clock_samples` NTP-style exchanges over the
   clock WebSocket →
   :func:`~emulator.remote.clock.estimate_offset` (offset and uncertainty per host);
3. upload the schedule under its sha256 (an agent that has it answers at once);
4. arm every agent with its ranks, every rank's data-plane address and port and the endpoint settings.
   Any refusal (401/403/409/413/400/422) ends the run before any packet with the host named (a
   RunError, exit 2);
5. follow each agent's events WebSocket (ready, progress, status ticks), sending heartbeats on it. Once
   every agent is ready: a common start t0 on the controller's clock, :func:`start_lead_s` after now,
   sent to each
   agent on *its* clock (t0 + its offset). An agent that closes the WebSocket or says nothing for
   ``agent_timeout_s`` is *lost*: its host and ranks are named, the other agents are told to abort, and
   the run ends incomplete with their records;
6. gather the records of every agent still answering and merge them (:func:`merge_results`).

Steps 1–4 and the start request are each bounded by ``agent_timeout_s`` per host (the upload by that plus
its size at :data:`UPLOAD_FLOOR_BYTES_PER_S`): an agent that cannot be reached or says nothing within it is
lost before t0 — an :class:`~emulator.errors.AgentLostError` (exit 3) naming the host and its ranks, after
the agents already armed are told to abort (nothing was measured yet).

Ctrl-C while the run is under way aborts every agent with :data:`INTERRUPTED` as the reason and still
gathers their records (the run then ends as interrupted, with what was measured).

Rank records count from each agent's t0, which is the one controller-clock instant (to within that
agent's offset uncertainty): the merged records are on the controller's clock. The setup-to-t0 time
and every host's health (lag, drops, offset, uncertainty) go into ``health``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from emulator.drivers.contract import DriverResult
from emulator.endpoint.config import EndpointConfig
from emulator.errors import AgentLostError, RunError
from emulator.remote.api import API_VERSION, DEFAULT_PROGRESS_INTERVAL_S, PREFIX, ArmRequest
from emulator.remote.clock import ClockOffset, ClockSample, estimate_offset
from emulator.remote.codec import result_from_json, schedule_bytes
from emulator.remote.hosts import HostSpec, HostsPlan, format_ranks
from emulator.schedule.model import SCHEDULE_VERSION, Schedule

#: the slowest schedule upload a live agent is granted (its step bound: the agent timeout plus size / this)
UPLOAD_FLOOR_BYTES_PER_S = 10e6
#: the abort reason of a Ctrl-C; it contains "interrupted", so the run ends as interrupted (exit 130)
INTERRUPTED = "interrupted by the user (Ctrl-C)"


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """How the controller talks to agents (times in seconds)."""

    token: str
    ca_file: str | None = None
    lead_s: float = 0.1
    start_timeout_s: float = 60.0
    clock_samples: int = 32
    agent_timeout_s: float = 5.0
    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 5.0
    linger_s: float = 1.0
    ranks_per_worker: int = 0
    progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S


@dataclass
class _Host:
    spec: HostSpec
    info: dict[str, Any] = field(default_factory=dict)
    clock: ClockOffset | None = None
    progress: dict[str, Any] = field(default_factory=dict)
    lost: str | None = None
    ready: bool = False
    done: bool = False
    result: DriverResult | None = None

    @property
    def url(self) -> str:
        return self.spec.agent


async def _call(session: aiohttp.ClientSession, host: _Host, method: str, path: str, **kw: Any) -> Any:
    """One request; a refusal is a RunError, an unreachable agent an AgentLostError, each naming the host."""
    try:
        async with session.request(method, host.url + path, **kw) as resp:
            text = await resp.text()
            if resp.status >= 400:
                try:
                    reason = json.loads(text).get("error", text)
                except ValueError:
                    reason = text.strip()[:200]
                raise RunError(f"host {host.spec.label}: {method} {path} refused ({resp.status}): {reason}")
            return json.loads(text) if text else {}
    except (aiohttp.ClientSSLError, ssl.SSLError) as exc:
        raise RunError(f"host {host.spec.label}: {method} {path} failed: {type(exc).__name__}: {exc}") from None
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise AgentLostError(f"host {host.spec.label}: {method} {path} failed: {type(exc).__name__}: {exc}") \
            from None


async def _setup_step(host: _Host, step: str, timeout_s: float, coro: Awaitable[Any]) -> Any:
    """``coro`` (one setup step of ``host``) within ``timeout_s``; past it the host is lost (AgentLostError)."""
    try:
        return await asyncio.wait_for(coro, timeout_s)
    except asyncio.TimeoutError:
        raise AgentLostError(f"host {host.spec.label} stopped answering during {step} "
                             f"(nothing for {timeout_s:g} s)") from None


async def _check_info(session: aiohttp.ClientSession, host: _Host) -> None:
    host.info = info = await _call(session, host, "GET", f"{PREFIX}/info")
    if info.get("api") != API_VERSION or info.get("schedule_format") != SCHEDULE_VERSION:
        raise RunError(f"host {host.spec.label}: agent speaks API {info.get('api')} / schedule format "
                       f"{info.get('schedule_format')}, this controller {API_VERSION} / {SCHEDULE_VERSION}")
    if info.get("busy"):
        raise RunError(f"host {host.spec.label}: the agent is busy with another run")


async def _measure_clock(session: aiohttp.ClientSession, host: _Host, n: int, timeout_s: float) -> None:
    samples = []
    mono = time.monotonic_ns
    try:
        ws = await asyncio.wait_for(session.ws_connect(host.url + f"{PREFIX}/clock", heartbeat=None), timeout_s)
        async with ws:
            for _ in range(n):
                t1 = mono()
                await ws.send_str(f'{{"t1_ns":{t1}}}')
                msg = await ws.receive(timeout=timeout_s)
                t4 = mono()
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                d = json.loads(msg.data)
                if d.get("t1_ns") == t1:
                    samples.append(ClockSample(t1, int(d["t2_ns"]), int(d["t3_ns"]), t4))
    except asyncio.TimeoutError:
        raise AgentLostError(f"host {host.spec.label} stopped answering during the clock exchange "
                             f"(nothing for {timeout_s:g} s)") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise AgentLostError(f"host {host.spec.label}: clock exchange failed: {type(exc).__name__}: {exc}") \
            from None
    except (ValueError, KeyError) as exc:
        raise RunError(f"host {host.spec.label}: clock exchange failed: {type(exc).__name__}: {exc}") from None
    if not samples:
        raise AgentLostError(f"host {host.spec.label}: clock exchange failed: no answer")
    host.clock = estimate_offset(samples)


async def _follow(session: aiohttp.ClientSession, host: _Host, cfg: ControllerConfig,
                  on_event: Callable[[], None]) -> None:
    """Read the host's events until done; mark it lost when it closes or goes silent."""
    try:
        ws = await asyncio.wait_for(session.ws_connect(host.url + f"{PREFIX}/events", heartbeat=None),
                                    cfg.agent_timeout_s)
        async with ws:

            async def beat() -> None:
                while True:
                    await asyncio.sleep(cfg.heartbeat_interval_s)
                    await ws.send_str("heartbeat")

            beater = asyncio.get_running_loop().create_task(beat())
            try:
                while True:
                    try:
                        msg = await ws.receive(timeout=cfg.agent_timeout_s)
                    except asyncio.TimeoutError:
                        host.lost = f"stopped answering (nothing for {cfg.agent_timeout_s:g} s)"
                        return
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        host.lost = "closed its connection (agent died?)"
                        return
                    ev = json.loads(msg.data)
                    if ev.get("type") == "ready":
                        host.ready = True
                        on_event()
                    elif ev.get("type") == "progress":
                        host.progress = ev
                        on_event()
                    elif ev.get("type") == "done":
                        host.done = True
                        on_event()
                        return
            finally:
                beater.cancel()
    except asyncio.TimeoutError:
        host.lost = f"stopped answering (no events connection within {cfg.agent_timeout_s:g} s)"
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        host.lost = f"connection failed: {type(exc).__name__}: {exc}"


def _progress_sum(hosts: list[_Host]) -> dict[str, Any]:
    out: dict[str, Any] = {"ranks": sum(len(h.spec.ranks) for h in hosts)}
    for key in ("ranks_done", "ops_done", "bytes_delivered", "packets_delivered", "progress"):
        out[key] = sum(int(h.progress.get(key, 0)) for h in hosts)
    out["elapsed_s"] = max((float(h.progress.get("elapsed_s", 0.0)) for h in hosts), default=0.0)
    return out


def start_lead_s(min_lead_s: float, phases_s: dict[str, float]) -> float:
    """How far ahead of now t0 goes: the start requests go out to every agent in parallel, like the info
    and arm requests did, so twice the slower of those two rounds (the arm round also forks each agent's
    run process: on a loaded machine the slowest of the rounds), never less than ``min_lead_s``."""
    arm_s = phases_s.get("arm", 0.0) - phases_s.get("upload", phases_s.get("arm", 0.0))
    return max(min_lead_s, 2 * max(phases_s.get("info", 0.0), arm_s))


def _ssl_context(cfg: ControllerConfig) -> ssl.SSLContext | bool:
    if cfg.ca_file is None:
        return True
    try:
        return ssl.create_default_context(cafile=cfg.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise RunError(f"--ca-file {cfg.ca_file}: {exc}") from None


async def run_remote_async(schedule: Schedule, plan: HostsPlan, endpoint: EndpointConfig, *, udp_port: int,
                           timeout_s: float, cfg: ControllerConfig,
                           progress: Callable[[dict], None] | None = None) -> DriverResult:
    """The whole run (module docstring)."""
    plan.check_world(schedule.world_size)
    hosts = [_Host(spec) for spec in plan.hosts]
    addresses = plan.rank_addresses()
    ports = plan.rank_ports(udp_port)
    headers = {"Authorization": f"Bearer {cfg.token}", "X-Emulator-Api": str(API_VERSION)}
    tmo = aiohttp.ClientTimeout(total=None, sock_connect=cfg.agent_timeout_s, sock_read=max(60.0, cfg.agent_timeout_s))
    connector = aiohttp.TCPConnector(ssl=_ssl_context(cfg), limit=0)
    setup0 = time.monotonic_ns()
    user_stopped = False
    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        phases[name] = round((time.monotonic_ns() - setup0) / 1e9, 6)
    async with aiohttp.ClientSession(headers=headers, timeout=tmo, connector=connector) as session:
        step_s = cfg.agent_timeout_s
        await asyncio.gather(*(_setup_step(h, "info", step_s, _check_info(session, h)) for h in hosts))
        phase("info")
        for h in hosts:  # one host at a time: concurrent exchanges would delay each other's stamps
            await _measure_clock(session, h, cfg.clock_samples, cfg.agent_timeout_s)
        phase("clock")
        data, sha = await asyncio.get_running_loop().run_in_executor(None, schedule_bytes, schedule)
        upload_s = step_s + len(data) / UPLOAD_FLOOR_BYTES_PER_S
        await asyncio.gather(*(_setup_step(h, "upload", upload_s,
                                           _call(session, h, "PUT", f"{PREFIX}/schedules/{sha}", data=data))
                               for h in hosts))
        phase("upload")
        arms = [ArmRequest(schedule_sha256=sha, local_ranks=h.spec.ranks, addresses=addresses, ports=ports,
                           endpoint=endpoint, timeout_s=timeout_s, start_timeout_s=cfg.start_timeout_s,
                           heartbeat_timeout_s=cfg.heartbeat_timeout_s, linger_s=cfg.linger_s,
                           ranks_per_worker=cfg.ranks_per_worker, progress_interval_s=cfg.progress_interval_s)
            for h in hosts]
        armed = await asyncio.gather(*(_setup_step(h, "arm", step_s,
                                                   _call(session, h, "POST", f"{PREFIX}/runs", json=a.to_json()))
                                       for h, a in zip(hosts, arms, strict=True)), return_exceptions=True)
        phase("arm")
        failed = [e for e in armed if isinstance(e, BaseException)]
        if failed:
            for h, e in zip(hosts, armed, strict=True):
                if not isinstance(e, BaseException):
                    with contextlib.suppress(RunError):
                        await _call(session, h, "POST", f"{PREFIX}/abort", json={"reason": "another host refused"})
            raise failed[0]
        all_ready = asyncio.Event()

        def on_event() -> None:
            if all(h.ready for h in hosts):
                all_ready.set()
            if progress is not None:
                progress(_progress_sum(hosts))

        loop = asyncio.get_running_loop()
        tasks = {loop.create_task(_follow(session, h, cfg, on_event)): h for h in hosts}
        waiter = loop.create_task(all_ready.wait())
        await asyncio.wait([waiter, *tasks], timeout=cfg.start_timeout_s, return_when=asyncio.FIRST_COMPLETED)
        phase("ready")
        lead_s = start_lead_s(cfg.lead_s, phases)
        t0 = time.monotonic_ns() + int(lead_s * 1e9)
        setup_ns = t0 - setup0
        aborted = False
        if all_ready.is_set():
            started = await asyncio.gather(*(_setup_step(h, "start", step_s, _call(
                session, h, "POST", f"{PREFIX}/start", json={"t0_ns": h.clock.to_agent_ns(t0)})) for h in hosts),
                                           return_exceptions=True)
            for h, e in zip(hosts, started, strict=True):
                if isinstance(e, BaseException) and not h.lost:
                    h.lost = f"did not start: {e}"
        else:
            waiter.cancel()
            for h in hosts:
                if not h.ready and not h.lost and not h.done:
                    h.lost = f"not ready within {cfg.start_timeout_s:g} s of arming"
        deadline_s = timeout_s + cfg.linger_s + cfg.agent_timeout_s + 10.0
        end = time.monotonic() + deadline_s
        interrupted = asyncio.Event()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # main thread only
            loop.add_signal_handler(signal.SIGINT, interrupted.set)
        int_task = loop.create_task(interrupted.wait())
        pending = set(tasks)
        try:
            while pending:
                lost = [h for h in hosts if h.lost]
                if (lost or interrupted.is_set()) and not aborted:
                    aborted = True
                    reason = "; ".join(f"host {h.spec.label} {h.lost}" for h in lost) or INTERRUPTED
                    await asyncio.gather(*(_call(session, h, "POST", f"{PREFIX}/abort", json={"reason": reason})
                                           for h in hosts if not h.lost and not h.done), return_exceptions=True)
                watch = pending if int_task.done() else pending | {int_task}
                done, _ = await asyncio.wait(watch, timeout=max(0.0, end - time.monotonic()),
                                             return_when=asyncio.FIRST_COMPLETED)
                pending -= done
                if not done:  # past every bound: whoever is still running is lost
                    for t in pending:
                        tasks[t].lost = f"did not finish within {deadline_s:.0f} s"
                        t.cancel()
                    break
        finally:
            user_stopped = interrupted.is_set()
            int_task.cancel()
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signal.SIGINT)
        for h in hosts:
            if h.lost:
                continue
            try:
                h.result = result_from_json(await _call(session, h, "GET", f"{PREFIX}/records"))
            except RunError as exc:
                h.lost = str(exc)
    return merge_results(hosts, schedule.world_size, setup_to_t0_ns=setup_ns, phases_s=phases,
                         interrupted=user_stopped)


def merge_results(hosts: list[_Host], world_size: int, *, setup_to_t0_ns: int,
                  phases_s: dict[str, float] | None = None, interrupted: bool = False) -> DriverResult:
    """One DriverResult from every host's (the adaptation to the driver contract, in one place)."""
    records: dict = {}
    errors: list[str] = []
    warnings: list[str] = []
    per_host = []
    sockets: dict = {}
    lag_p99 = lag_max = None
    sums = {"endpoint_socket_drops": 0, "endpoint_send_errors": 0, "endpoint_late_wakeups": 0,
            "endpoint_timer_wakeups": 0}
    for h in hosts:
        label = f"host {h.spec.agent} (ranks {format_ranks(h.spec.ranks)})"
        entry: dict[str, Any] = {"agent": h.spec.agent, "ranks": list(h.spec.ranks),
                                 "addresses": list(h.spec.addresses), "hostname": h.info.get("host"),
                                 **(h.clock.to_dict() if h.clock else {}), "lost": h.lost}
        if h.lost:
            errors.append(f"{label} {h.lost}; its records are missing")
        res = h.result
        if res is not None:
            records.update(res.records)
            errors.extend(f"{label}: {e}" for e in res.errors)
            hh = res.health
            warnings.extend(f"{label}: {w}" for w in hh.get("warnings", []))
            lag = hh.get("endpoint_timer_lag_ns", {})
            entry.update(complete=res.complete, wall_ns=res.wall_ns, timer_lag_ns=lag,
                         **{k: hh.get(k, 0) for k in sums})
            for k in sums:
                sums[k] += int(hh.get(k, 0))
            sockets.update(hh.get("sockets", {}))
            if lag.get("p99") is not None:
                lag_p99 = max(lag_p99 or 0, lag["p99"])
                lag_max = max(lag_max or 0, lag.get("max") or 0)
        per_host.append(entry)
    health = {"world_size": world_size, "hosts": per_host, "warnings": warnings, **sums,
              "endpoint_timer_lag_ns": {"p99": lag_p99, "max": lag_max},
              "sockets": dict(sorted(sockets.items(), key=lambda kv: int(kv[0]))),
              "controller": {"setup_to_t0_s": setup_to_t0_ns / 1e9, "setup_phases_s": phases_s or {},
                             "clock": "controller monotonic; rank times count from the common t0"}}
    complete = not errors and all(h.result is not None and h.result.complete for h in hosts)
    wall = max((h.result.wall_ns for h in hosts if h.result is not None), default=0)
    return DriverResult(driver="remote", records=dict(sorted(records.items())), health=health, complete=complete,
                        errors=errors, wall_ns=wall, interrupted=interrupted)


def check_agents(plan: HostsPlan, cfg: ControllerConfig) -> None:
    """Every agent of ``plan`` answers ``/info`` to ``cfg``'s token and CA, speaks this API and is idle: the run's
    first setup step, asked before a results directory is claimed, so a wrong token, a missing CA or a misspelt
    agent address (RunError; AgentLostError when unreachable) costs no earlier results."""

    async def check() -> None:
        headers = {"Authorization": f"Bearer {cfg.token}", "X-Emulator-Api": str(API_VERSION)}
        tmo = aiohttp.ClientTimeout(total=None, sock_connect=cfg.agent_timeout_s, sock_read=cfg.agent_timeout_s)
        connector = aiohttp.TCPConnector(ssl=_ssl_context(cfg), limit=0)
        async with aiohttp.ClientSession(headers=headers, timeout=tmo, connector=connector) as session:
            await asyncio.gather(*(_setup_step(h, "info", cfg.agent_timeout_s, _check_info(session, h))
                                   for h in (_Host(spec) for spec in plan.hosts)))

    asyncio.run(check())


def run_remote(schedule: Schedule, plan: HostsPlan, endpoint: EndpointConfig, *, udp_port: int, timeout_s: float,
               cfg: ControllerConfig, progress: Callable[[dict], None] | None = None) -> DriverResult:
    """:func:`run_remote_async` from synchronous code."""
    return asyncio.run(run_remote_async(schedule, plan, endpoint, udp_port=udp_port, timeout_s=timeout_s, cfg=cfg,
                                        progress=progress))
