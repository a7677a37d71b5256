"""Errors that reach the user as one clear line.

Every problem with user input (a trace file, a profile, a schedule, a results directory) is raised as
an :class:`EmulatorError` subclass whose message names the file and the key, node or byte offset. The
CLI prints ``error: <message>`` and exits with status 2; it never shows a traceback for these.
"""

from __future__ import annotations


class EmulatorError(Exception):
    """Base class: a problem the user can fix, reported as one line.

    Messages often quote user data (a node name, a JSON value); line breaks in them are escaped here so
    that every message stays one line wherever it is raised.
    """

    exit_code = 2

    def __init__(self, message: object = "", *args: object) -> None:
        if isinstance(message, str) and ("\n" in message or "\r" in message):
            message = message.replace("\r", "\\r").replace("\n", "\\n")
        super().__init__(message, *args)


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


class AgentLostError(RunError):
    """An agent of a multi-host run stopped answering or could not be reached (the host is named)."""

    exit_code = 3
