"""Memory layout of the fluid driver's per-op, per-flow and per-part state (:mod:`emulator.drivers.fluid`).

The driver's compiled checks (:mod:`emulator.drivers.fluid_event_kernels`) read a handful of fields of each op,
flow and part they touch, and one step of a 1,024-rank ring touches ops scattered over millions (op ids run in
rank order). Kept as one array per field, each field of an op is a cache line and a page of its own; here the
fields of one op (flow, part) share one 64-byte record, so the fields a check reads of one op cost one line.

Each field is handed out as a one-dimensional memoryview over its column of the records (stride 64 bytes):
Python reads and sets its entries one at a time as cheaply as an array of the standard library's, and
``np.asarray`` of it is the numpy view the compiled checks take (no copy). The records are numpy memory, which
numpy backs with huge pages from 4 MiB (``madvise(MADV_HUGEPAGE)``): scattered reads miss the TLB less.
"""

from __future__ import annotations

import numpy as np

#: bytes of one record: a cache line
RECORD_BYTES = 64


def interleaved(n: int, columns: dict[str, type], longer: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """``n`` records of the ``columns`` (name: dtype), each record 64 bytes and aligned to 64, not filled: per
    name, the numpy view of its column (stride 64 bytes; fill it, then hand it out as ``memoryview``). The
    columns in ``longer`` have ``n + 1`` entries (offsets of the form ``ptr[i]:ptr[i + 1]``), the others ``n``."""
    names = list(columns)
    formats = [np.dtype(columns[k]) for k in names]
    offsets = np.concatenate(([0], np.cumsum([f.itemsize for f in formats])[:-1])).astype(int).tolist()
    if offsets[-1] + formats[-1].itemsize > RECORD_BYTES:
        raise ValueError(f"fluid layout: fields {names} take more than {RECORD_BYTES} bytes")
    dt = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": RECORD_BYTES})
    rows = n + 1 if longer else n
    raw = np.empty(rows * RECORD_BYTES + RECORD_BYTES, np.uint8)
    at = -raw.ctypes.data % RECORD_BYTES
    rec = raw[at:at + rows * RECORD_BYTES].view(dt)
    return {k: rec[k] if k in longer else rec[k][:n] for k in names}
