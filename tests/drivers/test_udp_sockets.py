"""UDP plumbing: GSO sends, GRO receives, TOS/ECN control messages, drop counters, namespaces helper."""

from __future__ import annotations

import select
import socket
import time

import pytest

from emulator.drivers.sockets.mmsg import mmsg_supported
from emulator.drivers.sockets.netns import in_netns
from emulator.drivers.sockets.udp import (
    IP_MTU_DISCOVER,
    IP_PMTUDISC_DO,
    SOL_UDP,
    UDP_GRO,
    UdpPort,
    gso_supported,
)
from emulator.endpoint.events import split_segments

pytestmark = pytest.mark.skipif(not gso_supported(), reason="kernel without UDP GSO/GRO")


def _recv_all(port: UdpPort, buf: bytearray, want: int, timeout_s: float = 2.0) -> list[tuple[bytes, int, int]]:
    out = []
    while len(out) < want:
        if not select.select([port.fileno], [], [], timeout_s)[0]:
            break
        n, tos, seg = port.recv_into(buf)
        if n >= 0:
            out.append((bytes(buf[:n]), tos, seg))
    return out


@pytest.fixture(params=["mmsg", "each"])
def pair(request):
    """Two ports on 127.0.0.1: by ``sendmmsg``/``recvmmsg`` (where libc has them), or one call a datagram."""
    if request.param == "mmsg" and not mmsg_supported():
        pytest.skip("libc without sendmmsg/recvmmsg")
    a, b = UdpPort("127.0.0.1"), UdpPort("127.0.0.1")
    a._mmsg = b._mmsg = a._mmsg_tx = b._mmsg_tx = request.param == "mmsg"
    yield a, b
    a.close()
    b.close()


def test_gso_batch_arrives_as_one_gro_buffer_with_segment_size_and_tos(pair):
    a, b = pair
    payload = bytes(range(256)) * 16 * 14 + b"tail"  # 14 segments of 4096 + a 4-byte last one
    assert a.send(payload, b.address, 4096, 26 << 2 | 0b10)
    got = _recv_all(b, bytearray(65536), 1)
    assert got == [(payload, 26 << 2 | 0b10, 4096)]
    assert split_segments(got[0][0], 4096)[-1] == b"tail" and len(split_segments(got[0][0], 4096)) == 15
    assert b.sock.getsockopt(SOL_UDP, UDP_GRO) == 1
    assert a.sock.getsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER) == IP_PMTUDISC_DO


@pytest.mark.parametrize("tos", [0x00, 0x02, 0x01, 0x03, 0xC2, 0x6B])
def test_tos_byte_goes_per_send_and_ecn_is_read_back(pair, tos):
    a, b = pair
    a.send(b"x" * 40, b.address, 0, tos)
    (data, got_tos, seg), = _recv_all(b, bytearray(2048), 1)
    assert (data, got_tos, seg) == (b"x" * 40, tos, 0)


def test_gathered_buffers_form_one_gso_send(pair):
    a, b = pair
    parts = [bytes([k]) * 1000 for k in range(5)]
    a.send(parts, b.address, 1000, 0x03)
    (data, tos, seg), = _recv_all(b, bytearray(65536), 1)
    assert data == b"".join(parts) and tos == 0x03 and seg == 1000
    assert a.stats()["sent_bytes"] == 5000 and b.stats()["recv_bytes"] == 5000


def test_plain_datagrams_are_not_coalesced(pair):
    a, b = pair
    for k in range(3):
        a.send(bytes([k]) * 100, b.address)
    got = _recv_all(b, bytearray(2048), 3)
    assert [(d[:1], s) for d, _, s in got] == [(b"\x00", 0), (b"\x01", 0), (b"\x02", 0)]


def test_oversized_datagram_is_refused_and_counted(pair):
    a, b = pair
    assert not a.send(bytes(70000), b.address)
    assert a.stats()["send_errors"] == 1


def test_receive_buffer_overflow_shows_in_the_drop_counter():
    a = UdpPort("127.0.0.1")
    b = UdpPort("127.0.0.1", rcvbuf_bytes=4096)
    try:
        for _ in range(200):
            a.send(bytes(1400), b.address)
        assert b.drops() > 0
        assert b.recv_into(bytearray(2048))[0] > 0  # what did fit is still readable
    finally:
        a.close()
        b.close()


