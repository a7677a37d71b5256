"""Which tests run alone: the rule of the ``serial`` marker (applied by ``tests/conftest.py``) and the
``xdist_group`` that keeps the users of one expensive session fixture on one worker.

A test is serial when its result depends on real time or it runs several processes itself: it lives in a
serial folder (``tests/remote``: agents, controllers, mpirun, network namespaces) or in a serial module
(the socket drivers' modules: their name has ``loopback``, ``direct``, ``socket`` or ``veth``; plus
:data:`SERIAL_MODULES`), or one of its parameters is a socket fabric (:data:`SOCKET_FABRICS`), or it is
marked ``@pytest.mark.serial`` by hand."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: folders (relative to ``tests/``) whose every test is serial
SERIAL_FOLDERS = ("remote",)
#: words in a module's file name that make its every test serial
SERIAL_MODULE_WORDS = ("loopback", "direct", "socket", "veth")
#: further modules (relative to ``tests/``) whose every test is serial
SERIAL_MODULES = frozenset({
    "drivers/test_wire_options_on_drivers.py",  # frames over loopback and direct sockets
    "run/test_jobs_fabrics.py",  # two jobs on the loopback and direct fabrics
    "run/test_run_fabrics.py",  # profile -> loopback and direct runs
    "run/test_run_time_dilation.py",  # dilated loopback runs judged against the sim
})
#: parameter values that put a parametrized case on a real-time fabric
SOCKET_FABRICS = frozenset({"loopback", "direct"})
#: session fixture -> the xdist group of its users (made once per worker: one worker makes it once)
SHARED_FIXTURE_GROUPS = {"study": "study", "stored_reports": "stored_reports"}


def is_serial(rel_path: str, params: Mapping[str, object]) -> bool:
    """Whether the test in ``rel_path`` (relative to ``tests/``, ``/``-separated) with these parameter
    values is serial by the folder, module and parameter rule (hand-made marks aside)."""
    folder, _, name = rel_path.rpartition("/")
    if folder.split("/")[0] in SERIAL_FOLDERS:
        return True
    if any(word in name for word in SERIAL_MODULE_WORDS) or rel_path in SERIAL_MODULES:
        return True
    return any(isinstance(v, str) and v in SOCKET_FABRICS for v in params.values())


def shared_group(fixture_names: Iterable[str]) -> str | None:
    """The xdist group of a test that uses an expensive session fixture, else None."""
    groups = sorted({SHARED_FIXTURE_GROUPS[f] for f in fixture_names if f in SHARED_FIXTURE_GROUPS})
    return groups[0] if groups else None
