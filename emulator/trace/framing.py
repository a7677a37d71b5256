"""Chakra length-delimited framing: varint32 length + message bytes, repeated to end of file.

Theory of operation
-------------------
:class:`RecordReader` reads a (possibly gzip-compressed) file in chunks of ``CHUNK_BYTES``. It walks
the varint length prefixes in Python and hands out *batches*: the record bodies of one chunk. The
decoder joins them into one buffer (with separators, see ``NodeColumns`` in ``et_def.proto``, or
with tag ``0x0a`` + length before each body, which is a serialized ``repeated Node`` message), so
the protobuf runtime decodes thousands of nodes per ``ParseFromString`` call. A record that does
not fit in the current chunk is carried over to the next read, so memory is bounded by the chunk
size plus the largest record, never by the file size.

Error rules (one line, naming the file and the byte offset of the record):

* a varint cut by end of file → "truncated varint"; more than 5 bytes or ≥ 2**32 → "varint overflow";
* a body shorter than its length → "truncated record";
* a length of 0 is an empty message (``protolib`` stops there; we do not), never end of stream.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from emulator.errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
CHUNK_BYTES = 1 << 20
_TAG = b"\x0a"


def encode_varint(value: int) -> bytes:
    """Unsigned LEB128 (protobuf varint) encoding of a non-negative int."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint32(buf: bytes, pos: int, end: int) -> tuple[int, int] | None:
    """(value, new_pos) of the varint32 at ``pos``; None when ``buf[pos:end]`` ends inside it.

    Raises ValueError on overflow (more than 5 bytes, or a value that does not fit in 32 bits).
    """
    value = 0
    shift = 0
    while True:
        if pos >= end:
            return None
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift >= 35:
            raise ValueError("varint overflow (more than 5 bytes)")
    if value >> 32:
        raise ValueError("varint overflow (length does not fit in 32 bits)")
    return value, pos


def open_binary(path: str) -> BinaryIO:
    """Open a file for reading, transparently gunzipping it when it starts with the gzip magic."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - returned to the caller
    except OSError as exc:
        raise TraceError(f"{path}: cannot open ({exc.strerror or exc})") from None
    head = f.peek(2)[:2] if hasattr(f, "peek") else b""
    if head == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    return f


@dataclass
class Batch:
    """Records of one chunk: their bodies (length prefixes stripped) and where the chunk starts."""

    offset: int
    index: int
    bodies: list[bytes]

    def tagged_blob(self) -> bytes:
        """The records as a serialized ``repeated Node nodes = 1`` message (tag 0x0a + length + body)."""
        return b"".join(_TAG + encode_varint(len(b)) + b for b in self.bodies)

    def record_offsets(self) -> Iterator[tuple[int, int, bytes]]:
        """(record index, byte offset of its length prefix, body) per record (minimal varints assumed)."""
        off = self.offset
        for i, body in enumerate(self.bodies):
            yield self.index + i, off, body
            off += len(encode_varint(len(body))) + len(body)


class RecordReader:
    """Streaming reader of length-delimited records from an open binary file."""

    def __init__(self, f: BinaryIO, source: str, chunk_bytes: int | None = None) -> None:
        self._f = f
        self.source = source
        self._chunk = chunk_bytes or CHUNK_BYTES
        self._buf = b""
        self._pos = 0
        self._base = 0  # file offset of _buf[0]
        self._eof = False
        self.index = 0  # index of the next record

    def _read(self, path_hint: str = "") -> bool:
        """Append one chunk to the buffer (dropping consumed bytes); False at end of file."""
        if self._eof:
            return False
        try:
            data = self._f.read(self._chunk)
        except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise TraceError(f"{self.source}: cannot read ({exc})") from None
        if not data:
            self._eof = True
            return False
        self._base += self._pos
        self._buf = self._buf[self._pos :] + data
        self._pos = 0
        return True

    def _fail_at_eof(self, pos: int) -> None:
        buf = self._buf
        offset = self._base + pos
        try:
            got = decode_varint32(buf, pos, len(buf))
        except ValueError as exc:
            raise TraceError(f"{self.source}: record {self.index} at byte offset {offset}: {exc}") from None
        if got is None:
            raise TraceError(
                f"{self.source}: record {self.index} at byte offset {offset}: truncated varint length"
            )
        size, body = got
        raise TraceError(
            f"{self.source}: record {self.index} at byte offset {offset}: truncated record "
            f"(length {size}, only {len(buf) - body} bytes left)"
        )

    def next_record(self) -> tuple[int, bytes] | None:
        """(byte offset, body) of the next record, or None at a clean end of file."""
        while True:
            buf, pos, n = self._buf, self._pos, len(self._buf)
            if pos < n:
                try:
                    got = decode_varint32(buf, pos, n)
                except ValueError as exc:
                    raise TraceError(
                        f"{self.source}: record {self.index} at byte offset {self._base + pos}: {exc}"
                    ) from None
                if got is not None and got[1] + got[0] <= n:
                    size, body = got
                    self._pos = body + size
                    self.index += 1
                    return self._base + pos, buf[body : body + size]
            if not self._read():
                if pos < n:
                    self._fail_at_eof(pos)
                return None

    def batches(self) -> Iterator[Batch]:
        """Yield the remaining records in batches (about one chunk each)."""
        while True:
            buf, pos, n = self._buf, self._pos, len(self._buf)
            start = pos
            pieces: list[bytes] = []
            append = pieces.append
            safe = n - 129  # below this, a record with a one-byte length always fits in the buffer
            while True:
                while pos < safe:  # hot loop: one-byte lengths, no bounds check needed
                    b = buf[pos]
                    if b & 0x80:
                        break
                    pos += 1
                    end = pos + b
                    append(buf[pos:end])
                    pos = end
                if pos >= n:
                    break
                try:
                    got = decode_varint32(buf, pos, n)
                except ValueError as exc:
                    offset = self._base + pos
                    raise TraceError(
                        f"{self.source}: record {self.index + len(pieces)} at byte offset {offset}: {exc}"
                    ) from None
                if got is None:
                    break
                body, end = got[1], got[1] + got[0]
                if end > n:
                    break
                append(buf[body:end])
                pos = end
            if pieces:
                batch = Batch(self._base + start, self.index, pieces)
                self._pos = pos
                self.index += len(pieces)
                yield batch
                del batch, pieces
            if not self._read():
                if self._pos < len(self._buf):
                    self._fail_at_eof(self._pos)
                return


def top_level_tags(body: bytes) -> list[int] | None:
    """Tags (field << 3 | wire type) of a message's top-level fields; None if it is not well formed."""
    tags: list[int] = []
    pos, n = 0, len(body)
    try:
        while pos < n:
            got = _varint64(body, pos)
            if got is None:
                return None
            tag, pos = got
            wire = tag & 7
            if wire == 0:
                got = _varint64(body, pos)
                if got is None:
                    return None
                pos = got[1]
            elif wire == 1:
                pos += 8
            elif wire == 2:
                got = _varint64(body, pos)
                if got is None:
                    return None
                pos = got[1] + got[0]
            elif wire == 5:
                pos += 4
            else:
                return None
            if pos > n or tag >> 3 == 0:
                return None
            tags.append(tag)
    except ValueError:
        return None
    return tags


def _varint64(buf: bytes, pos: int) -> tuple[int, int] | None:
    value = 0
    shift = 0
    n = len(buf)
    while pos < n:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint overflow")
    return None