def test_nothing_waiting_is_reported_without_blocking(pair):
    _, b = pair
    assert b.recv_into(bytearray(64)) == (-1, 0, 0)
    assert b.recv() == (None, 0, 0)


def test_split_segments_edges():
    assert split_segments(b"abc", 0) == [b"abc"]
    assert split_segments(b"abc", 3) == [b"abc"]
    assert [bytes(x) for x in split_segments(b"abcdefg", 3)] == [b"abc", b"def", b"g"]


def test_in_netns_none_stays_put_and_unknown_namespace_raises():
    with in_netns(None):
        UdpPort("127.0.0.1").close()
    with pytest.raises(OSError):
        with in_netns("no-such-namespace-xyz"):
            pass


def test_send_transmits_sends_each_transmit_like_send(pair):
    from emulator.endpoint.events import Transmit

    a, b = pair
    gso = bytes(range(256)) * 16 * 3 + b"end"  # 3 segments of 4096 + a short last one
    txs = [Transmit(1, gso, 4096, 26 << 2 | 2), Transmit(1, b"ack" * 10, 0, 48 << 2),
           Transmit(1, memoryview(b"y" * 4096), 4096, 0x03)]  # one segment: sent as a plain datagram
    a.send_transmits(txs, ((b"", 0), b.address))
    got = _recv_all(b, bytearray(65536), 3)
    assert got == [(gso, 26 << 2 | 2, 4096), (b"ack" * 10, 48 << 2, 0), (b"y" * 4096, 0x03, 0)]
    assert a.sent_calls == 3 and a.sent_bytes == len(gso) + 30 + 4096 and a.send_errors == 0


def test_the_first_gso_batchs_options_become_the_sockets_and_every_other_send_keeps_its_own(pair):
    """After the first GSO batch its TOS and segment size are the socket's options: later batches with both go
    by ``sendto`` (no control messages); a longer single datagram than that segment size is not cut by it, a
    batch of another segment size or TOS and a control packet keep theirs. By ``sendmmsg`` the same bytes
    and options go in one system call."""
    from emulator.endpoint.events import Transmit

    a, b = pair
    mmsg = a._mmsg_tx
    calls = {"sendto": 0, "sendmsg": 0}
    real_to, real_msg = a._sendto, a._sendmsg

    def sendto(*args):
        calls["sendto"] += 1
        return real_to(*args)

    def sendmsg(*args):
        calls["sendmsg"] += 1
        return real_msg(*args)

    a._sendto, a._sendmsg = sendto, sendmsg
    seg, data_tos = 1000, 26 << 2 | 2
    batch = bytes(range(250)) * 4 * 3 + b"tail"  # 3 full segments and a short last one
    txs = [Transmit(1, batch, seg, data_tos), Transmit(1, memoryview(batch), seg, data_tos),
           Transmit(1, b"F" * 1016, 0, data_tos),  # one datagram longer than the socket's segment size
           Transmit(1, b"x" * 1800, 900, data_tos),  # another segment size
           Transmit(1, b"ack" * 7, 0, 48 << 2), Transmit(1, batch, seg, 0x03)]  # fmt: skip
    a.send_transmits(txs, ((b"", 0), b.address))
    got = _recv_all(b, bytearray(65536), 6)
    assert got == [(batch, data_tos, seg), (batch, data_tos, seg), (b"F" * 1016, data_tos, 0),
                   (b"x" * 1800, data_tos, 900), (b"ack" * 7, 48 << 2, 0), (batch, 0x03, seg)]
    assert calls == ({"sendto": 0, "sendmsg": 0} if mmsg else {"sendto": 2, "sendmsg": 4})
    assert a.sent_calls == 6 and a.send_errors == 0 and a.stats()["send_syscalls"] == (1 if mmsg else 6)
    assert a.send(b"G" * 1016, b.address, 0, 0x6B)  # the general send cancels the socket's segment size too
    assert _recv_all(b, bytearray(65536), 1) == [(b"G" * 1016, 0x6B, 0)]


