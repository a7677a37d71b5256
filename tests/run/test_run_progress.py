"""The progress line: silent off a terminal, informative on one."""

from __future__ import annotations

import io

from emulator.run.progress import ProgressLine


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_silent_when_not_a_terminal() -> None:
    stream = io.StringIO()
    with ProgressLine("run", stream=stream, interval_s=0.001) as p:
        p.update({"ranks": 4, "ranks_done": 1})
    assert not p.enabled and stream.getvalue() == ""


def test_draws_and_erases_on_a_terminal() -> None:
    stream = _Tty()
    with ProgressLine("quickstart on loopback", stream=stream, ops_per_iteration=10, iterations=3,
                      interval_s=0.001) as p:
        p.update({"ranks": 4, "ranks_done": 2, "ops_done": 25, "progress": 1000})
        text = p.render()
    assert p.enabled
    assert text.startswith("quickstart on loopback:") and "ranks done 2/4" in text and "iteration 2/3" in text
    assert "events/s" in text
    assert stream.getvalue().endswith("\r")
