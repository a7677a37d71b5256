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


def _help(capsys, *argv: str) -> str:
    try:
        main([*argv, "--help"])
    except SystemExit as exc:
        assert exc.code == 0
    return capsys.readouterr().out


def test_top_level_help_lists_every_report_format(capsys):
    from emulator.commands.report import FORMATS

    text = " ".join(_help(capsys).split())  # argparse wraps long help lines
    entry = text[text.index(" report "):text.index(" compare ")]
    assert all(f in entry for f in FORMATS), entry


def test_generate_help_says_ranks_is_required(capsys):
    for kind in ("collective", "data-parallel", "pipeline"):
        out = _help(capsys, "generate", kind)
        assert "[--ranks N]" not in out and " --ranks N " in out.split("\n\n")[0]
        assert "required arguments:\n  --ranks N" in out
    assert "[--ranks N]" in _help(capsys, "generate", "moe")  # tp × ep × dp gives the ranks


def test_generate_without_ranks_is_one_error_line(tmp_path, capsys):
    assert main_exit(["generate", "pipeline", "-o", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "--ranks" in err


def main_exit(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


def _boom(args):
    raise RuntimeError("line one\nline two")


def test_unexpected_exception_exits_4_with_one_line(monkeypatch, capsys):
    import emulator.commands.compare as compare

    monkeypatch.delenv("EMULATOR_DEBUG", raising=False)
    monkeypatch.setattr(compare, "run", _boom)
    assert main(["compare", "a", "b"]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("internal error")
    assert "bug" in err and "RuntimeError: line one\\nline two" in err and "EMULATOR_DEBUG=1" in err
    assert "test_cli.py:" in err  # where it was raised


def test_emulator_debug_reraises(monkeypatch):
    import pytest

    import emulator.commands.compare as compare

    monkeypatch.setenv("EMULATOR_DEBUG", "1")
    monkeypatch.setattr(compare, "run", _boom)
    with pytest.raises(RuntimeError, match="line one"):
        main(["compare", "a", "b"])


def test_a_bug_in_a_subprocess_run_exits_4_not_1(tmp_path):
    """End to end through ``python -m emulator``: Python's own status for an uncaught exception is 1."""
    code = ("import sys, emulator.commands.inspect as m\n"
            "def boom(args): raise ZeroDivisionError('x')\n"
            "m.run = boom\n"
            "from emulator.cli import main\n"
            "sys.exit(main(['inspect', 'whatever']))\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "EMULATOR_DEBUG"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 4
    assert proc.stderr.startswith("internal error") and "Traceback" not in proc.stderr


def test_warmup_compiles_the_fluid_kernels_and_says_where(monkeypatch, capsys):
    from emulator.drivers import fluid_warm

    calls = []
    monkeypatch.setattr(fluid_warm, "warm_all", lambda: calls.append(1) or "fluid kernels: 3 of 35 compiled")
    assert main(["warmup"]) == 0
    assert calls == [1]
    assert capsys.readouterr().out.strip() == "fluid kernels: 3 of 35 compiled"
