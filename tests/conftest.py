"""Fixtures shared across test folders (``emulator report`` on the stored results directory, run once) and
the split of the suite into a parallel and a serial pass.

The test command runs ``python -m pytest -n 2 --dist loadgroup -m "not serial"`` (CPU-bound tests on both
cores, pytest-xdist) and then ``python -m pytest -m serial`` (alone); plain ``python -m pytest`` runs
everything in one process. A test is marked ``serial`` here, at collection, when its result depends on real
time or it runs several processes itself (:mod:`support.serial` has the lists):

* every test under a serial folder: ``tests/remote`` (agents, controllers, mpirun, network namespaces);
* every test of a module whose file name has ``loopback``, ``direct``, ``socket`` or ``veth`` (the socket
  drivers, veth pacing), or of a module in ``support.serial.SERIAL_MODULES``;
* every parametrized case with a parameter value ``"loopback"`` or ``"direct"`` (a socket fabric);
* and by hand, ``@pytest.mark.serial``: a single such test in an otherwise CPU-bound module (a loopback
  run, ``--jobs`` worker processes, vermin's process pool, a wall-clock bound).

A new test in those folders or modules is serial by default. Child processes that a test waits for one at
a time (``python -m emulator``, tshark) do not make it serial. The users of an expensive session fixture
(``study``, ``stored_reports``) get one ``xdist_group``, so ``--dist loadgroup`` makes the fixture on one
worker only; hypothesis's example database (a directory) and numba's cache (files written to a temporary
name and renamed into place, one signature per kernel) are safe for two workers.
"""

from __future__ import annotations

import contextlib
import gc
import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import settings
from support.serial import is_serial, shared_group

from emulator.cli import main

# No per-example deadline: a test's speed is a benchmark's business, and with two xdist workers (or a busy CI
# machine) an example's wall time says nothing about the code. The rest is the profile hypothesis loaded
# (with CI set: its "ci" profile, derandomized).
settings.register_profile("suite", parent=settings.default, deadline=None)
settings.load_profile("suite")

@pytest.fixture
def no_gc():
    """The garbage collector collected once and then off for the test: a test that counts Python calls or
    bytecodes must count its own code's, and a collection inside the counted region runs the finalizers and
    callbacks of other tests' garbage (llvmlite objects after a numba compile, ``gc.callbacks``)."""
    gc.collect()
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


STORED_RESULTS = Path(__file__).resolve().parent / "data" / "results_v1"
#: format -> what `emulator report --format FMT -o PATH` writes (a file or a directory)
REPORT_OUTPUTS = {"html": "report.html", "timeline": "timeline.json", "plots": "plots"}


@pytest.fixture(scope="session")
def stored_reports(tmp_path_factory) -> dict[str, SimpleNamespace]:
    """``emulator report tests/data/results_v1 --format FMT -o DIR/NAME`` for html, timeline and plots, each
    into a directory of its own: format -> (code, out, err, dir, path)."""
    runs = {}
    for fmt, name in REPORT_OUTPUTS.items():
        d = tmp_path_factory.mktemp(f"report-{fmt}")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["report", str(STORED_RESULTS), "--format", fmt, "-o", str(d / name)])
        runs[fmt] = SimpleNamespace(code=code, out=out.getvalue(), err=err.getvalue(), dir=d, path=d / name)
    return runs


@pytest.hookimpl(tryfirst=True)  # before pytest's -m selection and xdist's loadgroup naming read the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the serial tests (the rule above) and group the users of an expensive session fixture."""
    tests_dir = Path(__file__).resolve().parent
    for item in items:
        path = item.path.resolve()
        if not path.is_relative_to(tests_dir):
            continue
        rel = path.relative_to(tests_dir).as_posix()
        callspec = getattr(item, "callspec", None)
        if is_serial(rel, callspec.params if callspec else {}):
            item.add_marker(pytest.mark.serial)
        group = shared_group(getattr(item, "fixturenames", ()))
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
