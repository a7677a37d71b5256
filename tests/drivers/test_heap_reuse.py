"""Freed blocks of megabytes stay in the heap for reuse once the fluid driver set the allocator up."""

from __future__ import annotations

import platform
import resource

import numpy as np
import pytest

from emulator.drivers.heap_reuse import keep_large_blocks


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_arrays_of_megabytes_allocated_again_do_not_fault_their_pages_in_again():
    assert keep_large_blocks()

    def cycle() -> None:  # three 12 MiB temporaries, as a slice's passes make and drop them
        xs = [np.ones(3 << 19) for _ in range(3)]
        del xs

    cycle()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        cycle()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    # glibc's defaults give the freed 36 MiB back (mmap, or a trim of the heap's top) and fault ~10,500 pages
    # in again over these cycles; kept in the heap, they are reused
    assert faults < 1_000, faults
