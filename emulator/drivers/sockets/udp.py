"""UDP socket plumbing for the socket drivers: GSO sends and GRO receives with ancillary data.

Theory of operation
-------------------
:class:`UdpPort` wraps one non-blocking IPv4 UDP socket, bound and never connected:

* **Send** (:meth:`UdpPort.send`): one ``sendmsg`` per datagram or per GSO batch. The IP TOS byte
  (DSCP << 2 | ECN) travels as an ``IP_TOS`` control message, so each call may carry a different
  marking (the software switch sets CE per packet this way); a batch of several equal segments carries
  a ``UDP_SEGMENT`` control message with the segment size and the kernel cuts it (only the last segment
  may be shorter; at most 64 segments and 65507 bytes). Control-message lists are cached per
  (TOS, segment size). :meth:`UdpPort.send_transmits` (the workers' hot path) sends a poll's endpoint
  ``Transmit`` objects one call each, or with ``send_mmsg`` by one ``sendmmsg``
  (:mod:`~emulator.drivers.sockets.mmsg`); the TOS and segment size of its first GSO batch become the socket's own options
  (``IP_TOS``, ``UDP_SEGMENT``), so the sends that have both (a sender's data batches) carry no control
  message, and every other send carries its own, a segment size of 0 included. ``IP_MTU_DISCOVER =
  IP_PMTUDISC_DO`` sets DF and, with an address given on an unconnected socket, makes Linux stamp IPv4 ID
  0 (+k for GSO segment k), which the ICRC of
  ``icrc=compute`` assumes. A full send buffer is waited out (bounded) instead of dropping.
* **Receive** (:meth:`UdpPort.recv_into` / :meth:`UdpPort.recv`): ``recvmsg`` with ``UDP_GRO`` on, so
  a GSO batch that crossed loopback (or was coalesced by a NIC's GRO) arrives as one buffer plus a
  ``UDP_GRO`` control message holding the segment size; ``IP_RECVTOS`` delivers the TOS byte (ECN as
  received, CE included) and ``SO_RXQ_OVFL`` the socket's cumulative drop count. The receive returns
  ``(n, tos, segment_size)``; ``segment_size == 0`` means one plain datagram. :meth:`UdpPort.drain_into` (the workers'
  loop) takes every GRO batch waiting, up to its limit, by one ``recvmmsg`` into page-aligned buffers
  reused from call to call; where libc has none, one ``recvmsg`` each, asking the socket's own epoll
  instance whether more is waiting before each further one (0.5 µs), so a drain ends without the failing
  ``recvmsg`` whose ``BlockingIOError`` (errno text included) costs ~5 µs.
* **Buffers**: ``SO_RCVBUF``/``SO_SNDBUF`` requested with the ``*FORCE`` variants when allowed (root),
  else capped by ``net.core.rmem_max``; the effective sizes are kept for the run's health report.
* **Drops**: :meth:`UdpPort.drops` reads the kernel's per-socket drop counter from
  ``/proc/self/net/udp`` (by socket inode), falling back to the last ``SO_RXQ_OVFL`` value.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import struct
import time

from emulator.drivers.sockets.mmsg import (
    RX_CONTROL_BYTES,
    MmsgReceiver,
    MmsgSender,
    buffer_address,
    cmsg,
    mmsg_supported,
    parse_cmsgs,
)
from emulator.endpoint.events import expand_runs

SOL_UDP = getattr(socket, "SOL_UDP", 17)
UDP_SEGMENT = 103
UDP_GRO = 104
IP_MTU_DISCOVER = 10
IP_PMTUDISC_DO = 2
IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
IP_TOS = getattr(socket, "IP_TOS", 1)
SO_RXQ_OVFL = 40
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
IPPROTO_IP = socket.IPPROTO_IP
SOL_SOCKET = socket.SOL_SOCKET

#: Largest UDP payload over IPv4 (one datagram or one GSO send).
MAX_UDP_PAYLOAD = 65507
RECV_BUFFER_BYTES = 65536
_ANC_BYTES = socket.CMSG_SPACE(4) * 4
_INT = struct.Struct("=i")
_U32 = struct.Struct("=I")
_SEND_WAIT_S = 0.05


def _set_buffer(sock: socket.socket, force_opt: int, opt: int, size: int) -> int:
    if size > 0:
        try:
            sock.setsockopt(SOL_SOCKET, force_opt, size)
        except OSError:
            sock.setsockopt(SOL_SOCKET, opt, size)
    return sock.getsockopt(SOL_SOCKET, opt)


def gso_supported() -> bool:
    """True when this kernel accepts ``UDP_SEGMENT`` and ``UDP_GRO`` on a UDP socket."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(SOL_UDP, UDP_SEGMENT, 1024)
        s.setsockopt(SOL_UDP, UDP_GRO, 1)
        return True
    except OSError:
        return False
    finally:
        s.close()


