"""The fluid kernels compiled ahead (emulator.drivers.fluid_warm): the list names the types large runs pass, so
the run compiles nothing more; the helper and the run split the list by claims; a missing helper costs nothing
but time."""

from __future__ import annotations

import inspect
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba.core import event
from support.sim import collective_schedule

from emulator.config.loader import profile_from_dict
from emulator.drivers import fluid_warm
from emulator.drivers.fluid import run_fluid
from emulator.drivers.sim_types import SimConfig
from emulator.endpoint import EndpointConfig
from emulator.fabric.fluid_cc import FluidDcqcn
from emulator.fabric.topology import TopologyConfig
from emulator.pacing import get_params
from emulator.pacing.red import RedParams
from emulator.run import pipeline
from emulator.run.pipeline import run_profile
from emulator.trace.model import CollectiveType


def _compile_all() -> None:
    for entry in fluid_warm.KERNELS:
        fluid_warm.dispatcher(entry).compile(fluid_warm.signature(entry[2]))  # raises on a stale entry


def test_every_entry_names_a_kernel_with_its_arity() -> None:
    for mod, name, codes in fluid_warm.KERNELS:
        disp = fluid_warm.dispatcher((mod, name, codes))
        assert len(inspect.signature(disp.py_func).parameters) == len(codes.split()), name
    assert len({e[:2] for e in fluid_warm.KERNELS}) == len(fluid_warm.KERNELS)


