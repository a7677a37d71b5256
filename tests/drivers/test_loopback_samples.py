"""The switch's snapshots carry only the queue samples new since its previous message; the parent's
SampleTap appends them. A run's samples are the concatenation of what the messages delivered, the same
samples in the same order and within the same bound as when the switch held them all, and a switch that
dies mid-run still leaves every sample the parent received."""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import signal

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.drivers.loopback import LoopbackConfig, SampleTap, run_loopback
from emulator.drivers.loopback.spec import SwitchSpec
from emulator.drivers.loopback.switch import _SoftwareSwitch
from emulator.endpoint.config import EndpointConfig
from emulator.fabric.port import PortConfig
from emulator.pacing.red import RedParams

EP = EndpointConfig(line_rate_bps=2e9, retransmit_timeout_ns=30_000_000)


def _switch(n_ports: int, max_samples: int) -> _SoftwareSwitch:
    spec = SwitchSpec(port=PortConfig(rate_bps=1e9, buffer_bytes=1 << 20),
                      rank_addresses=(("127.0.0.1", 9),) * n_ports, qp_src=tuple(range(n_ports)),
                      qp_dst=tuple(range(n_ports)), seed=1, max_samples=max_samples)
    return _SoftwareSwitch(spec, None, None, None, 0)


def _reference(n_ports: int, max_samples: int, ops: list) -> dict[str, list[int]]:
    """What the switch recorded when it kept every sample: per port, (t, depth) of each sampling of a
    non-empty port or one that just emptied, no sampling once ``max_samples`` were taken; port-major."""
    depth = [0] * n_ports
    was = [False] * n_ports
    per_port: list[list[tuple[int, int]]] = [[] for _ in range(n_ports)]
    taken = 0
    for t, op in enumerate(ops):
        if op[0] == "set":
            depth[op[1]] = op[2]
        elif op[0] == "sample" and taken < max_samples:
            for i in range(n_ports):
                if depth[i] or was[i]:
                    per_port[i].append((t, depth[i]))
                    taken += 1
                    was[i] = bool(depth[i])
    return {"t_ns": [t for p in per_port for t, _ in p],
            "port": [i for i, p in enumerate(per_port) for _ in p],
            "queue_bytes": [q for p in per_port for _, q in p]}


_OPS = st.lists(st.one_of(st.tuples(st.just("set"), st.integers(0, 3), st.integers(0, 3).map(lambda k: k * 1500)),
                          st.tuples(st.just("sample")), st.tuples(st.just("snap"))), max_size=120)


@settings(max_examples=150, deadline=None)
@given(ops=_OPS, max_samples=st.integers(1, 40))
def test_snapshot_deltas_concatenate_to_the_samples_of_a_switch_that_kept_them_all(ops, max_samples):
    n = 4
    sw = _switch(n, max_samples)
    tap = SampleTap(None, n)
    delivered = []
    for t, op in enumerate(ops):
        if op[0] == "set":
            sw.ports[op[1]].queue_bytes = op[2]
        elif op[0] == "sample":
            sw._sample(t)
        else:
            new = sw.fabric(t)["queue_samples_new"]
            delivered.append(new)
            tap.add(new)
    final = sw.fabric(len(ops))
    tap.add(final["queue_samples_new"])
    delivered.append(final["queue_samples_new"])
    got = tap.queue_samples()
    assert got == _reference(n, max_samples, ops)
    assert len(got["t_ns"]) < max_samples + n  # the bound: no sampling round starts at max_samples
    # each message held only what was new: nothing delivered twice
    assert sum(len(ts) for d in delivered for ts in d["t_ns"]) == len(got["t_ns"])
    assert sw.samples_t == [[] for _ in range(n)]  # the switch forgets what it sent
    assert sw.fabric(len(ops) + 1)["queue_samples_new"]["t_ns"] == [[] for _ in range(n)]


