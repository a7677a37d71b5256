"""The CLI wiring: help on the top level, one-line errors."""

import subprocess
import sys

from emulator.cli import main


def test_top_level_help_lists_commands(capsys):
    try:
        main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    assert "COMMAND" in out


def test_python_dash_m_runs():
    proc = subprocess.run([sys.executable, "-m", "emulator", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert "emulator" in proc.stdout
