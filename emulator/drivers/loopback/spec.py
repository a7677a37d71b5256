"""What the loopback driver's software switch process is given: its ports, ranks, queue pairs and timing."""

from __future__ import annotations

from dataclasses import dataclass

from emulator.fabric.port import PortConfig


@dataclass(frozen=True, slots=True)
class SwitchSpec:
    """Everything the switch process needs (inherited through fork, never pickled)."""

    port: PortConfig
    rank_addresses: tuple[tuple[str, int], ...]
    qp_src: tuple[int, ...]
    qp_dst: tuple[int, ...]
    seed: int
    wire_overhead_bytes: int = 66
    high_priority_dscps: tuple[int, ...] = (48,)
    late_threshold_ns: int = 500_000
    sample_interval_ns: int = 1_000_000
    max_samples: int = 200_000
    snapshot_interval_ns: int = 500_000_000
    start_timeout_s: float = 60.0
    #: real ns the model clock runs behind the real one (the horizon: senders may be this late without
    #: effect, and departures gather into larger GSO sends); this deliberate hold is part of the lag, and
    #: only lag beyond it plus ``late_threshold_ns`` counts as late
    egress_slack_ns: int = 100_000
    #: "fifo": real-time SCHED_FIFO priority 2, above the rank workers' 1 (falls back to nice -5, then to nothing, when not
    #: permitted); "nice": nice -5; "normal": unchanged. The fabric must keep its rate on a busy machine
    #: (a starved rank shows as lag); the kernel's RT throttling bounds a runaway loop.
    scheduling: str = "fifo"
    #: the senders' NIC (host link) rate: a stamped batch reaches its egress port packet by packet at this
    #: rate from its intended send time, as a NIC would serialise it (0: the whole batch at once)
    nic_rate_bps: float = 0.0
    #: emulated time runs this many times slower than real time (every time in the model is emulated ns)
    time_dilation: float = 1.0
    #: the ranks' receiving sockets (inherited descriptors, rank r at index r; empty: no back-pressure)
    rank_fds: tuple[int, ...] = ()
