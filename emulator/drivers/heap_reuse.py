"""The C allocator's large blocks kept in the process heap, for drivers that free and allocate arrays of
megabytes every step (the fluid driver's per-slice numpy temporaries over a million flows).

glibc serves a block above its mmap threshold (128 KiB until it adapts) with a fresh ``mmap`` and returns it
with ``munmap`` when freed, so each slice's temporaries page-fault their memory in again: up to a third of a
1,024-rank fluid run's CPU was kernel time. Raising the threshold to glibc's maximum (32 MiB on 64-bit) and
the trim threshold keeps freed blocks for reuse. Process-wide; peak memory is unchanged (freed blocks are
reused, not added to). A no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: glibc's largest mmap threshold on 64-bit (``DEFAULT_MMAP_THRESHOLD_MAX``)
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 1 << 30
_applied: bool | None = None


def keep_large_blocks() -> bool:
    """Keep freed blocks up to 32 MiB in the heap for reuse (once per process); whether it applies."""
    global _applied
    if _applied is None:
        _applied = False
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name) if name else None
        except OSError:
            libc = None
        if libc is not None and hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt"):
            _applied = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
                libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    return _applied