class UdpPort:
    """One bound, unconnected, non-blocking UDP socket with GSO/GRO and TOS control messages."""

    def __init__(
        self,
        address: str,
        port: int = 0,
        *,
        rcvbuf_bytes: int = 4 << 20,
        sndbuf_bytes: int = 4 << 20,
        gro: bool = True,
        recv_tos: bool = True,
        dont_fragment: bool = True,
        send_mmsg: bool = False,
        send_compiled: bool = False,
    ) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.rcvbuf_bytes = _set_buffer(sock, SO_RCVBUFFORCE, socket.SO_RCVBUF, rcvbuf_bytes)
            self.sndbuf_bytes = _set_buffer(sock, SO_SNDBUFFORCE, socket.SO_SNDBUF, sndbuf_bytes)
            if dont_fragment:
                sock.setsockopt(IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
            if recv_tos:
                sock.setsockopt(IPPROTO_IP, IP_RECVTOS, 1)
            self.gro = False
            if gro:
                try:
                    sock.setsockopt(SOL_UDP, UDP_GRO, 1)
                    self.gro = True
                except OSError:
                    self.gro = False
            try:
                sock.setsockopt(SOL_SOCKET, SO_RXQ_OVFL, 1)
            except OSError:
                pass
            sock.bind((address, port))
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.sock = sock
        self.fileno = sock.fileno()
        self.address: tuple[str, int] = sock.getsockname()
        self._anc: dict[tuple[int, int], list[tuple[int, int, bytes]]] = {}
        self._sendmsg = sock.sendmsg
        self._sendto = sock.sendto
        #: the socket's own options (:meth:`_own_options`): asked for, its ``UDP_SEGMENT`` set, and the
        #: (TOS, segment size) sent by ``sendto`` without control messages (None: none)
        self._own_tried = False
        self._own_gso = False
        self._fast_key: tuple[int, int] | None = None
        self._recvmsg_into = sock.recvmsg_into
        self._recvmsg = sock.recvmsg
        self.last_rxq_ovfl = 0
        # counters
        self.sent_calls = 0
        self.sent_bytes = 0
        self.send_waits = 0
        self.send_errors = 0
        self.recv_calls = 0
        self.recv_bytes = 0
        self.recv_empty = 0  # times a receive or a drain's peek found the socket empty
        self.recv_eagain = 0  # recvmsg calls that found it empty (raised BlockingIOError)
        self._peek = None  # this process's epoll of the socket alone (drain_into), made at first use
        self._peek_pid = 0
        self._rx_anc: list | bytes | None = None  # the last control messages drain_into parsed, and their result
        self._rx_meta = (0, 0)
        #: recvmmsg (and with ``send_mmsg`` sendmmsg) where libc has them, made at first use in the process that
        #: receives (sends)
        self._mmsg = mmsg_supported()
        self._mmsg_tx = send_mmsg and self._mmsg
        self._mm_tx: MmsgSender | None = None
        #: with ``send_mmsg`` and ``send_compiled``: every poll's transmits by one compiled call
        #: (:class:`~emulator.drivers.sockets.tx_compiled.CompiledSend`), made at first use
        self._send_compiled = send_compiled
        self._tx_compiled = None
        #: the sender's MIDDLE arena whose views this port sends (set by a worker): their buffer addresses from
        #: its records (:class:`~emulator.drivers.sockets.tx_compiled.CompiledSend`)
        self.tx_arena = None
        self._mm_rx: MmsgReceiver | None = None
        self._mm_controls: dict[tuple[int, int], tuple[int, int]] = {}
        self.send_calls_each = 0  # sendto/sendmsg calls of send_each (sendmmsg calls: MmsgSender.syscalls)

    # -- send -------------------------------------------------------------------------------------------
    def _ancillary(self, tos: int, segment_size: int) -> list[tuple[int, int, bytes]]:
        key = (tos, segment_size)
        anc = self._anc.get(key)
        if anc is None:
            anc = [(IPPROTO_IP, IP_TOS, _INT.pack(tos))]
            if segment_size or self._own_gso:  # 0 cancels the socket's own segment size
                anc.append((SOL_UDP, UDP_SEGMENT, struct.pack("=H", segment_size)))
            self._anc[key] = anc
        return anc

    def _own_options(self, tos: int, segment_size: int) -> None:
        """Make ``(tos, segment_size)`` the socket's own ``IP_TOS`` and ``UDP_SEGMENT`` (once per socket): sends
        with them then go by ``sendto`` without control messages, the others carry theirs (a segment size of 0
        included, which cancels the socket's)."""
        self._own_tried = True  # once: a socket's options never flip
        try:
            self.sock.setsockopt(SOL_UDP, UDP_SEGMENT, segment_size)
        except OSError:
            return
        self._own_gso = True
        self._anc.clear()
        self._mm_controls.clear()
        try:
            self.sock.setsockopt(IPPROTO_IP, IP_TOS, tos)
        except OSError:
            return
        self._fast_key = (tos, segment_size)

    def send(self, data, addr: tuple[str, int], segment_size: int = 0, tos: int = 0) -> bool:
        """Send one datagram, or a GSO batch when ``0 < segment_size < len(data)``. ``data`` may be a
        buffer or a list of buffers (gathered). False (counted) if the kernel refused it."""
        if isinstance(data, list):
            bufs = data
            n = sum(len(b) for b in data)
        else:
            bufs = [data]
            n = len(data)
        anc = self._ancillary(tos, segment_size if 0 < segment_size < n else 0)
        try:
            self._sendmsg(bufs, anc, 0, addr)
        except BlockingIOError:
            return self._send_slow(bufs, anc, addr, n)
        except OSError:
            self.send_errors += 1
            return False
        self.sent_calls += 1
        self.sent_bytes += n
        return True

    def send_transmits(self, txs, dest) -> None:
        """Send endpoint ``Transmit`` objects (``dest[tx.dst_rank]`` = address) as :meth:`send` would, in
        order: one ``sendto``/``sendmsg`` each (:meth:`send_each`), or with ``send_mmsg`` by ``sendmmsg``, up
        to 64 a system call (:class:`~emulator.drivers.sockets.mmsg.MmsgSender`; off by default: with
        61 KB GSO batches the kernel's copy dominates and its per-message setup through ctypes cost the
        sender 2–3 µs per batch more than ``sendto``, measured). The first GSO batch's TOS
        and segment size become the socket's own options, so every later send with both carries no control
        message."""
        if self._tx_compiled is not None:
            self._tx_compiled.send(txs, dest)
            return
        if self._mm_tx is None:
            if not self._mmsg_tx:
                self.send_each(txs, dest)
                return
            if self._send_compiled:
                from emulator.drivers.sockets.tx_compiled import CompiledSend

                self._tx_compiled = CompiledSend(self)
                self._tx_compiled.send(txs, dest)
                return
            self._mm_tx = MmsgSender(self.fileno)
        self.send_mmsg_each(txs, dest)

    def send_mmsg_each(self, txs, dest) -> None:
        """:meth:`send_transmits` by ``sendmmsg`` through ctypes, every message's header written here."""
        txs = expand_runs(txs)
        mm = self._mm_tx
        names = mm.names_for(dest)
        address = buffer_address
        controls = self._mm_controls
        w = mm.words
        iv = mm.iovecs
        slots = mm.slots
        lens = []
        keep = []  # copies of read-only views, alive until their call
        k = 0
        for dst, data, seg, tos, _, _ in txs:
            n = len(data)
            if not 0 < seg < n:
                seg = 0
            elif not self._own_tried:
                if k:  # the messages before go under the options they were written for
                    self._send_slots(k, lens)
                    lens.clear()
                    keep.clear()
                    k = 0
                self._own_options(tos, seg)
            ctl = controls.get((tos, seg))
            if ctl is None:
                ctl = self._mm_control(tos, seg)
            if type(data) is memoryview and data.readonly:
                data = bytes(data)
                keep.append(data)
            j = k * 8
            w[j] = names + dst * 16
            w[j + 4], w[j + 5] = ctl
            iv[2 * k] = address(data)
            iv[2 * k + 1] = n
            lens.append(n)
            k += 1
            if k == slots:
                self._send_slots(k, lens)
                lens.clear()
                keep.clear()
                k = 0
        if k:
            self._send_slots(k, lens)

    def _mm_control(self, tos: int, seg: int) -> tuple[int, int]:
        """The control block of a (TOS, segment size) send by ``sendmmsg``: none when the socket's own
        options are those, else the messages :meth:`_ancillary` gives."""
        if (tos, seg) == self._fast_key:
            ctl = (0, 0)
        else:
            ctl = self._mm_tx.control(b"".join(cmsg(*a) for a in self._ancillary(tos, seg)))
        self._mm_controls[(tos, seg)] = ctl
        return ctl

    def _send_slots(self, k: int, lens: list[int], start: int = 0) -> None:
        """``sendmmsg`` of slots ``start .. k − 1`` until every one went or failed; a full send buffer is waited
        out (bounded, per message) as :meth:`_send_slow` does."""
        mm = self._mm_tx
        deadline = 0.0
        while start < k:
            r = mm.send(start, k - start)
            if r > 0:
                self.sent_calls += r
                self.sent_bytes += sum(lens[start : start + r])
                start += r
                deadline = 0.0
                continue
            if r == -errno.EAGAIN:
                now = time.monotonic()
                if not deadline:
                    self.send_waits += 1
                    deadline = now + _SEND_WAIT_S
                if now < deadline:
                    select.select([], [self.fileno], [], deadline - now)
                    continue
            self.send_errors += 1  # refused, or no room in time: this message is not sent
            start += 1
            deadline = 0.0

    def send_each(self, txs, dest) -> None:
        """:meth:`send_transmits` by one ``sendto`` (the socket's own options) or ``sendmsg`` per transmit."""
        sendmsg = self._sendmsg
        sendto = self._sendto
        cache = self._anc
        fast = self._fast_key
        calls = nbytes = 0
        txs = expand_runs(txs)
        self.send_calls_each += len(txs)
        for dst, data, seg, tos, _, _ in txs:
            n = len(data)
            if not 0 < seg < n:
                seg = 0
            elif not self._own_tried:
                self._own_options(tos, seg)
                fast = self._fast_key
            key = (tos, seg)
            addr = dest[dst]
            try:
                if key == fast:
                    sendto(data, addr)
                else:
                    anc = cache.get(key)
                    if anc is None:
                        anc = self._ancillary(tos, seg)
                    sendmsg([data], anc, 0, addr)
            except BlockingIOError:
                self._send_slow([data], self._ancillary(tos, seg), addr, n)
                continue
            except OSError:
                self.send_errors += 1
                continue
            calls += 1
            nbytes += n
        self.sent_calls += calls
        self.sent_bytes += nbytes

    def _send_slow(self, bufs, anc, addr, n: int) -> bool:
        """The send buffer is full: wait for room (bounded), then try once more."""
        self.send_waits += 1
        deadline = time.monotonic() + _SEND_WAIT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.send_errors += 1
                return False
            select.select([], [self.fileno], [], left)
            try:
                self._sendmsg(bufs, anc, 0, addr)
            except BlockingIOError:
                continue
            except OSError:
                self.send_errors += 1
                return False
            self.sent_calls += 1
            self.sent_bytes += n
            return True

    # -- receive ----------------------------------------------------------------------------------------
    def _parse(self, anc: list) -> tuple[int, int]:
        tos = 0
        seg = 0
        for level, kind, cdata in anc:
            if level == IPPROTO_IP:
                if kind == IP_TOS and cdata:
                    tos = cdata[0]
            elif level == SOL_UDP:
                if kind == UDP_GRO:
                    seg = _INT.unpack_from(cdata)[0]
            elif level == SOL_SOCKET and kind == SO_RXQ_OVFL:
                self.last_rxq_ovfl = _U32.unpack_from(cdata)[0]
        return tos, seg

    def recv_into(self, buf: bytearray | memoryview) -> tuple[int, int, int]:
        """One receive into ``buf``: ``(nbytes, tos, segment_size)``; ``nbytes == -1`` when nothing is
        waiting. ``segment_size`` is 0 for a plain datagram (or a GRO buffer of one segment)."""
        try:
            n, anc, _flags, _addr = self._recvmsg_into([buf], _ANC_BYTES)
        except (BlockingIOError, InterruptedError):
            return -1, 0, 0
        self.recv_calls += 1
        self.recv_bytes += n
        if not anc:
            return n, 0, 0
        tos, seg = self._parse(anc)
        return n, tos, (seg if 0 < seg < n else 0)

    def drain_into(self, buf: bytearray, receive, clock, t0_ns: int, limit: int) -> int:
        """Up to ``limit`` datagrams, each handed on at once as ``receive(view, ecn, now_ns, segment_size)``
        (``view`` valid during the call; ``now_ns = clock() − t0_ns``), in arrival order. Returns how many it
        handed on; fewer than ``limit`` means the socket is empty. Where libc has ``recvmmsg``, up to
        ``limit`` datagrams come per system call into the port's own reused buffers (:meth:`drain_mmsg`;
        ``buf`` is unused), else one ``recvmsg`` each into ``buf`` (:meth:`drain_each`). The control messages
        are parsed once per distinct set (consecutive GRO batches of one flow carry the same), the last set
        kept across calls."""
        if self._mmsg:
            return self.drain_mmsg(receive, clock, t0_ns, limit)
        return self.drain_each(buf, receive, clock, t0_ns, limit)

    def drain_mmsg(self, receive, clock, t0_ns: int, limit: int) -> int:
        """:meth:`drain_into` by ``recvmmsg``: a call that returns fewer datagrams than asked emptied the
        socket (``recv_empty``); one that found none is counted in ``recv_eagain`` too."""
        rx = self._mm_rx
        if rx is None:
            rx = self._mm_rx = MmsgReceiver(self.fileno, min(max(limit, 1), 16), RECV_BUFFER_BYTES)
        view = rx.view
        cview = rx.control_view
        w = rx.words
        size = rx.buffer_bytes
        last = self._rx_anc
        tos, seg = self._rx_meta
        got = nbytes = 0
        while got < limit:
            want = min(rx.slots, limit - got)
            r = rx.receive(want)
            if r <= 0:
                self.recv_empty += 1
                self.recv_eagain += 1
                break
            for i in range(r):
                j = i * 8
                n = w[j + 7] & 0xFFFFFFFF
                c = w[j + 5]
                w[j + 5] = RX_CONTROL_BYTES  # the kernel shrank it (to 0: none), for this slot's next datagram
                if c:
                    a = i * RX_CONTROL_BYTES
                    c = bytes(cview[a : a + c])
                    if c != last:
                        last = c
                        tos, seg = self._parse(parse_cmsgs(c, len(c)))
                elif last != b"":
                    last = b""
                    tos = seg = 0
                nbytes += n
                a = i * size
                receive(view[a : a + n], tos & 3, clock() - t0_ns, seg if 0 < seg < n else 0)
            got += r
            if r < want:
                self.recv_empty += 1
                break
        return self._drained(last, tos, seg, got, nbytes)

    def drain_each(self, buf: bytearray, receive, clock, t0_ns: int, limit: int) -> int:
        """:meth:`drain_into` by one ``recvmsg`` a datagram into ``buf``: after each the socket's own epoll
        instance (level-triggered, timeout 0) says whether another is waiting, so the drain ends there, not on
        a ``recvmsg`` that fails."""
        recvmsg_into = self._recvmsg_into
        bufs = [buf]
        mv = memoryview(buf)
        last_anc = self._rx_anc
        tos, seg = self._rx_meta
        peek = self._peeker()
        got = nbytes = 0
        while got < limit:
            try:
                n, anc, _flags, _addr = recvmsg_into(bufs, _ANC_BYTES)
            except (BlockingIOError, InterruptedError):
                self.recv_eagain += 1
                self.recv_empty += 1
                break
            got += 1
            nbytes += n
            if anc != last_anc:
                last_anc = anc
                tos, seg = self._parse(anc) if anc else (0, 0)
            receive(mv[:n], tos & 3, clock() - t0_ns, seg if 0 < seg < n else 0)
            if got < limit and not peek(0):
                self.recv_empty += 1
                break
        return self._drained(last_anc, tos, seg, got, nbytes)

    def _drained(self, anc, tos: int, seg: int, got: int, nbytes: int) -> int:
        """End of a drain: keep its last control messages and their meaning, count what it received."""
        self._rx_anc = anc
        self._rx_meta = (tos, seg)
        self.recv_calls += got
        self.recv_bytes += nbytes
        return got

    def _peeker(self):
        """``poll`` of an epoll instance watching this socket alone, made in the calling process (an
        instance inherited across ``fork`` would be shared with the parent)."""
        pid = os.getpid()
        if self._peek is None or self._peek_pid != pid:
            self._peek = select.epoll()
            self._peek.register(self.fileno, select.EPOLLIN)
            self._peek_pid = pid
        return self._peek.poll

    def recv(self) -> tuple[bytes | None, int, int]:
        """One receive into a fresh bytes object (kept by the caller): ``(data, tos, segment_size)``;
        ``data`` is None when nothing is waiting."""
        try:
            data, anc, _flags, _addr = self._recvmsg(RECV_BUFFER_BYTES, _ANC_BYTES)
        except (BlockingIOError, InterruptedError):
            return None, 0, 0
        n = len(data)
        self.recv_calls += 1
        self.recv_bytes += n
        if not anc:
            return data, 0, 0
        tos, seg = self._parse(anc)
        return data, tos, (seg if 0 < seg < n else 0)

    # -- accounting -------------------------------------------------------------------------------------
    def drops(self) -> int:
        """Datagrams the kernel dropped at this socket (receive buffer full, ...)."""
        found = proc_udp_drops(self.fileno)
        return found if found is not None else self.last_rxq_ovfl

    def stats(self) -> dict[str, int]:
        return {
            "sent_calls": self.sent_calls, "sent_bytes": self.sent_bytes, "send_waits": self.send_waits,
            "send_errors": self.send_errors, "recv_calls": self.recv_calls, "recv_bytes": self.recv_bytes,
            "recv_empty": self.recv_empty, "recv_eagain": self.recv_eagain,
            "send_syscalls": self.send_calls_each + (self._mm_tx.syscalls if self._mm_tx else 0),
            "recv_syscalls": self._mm_rx.syscalls if self._mm_rx else self.recv_calls + self.recv_eagain,
            "socket_drops": self.drops(), "rcvbuf_bytes": self.rcvbuf_bytes, "sndbuf_bytes": self.sndbuf_bytes,
        }  # fmt: skip

    def close(self) -> None:
        if self._peek is not None and self._peek_pid == os.getpid():
            self._peek.close()
        self.sock.close()


def proc_udp_drops(fd: int) -> int | None:
    """The ``drops`` column of ``/proc/self/net/udp`` for the socket behind ``fd`` (None if not found)."""
    try:
        inode = os.fstat(fd).st_ino
        with open("/proc/self/net/udp") as fh:
            next(fh)
            for line in fh:
                cols = line.split()
                if len(cols) >= 13 and cols[9] == str(inode):
                    return int(cols[12])
    except (OSError, ValueError, StopIteration):
        return None
    return None
