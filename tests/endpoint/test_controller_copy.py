"""A queue pair's rate controller is a copy of one built with the endpoint config: as fresh as a new one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.endpoint.config import EndpointConfig
from emulator.pacing import controller_for_params, get_controller
from emulator.pacing.base import slot_names
from emulator.pacing.dcqcn import DcqcnFirmware, DcqcnPaper

_STEP = st.tuples(st.sampled_from(("cnp", "bytes", "timer")), st.integers(0, 200_000), st.integers(1, 70_000))


def test_a_queue_pairs_controller_is_copied_not_built(monkeypatch):
    cfg = EndpointConfig(cc="connectx", line_rate_bps=25e9)
    built = []
    init = DcqcnFirmware.__init__

    def counting(self, *args, **kwargs):
        built.append(1)
        init(self, *args, **kwargs)

    monkeypatch.setattr(DcqcnFirmware, "__init__", counting)
    ctrls = [cfg.make_controller() for _ in range(100)]
    assert not built
    assert len({id(c) for c in ctrls}) == 100 and all(type(c) is DcqcnFirmware for c in ctrls)


def _state(c) -> dict:
    return dict(vars(c)) if hasattr(c, "__dict__") else {name: getattr(c, name) for name in slot_names(type(c))}


@settings(max_examples=60, deadline=None)
@given(cc=st.sampled_from(("connectx", "paper", "hpcc-ns3", "none")), steps=st.lists(_STEP, max_size=40))
def test_a_copied_controller_runs_as_a_fresh_one(cc, steps):
    """The same inputs give the same rates and state as a controller built from scratch, and driving one
    copy leaves the next copy untouched."""
    cfg = EndpointConfig(cc=cc, line_rate_bps=25e9)
    params = cfg._dcqcn_params
    fresh = controller_for_params(params, 25e9) if params is not None else get_controller(cc, 25e9)
    copy, untouched = cfg.make_controller(), cfg.make_controller()
    assert type(copy) is type(fresh)
    t = 0
    for kind, dt, n_bytes in steps:
        t += dt
        for c in (fresh, copy):
            if kind == "bytes":
                c.on_bytes_sent(n_bytes, t)
            else:
                (c.on_cnp if kind == "cnp" else c.on_timer)(t)
        assert copy.state() == fresh.state()
        assert copy.next_timer_ns() == fresh.next_timer_ns()
    assert untouched.state() == cfg.make_controller().state()
    assert _state(untouched) == _state(cfg._proto_ctrl)
    if isinstance(fresh, (DcqcnFirmware, DcqcnPaper)) and steps:
        assert untouched.state() == controller_for_params(params, 25e9).state()


def test_a_dcqcn_controller_and_its_copies_have_no_instance_dict():
    """Slotted: a per-packet call (``on_bytes_sent``) on one of thousands of queue pairs' controllers takes the
    type's method and fixed-offset attributes, not a probe of a dict of its own (31 attributes were past
    CPython 3.11's 29 inline values)."""
    for cc in ("connectx", "paper", "hpcc-ns3"):
        cfg = EndpointConfig(cc=cc, line_rate_bps=25e9)
        ctrl = cfg.make_controller()
        assert not hasattr(ctrl, "__dict__") and not hasattr(cfg._proto_ctrl, "__dict__")
        assert ctrl is not cfg._proto_ctrl and _state(ctrl) == _state(cfg._proto_ctrl)
        ctrl.on_cnp(1000)
        assert _state(cfg.make_controller()) == _state(cfg._proto_ctrl) != _state(ctrl)
