"""Runs started by existing launchers (``mpirun``, ``srun``, ``torchrun``): who am I, and the rendezvous.

:func:`launcher_env` reads rank, world size and local rank from the launcher's environment (sans-IO).
Every rank process runs an agent (in a thread); the agent of rank 0 also serves ``POST /v1/register``
(:class:`Rendezvous`), where every other rank names its agent and data-plane address. Once all have, rank 0
runs the controller against every agent, its own included, and writes the merged results.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from emulator.errors import ConfigError
from emulator.remote.api import Refusal
from emulator.remote.hosts import HostSpec, HostsPlan

#: (rank, world size, local rank) variables of each launcher, in the order they are tried
LAUNCHER_VARS: tuple[tuple[str, str, str, str], ...] = (
    ("mpirun (Open MPI)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("srun (Slurm)", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ("PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
)


@dataclass(frozen=True, slots=True)
class LaunchInfo:
    """This process's place in the launched job."""

    rank: int
    world_size: int
    local_rank: int
    launcher: str


def launcher_env(env: Mapping[str, str]) -> LaunchInfo:
    """Rank, world size and local rank from the first launcher whose variables are set."""
    for name, rank_var, size_var, local_var in LAUNCHER_VARS:
        if rank_var not in env or size_var not in env:
            continue
        try:
            rank, world = int(env[rank_var]), int(env[size_var])
            local = int(env.get(local_var, rank))
        except ValueError:
            raise ConfigError(f"{name}: {rank_var}/{size_var}/{local_var} must be integers, got "
                              f"{env.get(rank_var)!r}/{env.get(size_var)!r}/{env.get(local_var)!r}") from None
        if not 0 <= rank < world or local < 0:
            raise ConfigError(f"{name}: {rank_var}={rank} is not a rank of {size_var}={world}")
        return LaunchInfo(rank, world, local, name)
    names = ", ".join(f"{r}/{s}" for _, r, s, _ in LAUNCHER_VARS)
    raise ConfigError(f"rank: no launcher environment ({names}); start it with mpirun, srun or torchrun")


class Rendezvous:
    """Rank 0's table of every rank's agent URL and data-plane address (``POST /v1/register``)."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.entries: dict[int, tuple[str, str]] = {}
        self._lock = threading.Lock()

    def add(self, rank: int, agent: str, address: str) -> None:
        with self._lock:
            if rank in self.entries and self.entries[rank] != (agent, address):
                raise Refusal(409, f"rank {rank} is already registered by {self.entries[rank][0]}")
            self.entries[rank] = (agent, address)

    def complete(self) -> bool:
        with self._lock:
            return len(self.entries) == self.world_size

    def plan(self) -> HostsPlan:
        """One host per rank (its agent), in rank order."""
        with self._lock:
            return HostsPlan(hosts=tuple(HostSpec(agent=a, ranks=(r,), addresses=(addr,))
                                         for r, (a, addr) in sorted(self.entries.items())), source="rendezvous")

    async def handle(self, request: web.Request) -> web.Response:
        try:
            doc = await request.json()
        except ValueError as exc:
            raise Refusal(400, f"malformed JSON body: {exc}") from None
        if not isinstance(doc, dict):
            raise Refusal(400, "the body must be a JSON object")
        rank, world, agent, address = (doc.get(k) for k in ("rank", "world_size", "agent", "address"))
        if world != self.world_size:
            raise Refusal(409, f"world size {world!r} differs from rank 0's {self.world_size}")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.world_size:
            raise Refusal(400, f"'rank' must be a rank 0..{self.world_size - 1}")
        if not isinstance(agent, str) or not isinstance(address, str):
            raise Refusal(400, "'agent' and 'address' must be strings")
        self.add(rank, agent, address)
        return web.json_response({"registered": rank})


@dataclass
class AgentThread:
    """An agent served by its own event loop in a thread."""

    url: str
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    runner: Any

    def stop(self) -> None:
        fut = asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop)
        try:
            fut.result(15)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


def start_agent_thread(agent: Any, host: str, port: int) -> AgentThread:
    """Serve ``agent`` on ``host:port`` (0 = any free port) from a daemon thread; returns once listening."""
    from emulator.remote.agent import serve

    loop = asyncio.new_event_loop()
    box: dict[str, Any] = {}
    started = threading.Event()

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            box["runner"], box["port"] = loop.run_until_complete(serve(agent, host, port))
        except OSError as exc:
            box["error"] = exc
            started.set()
            return
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=main, name="emulator-agent", daemon=True)
    thread.start()
    started.wait(30)
    if "error" in box or "port" not in box:
        exc = box.get("error")
        raise ConfigError(f"rank: cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}")
    return AgentThread(f"http://{host}:{box['port']}", loop, thread, box["runner"])
