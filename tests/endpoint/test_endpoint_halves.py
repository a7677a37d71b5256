"""The sender and receiver halves get their narrow state at construction and never reach the rank."""

from __future__ import annotations

import ast
import inspect

import emulator.endpoint.receiver as receiver
import emulator.endpoint.sender as sender


def _ep_uses(module) -> set[str]:
    """Attributes read on ``self.ep`` or on a local ``ep`` in ``module``."""
    used: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.Attribute):
            v = node.value
            if (isinstance(v, ast.Attribute) and v.attr == "ep" and isinstance(v.value, ast.Name)
                    and v.value.id == "self") or (isinstance(v, ast.Name) and v.id == "ep"):
                used.add(node.attr)
    return used


def test_the_halves_do_not_call_the_rank_endpoint() -> None:
    for module in (sender, receiver):
        assert _ep_uses(module) == set(), module.__name__
        assert "emulator.endpoint.endpoint" not in inspect.getsource(module)


def test_the_halves_log_no_records_rows_themselves() -> None:
    """Op times, rate samples and the event log are events for the recorder, not writes of a half."""
    for module in (sender, receiver):
        src = inspect.getsource(module)
        for column in ("ready_ns[", "start_ns[", "end_ns[", "event_packets[", "rate_t_ns", ".log_event("):
            assert column not in src, (module.__name__, column)