def test_drain_into_hands_on_every_datagram_with_its_own_tos_and_segment_size(pair):
    """The workers' receive loop: datagrams in order, each with its TOS and GRO segment size (the parsed
    control messages are reused only while they are the same), at most ``limit`` per call."""
    a, b = pair
    sent = [(b"a" * 4096 * 3, 4096, 0x6A), (b"b" * 100, 0, 0x6A), (b"c" * 100, 0, 0x6B),
            (b"d" * 1000 * 2 + b"e", 1000, 0x6B), (b"f" * 50, 0, 0x00)]
    for data, seg, tos in sent:
        assert a.send(data, b.address, seg, tos)
    select.select([b.fileno], [], [], 2.0)
    got = []

    def receive(view, ecn, now_ns, seg):
        got.append((bytes(view), ecn, now_ns, seg))

    buf = bytearray(65536)
    assert b.drain_into(buf, receive, lambda: 1_000, 400, 2) == 2
    assert b.drain_into(buf, receive, lambda: 1_000, 400, 16) == 3  # fewer than asked: the socket is empty
    assert [(d, e, seg) for d, e, _, seg in got] == [(d, t & 3, s) for d, s, t in sent]
    assert {t for _, _, t, _ in got} == {600}
    assert b.recv_calls == 5 and b.recv_bytes == sum(len(d) for d, _, _ in sent)


def test_drain_into_parses_a_repeated_control_message_list_once_across_calls_and_counts_empty_receives(pair,
                                                                                                       monkeypatch):
    """A receiver that keeps up drains one GRO batch per call: the control messages of consecutive batches of
    one flow are the same list, parsed once for all of them; a TOS change is parsed again. Every drain that
    empties the socket ends in one empty receive, counted (``recv_empty``, per GB in the benches)."""
    a, b = pair
    parsed = []
    real_parse = b._parse
    monkeypatch.setattr(b, "_parse", lambda anc: parsed.append(anc) or real_parse(anc))
    got = []
    buf = bytearray(65536)
    for i, tos in enumerate((0x6A, 0x6A, 0x6A, 0x6B)):
        assert a.send(bytes([65 + i]) * 4096 * 2, b.address, 4096, tos)
        select.select([b.fileno], [], [], 2.0)
        assert b.drain_into(buf, lambda view, ecn, now, seg: got.append((view[0], ecn, seg)), lambda: 0, 0, 16) == 1
    assert got == [(65, 2, 4096), (66, 2, 4096), (67, 2, 4096), (68, 3, 4096)]
    assert len(parsed) == 2  # the first list, and the one with the new TOS
    assert b.recv_empty == 4 and b.stats()["recv_empty"] == 4


def test_a_drain_ends_on_the_sockets_epoll_not_on_a_failing_receive(pair):
    """A drain that empties the socket learns it from the socket's own epoll (level-triggered, no wait), not
    from a ``recvmsg`` raising ``BlockingIOError`` (~5 µs with its errno text): every datagram is handed on,
    ``recv_empty`` counts the drains that found the socket empty and ``recv_eagain`` the receives that
    failed, none here; a drain of an already empty socket costs one failing receive, counted."""
    a, b = pair
    buf = bytearray(65536)
    got = []
    for k in (1, 3, 2):
        for i in range(k):
            assert a.send(bytes([i]) * 4096 * 2, b.address, 4096, 0x6A)
        deadline = time.monotonic() + 2.0
        n = 0
        while n < k and time.monotonic() < deadline:
            select.select([b.fileno], [], [], 0.5)
            n += b.drain_into(buf, lambda view, ecn, now, seg: got.append((view[0], len(view), seg)), lambda: 0, 0,
                              16)
        assert n == k
    assert got == [(0, 8192, 4096)] + [(i, 8192, 4096) for i in range(3)] + [(i, 8192, 4096) for i in range(2)]
    assert b.recv_eagain == 0 and b.stats()["recv_eagain"] == 0 and b.recv_empty >= 3
    assert b.drain_into(buf, lambda *_: None, lambda: 0, 0, 16) == 0
    assert b.recv_eagain == 1 and b.recv_calls == 6


mmsg_only = pytest.mark.skipif(not mmsg_supported(), reason="libc without sendmmsg/recvmmsg")


