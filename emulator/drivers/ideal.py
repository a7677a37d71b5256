"""A contention-free reference driver: what a schedule's records look like on an ideal fabric.

Theory of operation
-------------------
No packets and no queues: every flow takes ``latency + size × 8 / rate`` from its SEND's start to its
last byte at the receiver, whatever else is in flight, and its ACK takes one more ``latency``. Ops are
processed in dependency order (Kahn's algorithm over the same-rank dependencies plus the cross-rank
edge SEND start → RECV):

* an op is *ready* when its parents have ended (and its ``not_before_ns`` has come); DELAY ends
  ``duration_ns`` later; SEND starts when ready;
* RECV: ``start`` = first byte arrives (SEND start + latency), ``end`` = max(ready, last byte arrival)
  (data that arrives before its RECV op is ready is held, as RDMA WRITEs land in memory);
* SEND ends when the ACK of the last byte is back: last byte arrival + latency (the receiving NIC
  acknowledges on arrival, whether or not the RECV op is ready yet).

``dead_ranks`` never start (their ops stay at −1; peers waiting on them never finish), which is how
tests build an incomplete run. ``stop_ns`` cuts the run: ops that would end later stay unfinished.
The result is a :class:`~emulator.drivers.contract.DriverResult` like the real drivers' (no fabric
counters). It is the basis of the ``ideal`` straggler analysis (the schedule's own order on an empty
fabric) and the fake driver of tests; it is not a fabric model.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

import numpy as np

from emulator.drivers.contract import DriverResult
from emulator.endpoint.records import RankRecords
from emulator.schedule.model import OP_DELAY, OP_RECV, OP_SEND, Schedule


def run_ideal(
    schedule: Schedule,
    *,
    rate_bps: float = 25e9,
    latency_ns: int = 1000,
    mtu_bytes: int = 4096,
    dead_ranks: Iterable[int] = (),
    stop_ns: int | None = None,
) -> DriverResult:
    s = schedule
    dead = set(dead_ranks)
    n = s.n_ops
    ready = np.full(n, -1, dtype=np.int64)
    start = np.full(n, -1, dtype=np.int64)
    end = np.full(n, -1, dtype=np.int64)
    parents_left = np.diff(s.dep_ptr).astype(np.int64)
    # children lists
    child_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(s.dep_ptr))
    order = np.argsort(s.dep_idx.astype(np.int64), kind="stable")
    ch_sorted = child_of[order]
    ch_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(s.dep_idx.astype(np.int64), minlength=n), out=ch_ptr[1:])
    recv_op = np.full(s.n_flows, -1, dtype=np.int64)
    kinds = s.op_kind
    flows = s.op_flow.astype(np.int64)
    recv_op[flows[kinds == OP_RECV]] = np.flatnonzero(kinds == OP_RECV)
    recv_waits = np.ones(n, dtype=np.int64)  # a RECV also waits for its SEND to start
    deps_end = np.zeros(n, dtype=np.int64)
    heap: list[tuple[int, int]] = []
    limit = stop_ns if stop_ns is not None else np.iinfo(np.int64).max
    ranks = s.op_rank

    def maybe_ready(op: int) -> None:
        if parents_left[op] == 0 and (kinds[op] != OP_RECV or recv_waits[op] == 0) and ranks[op] not in dead:
            t = max(int(deps_end[op]), int(s.op_not_before_ns[op]), 0)
            heapq.heappush(heap, (t, op))

    def finish(op: int, t: int) -> None:
        if t > limit:
            return
        end[op] = t
        for c in ch_sorted[ch_ptr[op] : ch_ptr[op + 1]].tolist():
            parents_left[c] -= 1
            deps_end[c] = max(deps_end[c], t)
            if parents_left[c] == 0:
                if kinds[c] == OP_RECV:
                    ready[c] = max(int(deps_end[c]), int(s.op_not_before_ns[c]), 0)
                maybe_ready(c)

    for op in range(n):
        if parents_left[op] == 0 and kinds[op] == OP_RECV:
            ready[op] = max(int(s.op_not_before_ns[op]), 0)
        maybe_ready(op)
    arrival = np.full(n, -1, dtype=np.int64)
    while heap:
        t, op = heapq.heappop(heap)
        if t > limit:
            break
        k = kinds[op]
        if k == OP_DELAY:
            ready[op] = start[op] = t
            finish(op, t + int(s.op_duration_ns[op]))
        elif k == OP_SEND:
            ready[op] = start[op] = t
            f = int(flows[op])
            size = int(s.flow_size_bytes[f])
            r = recv_op[f]
            if r >= 0 and ranks[r] not in dead:
                arrival[r] = t + latency_ns + int(round(size * 8e9 / rate_bps))
                start[r] = t + latency_ns
                recv_waits[r] = 0
                maybe_ready(int(r))
                finish(op, int(arrival[r]) + latency_ns)  # the receiver's NIC acknowledges on arrival
        else:  # RECV: its SEND has started and its parents are done
            finish(op, max(int(ready[op]), int(arrival[op])))
    records: dict[int, RankRecords] = {}
    for rank in range(s.world_size):
        if rank in dead:
            continue
        a, b = int(s.rank_op_ptr[rank]), int(s.rank_op_ptr[rank + 1])
        rec = RankRecords(rank=rank, n_ops=b - a)
        rec.ready_ns[:] = ready[a:b]
        rec.start_ns[:] = start[a:b]
        rec.end_ns[:] = end[a:b]
        kk, ff = kinds[a:b], flows[a:b]
        sizes = (np.where(ff >= 0, s.flow_size_bytes[np.maximum(ff, 0)], 0) if len(s.flow_size_bytes)
                 else np.zeros(b - a, dtype=np.int64))  # a schedule without flows (compute only)
        pk = np.maximum(1, -(-sizes // mtu_bytes))
        sent = (kk == OP_SEND) & (start[a:b] >= 0)
        got = (kk == OP_RECV) & (end[a:b] >= 0)
        rec.packets[:] = np.where(sent | got, pk, 0)
        rec.counters = {
            "bytes_sent": int(sizes[sent].sum()), "bytes_received": int(sizes[got].sum()),
            "packets_sent": int(pk[sent].sum()), "retransmits": 0, "cnps_sent": 0, "cnps_received": 0,
            "ce_marks": 0,
        }
        records[rank] = rec
    complete = bool((end >= 0).all())
    errors = [f"rank {r} died: simulated by the ideal driver" for r in sorted(dead)]
    if not complete and stop_ns is not None and not dead:
        errors.append(f"timeout: run stopped at {stop_ns} ns with ops unfinished")
    return DriverResult(
        driver="ideal", records=records, health={"world_size": s.world_size, "warnings": []},
        complete=complete, errors=errors, wall_ns=int(end.max()) if n else 0,
    )
