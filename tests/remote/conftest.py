"""Fixtures of the multi-host tests: agents as real processes (optionally inside a network namespace),
a token file, and namespaces as hosts (veth pairs into a bridge), all removed whatever happens."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from emulator.remote.lab import AgentProcess, LabUnavailable, NamespaceLab, spawn_agent

TOKEN = "s3cret-token-for-tests"


@pytest.fixture
def make_mixed():
    """:func:`mixed_schedule`, for the tests."""
    return mixed_schedule


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    p = tmp_path / "token"
    p.write_text(TOKEN + "\n")
    return p


@pytest.fixture
def start_agent(tmp_path: Path, token_file: Path):
    """``start_agent(*args, listen="127.0.0.1:0", ns=None)`` → a running agent; all are stopped at the end."""
    started: list[AgentProcess] = []

    def start(*args: str, listen: str = "127.0.0.1:0", ns: str | None = None) -> AgentProcess:
        log = tmp_path / f"agent{len(started)}.log"
        try:
            a = spawn_agent(token_file, *args, listen=listen, ns=ns, log=log)
        except RuntimeError as exc:
            pytest.fail(f"{exc}: {log.read_text()}")
        started.append(a)
        return a

    yield start
    for a in started:
        a.stop()


@pytest.fixture
def lab():
    """``lab(n_hosts)`` → (host namespaces + the controller's, their addresses, the bridge's namespace)
    (:class:`~emulator.remote.lab.NamespaceLab`); deleted at the end."""
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (ip) not installed")
    labs: list[NamespaceLab] = []

    def make(n: int) -> tuple[list[str], list[str], str]:
        lab = NamespaceLab(n)
        labs.append(lab)
        try:
            lab.__enter__()
        except LabUnavailable as exc:
            pytest.skip(str(exc))
        return [*lab.hosts, lab.controller_ns], [*lab.addresses, lab.controller_address], lab.bridge_ns

    try:
        yield make
    finally:
        for lab in labs:
            lab.close()


def mixed_schedule(ranks_ar: int, ranks_a2a: int, size_bytes: int):
    """Ranks 0..ranks_ar-1 ring All-Reduce, the next ranks_a2a ranks All-to-All, at the same time."""
    from emulator.schedule.compiler import compile_trace
    from emulator.trace.generators.common import coll_node
    from emulator.trace.model import CollectiveType, ProcessGroup, RankGraph, Trace

    ar = tuple(range(ranks_ar))
    a2a = tuple(range(ranks_ar, ranks_ar + ranks_a2a))
    ranks = {r: RankGraph(r, [coll_node(0, "c", CollectiveType.ALL_REDUCE if r in ar else CollectiveType.ALL_TO_ALL,
                                        size_bytes, pg_name="1" if r in ar else "2")]) for r in ar + a2a}
    groups = {"1": ProcessGroup("1", ar), "2": ProcessGroup("2", a2a)}
    return compile_trace(Trace(ranks=ranks, groups=groups))


MIXED_WORKLOAD = """  collectives:
    - name: allreduce
      type: all_reduce
      group: 0-7
      size: {size}
      algorithm: ring
      iterations: 1
    - name: alltoall
      type: all_to_all
      group: 0-7
      size: {size}
      algorithm: direct
      iterations: 1
"""


def direct_profile(path: Path, workload: str, *, port: int = 14791, timeout: str = "30s", rate: str = "1Gbps",
                   iterations: int = 1, ranks: int = 8) -> Path:
    """A direct-fabric profile at ``path`` (retransmit timeout 30 ms, no warmup) with the ``workload:`` body;
    ``workload`` may be ``"mixed:SIZE"`` for an All-Reduce + All-to-All of SIZE on ranks 0-7."""
    if workload.startswith("mixed:"):
        workload = MIXED_WORKLOAD.format(size=workload[6:])
    base = Path(__file__).resolve().parents[2] / "profiles" / "base" / "loopback_8.yaml"
    path.write_text(f"""extends: {base}
timeout: {timeout}
warmup: 0
iterations: {iterations}
ranks:
  count: {ranks}
fabric:
  kind: direct
  udp_port: {port}
  time_dilation: 1
  ports:
    rate: {rate}
  transport:
    retransmit_timeout: 30ms
workload:
{workload}""")
    return path


def hosts_file(path: Path, agents, addresses, ranks) -> Path:
    """HOSTS.yaml at ``path``: agent i runs ``ranks[i]`` on ``addresses[i]``."""
    lines = ["hosts:"]
    for a, addr, r in zip(agents, addresses, ranks, strict=True):
        lines += [f"  - agent: {a.url}", f"    ranks: {r}", f"    addresses: [{addr}]"]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def profiles():
    """(:func:`direct_profile`, :func:`hosts_file`), for the tests."""
    return direct_profile, hosts_file