@mmsg_only
def test_a_polls_transmits_go_in_one_sendmmsg_per_64_and_arrive_whole_in_order():
    """70 transmits (GSO batches from bytes, writable and read-only views, control packets, two destinations)
    go in 2 system calls (64 slots, then 6), each datagram with its own bytes, TOS and segment size."""
    from emulator.endpoint.events import Transmit

    a, b, c = UdpPort("127.0.0.1", send_mmsg=True), UdpPort("127.0.0.1"), UdpPort("127.0.0.1")
    try:
        arena = bytearray(4096 * 3 * 70)
        txs, want = [], {1: [], 2: []}
        for i in range(70):
            dst = 1 + i % 2
            if i % 5 == 4:
                data, seg, tos = bytes([i]) * 30, 0, 48 << 2
            else:
                view = memoryview(arena)[i * 12288 : (i + 1) * 12288]
                view[:] = bytes([i]) * 12288
                data = view.toreadonly() if i % 5 == 3 else (bytes(view) if i % 5 == 2 else view)
                seg, tos = 4096, 26 << 2 | 2
            txs.append(Transmit(dst, data, seg, tos))
            want[dst].append((bytes(data), tos, seg))
        a.send_transmits(txs, ((b"", 0), b.address, c.address))
        assert a.stats()["send_syscalls"] == 2 and a.sent_calls == 70 and a.send_errors == 0
        assert a.sent_bytes == sum(len(t.data) for t in txs)
        got_b = _recv_all(b, bytearray(65536), 35)
        got_c = _recv_all(c, bytearray(65536), 35)
        assert got_b == want[1] and got_c == want[2]
    finally:
        for p in (a, b, c):
            p.close()


def test_a_datagram_sent_before_the_first_gso_batch_is_not_cut_by_the_sockets_new_segment_size(pair):
    """A message's FIRST packet (one datagram longer than the MIDDLEs' segment size) goes in the same poll
    as, and before, the first GSO batch, whose options then become the socket's: it still arrives whole."""
    from emulator.endpoint.events import Transmit

    a, b = pair
    txs = [Transmit(1, b"F" * 1016, 0, 0x6A), Transmit(1, b"m" * 3000, 1000, 0x6A), Transmit(1, b"L" * 1010, 0, 0x6A)]
    a.send_transmits(txs, ((b"", 0), b.address))
    assert _recv_all(b, bytearray(65536), 3) == [(b"F" * 1016, 0x6A, 0), (b"m" * 3000, 0x6A, 1000),
                                                 (b"L" * 1010, 0x6A, 0)]
    assert a.sent_calls == 3 and a.send_errors == 0


@mmsg_only
def test_a_refused_message_is_counted_and_the_rest_of_the_call_still_goes(pair):
    """A datagram the kernel refuses (larger than UDP allows) is one send error; the messages after it in the
    same ``sendmmsg`` go in a further call; a full send buffer is waited out (bounded) and counted."""
    from emulator.drivers.sockets import mmsg
    from emulator.endpoint.events import Transmit

    a, b = pair
    if not a._mmsg_tx:
        pytest.skip("the sendmmsg path only")
    txs = [Transmit(1, b"a" * 100, 0, 0), Transmit(1, b"b" * 70000, 0, 0), Transmit(1, b"c" * 100, 0, 0)]
    a.send_transmits(txs, ((b"", 0), b.address))
    assert [d for d, _, _ in _recv_all(b, bytearray(65536), 2)] == [b"a" * 100, b"c" * 100]
    assert a.sent_calls == 2 and a.send_errors == 1 and a.sent_bytes == 200
    real = mmsg.MmsgSender.send
    full = [1]

    def send(self, start, count):
        if full:
            full.pop()
            return -11  # EAGAIN: the send buffer is full once
        return real(self, start, count)

    a._mm_tx.send = send.__get__(a._mm_tx)
    a.send_transmits([Transmit(1, b"d" * 100, 0, 0)], ((b"", 0), b.address))
    assert _recv_all(b, bytearray(65536), 1) == [(b"d" * 100, 0, 0)]
    assert a.send_waits == 1 and a.sent_calls == 3 and a.send_errors == 1


