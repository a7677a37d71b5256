"""IP marking and flow entropy for RoCEv2 packets: DSCP/ECN (docs/rocev2.md §5), UDP source port (§2).

Theory of operation: the IPv4 TOS byte (IPv6 traffic class) is ``DSCP << 2 | ECN``. Data is sent ECT so a
switch can mark it CE; a notification point reacts to CE only. :class:`Marking` holds the per-class
defaults (data DSCP 26 + ECT(0), CNP DSCP 48) and is configurable. The UDP source port of a queue pair is
derived from the QP numbers exactly as Linux ``rdma_get_udp_sport`` does, so ECMP on a real switch hashes
our flows the way it would hash real RDMA traffic; it is constant for a QP's lifetime.
"""

from __future__ import annotations

from dataclasses import dataclass

ROCE_UDP_PORT = 4791

NOT_ECT = 0b00
ECT1 = 0b01
ECT0 = 0b10
CE = 0b11

DSCP_DATA_DEFAULT = 26
DSCP_CNP_DEFAULT = 48


def tos(dscp: int, ecn: int) -> int:
    """The IPv4 TOS / IPv6 traffic-class byte for a DSCP (0..63) and an ECN codepoint (0..3)."""
    if not 0 <= dscp <= 63:
        raise ValueError(f"DSCP {dscp} out of range 0..63")
    if not 0 <= ecn <= 3:
        raise ValueError(f"ECN codepoint {ecn} out of range 0..3")
    return (dscp << 2) | ecn


def dscp_of(tos_byte: int) -> int:
    """The DSCP (upper 6 bits) of a TOS / traffic-class byte."""
    return (tos_byte >> 2) & 0x3F


def ecn_of(tos_byte: int) -> int:
    """The ECN codepoint (lower 2 bits) of a TOS / traffic-class byte."""
    return tos_byte & 0x03


def is_ce(tos_byte: int) -> bool:
    """True when the byte carries Congestion Experienced (``11``); an NP reacts to this only."""
    return tos_byte & 0x03 == CE


@dataclass(frozen=True, slots=True)
class Marking:
    """DSCP and ECN per packet class. Defaults: data DSCP 26 ECT(0); ACK/NAK DSCP 26 Not-ECT;
    CNP DSCP 48 ECT(0) (as the captured ConnectX-4 Lx CNP, TOS 0xC2)."""

    data_dscp: int = DSCP_DATA_DEFAULT
    data_ecn: int = ECT0
    ack_dscp: int = DSCP_DATA_DEFAULT
    ack_ecn: int = NOT_ECT
    cnp_dscp: int = DSCP_CNP_DEFAULT
    cnp_ecn: int = ECT0

    def __post_init__(self) -> None:
        tos(self.data_dscp, self.data_ecn)
        tos(self.ack_dscp, self.ack_ecn)
        tos(self.cnp_dscp, self.cnp_ecn)

    @property
    def data_tos(self) -> int:
        return tos(self.data_dscp, self.data_ecn)

    @property
    def ack_tos(self) -> int:
        return tos(self.ack_dscp, self.ack_ecn)

    @property
    def cnp_tos(self) -> int:
        return tos(self.cnp_dscp, self.cnp_ecn)


def flow_label_from_qpns(lqpn: int, rqpn: int) -> int:
    """The 20-bit flow label Linux derives from a QP pair (``rdma_calc_flow_label``)."""
    v = (lqpn * rqpn) & 0xFFFFFFFFFFFFFFFF
    v ^= v >> 20
    v ^= v >> 40
    return v & 0xFFFFF


def udp_source_port(lqpn: int, rqpn: int, flow_label: int = 0) -> int:
    """The RoCEv2 UDP source port as Linux ``rdma_get_udp_sport`` computes it (0xC000..0xFFFF).

    ``flow_label`` is the GRH flow label; when 0 it is derived from the local and remote QP numbers.
    """
    fl = flow_label & 0xFFFFF
    if fl == 0:
        fl = flow_label_from_qpns(lqpn, rqpn)
    low = (fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)
    return low | 0xC000
