"""The fluid driver's records (:meth:`emulator.drivers.fluid._Run.records`) in one compiled pass over the ops:
the per-op columns of every rank in contiguous arrays and each rank's counters, where numpy made some twenty
passes over million-entry strided arrays (tests/drivers/test_fluid_record_kernels.py pins it to the numpy
form). Compiled by numba once and cached on disk (``cache=True``); it reads and writes only the arrays it is given."""

from __future__ import annotations

import numpy as np
from numba import njit

from emulator.schedule.model import OP_RECV, OP_SEND


@njit(cache=True)
def rank_columns(ready: np.ndarray, start: np.ndarray, end: np.ndarray, cnps: np.ndarray, ce: np.ndarray,
                 kind: np.ndarray, flow: np.ndarray, flow_packets: np.ndarray, flow_size: np.ndarray,
                 ptr: np.ndarray) -> tuple:  # fmt: skip
    """``(cols, counters)``: ``cols`` rows ready, start, end, packets, cnps, ce_marks per op (int64; packets:
    its flow's where it is a SEND or a RECV done, ce_marks: a RECV's), ``counters`` per rank (``ptr[r]:ptr[r +
    1]`` its ops) bytes_sent, packets_sent (SENDs started), bytes_received, packets_received (RECVs done),
    cnps_sent (RECVs'), cnps_received (SENDs'), ce_marks (all ops'), each an int64 sum in op order."""
    n = ready.size
    cols = np.empty((6, n), np.int64)
    n_r = ptr.size - 1
    counters = np.zeros((n_r, 7), np.int64)
    for r in range(n_r):
        for i in range(ptr[r], ptr[r + 1]):
            f = flow[i]
            pk = flow_packets[f] if f >= 0 else 0
            sz = flow_size[f] if f >= 0 else 0
            k = kind[i]
            is_send, is_recv = k == OP_SEND, k == OP_RECV
            done = end[i] >= 0
            cols[0, i], cols[1, i], cols[2, i] = ready[i], start[i], end[i]
            cols[3, i] = pk if is_send or (is_recv and done) else 0
            cols[4, i] = cnps[i]
            cols[5, i] = ce[i] if is_recv else 0
            if is_send and start[i] >= 0:
                counters[r, 0] += sz
                counters[r, 1] += pk
            if is_recv and done:
                counters[r, 2] += sz
                counters[r, 3] += pk
            if is_recv:
                counters[r, 4] += cnps[i]
            if is_send:
                counters[r, 5] += cnps[i]
            counters[r, 6] += ce[i]
    return cols, counters
