"""A worker's receive by compiled code: ``recvmmsg``, control messages and the receiver's accept in one call.

:class:`CompiledDrain` is :meth:`~emulator.drivers.sockets.udp.UdpPort.drain_into` for a rank whose receiver
keeps its queue pairs in a table (:mod:`emulator.endpoint.rx_table`). One call of :func:`recv_scan` (numba,
``nopython``) makes the ``recvmmsg`` system call (libc's, through numba's external-function binding, so the
machine code is cached like any kernel's), reads every datagram's length, TOS and GRO segment size from its
control messages (:func:`parse_block`; the socket's drop count too), and accepts every datagram that is one
whole run of MIDDLE packets into the table (:func:`~emulator.endpoint.rx_table.scan_block`). The interpreter
runs once per call, to book what was accepted (:meth:`~emulator.endpoint.endpoint.RankEndpoint.scan_accepted`),
and once for each datagram the scan stopped at (a FIRST, a control packet, a loss, CE), which goes to
``receive`` as before; the scan then goes on after it. A batch that ends a message (MIDDLE rows, then the LAST
packet) has its rows accepted by the scan and only the LAST packet goes to ``receive`` (with ``defer_acks``). The endpoint's state changes are the ones
``drain_into`` + ``receive`` make, in the same order (tests/drivers/test_socket_rx_compiled.py).

Counters kept as ``drain_mmsg`` keeps them (``recv_calls``, ``recv_bytes``, ``recv_empty``, ``recv_eagain``,
the receiver's ``syscalls``), plus ``scanned_datagrams``: the datagrams accepted without the interpreter.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from emulator.drivers.sockets.mmsg import MSG_DONTWAIT, RX_CONTROL_BYTES, MmsgReceiver, mmsg_supported
from emulator.drivers.sockets.udp import RECV_BUFFER_BYTES, UdpPort
from emulator.endpoint.rx_table import (
    OUT_BYTES,
    OUT_DUE,
    OUT_HEAD,
    OUT_OVFL,
    OUT_ROWS,
    OUT_STOP,
    OUT_TAIL,
    OUT_TAILS,
    scan_block,
)

#: libc's ``recvmmsg(fd, msgvec, vlen, flags, timeout)`` by symbol (pointers passed as integers: LP64)
_recvmmsg = types.ExternalFunction(
    "recvmmsg", types.int32(types.int32, types.intp, types.uint32, types.int32, types.intp))
_IPPROTO_IP, _IP_TOS, _SOL_UDP, _UDP_GRO, _SOL_SOCKET, _SO_RXQ_OVFL = 0, 1, 17, 104, 1, 40


@njit(cache=True, inline="always")
def _le32(buf, a):  # pragma: no cover - compiled
    return np.int64(buf[a]) | (np.int64(buf[a + 1]) << 8) | (np.int64(buf[a + 2]) << 16) | (np.int64(buf[a + 3]) << 24)


@njit(cache=True)
def parse_block(words, ctrl, ctrl_bytes, count, out):  # pragma: no cover - compiled
    """Datagram ``i`` of ``count`` received by ``recvmmsg`` into ``mmsghdr`` words ``words`` (64-bit, 8 a message)
    and control blocks ``ctrl`` (``ctrl_bytes`` each): its length, TOS and segment size (0 unless ``0 < size <
    length``, as ``drain_mmsg`` hands them on) into ``out`` at ``OUT_HEAD + 3·i``; the bytes of all into
    ``out[OUT_BYTES]``, the last ``SO_RXQ_OVFL`` count into ``out[OUT_OVFL]`` (−1: none). Every control length
    the kernel shrank is set back to ``ctrl_bytes``."""
    total = 0
    ovfl = -1
    for i in range(count):
        j = i * 8
        n = np.int64(words[j + 7] & 0xFFFFFFFF)
        c = np.int64(words[j + 5])
        words[j + 5] = ctrl_bytes  # the kernel shrank it (to 0: none), for this slot's next datagram
        tos = 0
        seg = 0
        if c:
            base = i * ctrl_bytes
            pos = 0
            while pos + 16 <= c:
                ln = _le32(ctrl, base + pos) | (_le32(ctrl, base + pos + 4) << 32)
                if ln < 16:
                    break
                level = _le32(ctrl, base + pos + 8)
                kind = _le32(ctrl, base + pos + 12)
                d = base + pos + 16
                if level == _IPPROTO_IP and kind == _IP_TOS and ln > 16:
                    tos = np.int64(ctrl[d])
                elif level == _SOL_UDP and kind == _UDP_GRO:
                    seg = _le32(ctrl, d)
                    if seg >= 0x80000000:
                        seg -= 0x100000000
                elif level == _SOL_SOCKET and kind == _SO_RXQ_OVFL:
                    ovfl = _le32(ctrl, d)
                pos += (ln + 7) & ~7
        h = OUT_HEAD + 3 * i
        out[h] = n
        out[h + 1] = tos
        out[h + 2] = seg if 0 < seg < n else 0
        total += n
    out[OUT_BYTES] = total
    out[OUT_OVFL] = ovfl


@njit(cache=True)
def recv_scan(fd, hdr_addr, want, words, ctrl, ctrl_bytes, data, size, row, ack_every, qps, table, op_packets, out,
              due):  # pragma: no cover - compiled
    """``recvmmsg`` (non-blocking) of up to ``want`` datagrams, :func:`parse_block`, then
    :func:`~emulator.endpoint.rx_table.scan_block` from the first: how many arrived (0 or less: none)."""
    r = _recvmmsg(fd, hdr_addr, want, MSG_DONTWAIT, 0)
    if r <= 0:
        return r
    parse_block(words, ctrl, ctrl_bytes, r, out)
    scan_block(data, size, 0, r, row, ack_every, qps, table, op_packets, out, due)
    return r


def compiled_drain_supported() -> bool:
    """True where the ``recvmmsg`` path exists (:func:`~emulator.drivers.sockets.mmsg.mmsg_supported`)."""
    return mmsg_supported()


class CompiledDrain:
    """Rank ``ep``'s drain of ``port`` by :func:`recv_scan` (module docstring). ``ep.scan_state()`` must not be None;
    make it before the rank's first packet."""

    def __init__(self, port: UdpPort, ep, slots: int = 16) -> None:
        state = ep.scan_state()
        if state is None:
            raise ValueError("the endpoint's receiver has no batch fast path to scan")
        self.qps, self.table, self.op_packets, self.row, self.ack_every = state
        self.port = port
        self.ep = ep
        rx = port._mm_rx
        if rx is None:
            rx = port._mm_rx = MmsgReceiver(port.fileno, slots, RECV_BUFFER_BYTES)
        self.rx = rx
        self.slots = rx.slots
        self.words = np.frombuffer(rx._hdr, dtype=np.uint64)
        self.ctrl = np.frombuffer(rx.control, dtype=np.uint8)
        self.data = np.frombuffer(rx.data, dtype=np.uint8)
        self.out = np.zeros(OUT_HEAD + 3 * rx.slots, dtype=np.int64)
        self.o = memoryview(self.out)  # Python ints on reading, no numpy scalars
        # a message's LAST-ending batch: its MIDDLE rows scanned, the LAST packet to ``receive``; only with ACKs
        # deferred (else ``receive`` of the whole batch flushes one ACK after the LAST, not one for the rows too)
        self.out[OUT_TAILS] = 1 if ep.defer_acks else 0
        self.due = np.zeros(rx.slots, dtype=np.int64)
        self.scanned_datagrams = 0
        self.slots_high = 0  # the most datagrams one recvmmsg returned: the receive slots this drain touched

    def drain(self, clock, t0_ns: int, limit: int) -> int:
        """:meth:`~emulator.drivers.sockets.udp.UdpPort.drain_into` with ``receive = ep.receive``: up to ``limit``
        datagrams; fewer means the socket is empty."""
        port, ep, rx = self.port, self.ep, self.rx
        args = (self.words, self.ctrl, RX_CONTROL_BYTES, self.data, rx.buffer_bytes, self.row, self.ack_every,
                self.qps, self.table, self.op_packets, self.out, self.due)
        fd, hdr = rx.fd, rx._hdr_addr
        got = nbytes = 0
        while got < limit:
            want = min(self.slots, limit - got)
            ep.scan_tick(clock() - t0_ns)
            r = recv_scan(fd, hdr, want, *args)
            rx.syscalls += 1
            if r <= 0:
                port.recv_empty += 1
                port.recv_eagain += 1
                break
            nbytes += self.serve(r, clock, t0_ns)
            got += r
            if r > self.slots_high:
                self.slots_high = r
            if r < want:
                port.recv_empty += 1
                break
        port.recv_calls += got
        port.recv_bytes += nbytes
        return got

    def serve(self, count: int, clock, t0_ns: int) -> int:
        """After :func:`recv_scan` took ``count`` datagrams: book what it accepted, hand each datagram it stopped
        at to ``ep.receive`` (``now_ns = clock() − t0_ns``) and scan on after it. Returns their bytes."""
        ep, o = self.ep, self.o
        view = self.rx.view
        size = self.rx.buffer_bytes
        if o[OUT_OVFL] >= 0:
            self.port.last_rxq_ovfl = o[OUT_OVFL]
        start = 0
        while True:
            k = o[OUT_STOP]
            rows = o[OUT_ROWS]
            if rows:
                n_due = o[OUT_DUE]
                ep.scan_accepted(rows, self.due[:n_due].tolist() if n_due else ())
            self.scanned_datagrams += k - start
            if k >= count:
                break
            h = OUT_HEAD + 3 * k
            a = k * size
            off = o[OUT_TAIL]
            if off:  # the scan took the datagram's MIDDLE rows: its last packet alone
                ep.receive(view[a + off : a + o[h]], o[h + 1] & 3, clock() - t0_ns, 0)
            else:
                ep.receive(view[a : a + o[h]], o[h + 1] & 3, clock() - t0_ns, o[h + 2])
            start = k + 1
            if start >= count:
                break
            ep.scan_tick(clock() - t0_ns)
            scan_block(self.data, size, start, count, self.row, self.ack_every, self.qps, self.table,
                       self.op_packets, self.out, self.due)
        return o[OUT_BYTES]


def warm() -> None:
    """Compile (or load from numba's cache) :func:`recv_scan` and :func:`scan_block` for the arrays
    :class:`CompiledDrain` passes, on a socket that has nothing waiting."""
    import socket

    from emulator.endpoint.rx_table import new_table
    from emulator.endpoint.rx_table import warm as warm_scan

    warm_scan()
    if not mmsg_supported():
        return
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(("127.0.0.1", 0))
        rx = MmsgReceiver(s.fileno(), 1, 4096)
        recv_scan(s.fileno(), rx._hdr_addr, 1, np.frombuffer(rx._hdr, dtype=np.uint64),
                  np.frombuffer(rx.control, dtype=np.uint8), RX_CONTROL_BYTES, np.frombuffer(rx.data, dtype=np.uint8),
                  4096, 4112, 1, np.zeros(1, dtype=np.int64), new_table(1), np.zeros(1, dtype=np.int64),
                  np.zeros(OUT_HEAD + 3, dtype=np.int64), np.zeros(1, dtype=np.int64))
    finally:
        s.close()
