"""A pcap we write (Ethernet/IP/UDP 4791) decodes in tshark as RRoCE/InfiniBand with the right fields.

Runs in CI (``.ci/run`` installs tshark): skipped only when tshark is missing *and* ``CI`` is unset.
"""

import os
import shutil
import subprocess

import pytest

from emulator.wire import (
    ECT0,
    IcrcContext,
    PcapWriter,
    build_ack,
    build_cnp,
    build_nak_psn_error,
    build_write_batch,
    check_frame_icrc,
    ethernet_frame,
    ip_udp_packet,
    rnr_nak_syndrome,
    scapy_icrc_value,
    tos,
)
from emulator.wire.packets import read_icrc

FIELDS = [
    "frame.protocols", "_ws.col.Protocol", "infiniband.bth.opcode", "infiniband.bth.psn",
    "infiniband.bth.destqp", "infiniband.bth.a", "infiniband.bth.padcnt", "infiniband.bth.p_key",
    "infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen", "infiniband.aeth.syndrome",
    "infiniband.aeth.msn", "infiniband.immdt", "infiniband.invariant.crc", "ip.dsfield.dscp", "ip.dsfield.ecn", "udp.dstport",
    "udp.length",
]  # fmt: skip


@pytest.fixture(scope="module")
def tshark():
    path = shutil.which("tshark")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("tshark is missing but CI is set: .ci/run must install it")
        pytest.skip("tshark not installed (CI installs it via .ci/run)")
    return path


