"""RoCEv2 wire codec: what our UDP payloads to port 4791 look like (docs/rocev2.md).

Sans-IO and pure: no sockets, no clocks. Modules:

* :mod:`~emulator.wire.opcodes` -- every BTH opcode by name and the headers each carries;
* :mod:`~emulator.wire.headers` -- BTH, RETH, AETH, ImmDt, ... dataclasses with encode/decode;
* :mod:`~emulator.wire.packets` -- fast builders/parsers for the data path and full ``decode``;
* :mod:`~emulator.wire.batch` -- GSO batches of consecutive RDMA WRITE packets (numpy PSN stamping);
* :mod:`~emulator.wire.icrc` -- the invariant CRC, from a whole IP packet or from addresses;
* :mod:`~emulator.wire.psn` -- 24-bit PSN arithmetic; :mod:`~emulator.wire.marking` -- DSCP/ECN, UDP sport;
* :mod:`~emulator.wire.pcap` -- wrap payloads in Ethernet/IP/UDP and write pcap files.
"""

from emulator.wire.batch import (
    GSO_MAX_BYTES,
    GSO_MAX_SEGMENTS,
    MAX_MESSAGE_BYTES,
    PATH_MTUS,
    WriteBatch,
    batch_size_bytes,
    build_write_batch,
    max_batch_packets,
    message_packets,
    write_segments,
)
from emulator.wire.errors import WireError
from emulator.wire.headers import (
    ACK_SYNDROME,
    AETH_ACK,
    AETH_NAK,
    AETH_RNR_NAK,
    NAK_PSN_SEQUENCE_ERROR,
    Aeth,
    AtomicAckEth,
    AtomicEth,
    Bth,
    Deth,
    Ieth,
    ImmDt,
    Rdeth,
    Reth,
    rnr_nak_syndrome,
    syndrome,
)
from emulator.wire.icrc import (
    BoundIcrc,
    IcrcContext,
    check_frame_icrc,
    frame_icrc,
    icrc_from_wire,
    icrc_wire_bytes,
    scapy_icrc_value,
)
from emulator.wire.marking import (
    CE,
    DSCP_CNP_DEFAULT,
    DSCP_DATA_DEFAULT,
    ECT0,
    ECT1,
    NOT_ECT,
    ROCE_UDP_PORT,
    Marking,
    dscp_of,
    ecn_of,
    is_ce,
    tos,
    udp_source_port,
)
from emulator.wire.opcodes import Opcode, opcode_name
from emulator.wire.packets import (
    ACK_SIZE_BYTES,
    BTH_SIZE,
    CNP_SIZE_BYTES,
    ICRC_SIZE,
    RocePacket,
    build_ack,
    build_cnp,
    build_nak_psn_error,
    build_write_packet,
    data_packet_size,
    decode,
    encode_packet,
    pad_count_for,
    parse_aeth,
    parse_header,
    read_icrc,
)
from emulator.wire.pcap import PcapWriter, ethernet_frame, ip_udp_packet
from emulator.wire.psn import (
    PSN_MASK,
    PSN_MODULUS,
    psn_add,
    psn_diff,
    psn_ge,
    psn_gt,
    psn_le,
    psn_lt,
    psn_range,
)

__all__ = [
    "ACK_SIZE_BYTES", "ACK_SYNDROME", "AETH_ACK", "AETH_NAK", "AETH_RNR_NAK", "BTH_SIZE", "CE",
    "CNP_SIZE_BYTES", "DSCP_CNP_DEFAULT", "DSCP_DATA_DEFAULT", "ECT0", "ECT1", "GSO_MAX_BYTES",
    "GSO_MAX_SEGMENTS", "ICRC_SIZE", "MAX_MESSAGE_BYTES", "NAK_PSN_SEQUENCE_ERROR", "NOT_ECT", "PATH_MTUS", "PSN_MASK", "PSN_MODULUS",
    "ROCE_UDP_PORT", "Aeth", "AtomicAckEth", "AtomicEth", "BoundIcrc", "Bth", "Deth", "IcrcContext", "Ieth", "ImmDt",
    "Marking", "Opcode", "PcapWriter", "Rdeth", "Reth", "RocePacket", "WireError", "WriteBatch",
    "batch_size_bytes", "build_ack", "build_cnp", "build_nak_psn_error", "build_write_batch",
    "build_write_packet", "check_frame_icrc", "data_packet_size", "decode", "dscp_of", "ecn_of",
    "encode_packet", "ethernet_frame", "frame_icrc", "icrc_from_wire", "icrc_wire_bytes", "ip_udp_packet",
    "is_ce", "max_batch_packets", "message_packets", "opcode_name", "pad_count_for", "parse_aeth",
    "parse_header", "psn_add", "psn_diff", "psn_ge", "psn_gt", "psn_le", "psn_lt", "psn_range", "read_icrc",
    "rnr_nak_syndrome", "scapy_icrc_value", "syndrome", "tos", "udp_source_port", "write_segments",
]  # fmt: skip
