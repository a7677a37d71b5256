"""Bytecodes a call executes: a deterministic, load-independent measure of per-call work."""

from __future__ import annotations

import sys
from collections.abc import Callable


def opcodes(fn: Callable[[], object]) -> int:
    """Bytecodes executed by ``fn`` and what it calls in Python."""
    n = 0

    def trace(frame, event, arg):
        nonlocal n
        frame.f_trace_opcodes = True
        n += event == "opcode"
        return trace

    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return n
