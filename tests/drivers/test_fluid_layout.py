"""The fluid driver's per-op, per-flow and per-part state lies in one 64-byte record per op, flow and part
(:mod:`emulator.drivers.fluid_layout`): the fields a compiled check reads of one op share a cache line."""

from __future__ import annotations

import numpy as np
import pytest
from support.sim import collective_schedule

from emulator.drivers import fluid as fluid_driver
from emulator.drivers.fluid_layout import RECORD_BYTES, interleaved
from emulator.drivers.sim_types import SimConfig
from emulator.endpoint import EndpointConfig
from emulator.fabric.fluid import FluidConfig
from emulator.trace.model import CollectiveType

OP_FIELDS = ("child_ptr", "pending", "kind", "not_before", "op_flow", "ready", "start", "end")
FLOW_FIELDS = ("part_ptr", "send_op_l", "recv_op_l", "to_arrive", "to_ack", "arrived", "recv_ready")
PART_FIELDS = ("part_flow", "part_qp", "lat", "part_src", "wire", "first_pkt_ns")


def _address(view: memoryview, i: int) -> int:
    return np.asarray(view)[i:].ctypes.data


def test_interleaved_records_are_aligned_lines() -> None:
    cols = interleaved(1_000, {"a": np.int64, "b": np.float64, "c": np.int32}, ("a",))
    assert cols["a"].size == 1_001 and cols["b"].size == cols["c"].size == 1_000
    for k, v in cols.items():
        assert v.strides == (RECORD_BYTES,), k
    base = cols["a"].ctypes.data
    assert base % RECORD_BYTES == 0
    assert [cols[k].ctypes.data - base for k in "abc"] == [0, 8, 16]
    cols["b"][:] = 2.5
    cols["c"][:] = -1
    cols["a"][:] = np.arange(1_001)
    assert (cols["b"] == 2.5).all() and (cols["c"] == -1).all() and cols["a"][-1] == 1_000
    with pytest.raises(ValueError, match="64 bytes"):
        interleaved(4, dict.fromkeys("abcdefghi", np.int64))


@pytest.mark.parametrize("qps_per_peer", [1, 2])
def test_the_drivers_fields_share_one_record_per_entity(qps_per_peer: int) -> None:
    s = collective_schedule(8, CollectiveType.ALL_REDUCE, 1 << 20)
    ecfg = EndpointConfig(mtu_bytes=4096, cc="connectx", line_rate_bps=25e9, qps_per_peer=qps_per_peer)
    run = fluid_driver._Run(s, SimConfig(port_rate_bps=25e9), ecfg, FluidConfig(), seed=1)
    for fields, n in ((OP_FIELDS, s.n_ops), (FLOW_FIELDS, s.n_flows), (PART_FIELDS, run.parts.n)):
        views = [getattr(run, k) for k in fields]
        for i in (0, n // 2, n - 1):  # entity i's fields lie in one 64-byte line of their own
            at = [_address(v, i) for v in views]
            assert min(at) % RECORD_BYTES == 0 and max(at) - min(at) < RECORD_BYTES, (fields, i)
        assert all(v.strides == (RECORD_BYTES,) for v in views)
    # the values are those of the schedule and its parts
    assert np.array_equal(np.asarray(run.kind), s.op_kind)
    assert np.array_equal(np.asarray(run.child_ptr)[[0, -1]], [0, s.dep_idx.size])
    assert np.array_equal(np.asarray(run.pending), np.diff(s.dep_ptr))
    assert np.array_equal(np.asarray(run.part_ptr), run.parts.ptr)
    assert np.array_equal(np.asarray(run.part_qp), run.parts.qp)
    assert np.array_equal(np.asarray(run.to_ack), np.diff(run.parts.ptr))
    assert (np.asarray(run.start) == -1).all() and not np.asarray(run.arrived).any()
    run.pending[3] -= 1  # Python sets an entry where the compiled checks read it
    assert np.asarray(run.pending)[3] == np.diff(s.dep_ptr)[3] - 1
