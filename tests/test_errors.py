"""Every EmulatorError message is one line, even when it quotes user data with line breaks."""

import pytest

from emulator.cli import main
from emulator.errors import ConfigError, EmulatorError, TraceError


@pytest.mark.parametrize("cls", [EmulatorError, TraceError, ConfigError])
def test_line_breaks_in_messages_are_escaped(cls):
    exc = cls("f.json: node \n: Id must be an integer, got '\\r'\r")
    assert "\n" not in str(exc) and "\r" not in str(exc)
    assert str(exc) == "f.json: node \\n: Id must be an integer, got '\\r'\\r"


def test_cli_prints_one_line_for_a_node_id_holding_a_newline(tmp_path, capsys):
    path = tmp_path / "r.0.json"
    path.write_text('{"workload_graph": [{"Id": "\\n"}]}')
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
