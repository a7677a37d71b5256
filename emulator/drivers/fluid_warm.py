"""A large fluid run's compiled loops compiled before the loop needs them, part of them by a helper process.

numba compiles a kernel at its first call and keeps it in its on-disk cache (``cache=True``). With an empty
cache (a first run, a fresh checkout, CI) a large run spends ~35 CPU-s compiling, one kernel after the other,
in the run's own process. :data:`KERNELS` names the kernels a large run calls with the argument types it
passes; :func:`start` launches a helper (``python -m emulator.drivers.fluid_warm DIR``) that compiles them
from the end of the list while this process builds the schedule and the run, and :meth:`Warm.join` compiles
the rest from the front, then loads the helper's from the cache. A claim file per kernel in a shared
directory (``DIR``) keeps the two from compiling one kernel twice. The compiled code is numba's own for the
same function and types, so results are those of lazy compilation; with a warm cache both sides only load.
``emulator run`` starts the helper before the workload compiles (:func:`start_early`: a fluid profile of
:data:`WARM_FROM_RANKS` ranks or more), ``run_fluid`` joins it or, for a schedule of fewer than
:data:`WARM_FROM_FLOWS` flows, stops it (:func:`cancel`); a process that exits without either ends it (``atexit``).

The cache is numba's: next to the sources, or numba's user-wide directory (``NUMBA_CACHE_DIR``) when those
are read-only; a kernel whose signature does not match :data:`KERNELS` is skipped here and compiles at its
first call as before (tests/drivers/test_fluid_warm.py keeps the list in step with the kernels).
``emulator warmup`` (or ``python -m emulator.drivers.fluid_warm`` with no argument) compiles the whole list in
one process, as an explicit warm-up. No helper starts when the cache already holds the list's last kernel; ``EMULATOR_FLUID_WARM=0`` turns the
helper and the join off, ``always`` starts the helper even when no core is idle (:func:`free_cores`; by
default the run then compiles the list alone: a helper repeats ~5–10 CPU-s of numba's own start-up and internals, a
loss without a free core).
"""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: flows from which run_fluid warms the kernels (a run this large steps views of compiled size)
WARM_FROM_FLOWS = 50_000
#: ranks from which ``emulator run`` starts the helper before the workload is compiled (:func:`start_early`)
WARM_FROM_RANKS = 128
_POLL_S = 0.01
_SAMPLE_S = 0.1  # how long start() watches the cores before it decides on a helper

#: (module, kernel, argument types) in the order the helper leaves for last; a type per argument: ``i`` int64,
#: ``f`` float64, ``b`` bool, ``s`` float32, ``j`` int32 arrays (1-D contiguous; ``a`` suffix: any layout,
#: ``2``: 2-D C order, ``F``: 2-D Fortran order); ``I``, ``F``, ``B``: int64, float64, bool scalars
KERNELS: tuple[tuple[str, str, str], ...] = (
    ("drivers.fluid_event_kernels", "first_starts", "i f ia ia ia ia ia fa"),
    ("fabric.fluid_kernels", "offered", "f f i f i f i B"),
    ("fabric.fluid_cc_kernels", "next_deadline_ns", "i B f b f"),
    ("fabric.fluid_cc_kernels", "bytes_to_next_increase", "i F f b f"),
    ("fabric.fluid_step_kernels", "nic_max_min", "f i f b"),
    ("fabric.fluid_kernels", "nic_send", "f f F F"),
    ("fabric.fluid_kernels", "cnps_due", "f f i F"),
    ("fabric.fluid_kernels", "left_after", "f f b"),
    ("fabric.fluid_kernels", "mark_probability", "f F F F"),
    ("fabric.fluid_kernels", "marks", "f f F f i"),
    ("fabric.fluid_kernels", "port_sum", "i f I"),
    ("fabric.fluid_kernels", "release_credit", "f i f i f f F F F"),
    ("fabric.fluid_kernels", "delivered", "f f2 i F"),
    ("fabric.fluid_kernels", "level_in", "f f i i f"),
    ("fabric.fluid_kernels", "level_out", "f i i i f f f f f"),
    ("fabric.fluid_kernels", "level_queues", "f2 i i i i i i I"),
    ("fabric.fluid_kernels", "np_cnps", "f f i f F F B f"),
    ("fabric.fluid_kernels", "packet_phase", "f i f f"),
    ("fabric.fluid_kernels", "qp_sums", "i I f f f"),
    ("fabric.fluid_step_kernels", "port_account", "f f F f f f F f"),
    ("fabric.fluid_step_kernels", "to_draw", "f i f f"),
    ("fabric.fluid_step_kernels", "np_fire", "f f i f F F B f i f f f B"),
    ("fabric.fluid_step_kernels", "view_levels", "i i2"),
    ("fabric.fluid_cc_kernels", "idle", "i B f b"),
    ("fabric.fluid_cc_kernels", "advance", "i f F f B B f f f i i f f b b b f i f"),
    ("fabric.fluid_cc_kernels", "on_cnp", "i F f B f f f f i i f f b b b f i i f"),
    ("drivers.fluid_event_kernels", "acks_counted", "i i i ia ia i j ia j"),
    ("drivers.fluid_event_kernels", "plain_children", "i f ia i ia ia ia ia ia i B ia ia j"),
    ("drivers.fluid_event_kernels", "delivered_events", "i F F fF f f2 ia ia ia ia ia i f j f i i j I I"),
    ("drivers.fluid_record_kernels", "rank_columns", "ia ia ia i i i i i i i"),
    ("fabric.fluid_nic_kernels", "nic_sent", "f f f f i i f f f f F F"),
    ("fabric.fluid_nic_kernels", "nic_give", "f f f f f f f F i i f f f f"),
    ("fabric.fluid_nic_kernels", "nic_first", "f f f f i i f b F"),
    ("fabric.fluid_step_kernels", "qp_index", "i i i f i i i i i i"),
    ("fabric.fluid_kernels", "fifo_epochs", "i i i f f s2 i i f2 f f I F"),
    ("fabric.fluid_kernels", "level_out_marks", "f i i i f f f f f f"),
    ("fabric.fluid_kernels", "serve", "i f i b f s F F f I"),
    ("fabric.fluid_view_kernels", "view_update", "i i i i i b i i2 i f B i i i i i i i i i"),
    ("fabric.fluid_level_kernels", "level_step", "f f s i i i B f i f f F F f F f f F f f s2 i i f2 f F"),
)


