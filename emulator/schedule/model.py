"""The schedule: the contract between the compiler and the traffic engine.

A schedule says, for every rank, what to send to whom, how much, when and after what. It is columnar
(numpy arrays), so a million operations cost tens of MiB, and it reloads without the trace.

Tables
------
``flows`` (one row per point-to-point message; flow id = row index):
    ``src``, ``dst`` (ranks), ``size_bytes``, ``qp`` (queue-pair id, see below), ``coll``
    (collective-instance index, -1 for trace SEND/RECV pairs), ``step`` (algorithm step), ``chunk``.

``ops`` (one row per operation; op id = row index; rows of one rank are contiguous and in a valid
topological order, see ``rank_op_ptr``):
    ``rank``; ``kind`` (OP_SEND, OP_RECV, OP_DELAY); ``flow`` (flow id for SEND/RECV, -1 for DELAY);
    ``duration_ns`` (DELAY only, 0 otherwise); ``not_before_ns`` (-1 = none; open loop sets it);
    ``node`` (trace node id it came from, -1 if synthetic).
    Dependencies in CSR form: the parents of op ``i`` are ``dep_idx[dep_ptr[i]:dep_ptr[i+1]]``, global
    op ids that always belong to the **same rank** (cross-rank order travels through flows).

``colls`` (one row per collective instance):
    ``type`` (CollectiveType value), ``group`` (index into ``group_names``), ``seq`` (k-th collective of
    that group), ``size_bytes`` (trace ``comm_size``), ``algorithm`` (index into ``algorithm_names``),
    member ranks in CSR form ``coll_rank_ptr``/``coll_rank_idx``; its flows are the rows of ``flows``
    with ``coll == i``.

Semantics an endpoint follows
-----------------------------
An op is *ready* when all its parents are complete and ``now >= not_before_ns``. A DELAY completes
``duration_ns`` after it became ready. A SEND starts its flow on queue pair ``qp`` (flows of one QP go
out in op order) and completes when every byte is acknowledged. A RECV completes when every byte of its
flow has arrived. Every flow has exactly one SEND op (on ``src``) and one RECV op (on ``dst``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SCHEDULE_VERSION = 1

OP_SEND = 0
OP_RECV = 1
OP_DELAY = 2
OP_KIND_NAMES = ("SEND", "RECV", "DELAY")


@dataclass(frozen=True)
class Schedule:
    """A compiled schedule (see module docstring for every column's meaning)."""

    world_size: int
    # flows
    flow_src: np.ndarray  # int32
    flow_dst: np.ndarray  # int32
    flow_size_bytes: np.ndarray  # int64
    flow_qp: np.ndarray  # int32
    flow_coll: np.ndarray  # int32, -1 = point-to-point from the trace
    flow_step: np.ndarray  # int32
    flow_chunk: np.ndarray  # int32
    # ops
    op_rank: np.ndarray  # int32
    op_kind: np.ndarray  # int8
    op_flow: np.ndarray  # int32 (-1 for DELAY)
    op_duration_ns: np.ndarray  # int64
    op_not_before_ns: np.ndarray  # int64 (-1 = none)
    op_node: np.ndarray  # int64 (-1 = synthetic)
    dep_ptr: np.ndarray  # int64, len(ops) + 1
    dep_idx: np.ndarray  # int32/int64 global op ids (same rank)
    rank_op_ptr: np.ndarray  # int64, world_size + 1: ops of rank r are rank_op_ptr[r]:rank_op_ptr[r+1]
    # collective instances
    coll_type: np.ndarray  # int8
    coll_group: np.ndarray  # int32
    coll_seq: np.ndarray  # int32
    coll_size_bytes: np.ndarray  # int64
    coll_algorithm: np.ndarray  # int16
    coll_rank_ptr: np.ndarray  # int64
    coll_rank_idx: np.ndarray  # int32
    group_names: tuple[str, ...] = ()
    algorithm_names: tuple[str, ...] = ()
    #: compile options and provenance (trace hash, algorithms chosen, chunks, compute scale, open loop …)
    meta: dict = field(default_factory=dict)

    @property
    def n_flows(self) -> int:
        return int(self.flow_src.shape[0])

    @property
    def n_ops(self) -> int:
        return int(self.op_rank.shape[0])

    @property
    def n_colls(self) -> int:
        return int(self.coll_type.shape[0])

    def rank_ops(self, rank: int) -> range:
        """Global op ids of ``rank``, in order."""
        return range(int(self.rank_op_ptr[rank]), int(self.rank_op_ptr[rank + 1]))

    def parents(self, op: int) -> np.ndarray:
        return self.dep_idx[self.dep_ptr[op] : self.dep_ptr[op + 1]]

    def coll_root_ranks(self) -> np.ndarray:
        """Root rank per collective instance (-1 when unrooted), from ``meta["coll_roots"]``."""
        out = np.full(self.n_colls, -1, dtype=np.int64)
        rooted = (self.meta or {}).get("coll_roots") or {}
        if rooted.get("coll"):
            out[np.asarray(rooted["coll"], dtype=np.int64)] = np.asarray(rooted["rank"], dtype=np.int64)
        return out

    def coll_ranks(self, coll: int) -> np.ndarray:
        return self.coll_rank_idx[self.coll_rank_ptr[coll] : self.coll_rank_ptr[coll + 1]]


def op_layout(rank_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(op_rank, rank_op_ptr)`` of ops laid out rank by rank, ``rank_counts[r]`` ops on rank ``r``."""
    counts = np.asarray(rank_counts, dtype=np.int64)
    rank_op_ptr = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=rank_op_ptr[1:])
    return np.repeat(np.arange(counts.shape[0], dtype=np.int32), counts), rank_op_ptr


def dependencies_from_keys(key: np.ndarray, n_ops: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``(dep_ptr, dep_idx)`` from sorted, duplicate-free int64 edge keys ``child × max(n_ops, 1) +
    parent`` (global op ids). ``key`` is overwritten: it becomes the parent ids, so peak memory stays one
    edge array."""
    stride = max(n_ops, 1)
    dep_ptr = np.searchsorted(key, np.arange(n_ops + 1, dtype=np.int64) * stride).astype(np.int64, copy=False)
    np.remainder(key, stride, out=key)
    return dep_ptr, key.astype(np.int32 if n_ops < 2**31 else np.int64)


def dependencies(child: np.ndarray, parent: np.ndarray, n_ops: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``(dep_ptr, dep_idx)`` of the edges ``child[i]`` waits for ``parent[i]`` (global op ids): each
    op's parents ascending, duplicate edges once."""
    key = np.asarray(child, dtype=np.int64) * max(n_ops, 1) + np.asarray(parent, dtype=np.int64)
    return dependencies_from_keys(np.unique(key), n_ops)
