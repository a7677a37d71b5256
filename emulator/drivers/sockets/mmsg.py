"""Many datagrams per system call: ``sendmmsg`` and ``recvmmsg`` through ctypes, over buffers built once.

Python's ``socket`` has no ``sendmmsg``/``recvmmsg``. :class:`MmsgSender` and :class:`MmsgReceiver` call
libc's with ``struct mmsghdr`` arrays, ``iovec`` arrays, destination ``sockaddr_in`` and control messages
made once and reused: per message only the words that change (address, buffer, length, control block)
are written, through a ``memoryview`` cast to 64-bit words. Linux x86-64/aarch64 layout (LP64):

* ``struct mmsghdr`` (64 bytes): ``msg_name`` @0, ``msg_namelen`` @8, ``msg_iov`` @16, ``msg_iovlen`` @24,
  ``msg_control`` @32, ``msg_controllen`` @40, ``msg_flags`` @48, ``msg_len`` @56;
* ``struct iovec`` (16 bytes): base, length; ``struct cmsghdr`` (16 bytes): length, level, type, then data.

:func:`mmsg_supported` says whether libc has both calls (else the callers keep one ``sendmsg``/``recvmsg``
per datagram).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import socket
import struct
import sys

_HDR = 64  # sizeof(struct mmsghdr)
_W = _HDR // 8  # its 64-bit words
_IOV = 16
_NAME = 16  # sizeof(struct sockaddr_in)
_CMSG_HDR = 16
MSG_DONTWAIT = 0x40
#: control-message bytes per received datagram: the drop count, GRO segment size and TOS (the kernel's
#: order; the TOS would be cut first) and one spare, ``CMSG_SPACE(4)`` each
RX_CONTROL_BYTES = 4 * socket.CMSG_SPACE(4)


def _libc():
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        send, recv = lib.sendmmsg, lib.recvmmsg
    except (OSError, AttributeError):
        return None
    send.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int)
    send.restype = ctypes.c_int
    recv.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p)
    recv.restype = ctypes.c_int
    return lib


_LIB = _libc() if sys.platform.startswith("linux") and struct.calcsize("P") == 8 else None


def _bytes_offset() -> int:
    """Offset of a ``bytes`` object's data from its ``id`` (CPython), checked against ctypes; -1 if unknown."""
    probe = b"mmsg-probe"
    try:
        off = ctypes.cast(ctypes.c_char_p(probe), ctypes.c_void_p).value - id(probe)
    except (TypeError, ValueError):
        return -1
    return off if 0 < off < 256 else -1


_BYTES_OFF = _bytes_offset()


def mmsg_supported() -> bool:
    """True where libc has ``sendmmsg`` and ``recvmmsg`` and the LP64 layout above applies."""
    return _LIB is not None and _BYTES_OFF > 0


def _buffer(nbytes: int, page_aligned: bool = False) -> tuple[bytearray | mmap.mmap, int, memoryview]:
    """A zeroed buffer that never moves, its address and its 64-bit-word view; ``page_aligned``: private
    anonymous memory starting on a page (a ``bytearray`` that large starts 16 bytes into one, and the
    kernel's copy of a GRO batch into a buffer starting within 32 bytes of a page costs 3–4× as much: 27 µs
    against 7 for 61,680 bytes, measured on this machine)."""
    if page_aligned:
        buf = mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    else:
        buf = bytearray(nbytes)
    return buf, ctypes.addressof(ctypes.c_char.from_buffer(buf)), memoryview(buf).cast("Q")


def page_aligned_buffer(nbytes: int) -> mmap.mmap:
    """A zeroed, writable receive buffer that starts on a page (see :func:`_buffer`)."""
    return _buffer(nbytes, page_aligned=True)[0]


def buffer_address(data, _bytes=bytes, _off=_BYTES_OFF, _addressof=ctypes.addressof,
                   _char=ctypes.c_char) -> int:
    """Address of the first byte of ``data``: a ``bytes`` object, or a writable buffer (held by the caller
    while the address is in use)."""
    if type(data) is _bytes:
        return id(data) + _off
    return _addressof(_char.from_buffer(data))


def cmsg(level: int, kind: int, data: bytes) -> bytes:
    """One control message (header, data, padding to 8 bytes)."""
    n = _CMSG_HDR + len(data)
    return struct.pack("=QiI", n, level, kind) + data + bytes(-n % 8)


def parse_cmsgs(buf, nbytes: int) -> list[tuple[int, int, bytes]]:
    """``(level, type, data)`` of each control message in ``buf[:nbytes]``."""
    out = []
    pos = 0
    while pos + _CMSG_HDR <= nbytes:
        n, level, kind = struct.unpack_from("=QiI", buf, pos)
        if n < _CMSG_HDR:
            break
        out.append((level, kind, bytes(buf[pos + _CMSG_HDR : pos + n])))
        pos += (n + 7) & ~7
    return out


