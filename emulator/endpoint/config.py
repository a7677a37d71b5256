"""Endpoint configuration (:class:`EndpointConfig`).

It is frozen and picklable (no callables inside), so socket drivers can ship it to worker
processes. :class:`EndpointConfig` validates itself and raises :class:`~emulator.errors.ConfigError`
naming the field.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from emulator.errors import ConfigError
from emulator.pacing import controller_for_params, controller_names, get_controller, get_params, np_params
from emulator.pacing.base import RateController, slot_names
from emulator.pacing.notification import NpParams
from emulator.pacing.params import DcqcnParams
from emulator.pacing.registry import dcqcn_presets
from emulator.wire import GSO_MAX_BYTES, MAX_MESSAGE_BYTES, PATH_MTUS, max_batch_packets
from emulator.wire.icrc import ICRC_MODES, BoundIcrc, IcrcContext
from emulator.wire.marking import CE, ECT0, NOT_ECT, Marking, udp_source_port

#: Ethernet 14 + IPv4 20 + UDP 8 + FCS 4 + preamble/SFD/IFG 20: what a frame costs on the wire beyond its
#: UDP payload (docs/rocev2.md §1). Pacers charge it so a line-rate pacer fills exactly one link.
WIRE_OVERHEAD_BYTES = 66


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """How a rank endpoint sends, acknowledges, reacts to congestion and records.

    * ``mtu_bytes``: path MTU payload per packet (256..4096, default 4096); equal on every rank.
    * ``cc`` / ``cc_overrides``: congestion-control preset from :mod:`emulator.pacing` (``paper``,
      ``connectx``, ``hpcc-ns3``, ``none``, ``fixed``) and keyword overrides of its parameter dataclass
      (``(("rate_ai_mbps", 20.0),)``; ``fixed`` needs ``rate_bps``). One controller per queue pair.
    * ``np``: notification point (None = the preset's NP: paper 50 µs deferred, ConnectX 4 µs, ...).
    * ``max_segments``: packets per GSO batch (capped so a batch stays ≤ 64 KiB).
    * ``line_rate_bps``: NIC rate cap over all queue pairs of the rank (and the controllers' line rate).
    * ``ack_every_packets``: the receiver ACKs after this many in-order packets, and on every AckReq.
    * ``retransmit_timeout_ns``: go back to the oldest unacknowledged PSN after this long without
      progress; doubles on each consecutive timeout up to ``max_backoff`` times.
    * ``data_dscp``/``data_ecn``, ``ack_dscp``, ``cnp_dscp``/``cnp_ecn``: IP marking (data ECT(0) DSCP 26,
      ACK/NAK DSCP 48 Not-ECT, CNP DSCP 48 ECT(0) by default).
    * ``rate_sample_interval_ns``/``max_rate_samples``: a rate sample per queue pair when its rate changes,
      at most one per interval, at most this many per rank.
    * ``max_events``: bound of the rank's event log (CNPs, NAKs, retransmits, timeouts with their times,
      :mod:`emulator.endpoint.records`); events beyond it are counted in ``events_dropped``.
    * ``icrc``: ``zero`` (4 zero bytes) or ``compute``: the RoCEv2 invariant CRC of the IP/UDP headers each
      datagram travels in, which :meth:`icrc_fn` builds from ``rank_addresses`` (rank r's source IP; the
      sim driver fills in :func:`virtual_addresses` when empty, the socket drivers their sockets'),
      ``rank_udp_ports`` (rank r's source UDP port; empty: the RoCE source port hashed from the QPNs, as a
      NIC sends) and ``dest_endpoints`` (where datagrams to rank r go; empty: its address, ``udp_dport``).
    * ``wire_overhead_bytes``: bytes per packet the pacers charge beyond the UDP payload.
    * ``constant_rate_burst_ns``: the burst of the pacers whose rate never changes (the NIC's line-rate
      pacer, and the queue pairs' pacers under ``cc`` ``none``/``fixed``) is
      ``max(one GSO batch, rate × constant_rate_burst_ns)``, so a driver that wakes up less often than a
      batch takes at line rate can send several batches per wake-up and still hold the rate (at 100
      Gbit/s, 20 µs = 4 batches of 61 KiB; at 25 Gbit/s and below it is one batch). Rate-controlled
      (DCQCN) queue pairs keep one batch.
    * ``line_rate_burst_batches``: with socket sends (``socket_sends`` and ``pace_full_batches``, not
      ``model_time_service``), the constant-rate pacers at the line rate (the NIC's, and a queue pair's under
      ``none``) hold at least this many whole GSO batches, so a sender short of CPU sends that many per
      visit and pays a visit's fixed work once for all of them (0: off; the direct driver sets it), at most
      200 µs at the line rate (``sender.LINE_BURST_MAX_NS``: none at 1 Gbit/s). At the
      line rate the link itself spaces them: no more goes on a wire than the line rate allows; pacers below
      the line rate (``fixed``, DCQCN) keep their bursts.
    * ``qps_per_peer``: wire queue pairs per schedule queue pair; every flow is split evenly over them
      (:func:`~emulator.endpoint.qpn.part_sizes`), each with its own QPNs, UDP source port and rate
      controller; its SEND completes when every part is acknowledged, its RECV when every part is held.
    * ``late_threshold_ns``: a SEND op whose start lags its ready time by more counts as late.
    * ``initial_psn``: first PSN of every queue pair (24-bit; both ends use it, as if agreed at QP setup);
      a value near 2^24 makes PSNs wrap early in a run (tests of the wrap).
    * ``max_message_bytes``: longest RDMA WRITE message (1..2^31−1, the RETH DMA length's limit); a longer
      flow goes out as several messages of :attr:`message_bytes` (both ends cut it the same way). Lower
      values only serve tests of the segmentation.

    Driver modes (how the driver feeding the endpoint works; set when the config is built):

    * ``defer_acks``: coalesce ACKs over every ``receive`` call between two ``poll_transmit`` calls (a
      socket driver draining several GRO batches per wake-up), not one per ``receive``.
    * ``pace_full_batches``: a queue pair is due when a whole GSO batch may go, not one packet (a socket
      driver's loop cannot act on single-packet times; :mod:`~emulator.endpoint.sender`).
    * ``socket_sends``: the driver puts every ``Transmit`` of a ``poll_transmit`` on a socket (``sendmsg``
      copies it) before it calls the endpoint again (socket drivers): the sender writes its MIDDLE runs into
      buffers it reuses from call to call, and with ``pace_full_batches`` a visit to a constant-rate queue
      pair sends every batch its tokens allow, not one (:mod:`~emulator.endpoint.sender`).
    * ``run_transmits`` (with ``socket_sends``): a run of several MIDDLE batches written into the reused
      buffers goes out as one :class:`~emulator.endpoint.events.TransmitRun` (its sends back to back), not one
      ``Transmit`` per batch: for a driver that puts a run on the wire in one step (direct, compiled
      ``sendmmsg``). The same bytes, in the same order, and the same records.
    * ``stamp_spread_ns``: stamp a batch's packets one packet time apart at the QP's rate, batches
      spanning at most this (emulated ns; 0: one stamp per batch), for a fabric that runs on the stamps
      (loopback).
    * ``delivery_stamps``: arriving data packets carry their model delivery time in the stamp (the loopback
      switch rewrites it); the receiver times CE marks and message arrivals by it
      (:mod:`~emulator.endpoint.receiver`), the sender its ACKs and NAKs by their MSN (the switch's delivery
      time mod 2^24 ns, :mod:`~emulator.drivers.loopback.ack_times`) and its CNPs by the stamp in their reserved
      bytes; the receiver stamps its NAKs (MSN) and CNPs with the model time it sent them.
    * ``feedback_lag_bound_ns``: with ``delivery_stamps``, a CNP whose model time the sender's service had
      already passed by more than this when it read it counts in ``cnps_acted_late`` (0: not counted;
      loopback: one MTU at the port rate, the fidelity verdict's bound).
    * ``model_time_service``: serve the queue pairs on model time, as the sim's driver would: each visit
      acts at the time its queue pair (and the NIC) became due — its pacer charge, its stamp, its place
      in the round-robin — however late the driver's wake-up, packet by packet (``pace_full_batches`` is
      then ignored), so a fabric that runs on the stamps sees the sim's arrival process (loopback).
    * ``service_lag_ns``: with ``model_time_service``, serve the queue pairs this far (emulated ns) behind
      the driver's clock, so every message delivered before a visit's time is known when the visit acts: a
      SEND that a delivery makes ready joins the round-robin at its ready time, as in the sim (loopback:
      the switch's horizon plus half a packet time at the line rate).
    * ``compiled_core``: the per-batch work by the compiled kernels of :mod:`emulator.wire.kernels` (the
      receiver's GRO run, the sender's reused MIDDLE rows): the same bytes and state as the Python core
      (direct).
    * ``batch_fast_paths``: build and accept steady-state MIDDLE batches as one block; False takes the
      per-packet paths (same wire bytes and records; tests compare the two).
    * ``max_outstanding_bytes``: a queue pair's window of sent, unacknowledged payload bytes (0: none). A
      NAK halves it (at most once per window of packets, down to one GSO batch) and acknowledged packets
      grow it back; set by the direct driver from the receivers' socket buffers, so a sender that outruns
      its receiver backs off instead of overrunning it into go-back-N (:mod:`~emulator.endpoint.sender`).
    """

    mtu_bytes: int = 4096
    cc: str = "paper"
    cc_overrides: tuple[tuple[str, Any], ...] = ()
    np: NpParams | None = None
    max_segments: int = 16
    line_rate_bps: float = 25e9
    ack_every_packets: int = 16
    retransmit_timeout_ns: int = 1_000_000
    max_backoff: int = 64
    data_dscp: int = 26
    data_ecn: int = ECT0
    ack_dscp: int = 48
    cnp_dscp: int = 48
    cnp_ecn: int = ECT0
    rate_sample_interval_ns: int = 10_000
    max_rate_samples: int = 100_000
    max_events: int = 100_000
    icrc: str = "zero"
    rank_addresses: tuple[str, ...] = ()
    rank_udp_ports: tuple[int, ...] = ()
    dest_endpoints: tuple[tuple[str, int], ...] = ()
    udp_dport: int = 4791
    wire_overhead_bytes: int = WIRE_OVERHEAD_BYTES
    constant_rate_burst_ns: int = 20_000
    line_rate_burst_batches: int = 0
    late_threshold_ns: int = 100_000
    initial_psn: int = 0
    max_message_bytes: int = MAX_MESSAGE_BYTES
    defer_acks: bool = False
    pace_full_batches: bool = False
    socket_sends: bool = False
    run_transmits: bool = False
    stamp_spread_ns: int = 0
    delivery_stamps: bool = False
    feedback_lag_bound_ns: int = 0
    model_time_service: bool = False
    service_lag_ns: int = 0
    batch_fast_paths: bool = True
    compiled_core: bool = False
    qps_per_peer: int = 1
    max_outstanding_bytes: int = 0
    #: the DCQCN preset's parameter dataclass with ``cc_overrides`` applied, built and validated once in
    #: ``__post_init__`` (None for ``none``/``fixed``); every queue pair's controller shares it
    _dcqcn_params: DcqcnParams | None = field(init=False, repr=False, compare=False)
    #: a fresh controller that ``make_controller`` copies (its attributes are immutable values), or None
    _proto_ctrl: RateController | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"endpoint config: '{name}' {why}, got {getattr(self, name)!r}")

        if self.mtu_bytes not in PATH_MTUS:
            raise bad("mtu_bytes", f"must be one of {', '.join(map(str, PATH_MTUS))}")
        if self.cc not in controller_names():
            raise bad("cc", f"must be one of {', '.join(controller_names())}")
        for name in ("max_segments", "ack_every_packets", "retransmit_timeout_ns", "max_backoff", "qps_per_peer"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise bad(name, "must be an integer >= 1")
        for name in ("rate_sample_interval_ns", "max_rate_samples", "max_events", "late_threshold_ns",
                     "wire_overhead_bytes", "constant_rate_burst_ns", "line_rate_burst_batches", "stamp_spread_ns", "max_outstanding_bytes",
                     "service_lag_ns", "feedback_lag_bound_ns"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise bad(name, "must be an integer >= 0")
        if isinstance(self.line_rate_bps, bool) or not isinstance(self.line_rate_bps, (int, float)) \
                or not self.line_rate_bps > 0:
            raise bad("line_rate_bps", "must be a positive number")
        if isinstance(self.initial_psn, bool) or not isinstance(self.initial_psn, int) \
                or not 0 <= self.initial_psn < 1 << 24:
            raise bad("initial_psn", "must be an integer in 0..2^24-1")
        if isinstance(self.max_message_bytes, bool) or not isinstance(self.max_message_bytes, int) \
                or not 1 <= self.max_message_bytes <= MAX_MESSAGE_BYTES:
            raise bad("max_message_bytes", "must be an integer in 1..2^31-1")
        if self.icrc not in ICRC_MODES:
            raise bad("icrc", f"must be one of {', '.join(ICRC_MODES)}")
        for i, a in enumerate((*self.rank_addresses, *(e[0] for e in self.dest_endpoints))):
            try:
                ipaddress.ip_address(a)
            except ValueError:
                raise ConfigError(f"endpoint config: address {i} ({a!r}) is not an IP address") from None
        if self.rank_udp_ports and len(self.rank_udp_ports) != len(self.rank_addresses):
            raise bad("rank_udp_ports", "must give one port per entry of rank_addresses")
        if not all(0 < int(port) < 65536 for port in (*self.rank_udp_ports, *(e[1] for e in self.dest_endpoints))):
            raise ConfigError("endpoint config: 'rank_udp_ports' and 'dest_endpoints' ports must be in 1..65535")
        try:
            self.marking()
        except ValueError as exc:
            raise ConfigError(f"endpoint config: marking: {exc}") from None
        if self.data_ecn in (NOT_ECT, CE):
            raise bad("data_ecn", "must be ECT(0) (2) or ECT(1) (1) so switches can mark data")
        # validates the preset and its overrides once, here
        params = get_params(self.cc, self.line_rate_bps, **dict(self.cc_overrides)) if self.cc in dcqcn_presets() \
            else None
        object.__setattr__(self, "_dcqcn_params", params)
        object.__setattr__(self, "_proto_ctrl", None)
        proto = self.make_controller()  # validates fixed's knobs too
        if _copyable(proto):
            object.__setattr__(self, "_proto_ctrl", proto)

    # -- derived -----------------------------------------------------------------------------------------
    @property
    def batch_packets(self) -> int:
        """Packets per GSO batch: ``max_segments`` capped by the 64 KiB UDP GSO limit."""
        return max(1, min(self.max_segments, max_batch_packets(self.mtu_bytes, GSO_MAX_BYTES)))

    @property
    def message_bytes(self) -> int:
        """Bytes of every message of a flow but its last: ``max_message_bytes`` rounded down to a multiple of
        the MTU (so those messages are whole packets), or ``max_message_bytes`` itself below one MTU."""
        m = self.max_message_bytes
        return m if m < self.mtu_bytes else m - m % self.mtu_bytes

    def icrc_fn(self, src: int, dst: int, lqpn: int, rqpn: int) -> BoundIcrc:
        """The ICRC function of the datagrams rank ``src`` sends to rank ``dst`` on QPN ``lqpn`` → ``rqpn``
        (``icrc`` ``compute``; the addresses and ports are described in the class docstring)."""
        addrs = self.rank_addresses
        if max(src, dst) >= len(addrs):
            raise ConfigError(f"endpoint config: icrc 'compute' needs the address of rank {max(src, dst)}, "
                              f"'rank_addresses' lists {len(addrs)}")
        sport = self.rank_udp_ports[src] if self.rank_udp_ports else udp_source_port(lqpn, rqpn)
        daddr, dport = self.dest_endpoints[dst] if self.dest_endpoints else (addrs[dst], self.udp_dport)
        return IcrcContext(addrs[src], daddr).bind(sport, dport)

    def marking(self) -> Marking:
        """The IP marking of data, ACK/NAK (always Not-ECT) and CNP packets."""
        return Marking(data_dscp=self.data_dscp, data_ecn=self.data_ecn, ack_dscp=self.ack_dscp, ack_ecn=NOT_ECT,
                       cnp_dscp=self.cnp_dscp, cnp_ecn=self.cnp_ecn)

    def np_params(self) -> NpParams:
        return self.np if self.np is not None else np_params(self.cc)

    def make_controller(self) -> RateController:
        """A fresh rate controller for one queue pair: a copy of one built with the config (a queue pair's
        creation is per message in a short-message All-to-All), else built from the parameters."""
        proto = self._proto_ctrl
        if proto is not None:
            if not hasattr(proto, "__dict__"):  # slotted (the DCQCN forms): its copy
                return proto.copy()
            ctrl = object.__new__(type(proto))
            ctrl.__dict__.update(proto.__dict__)
            return ctrl
        if self._dcqcn_params is not None:
            return controller_for_params(self._dcqcn_params, self.line_rate_bps)
        return get_controller(self.cc, self.line_rate_bps, **dict(self.cc_overrides))


_IMMUTABLE = (int, float, str, bool, type(None))


def _copyable(ctrl: object) -> bool:
    """A controller whose state is numbers, strings, None and frozen dataclasses — a ``__dict__`` (a copy of
    that dict is a fresh, independent controller), or slots and a ``copy`` method that copies them."""
    state = getattr(ctrl, "__dict__", None)
    if state is None:
        if not callable(getattr(ctrl, "copy", None)):
            return False
        state = {name: getattr(ctrl, name) for name in slot_names(type(ctrl))}
    elif hasattr(type(ctrl), "__slots__"):
        return False
    return all(isinstance(v, _IMMUTABLE) or getattr(getattr(type(v), "__dataclass_params__", None), "frozen", False)
               for v in state.values())


def virtual_addresses(world_size: int) -> tuple[str, ...]:
    """IPv4 addresses of the ranks of a fabric without sockets (the sim): 10.0.0.1 + rank."""
    return tuple(str(ipaddress.IPv4Address(0x0A000001 + r)) for r in range(world_size))
