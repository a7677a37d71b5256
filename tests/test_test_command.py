"""The test command: the README's and .ci/run's are one line, a parallel pass of the tests that are not
``serial`` then a pass of the serial ones; tests/conftest.py marks the serial tests by support.serial's rule."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.serial import SERIAL_FOLDERS, SERIAL_MODULES, is_serial, shared_group

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
INSTALL = "pip install -q -e '.[test]' && "
PARALLEL = 'python -m pytest -n 2 --dist loadgroup -m "not serial"'
SERIAL = "python -m pytest -m serial"


def _command(text: str) -> str:
    """The line that installs the test extra and runs pytest, from its ``pip install`` on."""
    lines = [ln for ln in text.splitlines() if INSTALL in ln and "pytest" in ln]
    assert len(lines) == 1, lines
    return lines[0][lines[0].index(INSTALL):]


def test_the_readme_and_ci_run_one_two_pass_command() -> None:
    readme = _command((ROOT / "README.md").read_text(encoding="utf-8"))
    assert readme == _command((ROOT / ".ci" / "run").read_text(encoding="utf-8"))
    steps = readme.split(" && ")
    assert steps[-2:] == [PARALLEL, SERIAL], steps  # a failing first pass fails the command (&&)


def test_the_rule_by_folder_module_and_parameter() -> None:
    assert is_serial("remote/test_clock.py", {})
    assert is_serial("drivers/test_loopback_driver.py", {}) and is_serial("drivers/test_udp_sockets.py", {})
    assert is_serial("drivers/test_pacing_burst_veth.py", {}) and is_serial("run/test_run_fabrics.py", {})
    assert is_serial("config/test_profile_transport.py", {"kind": "direct", "expected_ns": 1})
    assert not is_serial("config/test_profile_transport.py", {"kind": "sim", "expected_ns": 1})
    assert not is_serial("schedule/test_algorithms.py", {"case": "all_reduce/direct"})
    assert not is_serial("drivers/test_fluid_driver.py", {}) and not is_serial("study/test_study_mixing.py", {})
    assert shared_group(["tmp_path", "study"]) == "study" and shared_group(["tmp_path"]) is None


def test_the_listed_folders_and_modules_exist() -> None:
    assert all((TESTS / f).is_dir() for f in SERIAL_FOLDERS)
    assert all((TESTS / m).is_file() for m in SERIAL_MODULES), sorted(m for m in SERIAL_MODULES
                                                                      if not (TESTS / m).is_file())


def test_collection_marks_by_folder_parameter_and_hand() -> None:
    files = ["tests/remote/test_clock.py", "tests/config/test_profile_transport.py", "tests/run/test_run_progress.py"]
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", "-m", "serial",
                          *files], cwd=ROOT, capture_output=True, text=True, timeout=120)  # addopts' -q: node ids
    assert out.returncode == 0, out.stdout + out.stderr
    picked = {ln.strip() for ln in out.stdout.splitlines() if "::" in ln}
    clock = {p for p in picked if p.startswith("tests/remote/test_clock.py::")}
    assert len(clock) == 3, picked
    assert picked - clock == {
        "tests/config/test_profile_transport.py::test_retransmit_timeout_default_depends_on_fabric[loopback-20000000]",
        "tests/config/test_profile_transport.py::test_retransmit_timeout_default_depends_on_fabric[direct-20000000]",
        "tests/run/test_run_progress.py::test_a_line_wider_than_the_terminal_wraps_and_is_redrawn_in_place",
        "tests/run/test_run_progress.py::test_loopback_reports_each_delivered_byte_once",
    }, picked