class MmsgSender:
    """``sendmmsg`` of up to ``slots`` messages a call from one socket, each to its own address with its
    own control block (or none)."""

    def __init__(self, fd: int, slots: int = 64) -> None:
        self.fd = fd
        self.slots = slots
        #: slot i: ``words[8i]`` its destination's address, ``words[8i+4]``/``[8i+5]`` its control block's address
        #: and length, ``iovecs[2i]``/``[2i+1]`` its data's address (:func:`buffer_address`) and length
        self._hdr, self._hdr_addr, self.words = _buffer(slots * _HDR)
        self._iov, iov_addr, self.iovecs = _buffer(slots * _IOV)
        for i in range(slots):
            self.words[i * _W + 1] = _NAME
            self.words[i * _W + 2] = iov_addr + i * _IOV
            self.words[i * _W + 3] = 1
        self._dest = None  # the destination tuple the names were built for
        self._names_addr = 0
        self._names: bytearray | None = None
        self._controls: dict[bytes, tuple[bytearray, int]] = {}
        self._call = _LIB.sendmmsg if _LIB is not None else None
        self.syscalls = 0

    def names_for(self, dest) -> int:
        """Address of ``sockaddr_in`` for each destination rank of ``dest`` (built once per tuple)."""
        if dest is not self._dest:
            names, addr, _ = _buffer(max(1, len(dest)) * _NAME)
            for r, (host, port) in enumerate(dest):
                if host:
                    names[r * _NAME : r * _NAME + 8] = struct.pack("=H", socket.AF_INET) + struct.pack(
                        "!H", port) + socket.inet_aton(host)
            self._dest, self._names, self._names_addr = dest, names, addr
        return self._names_addr

    def control(self, blob: bytes) -> tuple[int, int]:
        """Address and length of a control block holding ``blob`` (kept for the sender's life)."""
        got = self._controls.get(blob)
        if got is None:
            buf, addr, _ = _buffer(len(blob))
            buf[:] = blob
            got = self._controls[blob] = (buf, addr)
        return got[1], len(blob)

    def send(self, start: int, count: int) -> int:
        """``sendmmsg`` of slots ``start .. start + count − 1``: how many the kernel took, or ``−errno``."""
        self.syscalls += 1
        r = self._call(self.fd, self._hdr_addr + start * _HDR, count, 0)
        return r if r >= 0 else -ctypes.get_errno()


class MmsgReceiver:
    """``recvmmsg`` of up to ``slots`` datagrams a call into ``slots`` buffers of ``buffer_bytes`` each, with
    their control messages."""

    def __init__(self, fd: int, slots: int = 16, buffer_bytes: int = 65536, share: MmsgReceiver | None = None) -> None:
        self.fd = fd
        self.syscalls = 0
        self._call = _LIB.recvmmsg if _LIB is not None else None
        if share is not None:
            # another socket's receiver lends its slots (headers, control blocks, data): one set of buffers for the
            # sockets one thread drains in turn, each datagram served before the next call overwrites it
            self.slots, self.buffer_bytes = share.slots, share.buffer_bytes
            self.data, self.view, self.control, self.control_view = share.data, share.view, share.control, share.control_view
            self._hdr, self._hdr_addr, self.words, self._iov = share._hdr, share._hdr_addr, share.words, share._iov
            return
        self.slots = slots
        self.buffer_bytes = buffer_bytes
        self.data, data_addr, _ = _buffer(slots * buffer_bytes, page_aligned=True)
        self.view = memoryview(self.data)
        self.control, ctrl_addr, _ = _buffer(slots * RX_CONTROL_BYTES)
        self.control_view = memoryview(self.control)
        self._hdr, self._hdr_addr, self.words = _buffer(slots * _HDR)
        self._iov, iov_addr, iv = _buffer(slots * _IOV)
        w = self.words
        for i in range(slots):
            iv[2 * i] = data_addr + i * buffer_bytes
            iv[2 * i + 1] = buffer_bytes
            w[i * _W + 2] = iov_addr + i * _IOV
            w[i * _W + 3] = 1
            w[i * _W + 4] = ctrl_addr + i * RX_CONTROL_BYTES
            w[i * _W + 5] = RX_CONTROL_BYTES

    def receive(self, count: int) -> int:
        """``recvmmsg`` (non-blocking) of up to ``count`` datagrams: how many arrived (0: none waiting), or
        ``−errno``. Datagram ``i`` is ``view[i·buffer_bytes :][: words[8i+7] & 0xFFFFFFFF]``, its control
        messages ``control_view[i·RX_CONTROL_BYTES :][: words[8i+5]]`` (which the caller sets back to
        ``RX_CONTROL_BYTES`` before the next call: the kernel shrinks it)."""
        self.syscalls += 1
        r = self._call(self.fd, self._hdr_addr, count, MSG_DONTWAIT, None)
        if r >= 0:
            return r
        e = ctypes.get_errno()
        return 0 if e in (errno.EAGAIN, errno.EINTR) else -e
