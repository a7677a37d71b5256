"""A worker's send by compiled code: a poll's transmits, runs of batches included, by ``sendmmsg`` from numba.

:class:`CompiledSend` is :meth:`~emulator.drivers.sockets.udp.UdpPort.send_transmits` for a port made with
``send_compiled``. Per transmit the interpreter writes one row of a descriptor (destination address, buffer
address, bytes per send, control block, sends); a :class:`~emulator.endpoint.events.TransmitRun` (a sender's
run of MIDDLE batches in its reused buffers, ``EndpointConfig.run_transmits``) is one row however many
batches it holds; a row's buffer address is the arena's record of the view it handed out
(``MiddleArena.handed``, the port's ``tx_arena``) or else asked of ctypes. One call of :func:`send_rows` (``nopython``) then writes every ``struct mmsghdr`` and
``iovec`` of the rows, a send each, and makes the ``sendmmsg`` system calls (libc's, by symbol through
numba's external-function binding, as :mod:`~emulator.drivers.sockets.rx_compiled` binds ``recvmmsg``), up
to ``slots`` messages a call. A poll that hands out one plain transmit (an ACK alone) goes by ``send_each``:
one ``sendto`` costs less than the compiled call's arguments (1–2 µs, measured). A call the kernel answers short (a full send buffer, an error) stops it; the
rest of that call's messages go by the ctypes path, which waits a full buffer out (bounded) or counts the
error as ``UdpPort._send_slots`` does, and the kernel goes on with the following rows.

The headers and control blocks are :class:`~emulator.drivers.sockets.mmsg.MmsgSender`'s: the bytes on the
wire, their order and the socket's counters (``sent_calls`` = messages, ``sent_bytes``) are the ones
``send_each`` gives (tests/drivers/test_socket_tx_compiled.py).
"""

from __future__ import annotations

import ctypes

import numpy as np
from numba import njit, types

from emulator.drivers.sockets.mmsg import _BYTES_OFF, MmsgSender
from emulator.endpoint.events import TransmitRun

#: libc's ``sendmmsg(fd, msgvec, vlen, flags)`` by symbol (pointers passed as integers: LP64)
_sendmmsg = types.ExternalFunction("sendmmsg", types.int32(types.int32, types.intp, types.uint32, types.int32))
_addressof = ctypes.addressof
_char = ctypes.c_char
#: descriptor columns: destination ``sockaddr_in``, data address, bytes per send, control block, its length, sends
_COLS = 6
#: out: messages sent, their bytes, the row and send the next call starts at, slots filled by the last call,
#: system calls made
OUT_SENT, OUT_BYTES, OUT_ROW, OUT_PART, OUT_FILLED, OUT_CALLS = range(6)


@njit(cache=True)
def send_rows(fd, hdr_addr, words, iovecs, slots, desc, n_rows, out):  # pragma: no cover - compiled
    """From row ``out[OUT_ROW]``, send ``out[OUT_PART]`` of ``desc`` (``_COLS`` int64 a row, ``n_rows`` rows):
    fill up to ``slots`` headers, one ``sendmmsg``, repeat. Returns 0 when every send went, else the count the
    kernel took of the last call (``out[OUT_FILLED]`` its messages, ``OUT_ROW``/``OUT_PART`` past them)."""
    row = out[OUT_ROW]
    part = out[OUT_PART]
    while row < n_rows:
        k = 0
        nbytes = 0
        while k < slots and row < n_rows:
            b = row * 6
            size = desc[b + 2]
            j = k * 8
            words[j] = desc[b]
            words[j + 4] = desc[b + 3]
            words[j + 5] = desc[b + 4]
            iovecs[2 * k] = desc[b + 1] + part * size
            iovecs[2 * k + 1] = size
            nbytes += size
            k += 1
            part += 1
            if part == desc[b + 5]:
                part = 0
                row += 1
        out[OUT_ROW] = row
        out[OUT_PART] = part
        out[OUT_FILLED] = k
        r = _sendmmsg(fd, hdr_addr, k, 0)
        out[OUT_CALLS] += 1
        if r != k:
            return r if r > 0 else -1 if r == 0 else r
        out[OUT_SENT] += k
        out[OUT_BYTES] += nbytes
    return 0


