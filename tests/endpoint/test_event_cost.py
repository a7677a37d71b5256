"""Per-message bookkeeping stays out of Python calls: a FlowEvent is one allocation, a recorder applies a
stream of op milestones in one loop."""

from __future__ import annotations

import cProfile
import pickle
import pstats

from support.bytecodes import opcodes

from emulator.endpoint.events import FlowEvent, OpEventKind
from emulator.endpoint.recorder import Recorder
from emulator.schedule.model import OP_RECV, OP_SEND


def _calls(fn) -> int:
    prof = cProfile.Profile()
    prof.runcall(fn)
    return pstats.Stats(prof).total_calls - 1  # without fn itself


def test_a_flow_event_is_made_without_per_field_work():
    # a frozen dataclass sets each of its 7 fields through object.__setattr__ (66 bytecodes; a tuple 21)
    assert opcodes(lambda: FlowEvent(17, 5, op=3)) <= 30
    ev = FlowEvent(int(OpEventKind.RATE), 7, 2, value=10)
    assert (ev.kind, ev.t_ns, ev.qp, ev.psn, ev.packets, ev.op, ev.value) == (20, 7, 2, 0, 0, -1, 10)
    assert pickle.loads(pickle.dumps(ev)) == ev


def test_a_recorder_applies_op_milestones_in_one_loop():
    n = 200
    kinds = [OP_SEND, OP_RECV] * (n // 2)
    events = [FlowEvent(int(OpEventKind.ORIGIN), 0)]
    for op in range(n):
        events += [FlowEvent(int(OpEventKind.OP_READY), 10 * op, op=op),
                   FlowEvent(int(OpEventKind.OP_STARTED), 10 * op + 2, op=op),
                   FlowEvent(int(OpEventKind.OP_DONE), 10 * op + 5, op=op)]
    rec = Recorder(0, kinds, late_threshold_ns=1)
    assert _calls(lambda: rec.consume(events)) < 10  # not one call per event
    r = rec.records
    assert r.ready_ns.tolist() == [10 * op for op in range(n)]
    assert r.start_ns.tolist() == [10 * op + 2 for op in range(n)]
    assert r.end_ns.tolist() == [10 * op + 5 for op in range(n)]
    assert r.counters["late_ops"] == n // 2 and r.counters["lag_max_ns"] == 2