@mmsg_only
def test_a_drain_takes_the_waiting_gro_batches_in_one_recvmmsg(pair):
    """Five GSO batches waiting are handed on in order by one ``recvmmsg`` (its reused buffers), with their
    TOS and segment sizes; a drain of at most 3 takes 3 in one call and leaves the rest for the next."""
    a, b = pair
    if not b._mmsg:
        pytest.skip("the recvmmsg path only")
    sent = [(bytes([65 + i]) * 4096 * (2 + i), 4096, 0x6A + (i == 3)) for i in range(5)]
    for data, seg, tos in sent:
        assert a.send(data, b.address, seg, tos)
    deadline = time.monotonic() + 2.0
    while _rx_queue_bytes(b) < sum(len(d) for d, _, _ in sent) and time.monotonic() < deadline:
        time.sleep(0.005)
    got = []

    def receive(view, ecn, now_ns, seg):
        got.append((bytes(view), ecn, seg))

    assert b.drain_into(bytearray(0), receive, lambda: 0, 0, 3) == 3
    assert b.stats()["recv_syscalls"] == 1
    assert b.drain_into(bytearray(0), receive, lambda: 0, 0, 16) == 2
    assert b.stats()["recv_syscalls"] == 2 and b.recv_empty == 1 and b.recv_eagain == 0
    assert got == [(d, t & 3, s) for d, s, t in sent]


def _rx_queue_bytes(port: UdpPort) -> int:
    """Bytes waiting in ``port``'s receive queue (``rx_queue`` of ``/proc/self/net/udp``, as charged: ≥ the
    payload)."""
    import os

    inode = os.fstat(port.fileno).st_ino
    with open("/proc/self/net/udp") as fh:
        for line in fh:
            cols = line.split()
            if len(cols) > 9 and cols[9] == str(inode):
                return int(cols[4].split(":")[1], 16)
    return 0


def test_receive_buffers_start_on_a_page():
    """The kernel copies a GRO batch into a buffer that starts within 32 bytes of a page 3–4× slower (a large
    ``bytearray`` starts 16 bytes in): every ``recvmmsg`` slot and the workers' ``recvmsg`` buffer start on
    one."""
    import ctypes

    from emulator.drivers.sockets.mmsg import MmsgReceiver, page_aligned_buffer

    port = UdpPort("127.0.0.1")
    try:
        rx = MmsgReceiver(port.fileno, 16, 65536)
        base = ctypes.addressof(ctypes.c_char.from_buffer(rx.data))
        assert all((base + i * rx.buffer_bytes) % 4096 == 0 for i in range(rx.slots))
        buf = page_aligned_buffer(65536)
        assert ctypes.addressof(ctypes.c_char.from_buffer(buf)) % 4096 == 0 and len(buf) == 65536
        assert bytes(buf[:8]) == bytes(8)
    finally:
        port.close()


@mmsg_only
def test_a_receivers_tos_survives_a_drop_count_in_its_control_messages():
    """Once the socket has dropped datagrams, each receive carries the drop count, the GRO segment size and
    the TOS (in that order): the control block of a ``recvmmsg`` slot holds all three, so ECN is still read
    (a block of 64 bytes cut the TOS off)."""
    a, b = UdpPort("127.0.0.1"), UdpPort("127.0.0.1", rcvbuf_bytes=4096)
    try:
        for _ in range(64):  # overflow the small receive buffer: drops
            a.send(b"z" * 1000, b.address, 0, 0x02)
        time.sleep(0.05)
        assert b.drain_into(bytearray(0), lambda *_: None, lambda: 0, 0, 64) >= 1
        assert b.drops() > 0
        assert a.send(b"m" * 3000, b.address, 1000, 0x6B)
        got = []
        deadline = time.monotonic() + 2.0
        while not got and time.monotonic() < deadline:
            select.select([b.fileno], [], [], 0.5)
            b.drain_into(bytearray(0), lambda view, ecn, now, seg: got.append((bytes(view), ecn, seg)), lambda: 0,
                         0, 16)
        assert got == [(b"m" * 3000, 0x6B & 3, 1000)]
        assert b.last_rxq_ovfl > 0
    finally:
        a.close()
        b.close()


def test_a_port_receives_by_recvmmsg_and_sends_one_call_a_datagram_unless_asked():
    """``recvmmsg`` wherever libc has it; ``sendmmsg`` only with ``send_mmsg`` (it cost the sender more)."""
    plain, batched = UdpPort("127.0.0.1"), UdpPort("127.0.0.1", send_mmsg=True)
    try:
        assert plain._mmsg == batched._mmsg == mmsg_supported()
        assert not plain._mmsg_tx and batched._mmsg_tx == mmsg_supported()
    finally:
        plain.close()
        batched.close()
