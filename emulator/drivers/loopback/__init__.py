"""The loopback fabric: ranks on real UDP sockets over 127.0.0.0/8 through a software switch process.

:mod:`.driver` runs it (:func:`run_loopback`, :class:`LoopbackDriver`), :mod:`.switch` is the switch
process, :mod:`.calibrate` measures the time dilation a machine needs.
"""

from emulator.drivers.loopback.driver import (
    LoopbackConfig,
    LoopbackDriver,
    SampleTap,
    egress_slack_for,
    run_loopback,
)

__all__ = ["LoopbackConfig", "LoopbackDriver", "SampleTap", "egress_slack_for", "run_loopback"]
