"""sha256 of a trace's rank files: the provenance stamp of compiled schedules and run results.

One definition for ``emulator compile`` (the schedule's ``meta["trace_sha256"]``) and ``emulator run``
(results' ``trace_hash``), so the same trace files give the same hash everywhere: the bytes of every
file, concatenated in the given order (a trace's rank files in rank order), hashed in 1 MiB blocks.
An in-memory trace (a rank without a source file) has no digest: ``''``, never a hash of nothing.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emulator.trace.model import Trace

_BLOCK_BYTES = 1 << 20


def files_digest(paths: Iterable[str | os.PathLike[str]]) -> str:
    """sha256 hex of the files' bytes in order; ``''`` for no files."""
    h = hashlib.sha256()
    found = False
    for p in paths:
        found = True
        with open(p, "rb") as fh:
            for block in iter(lambda fh=fh: fh.read(_BLOCK_BYTES), b""):
                h.update(block)
    return h.hexdigest() if found else ""


def trace_digest(trace: Trace) -> str:
    """:func:`files_digest` of the trace's rank files in rank order; ``''`` when one is not a file."""
    paths = [trace.ranks[r].source for r in sorted(trace.ranks)]
    if not paths or not all(p and Path(p).is_file() for p in paths):
        return ""
    return files_digest(paths)