@pytest.mark.parametrize(("coll", "n", "size", "limit_ns"), [
    (CollectiveType.ALL_TO_ALL, 64, 64 << 10, 1_000_000),  # views of compiled size, a fused switch level
    (CollectiveType.ALL_REDUCE, 128, 1 << 20, 50_000),  # levels one call at a time, per-queue-pair sums
])  # fmt: skip
def test_a_large_run_calls_the_kernels_with_the_listed_types_only(coll, n, size, limit_ns, monkeypatch) -> None:
    monkeypatch.setenv("EMULATOR_FLUID_WARM", "0")
    _compile_all()
    before = {e: set(fluid_warm.dispatcher(e).signatures) for e in fluid_warm.KERNELS}  # other tests' too
    s = collective_schedule(n, coll, size, iterations=1)
    topo = TopologyConfig(kind="leaf_spine", leaves=n // 16, spines=4, hosts_per_leaf=16)
    scfg = SimConfig(topology=topo, port_rate_bps=400e9, buffer_bytes=1 << 20, latency_ns=1000, red=RedParams())
    with event.install_recorder("numba:compile") as rec:
        run_fluid(s, scfg, EndpointConfig(mtu_bytes=4096, cc="connectx", line_rate_bps=400e9), seed=1,
                  time_limit_ns=limit_ns)
    for entry in fluid_warm.KERNELS:
        assert set(fluid_warm.dispatcher(entry).signatures) == before[entry], entry[1]  # a new one: the list is stale
    late = {str(ev.data["dispatcher"].py_func.__name__) for _, ev in rec.buffer if ev.is_start}
    assert not late  # a kernel the list does not name compiled inside the run's loop


def test_the_jump_queries_of_dcqcn_run_on_listed_types() -> None:
    """A slice without congestion asks DCQCN for its next deadline and byte-counter distance (1,024-rank ring)."""
    _compile_all()
    cc = FluidDcqcn(300, 400e9, get_params("connectx", 400e9))
    cc.use_compiled()
    idx = np.arange(0, 300, 2)
    with event.install_recorder("numba:compile") as rec:
        cc.next_deadline_ns(idx)
        cc.bytes_to_next_increase(idx[idx % 3 > 0])  # a boolean-masked index, as the fabric passes
    assert not [ev for _, ev in rec.buffer if ev.is_start]  # a compile here: KERNELS lacks these types


def test_the_helper_and_the_run_split_the_list_and_both_end(monkeypatch) -> None:
    monkeypatch.setattr(fluid_warm, "_in_cache", lambda entry: False)  # as with an empty cache
    monkeypatch.setenv("EMULATOR_FLUID_WARM", "always")
    warm = fluid_warm.start()
    assert warm is not None
    warm.join()
    assert warm.proc.poll() is not None and not warm.dir.exists()
    for entry in fluid_warm.KERNELS:
        assert fluid_warm.signature(entry[2]) in fluid_warm.dispatcher(entry).signatures


def test_a_claim_left_by_a_helper_that_died_is_compiled_by_the_run(tmp_path) -> None:
    n = len(fluid_warm.KERNELS)
    for i in (n - 2, n - 1):  # claimed, never done
        (tmp_path / f"{i}.claim").touch()
    warm = fluid_warm.Warm(None, tmp_path)
    warm.join()
    assert not tmp_path.exists()
    for entry in fluid_warm.KERNELS:
        assert fluid_warm.signature(entry[2]) in fluid_warm.dispatcher(entry).signatures


def test_the_helper_stops_at_the_first_kernel_the_run_claimed(tmp_path) -> None:
    n = len(fluid_warm.KERNELS)
    for i in range(n - 1):
        (tmp_path / f"{i}.claim").touch()
    fluid_warm.helper(tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted([f"{i}.claim" for i in range(n)] + [f"{n - 1}.done"])


def test_no_helper_when_the_cache_holds_the_last_kernel() -> None:
    _compile_all()  # loads from (or writes) the cache
    assert fluid_warm._in_cache(fluid_warm.KERNELS[-1])
    assert fluid_warm.start() is None


def test_turned_off_by_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("EMULATOR_FLUID_WARM", "0")
    assert fluid_warm.start() is None


def test_the_explicit_warm_up_compiles_or_loads_the_whole_list() -> None:
    text = fluid_warm.warm_all()
    assert f" of {len(fluid_warm.KERNELS)} compiled" in text and "numba's cache: " in text
    for entry in fluid_warm.KERNELS:
        assert fluid_warm.signature(entry[2]) in fluid_warm.dispatcher(entry).signatures


def test_the_run_compiles_alone_without_a_free_core_unless_asked(monkeypatch) -> None:
    monkeypatch.setattr(fluid_warm, "_in_cache", lambda entry: False)
    monkeypatch.setattr(fluid_warm, "free_cores", lambda: 0.4)
    alone = fluid_warm.start()
    assert alone is not None and alone.proc is None
    alone.join()  # the run compiles (loads) the whole list itself
    assert not alone.dir.exists()
    monkeypatch.setenv("EMULATOR_FLUID_WARM", "always")
    warm = fluid_warm.start()
    assert warm is not None
    warm.stop()
    assert warm.proc.poll() is not None and not warm.dir.exists()


def test_a_helper_when_a_core_is_idle_now_though_the_load_average_is_high(monkeypatch) -> None:
    """The 1-minute load average still counts a job that just ended: the cores idle now decide."""
    monkeypatch.setattr(fluid_warm, "_in_cache", lambda entry: False)
    monkeypatch.setattr(os, "getloadavg", lambda: (float(os.cpu_count() or 1) + 1.0, 0.0, 0.0))
    ticks = iter([(1_000, 10_000), (1_190, 10_200)])  # 190 of 200 ticks idle: 95 % of the cores
    monkeypatch.setattr(fluid_warm, "_cpu_times", lambda: next(ticks), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    warm = fluid_warm.start()
    assert warm is not None and warm.proc is not None
    warm.stop()
    assert not warm.dir.exists()


def test_free_cores_is_the_idle_share_of_the_ticks_or_the_load_average(monkeypatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    ticks = iter([(500, 1_000), (550, 1_200)])  # 50 of 200 ticks idle
    monkeypatch.setattr(fluid_warm, "_cpu_times", lambda: next(ticks))
    assert fluid_warm.free_cores(0.0) == 1.0

    def unreadable() -> tuple[int, int]:
        raise OSError("no /proc")

    monkeypatch.setattr(fluid_warm, "_cpu_times", unreadable)
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5, 0.0, 0.0))
    assert fluid_warm.free_cores(0.0) == 1.5


def _fluid_profile(ranks: int):
    return profile_from_dict({"name": "ring", "fabric": {"kind": "fluid"}, "ranks": {"count": ranks},
                              "workload": {"collectives": [{"type": "all_reduce", "group": f"0-{ranks - 1}",
                                                            "size": "1MiB", "algorithm": "ring"}]}})


@pytest.mark.parametrize(("ranks", "calls"), [(1024, ["helper", "workload"]), (8, ["workload"])])
def test_emulator_run_starts_the_helper_before_the_workload_compiles(ranks, calls, monkeypatch, tmp_path) -> None:
    """A 1,024-rank schedule is seconds of CPU: the helper compiles meanwhile (from ``WARM_FROM_RANKS`` ranks)."""
    seen: list[str] = []

    class Stop(Exception):
        pass

    def workload(*args, **kwargs):
        seen.append("workload")
        raise Stop

    monkeypatch.setattr(fluid_warm, "start", lambda: seen.append("helper"))
    monkeypatch.setattr(pipeline, "load_workload", workload)
    with pytest.raises(Stop):
        run_profile(_fluid_profile(ranks), out_dir=tmp_path / "r", quiet=True)
    assert seen == calls


def test_a_small_schedule_stops_a_helper_started_early(monkeypatch) -> None:
    monkeypatch.setattr(fluid_warm, "_in_cache", lambda entry: False)
    monkeypatch.setenv("EMULATOR_FLUID_WARM", "always")
    warm = fluid_warm.start_early(1024)
    assert warm is not None and warm.proc is not None
    s = collective_schedule(8, CollectiveType.ALL_REDUCE, 64 << 10, iterations=1)  # 112 flows: no compiled loops
    run_fluid(s, SimConfig(port_rate_bps=25e9, buffer_bytes=1 << 20, latency_ns=1000, red=RedParams()),
              EndpointConfig(mtu_bytes=4096, cc="connectx", line_rate_bps=25e9), seed=1)
    assert warm.proc.poll() is not None and not warm.dir.exists()
    assert fluid_warm.start_early(fluid_warm.WARM_FROM_RANKS - 1) is None


def test_an_exit_without_a_join_ends_the_helper(tmp_path) -> None:
    """A run that stops before its join (bad input, Ctrl-C) leaves no process compiling behind."""
    code = ("import os; from emulator.drivers import fluid_warm as w; w._in_cache = lambda e: False; "
            "os.environ['EMULATOR_FLUID_WARM'] = 'always'; h = w.start(); print(h.proc.pid, h.dir)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    pid, d = out.stdout.split()
    try:
        assert not Path(d).exists()
        assert not _running(int(pid))
    finally:
        if _running(int(pid)):
            os.kill(int(pid), signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_later_start_before_the_join_looks_for_an_idle_core_again(monkeypatch) -> None:
    """The helper's chance is not one 0.1 s sample: run_fluid's start, seconds later, launches it if a core is idle."""
    monkeypatch.setattr(fluid_warm, "_in_cache", lambda entry: False)
    idle = iter([0.4, 1.6])
    monkeypatch.setattr(fluid_warm, "free_cores", lambda: next(idle))
    early = fluid_warm.start()
    assert early is not None and early.proc is None
    later = fluid_warm.start()
    assert later is early and later.proc is not None
    later.stop()
    assert later.proc.poll() is not None and not later.dir.exists()
