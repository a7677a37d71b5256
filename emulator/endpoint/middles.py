"""The sender's fast path writer: a run of full-MTU RDMA WRITE MIDDLE packets in one ``struct`` pack."""

from __future__ import annotations

import struct
from collections.abc import Callable

from emulator.wire.psn import PSN_MASK

_W0_MIDDLE = (0x07 << 24) | 0xFFFF  # RC RDMA WRITE MIDDLE, no SE/MigReq/pad, TVer 0, default P_Key
_ACKREQ = 0x80000000


class MiddleWriter:
    """Writes ``k`` MIDDLE packets of ``row_bytes`` (BTH + payload + ICRC) each; one packer per ``k``, cached."""

    __slots__ = ("row_bytes", "_packers")

    def __init__(self, row_bytes: int) -> None:
        self.row_bytes = row_bytes
        self._packers: dict[int, Callable[..., bytes]] = {}

    def write(self, dest_qp: int, psn: int, k: int, ack_req_last: bool, stamp_ns: int = -1,
              step_ns: int = 0) -> bytes:
        """``k`` full-MTU RDMA WRITE MIDDLE packets (RC, P_Key 0xFFFF, zero ICRC) from ``psn``, AckReq on the
        last one if asked, send-time stamp ``stamp_ns + j·step_ns`` (≥ 0) at the start of packet ``j``'s
        payload: the same bytes :func:`~emulator.wire.build_write_batch` writes for them, without planning
        the batch (one ``struct`` pack of the three BTH words and the stamp per row, the rest zero)."""
        pack = self._packers.get(k)
        if pack is None:
            fmt = "!" + f"IIIQ{self.row_bytes - 20}x" * k
            pack = self._packers[k] = struct.Struct(fmt).pack
        words = [_W0_MIDDLE, dest_qp, 0, stamp_ns + 1] * k
        if step_ns and k > 1:
            words[3::4] = range(stamp_ns + 1, stamp_ns + 1 + k * step_ns, step_ns)
        if psn + k <= PSN_MASK:
            words[2::4] = range(psn, psn + k)
        else:
            words[2::4] = [(psn + i) & PSN_MASK for i in range(k)]
        if ack_req_last:
            words[-2] |= _ACKREQ
        return pack(*words)