def test_the_tap_strips_the_new_samples_from_every_message_it_passes_on():
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=True)
    tap = SampleTap(parent, 2)
    child.send(("ready", -1, 123))
    child.send(("snapshot", -1, {"ports": [], "queue_samples_new": {"t_ns": [[1, 2], [1]], "queue_bytes": [[5, 0], [7]]}}, {}))
    child.send(("final", -1, {"ports": [], "queue_samples_new": {"t_ns": [[3], []], "queue_bytes": [[9], []]}}, {}))
    assert mpc.wait([tap], timeout=5) == [tap]  # the supervisor waits on it like on a connection
    msgs = []
    while tap.poll():
        msgs.append(tap.recv())
    assert [m[0] for m in msgs] == ["ready", "snapshot", "final"]
    assert all("queue_samples_new" not in m[2] for m in msgs[1:])
    assert tap.messages == 2
    assert tap.queue_samples() == {"t_ns": [1, 2, 3, 1], "port": [0, 0, 0, 1], "queue_bytes": [5, 0, 9, 7]}
    tap.send(("go", 1))
    assert child.recv() == ("go", 1)
    tap.close()
    child.close()


def _recording(monkeypatch) -> list:
    """Every delta the run's SampleTap receives, in order."""
    seen: list = []
    add = SampleTap.add

    def spy(self, new):
        seen.append({k: [list(p) for p in v] for k, v in new.items()})
        add(self, new)

    monkeypatch.setattr(SampleTap, "add", spy)
    return seen


def _concatenated(deltas: list, n_ports: int) -> dict[str, list[int]]:
    """The deltas appended per port, flattened port-major (independently of SampleTap)."""
    t = [[] for _ in range(n_ports)]
    q = [[] for _ in range(n_ports)]
    for d in deltas:
        for i in range(n_ports):
            t[i] += d["t_ns"][i]
            q[i] += d["queue_bytes"][i]
    return {"t_ns": sum(t, []), "port": [i for i in range(n_ports) for _ in t[i]], "queue_bytes": sum(q, [])}


def _schedule(senders: int, size_bytes: int):
    from emulator.schedule.compiler import compile_trace
    from emulator.trace.generators.common import p2p_node
    from emulator.trace.model import NodeType, RankGraph, Trace

    ranks = {0: RankGraph(0, [p2p_node(i, f"r{i}", NodeType.COMM_RECV_NODE, size_bytes, i, 0, 0)
                              for i in range(1, senders + 1)])}
    for i in range(1, senders + 1):
        ranks[i] = RankGraph(i, [p2p_node(0, "s", NodeType.COMM_SEND_NODE, size_bytes, i, 0, 0)])
    return compile_trace(Trace(ranks=ranks))


def test_a_run_returns_exactly_what_the_snapshots_delivered_within_the_bound(monkeypatch):
    seen = _recording(monkeypatch)
    s = _schedule(3, 768 * 1024)
    cfg = LoopbackConfig(port=PortConfig(rate_bps=300e6, buffer_bytes=2 << 20, red=RedParams()), ranks_per_worker=2,
                         queue_sample_interval_ns=200_000, max_queue_samples=400, snapshot_interval_s=0.05)
    res = run_loopback(s, cfg, EP, seed=1, timeout_s=40)
    assert res.complete, res.errors
    q = res.fabric.queue_samples.to_dict()
    assert len(seen) >= 2  # several snapshots and the final
    assert q == _concatenated(seen, 4)
    assert 0 < len(q["t_ns"]) < 400 + 4
    assert list(res.fabric_dict())[:3] == ["kind", "ports", "queue_samples"]
    assert "queue_samples_new" not in res.fabric_dict()
    for port in range(4):  # per port in time order, as the switch took them
        ts = [t for t, p in zip(q["t_ns"], q["port"], strict=True) if p == port]
        assert ts == sorted(ts)


def test_a_killed_switch_leaves_every_sample_its_snapshots_delivered(monkeypatch):
    seen = _recording(monkeypatch)
    s = _schedule(3, 4 << 20)
    cfg = LoopbackConfig(port=PortConfig(rate_bps=40e6, buffer_bytes=1 << 20), ranks_per_worker=2,
                         snapshot_interval_s=0.05)
    hit: dict = {}

    def progress(info):
        if not hit and info["elapsed_s"] > 0.5:
            _, pid, _ = next(p for p in info["processes"] if p[0] == "software switch")
            hit["pid"] = pid
            os.kill(pid, signal.SIGKILL)

    res = run_loopback(s, cfg, EP, seed=1, timeout_s=30, progress=progress)
    assert hit and not res.complete
    assert any(e.startswith(f"software switch (pid {hit['pid']}) died") for e in res.errors), res.errors
    q = res.fabric.queue_samples.to_dict()
    assert seen and len(q["t_ns"]) > 0  # the switch died before its final message, its samples did not
    assert q == _concatenated(seen, 4)
    assert len(res.fabric.ports) == 4