def signature(codes: str) -> tuple:
    """numba's argument types for ``codes`` (see :data:`KERNELS`)."""
    from numba import types as t

    dtypes = {"i": t.int64, "f": t.float64, "b": t.boolean, "s": t.float32, "j": t.int32}
    scalars = {"I": t.int64, "F": t.float64, "B": t.boolean}
    out = []
    for c in codes.split():
        if c in scalars:
            out.append(scalars[c])
        else:
            d = dtypes[c[0]]
            out.append({"": d[::1], "a": d[:], "2": d[:, ::1], "F": d[::1, :]}[c[1:]])
    return tuple(out)


def dispatcher(entry: tuple[str, str, str]):
    """The numba dispatcher of a :data:`KERNELS` entry."""
    return getattr(importlib.import_module(f"emulator.{entry[0]}"), entry[1])


def compile_one(entry: tuple[str, str, str]) -> bool:
    """Compile (or load from the cache) one kernel; whether it compiled (a cache miss). A kernel that does
    not take these types is left to compile at its first call."""
    disp, sig = dispatcher(entry), signature(entry[2])
    try:
        disp.compile(sig)
    except Exception:  # noqa: BLE001 — a stale entry must not stop a run; the test of the list catches it
        return False
    return bool(disp.stats.cache_misses.get(sig))


