"""Network test driver for AI fabrics.

Chakra execution traces in → per-rank flow schedules → RoCEv2 traffic paced by DCQCN over a simulated,
loopback or real fabric → flow/collective completion times, tails and stragglers out.
"""

from emulator.errors import ConfigError, EmulatorError, ResultsError, RunError, ScheduleError, TraceError

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "EmulatorError",
    "ResultsError",
    "RunError",
    "ScheduleError",
    "TraceError",
    "__version__",
]
