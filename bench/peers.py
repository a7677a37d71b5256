"""Run the shared peer-baseline scripts (``../shared/peers``) in the same run as our benches.

Theory of operation
-------------------
The peer scripts are run, never copied: each is started as its own process group with the peers'
virtualenv interpreter, ``PEERS_RESULTS_DIR`` pointing at a fresh temporary directory (so the shared
``results/`` stays untouched), and a hard wall-clock bound; on timeout the whole group (mpirun and its
ranks, torch's spawned ranks) is killed. The JSON the script wrote is read back and its ``rows`` returned.

Where things are (environment overrides):

* ``EMULATOR_PEERS_DIR``: the peer scripts (default ``<repo>/../shared/peers``);
* ``PEERS_PYTHON``: the interpreter that has torch 2.13.0, numpy and mpi4py; else ``$VENV/bin/python``;
  else ``~/.venv-peers/bin/python`` (what ``setup.sh`` makes).

Setup once (root): ``apt-get install -y openmpi-bin libopenmpi-dev iperf3`` and
``VENV=~/.venv-peers SKIP_APT=1 bash ../shared/peers/setup.sh`` (or ``pip install torch==2.13.0 numpy mpi4py``
into that venv). :func:`check_setup` names what is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS_DIR = Path(os.environ.get("EMULATOR_PEERS_DIR", HERE.parents[1] / "shared" / "peers"))


def peer_python() -> str:
    """The peers' interpreter (see module docstring)."""
    if os.environ.get("PEERS_PYTHON"):
        return os.environ["PEERS_PYTHON"]
    venv = os.environ.get("VENV") or str(Path.home() / ".venv-peers")
    return str(Path(venv) / "bin" / "python")


def check_setup(need_mpi: bool = True, need_torch: bool = True) -> list[str]:
    """Problems that keep the peers from running (empty list = ready)."""
    problems = []
    if not PEERS_DIR.is_dir():
        problems.append(f"peer scripts not found at {PEERS_DIR} (set EMULATOR_PEERS_DIR)")
    py = peer_python()
    if not Path(py).is_file():
        problems.append(f"peer interpreter {py} missing: VENV={Path(py).parent.parent} SKIP_APT=1 bash "
                        f"{PEERS_DIR}/setup.sh")
        return problems
    mods = (["torch"] if need_torch else []) + (["mpi4py", "numpy"] if need_mpi else [])
    if mods:
        r = subprocess.run([py, "-c", "import " + ", ".join(mods)], capture_output=True, text=True, timeout=120)
        if r.returncode:
            problems.append(f"{py} cannot import {', '.join(mods)}: {r.stderr.strip().splitlines()[-1:]}")
    if need_mpi and not shutil.which("mpirun"):
        problems.append("mpirun not found: apt-get install -y openmpi-bin libopenmpi-dev")
    return problems


@dataclass
class PeerRun:
    """The outcome of one peer script run."""

    name: str
    argv: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    output_tail: str = ""

    @property
    def command(self) -> str:
        return " ".join(["$VENV/bin/python", *self.argv])

    def busbw(self, op: str, world: int, size_bytes: int, transport: str = "") -> dict[str, float] | None:
        """busbw stats (median/min/max/mean, GB/s) of one row, or None when not measured."""
        for r in self.rows:
            if (r["op"] == op and r["world"] == world and r["size_bytes"] == size_bytes
                    and r.get("transport", "") == transport):
                return dict(r["busbw_GBps"])
        return None


#: put before every peer's command line (``chrt -f 1`` for a SCHED_FIFO comparison; empty = as is)
COMMAND_PREFIX: list[str] = []


def run_peer(script: str, args: list[str], result_name: str, timeout_s: float) -> PeerRun:
    """Run ``PEERS_DIR/script args`` (after :data:`COMMAND_PREFIX`) bounded by ``timeout_s``; read
    ``<tmp>/<result_name>.json``."""
    path = PEERS_DIR / script
    run = PeerRun(name=result_name, argv=[script, *args])
    if not path.is_file():
        run.errors.append(f"{path} not found")
        return run
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        env = dict(os.environ, PEERS_RESULTS_DIR=tmp, OMP_NUM_THREADS="1")
        proc = subprocess.Popen([*COMMAND_PREFIX, peer_python(), str(path), *args], cwd=str(PEERS_DIR), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            run.errors.append(f"{script} exceeded {timeout_s:.0f} s and was killed")
        finally:
            if proc.poll() is None:  # pragma: no cover - defensive
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        run.wall_s = time.monotonic() - t0
        run.output_tail = "\n".join((out or "").strip().splitlines()[-12:])
        if proc.returncode not in (0, None) and not run.errors:
            run.errors.append(f"{script} exited with {proc.returncode}")
        doc_path = Path(tmp) / f"{result_name}.json"
        if doc_path.is_file():
            doc = json.loads(doc_path.read_text())
            run.rows = list(doc.get("rows", []))
            run.meta = dict(doc.get("meta", {}))
            run.errors.extend(str(e["error"]) for e in doc.get("raw", []) if isinstance(e, dict) and "error" in e)
        elif not run.errors:
            run.errors.append(f"{script} wrote no {result_name}.json")
    return run


def run_gloo(world: int, sizes_mib: str, *, ops: str = "all_reduce,all_to_all", warmup: int = 1, iters: int = 3,
             launches: int = 1, timeout_s: float = 240.0) -> PeerRun:
    """PyTorch gloo over TCP on 127.0.0.1 (``gloo_collectives.py``)."""
    per_spawn = max(30, int(timeout_s / max(launches, 1)))
    args = ["--worlds", str(world), "--sizes-mib", sizes_mib, "--ops", ops, "--warmup", str(warmup),
            "--iters", str(iters), "--launches", str(launches), "--timeout", str(per_spawn)]
    return run_peer("gloo_collectives.py", args, "gloo", timeout_s + 30)


def run_mpi(world: int, sizes_mib: str, *, transports: str = "tcp", ops: str = "allreduce,alltoall",
            warmup: int = 1, iters: int = 3, launches: int = 1, timeout_s: float = 180.0) -> PeerRun:
    """Open MPI via mpi4py (``mpi_collectives.py``), TCP over lo by default."""
    per_run = max(30, int(timeout_s / max(launches * len(transports.split(",")), 1)))
    args = ["--nps", str(world), "--transports", transports, "--sizes-mib", sizes_mib, "--ops", ops,
            "--warmup", str(warmup), "--iters", str(iters), "--launches", str(launches), "--timeout", str(per_run)]
    return run_peer("mpi_collectives.py", args, "mpi", timeout_s + 30)


def load_note() -> str:
    """One line about the machine's load right now (1/5/15-minute load average, CPUs)."""
    la = os.getloadavg()
    return f"load average {la[0]:.2f} {la[1]:.2f} {la[2]:.2f} on {os.cpu_count()} CPUs"
