"""Bytecodes a call executes, and the Python functions it calls: deterministic, load-independent measures of
per-call work."""

from __future__ import annotations

import gc
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

    gc_was_on = gc.isenabled()
    gc.disable()  # a collection inside would count the finalizers of other tests' garbage
    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
        if gc_was_on:
            gc.enable()
    return n


def python_calls(fn: Callable[[], object]) -> list[str]:
    """Names of the Python functions ``fn`` calls, nested calls included, in call order (``fn``'s own frame is not
    listed)."""
    calls: list[str] = []

    def trace(frame, event, arg):
        if event == "call":
            calls.append(frame.f_code.co_name)

    gc_was_on = gc.isenabled()
    gc.disable()  # as in opcodes
    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
        if gc_was_on:
            gc.enable()
    return calls[1:]
