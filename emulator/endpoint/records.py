"""What one rank measured: columnar records, filled by the rank endpoint, read by stats and results.

Every array is indexed by the rank's *local* op index ``i`` (global op id = ``schedule.rank_op_ptr[rank] + i``),
so nothing is allocated per packet or per event. Times are integer ns relative to the run's t0 (chosen by
the driver); ``-1`` means "did not happen" (an incomplete run keeps what it measured).

Per op (every kind):
    ``ready_ns``  the op's dependencies were satisfied and its not-before time had come — the *scheduled*
                  start: completion times are measured from here so a lagging generator cannot hide latency;
    ``start_ns``  SEND: first packet handed to the driver; RECV: first packet arrived; DELAY: = ready_ns;
    ``end_ns``    SEND: last byte acknowledged; RECV: every byte held; DELAY: wait over.
Per SEND op (zero elsewhere): ``packets`` data packets sent (incl. retransmits), ``retx_packets``,
    ``cnps`` CNPs received on the flow's QP while it was active, ``timeouts``.
Per RECV op (zero elsewhere): ``packets`` data packets accepted, ``ce_marks`` CE-marked packets seen,
    ``cnps`` CNPs sent, ``naks`` PSN-sequence NAKs sent, ``dup_packets`` duplicates dropped.
Rate samples: ``rate_t_ns``, ``rate_qp``, ``rate_bps`` (sampled on change, bounded in count).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

OP_COLUMNS = ("ready_ns", "start_ns", "end_ns", "packets", "retx_packets", "cnps", "timeouts",
              "ce_marks", "naks", "dup_packets")


@dataclass
class RankRecords:
    """Columnar measurements of one rank (see module docstring)."""

    rank: int
    n_ops: int
    ready_ns: np.ndarray = field(init=False)
    start_ns: np.ndarray = field(init=False)
    end_ns: np.ndarray = field(init=False)
    packets: np.ndarray = field(init=False)
    retx_packets: np.ndarray = field(init=False)
    cnps: np.ndarray = field(init=False)
    timeouts: np.ndarray = field(init=False)
    ce_marks: np.ndarray = field(init=False)
    naks: np.ndarray = field(init=False)
    dup_packets: np.ndarray = field(init=False)
    rate_t_ns: list[int] = field(default_factory=list)
    rate_qp: list[int] = field(default_factory=list)
    rate_bps: list[int] = field(default_factory=list)
    #: free-form counters (bytes_sent, bytes_received, acks_sent, cnps_sent, cnps_received, ...)
    counters: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("ready_ns", "start_ns", "end_ns"):
            setattr(self, name, np.full(self.n_ops, -1, dtype=np.int64))
        for name in OP_COLUMNS[3:]:
            setattr(self, name, np.zeros(self.n_ops, dtype=np.int64))

    def count(self, key: str, n: int = 1) -> None:
        self.counters[key] = self.counters.get(key, 0) + n

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain arrays (for npz files or pickling across processes)."""
        out = {name: getattr(self, name) for name in OP_COLUMNS}
        out["rate_t_ns"] = np.asarray(self.rate_t_ns, dtype=np.int64)
        out["rate_qp"] = np.asarray(self.rate_qp, dtype=np.int32)
        out["rate_bps"] = np.asarray(self.rate_bps, dtype=np.int64)
        return out

    @classmethod
    def from_arrays(cls, rank: int, arrays: dict[str, np.ndarray], counters: dict[str, int]) -> RankRecords:
        rec = cls(rank=rank, n_ops=int(arrays["ready_ns"].shape[0]))
        for name in OP_COLUMNS:
            setattr(rec, name, np.asarray(arrays[name], dtype=np.int64))
        rec.rate_t_ns = [int(x) for x in arrays.get("rate_t_ns", ())]
        rec.rate_qp = [int(x) for x in arrays.get("rate_qp", ())]
        rec.rate_bps = [int(x) for x in arrays.get("rate_bps", ())]
        rec.counters = dict(counters)
        return rec