def _claim(d: Path, i: int) -> bool:
    try:
        os.close(os.open(d / f"{i}.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class Warm:
    """A helper process compiling :data:`KERNELS` from the end and the shared directory of claims."""

    def __init__(self, proc: subprocess.Popen | None, d: Path) -> None:
        self.proc, self.dir = proc, d
        self.compiled = 0  # kernels this process compiled in join (cache misses)
        self.join_s = self.wait_s = 0.0  # wall time in join, and of it waiting for the helper

    def join(self, note=None) -> None:
        """Compile the kernels the helper has not claimed, front to back, then wait for the helper's and load
        them; ``note(text)`` is called once after the first kernel that had to compile (a first run's message)."""
        t0 = time.perf_counter()
        for i, entry in enumerate(KERNELS):
            if not _claim(self.dir, i):
                break
            self._compile(entry, note)
        else:
            i = len(KERNELS)
        t1 = time.perf_counter()
        while i < len(KERNELS) and not (self.dir / f"{i}.done").exists() and self._helper_alive():
            time.sleep(_POLL_S)  # the helper compiles the kernels from i on, the one at i last
        self.wait_s = time.perf_counter() - t1
        for entry in KERNELS[i:]:
            self._compile(entry, note)  # the helper's, from the cache (compiled here if it failed)
        self.stop()
        self.join_s = time.perf_counter() - t0

    def _compile(self, entry: tuple[str, str, str], note) -> None:
        if compile_one(entry):
            if note is not None and not self.compiled:
                note("fluid fabric: compiling its kernels into numba's cache (empty: a first run); ~30 CPU-s, once"
                     + (", shared with a helper process" if self.proc is not None else "")
                     + " (`emulator warmup` does it ahead of a run)")
            self.compiled += 1

    def _helper_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """End the helper (if still running) and remove the claims."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
        if self.proc is not None:
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _in_cache(entry: tuple[str, str, str]) -> bool:
    """Whether numba's cache holds ``entry``: its index names a data file for these types and this source, and the
    file is there (neither loaded nor compiled; numba's cache object is not public API)."""
    disp = dispatcher(entry)
    try:
        cache = disp._cache
        key = cache._index_key(signature(entry[2]), disp.targetctx.codegen())
        name = cache._cache_file._load_index().get(key)
        return name is not None and os.path.exists(cache._cache_file._data_path(name))
    except Exception:  # noqa: BLE001 — unknown: warm as if cold
        return False


def _cpu_times() -> tuple[int, int]:
    """(idle, total) clock ticks of all cores since boot, from ``/proc/stat`` (idle and iowait count as idle)."""
    with open("/proc/stat") as fh:
        ticks = [int(x) for x in fh.readline().split()[1:9]]
    return ticks[3] + ticks[4], sum(ticks)


def free_cores(sample_s: float = _SAMPLE_S) -> float:
    """Cores the other processes leave idle now: the idle share of ``/proc/stat``'s ticks over ``sample_s``
    times the cores (this process sleeps meanwhile); where ``/proc/stat`` cannot be read, the cores less the
    1-minute load average. The load average lags by a minute: a job that just ended (a previous run, a
    compile) still counts there as a busy core."""
    cores = os.cpu_count() or 1
    try:
        idle0, total0 = _cpu_times()
        time.sleep(sample_s)
        idle1, total1 = _cpu_times()
    except (OSError, ValueError, IndexError):
        return cores - os.getloadavg()[0]
    if total1 <= total0:
        return cores - os.getloadavg()[0]
    return cores * (idle1 - idle0) / (total1 - total0)


_current: Warm | None = None


def start() -> Warm | None:
    """Launch the helper (once per process; ``None`` when turned off or the cache is warm; without a helper
    when :func:`free_cores` finds less than a core idle — a later call before the join looks again). The caller must
    :meth:`~Warm.join` or :meth:`~Warm.stop` it."""
    global _current
    mode = os.environ.get("EMULATOR_FLUID_WARM", "auto")
    if mode == "0":
        return None
    if _current is not None and _current.dir.exists():
        if _current.proc is None and mode != "always" and free_cores() >= 1.0:  # a core idle since: a helper now
            _current.proc = _launch(_current.dir)
        return _current
    if _in_cache(KERNELS[-1]):  # the last kernel the helper would compile is on disk: the cache is warm
        return None
    d = Path(tempfile.mkdtemp(prefix="emulator-fluid-warm-"))
    if mode != "always" and free_cores() < 1.0:
        _current = Warm(None, d)  # no core free: the run compiles the list itself (no helper's start-up to pay)
    else:
        _current = Warm(_launch(d), d)
    atexit.register(_current.stop)  # a run that never reaches its join (bad input, Ctrl-C) leaves no helper behind
    return _current


def _launch(d: Path) -> subprocess.Popen:
    """The helper process, on this process's emulator package whatever ``sys.path`` says."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    return subprocess.Popen([sys.executable, "-m", "emulator.drivers.fluid_warm", str(d)], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_early(ranks: int) -> Warm | None:
    """:func:`start` for a fluid run of ``ranks`` ranks whose schedule is not built yet: from
    :data:`WARM_FROM_RANKS` ranks, so the helper compiles while the workload compiles (seconds of CPU at 1,024
    ranks); ``run_fluid`` joins it, or :func:`cancel` stops it when the schedule has fewer than
    :data:`WARM_FROM_FLOWS` flows."""
    return start() if ranks >= WARM_FROM_RANKS else None


def cancel() -> None:
    """Stop a helper :func:`start` launched (a run too small to need it); what it compiled stays in the cache."""
    global _current
    if _current is not None:
        _current.stop()
        _current = None


def helper(d: Path) -> None:
    """The helper's work: claim and compile kernels from the end until one is claimed by the run."""
    for i in range(len(KERNELS) - 1, -1, -1):
        if not _claim(d, i):
            return
        compile_one(KERNELS[i])
        (d / f"{i}.done").touch()


def warm_all() -> str:
    """Compile (or load) every kernel of the list in this process: an explicit warm-up (after an install, in CI)."""
    compiled = sum(compile_one(entry) for entry in KERNELS)
    where = dispatcher(KERNELS[-1]).stats.cache_path
    return f"fluid kernels: {compiled} of {len(KERNELS)} compiled, the rest loaded; numba's cache: {where}"


if __name__ == "__main__":  # ``python -m emulator.drivers.fluid_warm [DIR]``: the helper of a run, or a warm-up
    if len(sys.argv) > 1:
        helper(Path(sys.argv[1]))
    else:
        print(warm_all())
