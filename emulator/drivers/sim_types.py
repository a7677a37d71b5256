"""Configuration of the virtual-time driver (:mod:`emulator.drivers.sim`)."""

from __future__ import annotations

import dataclasses

from emulator.errors import ConfigError
from emulator.fabric.port import PfcParams
from emulator.fabric.topology import TopologyConfig
from emulator.pacing.red import RedParams


@dataclasses.dataclass(frozen=True, slots=True)
class SimConfig:
    """The simulated fabric.

    * ``topology``: single switch or leaf–spine (:class:`~emulator.fabric.topology.TopologyConfig`).
    * ``port_rate_bps``: host link rate (NIC and switch ports facing hosts); uplinks per topology.
    * ``buffer_bytes``: tail-drop buffer of every switch egress port.
    * ``latency_ns``: one-way propagation delay of every link.
    * ``red``: ECN marking at dequeue on switch ports (None = no marking).
    * ``pfc``: XOFF/XON thresholds of switch ports (None = no PFC); a switch port crossing XOFF pauses
      every link into that switch until it falls to XON.
    * ``loss``: probability that a packet is lost on the last link before its destination host
      (seeded; applies to data, ACK, NAK and CNP alike).
    * ``wire_overhead_bytes``: bytes per packet beyond the UDP payload that a link serialises
      (Ethernet + IPv4 + UDP + FCS + preamble/IFG = 66).
    * ``nic_queue_bytes``: NIC backlog at which the driver stops pulling data from the endpoint (a NIC
      does not queue without bound; under PFC pause the backlog stays there).
    * ``dscp_priorities``: (DSCP, priority) pairs; other DSCPs use ``default_priority``. Ports serve
      higher priorities first (CNP/ACK DSCP 48 → 6, data → 3).
    * ``sample_interval_ns`` / ``max_samples``: queue-depth time series per port; when full, every other
      sample is dropped and the interval doubles, so it stays bounded.
    * ``max_batches_per_poll``: data batches taken from an endpoint per service.
    * ``train_ns``: 0 (default) = per-packet pacing: a sender is served whenever its pacers release one
      packet. > 0 = packet trains: a queue pair is served when its pacers release a whole batch of up to
      ``1 + train_ns // packet time`` packets (at its rate; the socket drivers' full-batch pacing with the
      loopback driver's stamp spread), and each packet joins its NIC port at its own send time, one packet
      time apart at the queue pair's rate, so a paced flow still arrives packet by packet; but queue pairs
      sharing a NIC take turns per train, not per packet, and a CNP or rate change acts only on packets
      not yet committed (up to ``train_ns`` late). Fewer services per packet: faster, a different model.
    """

    topology: TopologyConfig = TopologyConfig()
    port_rate_bps: float = 25e9
    buffer_bytes: int = 1 << 20
    latency_ns: int = 1_000
    red: RedParams | None = RedParams()
    pfc: PfcParams | None = None
    loss: float = 0.0
    wire_overhead_bytes: int = 66
    nic_queue_bytes: int = 256 * 1024
    dscp_priorities: tuple[tuple[int, int], ...] = ((48, 6),)
    default_priority: int = 3
    sample_interval_ns: int = 10_000
    max_samples: int = 2048
    max_batches_per_poll: int = 16
    #: (port name, down from ns, down until ns): the link behind that egress port drops every packet that
    #: leaves the port in [from, until) (counted as the port's loss)
    link_down: tuple[tuple[str, int, int], ...] = ()
    train_ns: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.port_rate_bps, (int, float)) or not self.port_rate_bps > 0:
            raise ConfigError(f"sim: 'port_rate_bps' must be positive, got {self.port_rate_bps!r}")
        for name in ("buffer_bytes", "nic_queue_bytes", "sample_interval_ns", "max_samples", "max_batches_per_poll"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"sim: {name!r} must be an integer >= 1, got {v!r}")
        for name in ("latency_ns", "wire_overhead_bytes", "train_ns"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(f"sim: {name!r} must be an integer >= 0, got {v!r}")
        if not isinstance(self.loss, (int, float)) or not 0.0 <= self.loss <= 1.0:
            raise ConfigError(f"sim: 'loss' must be within [0, 1], got {self.loss!r}")
        if not 0 <= self.default_priority <= 7 or any(not 0 <= p <= 7 for _, p in self.dscp_priorities):
            raise ConfigError("sim: priorities must be within 0..7")


#: the slots of the sim's run state (``sim._Sim``): its attributes at fixed offsets, methods found on the type (47
#: attributes were past CPython 3.11's 29 inline values); a dict too, for what a test sets on one instance
SIM_SLOTS = ("n", "cfg", "topo", "mark_rng", "loss_rng", "ports", "peer", "lat", "pfc_ports", "pause_cnt",
             "loss_cnt", "down", "recorders", "eps", "pending", "heap", "arrivals", "next_seq", "wake_t",
             "blocked", "done", "n_done", "sport_cache", "flow_cache", "prio", "tos_info", "max_batches",
             "over", "n_switches", "nic_limit", "events", "hops", "samples_t", "samples_q", "sample_every",
             "next_sample", "skip_quiet", "one_visits", "recv_ops", "offer", "depart", "receive",
             "visit_one", "handle_timer", "poll_transmit", "next_timer_ns", "wall_s", "short_pad", "__dict__")