def write_capture(path):
    """Data (FIRST/MIDDLE/LAST with send-time stamps, ONLY), ACK, NAK, RNR NAK, CNP over IPv4, one ONLY over IPv6."""
    a, b = "10.0.0.1", "10.0.0.2"
    sport = 0xC242
    expected = []
    packets = []
    data = build_write_batch(0xFFFFFE, 4, dest_qp=0x11, message_bytes=3 * 1024 + 10, mtu_bytes=1024,
                             va=0x7F0000001000, rkey=0x1234, icrc=IcrcContext(a, b).bind(sport),
                             stamp_ns=1_234_567_890)  # the send-time stamp: still plain RoCEv2  # fmt: skip
    for view, seg in data.views():
        for k in range(0, len(view), seg):  # as Linux GSO emits them: IPv4 ID 0, 1, ... within a send
            packets.append((bytes(view[k : k + seg]), dict(src=a, dst=b, tos=tos(26, ECT0), ip_id=k // seg)))
    only = build_write_batch(5, 1, dest_qp=0x12, message_bytes=100, mtu_bytes=1024, va=64, rkey=9,
                             icrc=IcrcContext(a, b).bind(sport))  # fmt: skip
    packets.append((bytes(only.buffer), dict(src=a, dst=b, tos=tos(26, ECT0))))
    ack_kw = dict(src=b, dst=a, fill_icrc=True)
    packets.append((build_ack(0x22, 1, 1), ack_kw))
    packets.append((build_nak_psn_error(0x22, 0xFFFFFF, 0), ack_kw))
    packets.append((build_ack(0x22, 2, 1, syndrome=rnr_nak_syndrome(14)), ack_kw))
    packets.append((build_cnp(0x11), dict(src=b, dst=a, tos=tos(48, ECT0), fill_icrc=True)))
    v6 = build_write_batch(7, 1, dest_qp=0x13, message_bytes=12, mtu_bytes=1024, imm=0xABCD)
    packets.append((bytes(v6.buffer), dict(src="fd00::1", dst="fd00::2", tos=tos(26, ECT0), fill_icrc=True)))
    with PcapWriter(str(path)) as w:
        for i, (roce, kw) in enumerate(packets):
            if i == 0:  # the convenience path
                w.write_roce(roce, 1_700_000_000_000_000_000, sport=sport, **kw)
                expected.append(roce)
                continue
            ip = ip_udp_packet(roce, sport=sport, **kw)
            assert check_frame_icrc(ip)
            w.write_frame(ethernet_frame(ip), 1_700_000_000_000_000_000 + 1000 * i)
            expected.append(ip[-len(roce) :])  # with the ICRC filled in where asked
    return expected


def test_tshark_decodes_our_pcap(tshark, tmp_path):
    pcap = tmp_path / "roce.pcap"
    payloads = write_capture(pcap)
    args = [tshark, "-n", "-r", str(pcap), "-T", "fields", "-E", "separator=|", "-E", "occurrence=f"]
    for f in FIELDS:
        args += ["-e", f]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout
    rows = [dict(zip(FIELDS, line.split("|"), strict=True)) for line in out.splitlines()]
    assert len(rows) == len(payloads) == 10
    for row, roce in zip(rows, payloads, strict=True):
        assert row["_ws.col.Protocol"] == "RRoCE" and "infiniband" in row["frame.protocols"]
        assert row["udp.dstport"] == "4791" and int(row["udp.length"]) == 8 + len(roce)
        assert row["infiniband.bth.p_key"] in ("65535", "0xffff")
        if roce[0] != 0x81:  # tshark 4.0 folds a CNP's ICRC into "Vendor Specific or Unknown"
            assert int(row["infiniband.invariant.crc"], 16) == scapy_icrc_value(read_icrc(roce)) != 0
    got = [(int(r["infiniband.bth.opcode"]), int(r["infiniband.bth.psn"]), int(r["infiniband.bth.destqp"], 16),
            int(r["infiniband.bth.a"]), int(r["infiniband.bth.padcnt"])) for r in rows]  # fmt: skip
    assert got == [
        (0x06, 0xFFFFFE, 0x11, 0, 0),  # RDMA WRITE FIRST, PSN about to wrap
        (0x07, 0xFFFFFF, 0x11, 0, 0),  # MIDDLE
        (0x07, 0x000000, 0x11, 0, 0),  # MIDDLE after the wrap
        (0x08, 0x000001, 0x11, 1, 2),  # LAST, 10 bytes + 2 pad, AckReq
        (0x0A, 5, 0x12, 1, 0),  # ONLY
        (0x11, 1, 0x22, 0, 0),  # ACK
        (0x11, 0xFFFFFF, 0x22, 0, 0),  # NAK
        (0x11, 2, 0x22, 0, 0),  # RNR NAK
        (0x81, 0, 0x11, 0, 0),  # CNP: tshark 4.0 shows "Unknown (129)"
        (0x0B, 7, 0x13, 1, 0),  # ONLY WITH IMMEDIATE over IPv6
    ]
    assert (rows[0]["infiniband.reth.va"], rows[0]["infiniband.reth.r_key"], rows[0]["infiniband.reth.dmalen"]) == (
        "0x00007f0000001000", "0x00001234", "3082")  # fmt: skip
    assert rows[4]["infiniband.reth.dmalen"] == "100"
    assert [int(r["infiniband.aeth.syndrome"]) for r in rows[5:8]] == [0x1F, 0x60, 0x2E]
    assert [int(r["infiniband.aeth.msn"]) for r in rows[5:8]] == [1, 0, 1]
    assert rows[9]["infiniband.immdt"].replace(":", "") == "0000abcd"
    assert rows[9]["infiniband.reth.dmalen"] == "12"
    assert (rows[0]["ip.dsfield.dscp"], rows[0]["ip.dsfield.ecn"]) == ("26", "2")
    assert (rows[8]["ip.dsfield.dscp"], rows[8]["ip.dsfield.ecn"]) == ("48", "2")


def test_tshark_info_column_names_the_operations(tshark, tmp_path):
    pcap = tmp_path / "roce.pcap"
    write_capture(pcap)
    out = subprocess.run([tshark, "-n", "-r", str(pcap), "-T", "fields", "-e", "_ws.col.Info"],
                         capture_output=True, text=True, timeout=120, check=True).stdout  # fmt: skip
    info = out.splitlines()
    assert info[0].startswith("RC RDMA Write First QP=0x000011")
    assert info[1].startswith("RC RDMA Write Middle") and info[3].startswith("RC RDMA Write Last")
    assert info[4].startswith("RC RDMA Write Only QP=0x000012")
    assert info[5].startswith("RC Acknowledge QP=0x000022")
    assert "PSN Sequence Error" in info[6]
