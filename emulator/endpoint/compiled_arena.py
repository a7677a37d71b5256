"""The sender's reused MIDDLE rows written by one compiled kernel call per run (``compiled_core``)."""

from __future__ import annotations

import numpy as np

from emulator.endpoint.middles import MiddleArena
from emulator.wire.kernels import write_middle_rows


class CompiledArena(MiddleArena):
    """A :class:`~emulator.endpoint.middles.MiddleArena` whose :meth:`write` stamps the destination QP, PSN,
    AckReq and stamp columns of a run with :func:`~emulator.wire.kernels.write_middle_rows`: the same bytes
    in the same rows, one call instead of a numpy assignment per column."""

    __slots__ = ("_acks",)

    def __init__(self, row_bytes: int, chunk_rows: int = 128) -> None:
        super().__init__(row_bytes, chunk_rows)
        self._acks = np.zeros(16, dtype=np.int64)  # the AckReq rows of the run being written

    def write(self, dest_qp: int, psn: int, n: int, stamp_ns: int, step_ns: int,
              ack_rows: tuple[int, ...] | list[int]) -> memoryview:  # fmt: skip
        """As :meth:`MiddleArena.write`: ``n`` MIDDLE rows from ``psn``, AckReq on ``ack_rows``, row ``j``
        stamped ``stamp_ns + j·step_ns``, as a view into a reused buffer."""
        a = self._pos  # MiddleArena._rows, inline (one call per run saved)
        h = 0 if a == 0 and self._i == 0 else self.handed_n  # a reset's first write restarts the handed list
        b = a + n
        try:
            ch = self._chunks[self._i]
            fits = b <= ch[6]  # its rows (MiddleArena._chunk)
        except IndexError:  # no chunk yet, or past the last one
            fits = False
        if not fits:
            ch = self._chunk(n, dest_qp)
            a = self._pos
            b = a + n
        self._pos = b
        dq = -1
        if ch[5] != dest_qp:  # the rows hold other QPs' numbers: write this run's
            dq = dest_qp
            ch[5] = -1
        acks = self._acks
        n_acks = len(ack_rows)
        if n_acks == 1:
            acks[0] = ack_rows[0]
        elif n_acks:
            if n_acks > len(acks):
                acks = self._acks = np.zeros(2 * n_acks, dtype=np.int64)
            acks[:n_acks] = ack_rows
        row = self.row_bytes
        write_middle_rows(ch[1], a, n, row, dq, psn, stamp_ns, step_ns, acks, n_acks)
        mv = ch[1][a * row : b * row]
        try:  # MiddleArena._hand, inline
            self.handed[h] = mv
            self.handed_addrs[h] = ch[7] + a * row
        except IndexError:
            self.handed.append(mv)
            self.handed_addrs.append(ch[7] + a * row)
        self.handed_n = h + 1
        return mv