class CompiledSend:
    """``port``'s sends by :func:`send_rows` (module docstring)."""

    def __init__(self, port, slots: int = 64) -> None:
        self.port = port
        mm = port._mm_tx
        if mm is None:
            mm = port._mm_tx = MmsgSender(port.fileno, slots)
        self.mm = mm
        self.slots = mm.slots
        self.words = np.frombuffer(mm._hdr, dtype=np.uint64)
        self.iovecs = np.frombuffer(mm._iov, dtype=np.uint64)
        self.rows = 64
        self.desc = np.zeros(self.rows * _COLS, dtype=np.int64)
        self.d = memoryview(self.desc)  # Python ints written without numpy scalars
        self.out = np.zeros(6, dtype=np.int64)
        self.o = memoryview(self.out)
        #: the MIDDLE arena whose rows the port sends (``UdpPort.tx_arena``): their addresses without ctypes
        self.arena = getattr(port, "tx_arena", None)

    def send(self, txs, dest) -> None:
        """Every transmit of ``txs`` (``dest[tx.dst_rank]`` = address) on the wire, in order."""
        port = self.port
        n_txs = len(txs)
        if n_txs == 1 and type(txs[0]) is not TransmitRun:  # one send: sendto/sendmsg is cheaper than a call here
            port.send_each(txs, dest)
            return
        if not port._own_tried:  # the first GSO batch sets the socket's own options: the ctypes path does it
            port.send_mmsg_each(txs, dest)
            return
        mm = self.mm
        names = mm._names_addr if dest is mm._dest else mm.names_for(dest)  # names_for's cache, inline
        controls = port._mm_controls
        if n_txs > self.rows:
            self.rows = 2 * n_txs
            self.desc = np.zeros(self.rows * _COLS, dtype=np.int64)
            self.d = memoryview(self.desc)
        d = self.d
        arena = self.arena
        if arena is not None:  # the rows the arena handed out, with their addresses (MiddleArena docstring)
            handed = arena.handed
            addrs = arena.handed_addrs
            n_handed = arena.handed_n
        else:
            n_handed = 0
        h = 0  # the next handed view: the arena's rows come in the order written
        keep = []  # copies of read-only views, alive until their call
        b = 0
        key_tos = key_seg = ctl = None  # the last row's control block and its key (rows mostly share it)
        for tx in txs:
            data = tx[1]
            seg = tx[2]
            kind = type(data)  # buffer_address(data), inline (one frame per row saved)
            if kind is memoryview:
                size = data.nbytes
                if h < n_handed and handed[h] is data:
                    addr = addrs[h]
                    h += 1
                elif data.readonly:
                    data = bytes(data)
                    keep.append(data)
                    addr = id(data) + _BYTES_OFF
                else:
                    addr = _addressof(_char.from_buffer(data))
            elif kind is bytes:
                size = len(data)
                addr = id(data) + _BYTES_OFF
            else:
                size = len(data)
                addr = _addressof(_char.from_buffer(data))
            if type(tx) is TransmitRun:
                m = tx[6]
                n = size // m
            else:
                m = 1
                n = size
            if not 0 < seg < n:
                seg = 0
            tos = tx[3]
            if tos != key_tos or seg != key_seg:
                try:
                    ctl = controls[tos, seg]
                except KeyError:
                    ctl = port._mm_control(tos, seg)
                key_tos = tos
                key_seg = seg
            d[b] = names + tx[0] * 16
            d[b + 1] = addr
            d[b + 2] = n
            d[b + 3], d[b + 4] = ctl
            d[b + 5] = m
            b += _COLS
        o = self.o
        o[OUT_SENT] = o[OUT_BYTES] = o[OUT_ROW] = o[OUT_PART] = o[OUT_CALLS] = 0
        n_rows = b // _COLS
        while True:
            r = send_rows(port.fileno, mm._hdr_addr, self.words, self.iovecs, self.slots, self.desc, n_rows, self.out)
            if r == 0:
                break
            # the kernel took r (≥ 0) of the call's messages: the rest of them by the ctypes path, then on
            k = o[OUT_FILLED]
            taken = r if r > 0 else 0
            lens = [int(self.iovecs[2 * i + 1]) for i in range(k)]
            port.sent_calls += taken
            port.sent_bytes += sum(lens[:taken])
            port._send_slots(k, lens, taken)
            if o[OUT_ROW] >= n_rows:
                break
        port.sent_calls += o[OUT_SENT]
        port.sent_bytes += o[OUT_BYTES]
        mm.syscalls += o[OUT_CALLS]


def warm() -> None:
    """Compile (or load from numba's cache) :func:`send_rows` for the arrays :class:`CompiledSend` passes
    (no row: no system call)."""
    z = np.zeros(8, dtype=np.uint64)
    send_rows(-1, 0, z, z, 1, np.zeros(_COLS, dtype=np.int64), 0, np.zeros(6, dtype=np.int64))
