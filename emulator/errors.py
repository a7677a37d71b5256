"""Errors that reach the user as one clear line.

Every problem with user input (a trace file, a profile, a schedule, a results directory) is raised as
an :class:`EmulatorError` subclass whose message names the file and the key, node or byte offset. The
CLI prints ``error: <message>`` and exits with status 2; it never shows a traceback for these.
"""

from __future__ import annotations


class EmulatorError(Exception):
    """Base class: a problem the user can fix, reported as one line."""

    exit_code = 2


class TraceError(EmulatorError):
    """A Chakra trace could not be read, written or validated."""


class ScheduleError(EmulatorError):
    """A trace could not be compiled, or a schedule file is invalid."""


class ConfigError(EmulatorError):
    """A profile or option is invalid; the message names the key path."""


class ResultsError(EmulatorError):
    """A results directory is missing, damaged or from a newer version."""


class RunError(EmulatorError):
    """A run failed (a rank died or hung, a socket could not be opened, ...)."""
