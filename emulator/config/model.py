"""The effective profile: a typed tree of frozen dataclasses (this *is* the profile schema).

Each field is declared with :func:`~emulator.schema.opt`: its YAML key, unit kind, default and
doc (``profiles/README.md`` documents the same keys; a test keeps the two in step). Attribute names
carry units (``rate_bps``, ``buffer_bytes``, ``latency_ns``); YAML keys are short (``rate``,
``buffer``, ``latency``). ``check(path)`` methods enforce rules local to one section; rules that span
sections (group ranks < ranks.count, placement against the topology, derived defaults) live in
:mod:`emulator.config.resolve`. :meth:`Profile.to_dict` gives canonical plain data (ints in bytes,
bit/s, ns) that loads back to an equal profile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from emulator.config.knobs import pacing_kwargs, parse_overrides, rate_presets
from emulator.config.perturb import Perturbation
from emulator.config.slo import Slo, parse_slo
from emulator.pacing.registry import CONTROLLER_NAMES, controller_spec
from emulator.schedule.compiler import P2P_PAIRINGS
from emulator.schema import SchemaError, build, dump, join, opt, suggest
from emulator.trace.generators import GENERATORS, KINDS
from emulator.trace.model import (
    COLLECTIVE_NAMES,
    DEP_POLICIES,
    LEGACY_CHOICES,
    MAX_COMM_SIZE_BYTES,
    ROOTED_NAMES,
)
from emulator.wire import PATH_MTUS
from emulator.wire.icrc import ICRC_MODES

FABRIC_KINDS = ("sim", "fluid", "loopback", "direct")
TOPOLOGY_KINDS = ("single_switch", "leaf_spine")
COLLECTIVE_TYPES = COLLECTIVE_NAMES  # the profile's collective type names, in report order
ROOTED_TYPES = ROOTED_NAMES


def _algorithm_table() -> dict[str, tuple[str, ...]]:
    """Algorithm names per collective type, read from the compiler's registry."""
    from emulator.schedule.algorithms import available_algorithms
    from emulator.trace.model import CollectiveType

    return {t: tuple(available_algorithms(CollectiveType[t.upper()])) for t in COLLECTIVE_TYPES}


#: algorithm names per collective type; '-' is read as '_'
ALGORITHMS: dict[str, tuple[str, ...]] = _algorithm_table()
GENERATOR_KINDS = KINDS
#: options of each generator: the fields of its options dataclass, by option name (the long options of
#: `emulator generate KIND` with '-' written '_'); ranks come from ranks.count
GENERATOR_OPTIONS: dict[str, tuple[str, ...]] = {k: GENERATORS[k].option_names() for k in KINDS}
LEGACY_COLLECTIVES = tuple(LEGACY_CHOICES)
OUTPUT_FORMATS = ("text", "json", "csv", "html", "timeline", "plots")
#: largest collective size: byte counts and rates stay exact as float64 in every report, sums fit int64
MAX_SIZE_BYTES = MAX_COMM_SIZE_BYTES
#: largest rate: 1,000 Tb/s (625x a 1.6 Tb/s port); per-flow rate records are int64 bit/s
MAX_RATE_BPS = 10**15
#: longest one-way link latency: 1 s (a planet-wide path is ~0.1 s); event times stay far inside int64 ns
MAX_LATENCY_NS = 10**9


# ----------------------------------------------------------------------------------- small parsers


def parse_rank_list(value: Any, path: str) -> tuple[int, ...]:
    """A list of ranks ``[0, 1, 2]`` or a range string ``'0-3'``, ``'0-3,8,10-11'``; order kept."""
    if isinstance(value, bool):
        raise SchemaError(path, f"expected a list of ranks or a range like '0-3', got {value!r}")
    if isinstance(value, int):
        value = [value]
    if isinstance(value, str):
        out: list[int] = []
        for part in value.replace(" ", "").split(","):
            m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
            if not m:
                raise SchemaError(path, f"cannot read {value!r} as ranks (write '0-3', '0,2,4' or a list)")
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if hi < lo:
                raise SchemaError(path, f"range {part!r} runs backwards")
            out.extend(range(lo, hi + 1))
        ranks = tuple(out)
    elif isinstance(value, list):
        ranks = tuple(_rank(v, join(path, i)) for i, v in enumerate(value))
    else:
        raise SchemaError(path, f"expected a list of ranks or a range like '0-3', got {type(value).__name__}")
    seen: set[int] = set()
    for r in ranks:
        if r in seen:
            raise SchemaError(path, f"rank {r} listed twice")
        seen.add(r)
    return ranks


def _rank(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SchemaError(path, f"expected a rank (integer ≥ 0), got {value!r}")
    return value


def _algo_text(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise SchemaError(path, f"expected an algorithm name, got {type(value).__name__} {value!r}")
    return value.strip().lower().replace("-", "_")


def _algo_name(value: Any, ctype: str, path: str) -> str:
    name = _algo_text(value, path)
    known = ALGORITHMS[ctype]
    if name not in known:
        raise SchemaError(path, f"{value!r} is not an algorithm for {ctype} (known: {', '.join(known)})")
    return name


def parse_algorithms(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    """``{all_reduce: ring, all_to_all: pairwise}`` → sorted pairs, names checked per type."""
    if not isinstance(value, dict):
        raise SchemaError(path, f"expected a mapping of collective type to algorithm, got {type(value).__name__}")
    out = {}
    for ctype, algo in value.items():
        sub = join(path, str(ctype))
        if ctype not in ALGORITHMS:
            raise SchemaError(sub, "unknown collective type" + suggest(str(ctype), ALGORITHMS))
        out[ctype] = _algo_name(algo, ctype, sub)
    return tuple(sorted(out.items()))


def parse_roots(value: Any, path: str) -> tuple[tuple[str, int], ...]:
    """``{broadcast: 0, reduce: 2}`` → sorted (type, group position) pairs; only rooted types take one."""
    if not isinstance(value, dict):
        raise SchemaError(path, f"expected a mapping of rooted collective type to group position, got "
                                f"{type(value).__name__}")
    out = {}
    for ctype, pos in value.items():
        sub = join(path, str(ctype))
        if ctype not in ALGORITHMS:
            raise SchemaError(sub, "unknown collective type" + suggest(str(ctype), ALGORITHMS))
        if ctype not in ROOTED_TYPES:
            raise SchemaError(sub, f"{ctype} has no root (rooted: {', '.join(sorted(ROOTED_TYPES))})")
        if isinstance(pos, bool) or not isinstance(pos, int) or pos < 0:
            raise SchemaError(sub, f"expected a group position (integer ≥ 0), got {pos!r}")
        out[ctype] = pos
    return tuple(sorted(out.items()))


def parse_options(value: Any, path: str) -> tuple[tuple[str, Any], ...]:
    """Free-form generator options: identifier keys, scalar or list values (checked by the generator)."""
    if not isinstance(value, dict):
        raise SchemaError(path, f"expected a mapping, got {type(value).__name__}")
    for k, v in value.items():
        sub = join(path, str(k))
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", k):
            raise SchemaError(sub, "option names must be identifiers")
        items = v if isinstance(v, list) else [v]
        if any(not isinstance(x, (str, int, float, bool)) for x in items) or v is None:
            raise SchemaError(sub, "option values must be scalars or lists of scalars")
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in value.items()))


def _pairs_to_dict(pairs: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in pairs}


# ----------------------------------------------------------------------------------------- fabric


@dataclass(frozen=True, slots=True)
class Topology:
    kind: str = opt("single_switch", choices=TOPOLOGY_KINDS, doc="single_switch or leaf_spine")
    leaves: int = opt(2, lo=1, doc="leaf switches (leaf_spine)")
    spines: int = opt(1, lo=1, doc="spine switches (leaf_spine)")
    hosts_per_leaf: int | None = opt(None, lo=1, doc="host ports per leaf", default_doc="ceil(ranks.count / leaves)")
    oversubscription: float = opt(1.0, lo=1.0, doc="leaf down:up bandwidth ratio (2 = 2:1 oversubscribed)")
    uplink_rate_bps: int | None = opt(None, key="uplink_rate", unit="bps", lo=1, hi=MAX_RATE_BPS,
                                      doc="rate of each leaf→spine link",
                                      default_doc="hosts_per_leaf × ports.rate / (spines × oversubscription)")
    ecmp: str = opt("udp_sport", choices=("udp_sport", "none"),
                    doc="spine choice: hash of the flow 5-tuple incl. UDP source port, or always spine 0")


#: the largest fabric.time_dilation accepted (a second of emulated time would take ~3 hours beyond it)
MAX_TIME_DILATION = 10_000


def parse_time_dilation(value: Any, path: str) -> float | str:
    """``auto`` or a number K with 1 ≤ K ≤ :data:`MAX_TIME_DILATION`."""
    if isinstance(value, str):
        if value.strip().lower() == "auto":
            return "auto"
        try:
            value = float(value)
        except ValueError:
            raise SchemaError(path, f"expected a number >= 1 or 'auto', got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise SchemaError(path, f"expected a number >= 1 or 'auto', got {value!r}")
    if not 1 <= value <= MAX_TIME_DILATION:
        raise SchemaError(path, f"{value:g} is outside 1..{MAX_TIME_DILATION} (1 = real time, K = K× slower)")
    return float(value)


def _topology(value: Any, path: str) -> Topology:
    return build(Topology, {"kind": value} if isinstance(value, str) else value, path)


@dataclass(frozen=True, slots=True)
class Ports:
    rate_bps: int = opt(25 * 10**9, key="rate", unit="bps", lo=1, hi=MAX_RATE_BPS, doc="host port (link) rate")
    buffer_bytes: int = opt(1 << 20, key="buffer", unit="bytes", lo=1, doc="egress buffer per port (tail drop)")
    latency_ns: int = opt(1000, key="latency", unit="ns", lo=0, hi=MAX_LATENCY_NS, doc="one-way link latency (sim; added delay in loopback)")


@dataclass(frozen=True, slots=True)
class Ecn:
    enabled: bool = opt(True, doc="RED/ECN marking at egress (dequeue)")
    kmin_bytes: int = opt(5000, key="kmin", unit="bytes", doc="queue depth where marking starts")
    kmax_bytes: int = opt(200000, key="kmax", unit="bytes", doc="queue depth where marking probability reaches pmax")
    pmax: float = opt(0.01, unit="fraction", doc="marking probability at kmax (marks every packet above kmax)")

    def check(self, path: str) -> None:
        if self.kmin_bytes > self.kmax_bytes:
            raise SchemaError(join(path, "kmin"), f"must not exceed kmax ({self.kmin_bytes} > {self.kmax_bytes} bytes)")


@dataclass(frozen=True, slots=True)
class Pfc:
    enabled: bool = opt(False, doc="PFC-style pause of upstream senders")
    xoff_bytes: int | None = opt(None, key="xoff", unit="bytes", doc="queue depth that sends PAUSE",
                                 default_doc="3/4 of ports.buffer")
    xon_bytes: int | None = opt(None, key="xon", unit="bytes", doc="queue depth that sends RESUME",
                                default_doc="1/2 of ports.buffer")


@dataclass(frozen=True, slots=True)
class Dscp:
    data: int = opt(26, lo=0, hi=63, doc="DSCP of data packets (ECN field ECT(0))")
    cnp: int = opt(48, lo=0, hi=63, doc="DSCP of CNPs")


@dataclass(frozen=True, slots=True)
class Transport:
    retransmit_timeout_ns: int | None = opt(
        None, key="retransmit_timeout", unit="ns", lo=1, doc="go-back-N retransmit timeout (doubles on repeats)",
        default_doc="1ms on sim; 20ms on loopback and direct, where Python processes can stall for milliseconds "
                    "(on loopback divided by fabric.time_dilation, at least 1ms)")
    ack_every_packets: int = opt(16, lo=1, doc="the receiver acknowledges after this many in-order packets")
    max_segments: int = opt(16, lo=1, hi=64, doc="packets per GSO batch (capped so a batch stays within 64 KiB)")
    qps_per_peer: int = opt(1, lo=1, doc="queue pairs per rank pair: every flow is split evenly over them, each with "
                                         "its own UDP source port (ECMP path) and DCQCN state; FCT stays per flow "
                                         "(sim, loopback, direct; fluid takes 1)")
    icrc: str = opt("zero", choices=ICRC_MODES,
                    doc="RoCEv2 invariant CRC of data, ACK and CNP packets: zero (4 zero bytes, what Wireshark "
                        "flags as wrong) or compute (the real CRC-32 over the IP/UDP/BTH headers and payload, "
                        "so captures verify; about 7 x the sender's CPU per packet, see profiles/README.md)")

    def retransmit_timeout_for(self, kind: str, time_dilation: float = 1.0) -> int:
        """The timeout in force on fabric ``kind`` (the default depends on it: a stall of the processes is
        real time, so under a time dilation of K it is K times shorter in emulated time)."""
        if self.retransmit_timeout_ns is not None:
            return self.retransmit_timeout_ns
        return 1_000_000 if kind == "sim" else max(1_000_000, int(20_000_000 / time_dilation))


@dataclass(frozen=True, slots=True)
class LoopbackSwitch:
    address: str = opt("127.0.0.1", doc="address the software switch binds (127.0.0.0/8)")
    port_base: int = opt(0, lo=0, hi=65535, doc="first UDP port of the switch and rank sockets (0 = ephemeral)")


@dataclass(frozen=True, slots=True)
class DirectRank:
    rank: int = opt(None, lo=0, required=True, doc="rank")
    address: str = opt(None, required=True, doc="local address this rank binds and peers send to")
    port: int | None = opt(None, lo=1, hi=65535, doc="UDP port of this rank", default_doc="fabric.udp_port")


@dataclass(frozen=True, slots=True)
class Direct:
    ranks: tuple[DirectRank, ...] = opt((), doc="per-rank addresses: [{rank: 0, address: 127.0.0.2}, ...]")
    address_template: str | None = opt(None, doc="address per rank, '{rank}' or '{rank+K}' replaced",
                                       default_doc="'127.0.0.{rank+2}' when ranks is empty")
    #: resolved (address, port) of every rank when fabric.kind is direct; filled by resolve
    endpoints: tuple[tuple[str, int], ...] = field(default=(), compare=True)


@dataclass(frozen=True, slots=True)
class Fabric:
    kind: str = opt("sim", choices=FABRIC_KINDS, doc="sim (virtual time, packets), fluid (virtual time, flow-level model), loopback (software switch) or direct")
    topology: Topology = opt(Topology(), parse=_topology, type_doc="mapping or string",
                             doc="topology; a bare string is its kind")
    ports: Ports = opt(Ports(), doc="host ports")
    ecn: Ecn = opt(Ecn(), doc="ECN marking (CP)")
    pfc: Pfc = opt(Pfc(), doc="priority flow control")
    mtu_bytes: int = opt(4096, key="mtu", unit="bytes", choices=PATH_MTUS,
                         type_doc=f"size: {', '.join(map(str, PATH_MTUS[:-1]))} or {PATH_MTUS[-1]}",
                         doc="RoCE path MTU (payload per packet)")
    udp_port: int = opt(4791, lo=1, hi=65535, doc="UDP destination port of RoCEv2 packets")
    dscp: Dscp = opt(Dscp(), doc="DSCP values")
    transport: Transport = opt(Transport(), doc="RC transport: retransmit timeout, ACK coalescing, GSO batch")
    loss: float = opt(0.0, unit="fraction", doc="injected packet-loss probability (sim only)")
    sim_train_ns: int = opt(0, key="sim_train", unit="ns", lo=0,
                            doc="sim: packet trains — a queue pair sends a batch of up to 1 + this / packet time "
                                "packets per service, each packet at its own paced time (faster; CNPs act up to "
                                "this late, queue pairs take turns per batch); 0 = per packet")
    switch: LoopbackSwitch = opt(LoopbackSwitch(), doc="software switch (loopback)")
    workers: int = opt(0, lo=0, doc="ranks per worker process (loopback; 0 = spread over the CPUs)")
    time_dilation: float | str = opt(1.0, parse=parse_time_dilation, type_doc="number or `auto`",
                                     doc="loopback: emulated time runs K× slower than real time (rates, timers, "
                                         "delays; reported times are emulated); auto: K from a short calibration "
                                         "of this machine")
    time_dilation_budget_ns: int = opt(180 * 10**9, key="time_dilation_budget", unit="ns", lo=1,
                                       doc="loopback, time_dilation auto: the wall time calibration, run and its "
                                           "one re-run (when the timing was not faithful) may take together; a "
                                           "re-run that would not fit is not made, and the summary says so")
    direct: Direct = opt(Direct(), doc="rank addresses (direct)")


# ------------------------------------------------------------------------------------------ ranks


def parse_placement(value: Any, path: str, names: tuple[str, ...] = ("round_robin", "block")) -> str | tuple[int, ...]:
    """One of ``names`` or a list of host indices."""
    what = f"{', '.join(names)} or a list of host indices"
    if isinstance(value, str):
        if value not in names:
            raise SchemaError(path, f"{value!r} is not {what}" + suggest(value, names, list_known=False))
        return value
    if isinstance(value, list):
        return tuple(_rank(v, join(path, i)) for i, v in enumerate(value))
    raise SchemaError(path, f"expected {what}, got {type(value).__name__}")


@dataclass(frozen=True, slots=True)
class Ranks:
    count: int | None = opt(None, lo=1, doc="number of ranks",
                            default_doc="from the workload (trace files, largest group rank + 1)")
    placement: str | tuple[int, ...] = opt(
        "round_robin", parse=parse_placement, dumper=lambda v: v if isinstance(v, str) else list(v),
        type_doc="`round_robin`, `block` or list of int",
        doc="rank → host: round_robin (across leaves), block (fill leaf 0 first) or a list (host of rank i)")
    #: resolved host index of every rank (leaf = host // hosts_per_leaf); filled by resolve
    hosts: tuple[int, ...] = field(default=(), compare=True)


# --------------------------------------------------------------------------------------- workload


def _legacy_collectives(value: Any, path: str) -> str:
    """``auto``, ``yes`` or ``no`` (YAML reads a bare yes/no as a boolean: taken as written)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value not in LEGACY_COLLECTIVES:
        raise SchemaError(path, f"{value!r} is not one of {', '.join(LEGACY_COLLECTIVES)}")
    return value


@dataclass(frozen=True, slots=True)
class TraceWorkload:
    prefix: str = opt(None, required=True, doc="Chakra trace prefix (PREFIX.<rank>.et), relative to the profile file "
                                               "or 'pkg:' + a path inside the emulator package")
    dep_policy: str = opt("auto", choices=DEP_POLICIES, doc="dependencies used: auto, data, ctrl or union")
    groups: str | None = opt(None, doc="comm-group JSON ({\"1\": [0, 1], ...}), relative to the profile file")
    replicate: int | None = opt(None, lo=1, doc="replicate a one-rank trace to this many ranks")
    legacy_collectives: str = opt("auto", parse=_legacy_collectives, type_doc="`auto`, `yes` or `no`",
                                  doc="pre-2023 collective numbering: auto (by schema version), yes, no")


@dataclass(frozen=True, slots=True)
class GenerateWorkload:
    kind: str = opt(None, required=True, choices=GENERATOR_KINDS, doc="generator: " + ", ".join(KINDS))
    options: tuple[tuple[str, Any], ...] = opt((), parse=parse_options, dumper=_pairs_to_dict, type_doc="mapping",
                                               doc="options of `emulator generate KIND` (e.g. size: 16MiB)")

    def check(self, path: str) -> None:
        known = GENERATOR_OPTIONS[self.kind]
        for name, _value in self.options:
            if name.replace("-", "_") not in known:
                raise SchemaError(join(join(path, "options"), name),
                                  f"not an option of the {self.kind} generator" + suggest(name, known))


@dataclass(frozen=True, slots=True)
class Collective:
    type: str = opt(None, required=True, choices=COLLECTIVE_TYPES, doc="collective type")
    group: tuple[int, ...] | None = opt(None, parse=parse_rank_list, dumper=list, type_doc="list of int or range string",
                                        doc="member ranks: a list or a range string like '0-3'",
                                        default_doc="all ranks")
    size_bytes: int | None = opt(None, key="size", unit="bytes", lo=0, hi=MAX_SIZE_BYTES,
                                 doc="collective size (all_gather: per-rank shard), at most 2^53 bytes (8 PiB: "
                                     "byte counts stay exact in every report); required except for barrier")
    algorithm: str | None = opt(None, parse=lambda v, p: _algo_text(v, p), type_doc="string",
                                doc="algorithm", default_doc="workload.compile.algorithms or the compiler's")
    iterations: int = opt(1, lo=1, doc="back-to-back instances per run iteration")
    start_offset_ns: int = opt(0, key="start_offset", unit="ns", lo=0,
                               doc="delay before the first instance (whole µs: Chakra's resolution)")
    gap_ns: int = opt(0, key="gap", unit="ns", lo=0, doc="compute delay between instances (whole µs)")
    chunks: int | None = opt(None, lo=1, doc="pipelined chunks", default_doc="workload.compile.chunks")
    root: int | None = opt(None, lo=0, doc="root rank (broadcast, reduce, gather, scatter)",
                           default_doc="workload.compile.roots' position in the sorted group, else the group's first rank")
    name: str | None = opt(None, doc="label in results", default_doc="'<type>#<index>'")

    def check(self, path: str) -> None:
        if self.size_bytes is None and self.type != "barrier":
            raise SchemaError(join(path, "size"), "required")
        if self.algorithm is not None:
            _algo_name(self.algorithm, self.type, join(path, "algorithm"))
        if self.root is not None and self.type not in ROOTED_TYPES:
            raise SchemaError(join(path, "root"), f"only rooted collectives take a root, not {self.type}")
        if self.root is not None and self.group is not None and self.root not in self.group:
            raise SchemaError(join(path, "root"), f"rank {self.root} is not in the group")
        if self.group is not None and len(self.group) < 2:
            raise SchemaError(join(path, "group"), "a collective needs at least 2 ranks")
        for key, value in (("start_offset", self.start_offset_ns), ("gap", self.gap_ns)):
            if value % 1000:
                raise SchemaError(join(path, key), f"{value} ns is not a whole number of µs (inline collectives "
                                                   "become Chakra nodes, whose durations are in µs)")


@dataclass(frozen=True, slots=True)
class CompileOptions:
    algorithms: tuple[tuple[str, str], ...] = opt((), parse=parse_algorithms, dumper=dict, type_doc="mapping",
                                                  doc="algorithm per collective type, e.g. {all_reduce: ring}")
    chunks: int = opt(1, lo=1, doc="pipelined chunks per collective")
    compute_scale: float = opt(1.0, lo=0.0, doc="scale compute delays (0.5 = twice-as-fast accelerators)")
    open_loop: bool = opt(False, doc="start operations at their recorded times regardless of completion")
    keep_idle: bool = opt(False, doc="when the trace has start_time_micros, keep the idle gap before a node as an "
                                     "extra delay (ignored with open_loop)")
    roots: tuple[tuple[str, int], ...] = opt((), parse=parse_roots, dumper=dict, type_doc="mapping",
                                             doc="root of broadcast/reduce/gather/scatter as a GROUP POSITION (index "
                                                 "in the sorted member list; = the rank in the all-rank group), e.g. "
                                                 "{broadcast: 0}; an inline collective's own root wins",
                                             default_doc="the node's root attribute, else position 0")
    p2p_pairing: str = opt("strict", choices=P2P_PAIRINGS,
                           doc="SEND/RECV without a peer or a match: error (strict), peer = the other member of the "
                               "node's 2-rank pg_name group (group), or a zero wait (ignore)")


@dataclass(frozen=True, slots=True)
class Workload:
    trace: TraceWorkload | None = opt(None, doc="run a Chakra trace")
    generate: GenerateWorkload | None = opt(None, doc="generate a trace (issue 2's generators)")
    collectives: tuple[Collective, ...] = opt((), doc="inline collectives; groups may run at once")
    schedule: str | None = opt(None, doc="a compiled schedule file, relative to the profile file")
    jobs: tuple[Job, ...] = opt((), doc="several jobs on the fabric, each with its own workload and placement "
                                        "(see 'Jobs')")
    compile: CompileOptions = opt(CompileOptions(), doc="compile options")

    @property
    def kind(self) -> str:
        """Which workload source is set: trace, generate, collectives, schedule or jobs."""
        return next(k for k in WORKLOAD_KINDS if getattr(self, k))

    def check(self, path: str) -> None:
        given = [k for k in WORKLOAD_KINDS if getattr(self, k)]
        if len(given) != 1:
            what = ", ".join(given) if given else "none"
            raise SchemaError(path, f"give exactly one of {', '.join(WORKLOAD_KINDS)} (got {what})")


WORKLOAD_KINDS = ("trace", "generate", "collectives", "schedule", "jobs")
JOB_WORKLOADS = ("trace", "generate", "collectives")
JOB_PLACEMENTS = ("contiguous", "round_robin")


def _job_placement(value: Any, path: str) -> str | tuple[int, ...]:
    return parse_placement(value, path, JOB_PLACEMENTS)


@dataclass(frozen=True, slots=True)
class Job:
    """One job of ``workload.jobs``: its ranks 0..n-1 run on the hosts its placement picks."""

    name: str = opt(None, required=True, doc="job name (results: jobs.<name>)")
    workload: Workload = opt(None, required=True, doc="the job's workload: trace, generate or collectives, "
                                                      "in job-local ranks 0..ranks-1")
    ranks: int | None = opt(None, lo=1, doc="ranks of the job",
                            default_doc="from the workload (trace rank files or replicate, largest group rank + 1)")
    placement: str | tuple[int, ...] = opt(
        "contiguous", parse=_job_placement, dumper=lambda v: v if isinstance(v, str) else list(v),
        type_doc="`contiguous`, `round_robin` or list of int",
        doc="job rank → host (= fabric rank): contiguous (the lowest free hosts), round_robin (across leaves, "
            "the lowest free host of each) or a list (host of job rank i)")
    iterations: int = opt(1, lo=1, doc="back-to-back repetitions of the job's workload per run iteration")
    start_offset_ns: int = opt(0, key="start_offset", unit="ns", lo=0,
                               doc="delay before the job's first operation in each run iteration")
    share: bool = opt(False, doc="may run on hosts another job also uses")
    #: resolved host (= fabric rank) of every job rank; filled by resolve
    hosts: tuple[int, ...] = field(default=(), compare=True)

    def check(self, path: str) -> None:
        if self.workload.kind not in JOB_WORKLOADS:
            raise SchemaError(join(path, f"workload.{self.workload.kind}"),
                              f"a job's workload is one of {', '.join(JOB_WORKLOADS)}")
        if isinstance(self.placement, tuple) and self.ranks is not None and len(self.placement) != self.ranks:
            raise SchemaError(join(path, "placement"), f"lists {len(self.placement)} hosts for {self.ranks} ranks")


# ------------------------------------------------------------------------------------ the rest


@dataclass(frozen=True, slots=True)
class CongestionControl:
    preset: str = opt("connectx", choices=CONTROLLER_NAMES,
                      doc=", ".join(f"{n} ({controller_spec(n).doc})" for n in CONTROLLER_NAMES))
    rate_bps: int | None = opt(None, key="rate", unit="bps", lo=1, hi=MAX_RATE_BPS,
                               doc=f"constant rate (preset {' or '.join(rate_presets())} only)")
    overrides: tuple[tuple[str, Any], ...] = opt((), parse=parse_overrides, dumper=dict, type_doc="mapping",
                                                 doc="knob → value, see 'Congestion-control knobs'")

    def check(self, path: str) -> None:
        takes_rate = self.preset in rate_presets()
        if takes_rate and self.rate_bps is None:
            raise SchemaError(join(path, "rate"), f"required with preset {self.preset}")
        if not takes_rate and self.rate_bps is not None:
            raise SchemaError(join(path, "rate"), f"only preset {' or '.join(rate_presets())} takes a rate "
                                                  f"(preset is {self.preset})")
        if controller_spec(self.preset).dcqcn_form is None and self.overrides:
            raise SchemaError(join(path, "overrides"), f"preset {self.preset} has no DCQCN knobs to override")
        pacing_kwargs(self.preset, self.overrides, join(path, "overrides"))

    def pacing_kwargs(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(RP, NP) keyword overrides for :mod:`emulator.pacing` (see :func:`knobs.pacing_kwargs`); the RP
        ones include ``rate_bps`` when ``rate`` is set."""
        rp, np_ = pacing_kwargs(self.preset, self.overrides)
        if self.rate_bps is not None:
            rp["rate_bps"] = self.rate_bps
        return rp, np_


@dataclass(frozen=True, slots=True)
class Output:
    dir: str | None = opt(None, doc="results directory", default_doc="chosen by `emulator run` (-o wins)")
    formats: tuple[str, ...] = opt(("text", "json", "csv", "timeline"), doc=f"reports to write: {', '.join(OUTPUT_FORMATS)}")

    def check(self, path: str) -> None:
        for i, fmt in enumerate(self.formats):
            if fmt not in OUTPUT_FORMATS:
                raise SchemaError(join(join(path, "formats"), i),
                                  f"{fmt!r} is not one of {', '.join(OUTPUT_FORMATS)}" + suggest(fmt, OUTPUT_FORMATS, list_known=False))


@dataclass(frozen=True, slots=True)
class Profile:
    name: str = opt(None, doc="run name", default_doc="the profile file's stem")
    description: str = opt("", doc="one line for humans")
    seed: int = opt(1, lo=0, doc="seed of every random choice (sim is deterministic per seed)")
    timeout_ns: int = opt(120 * 10**9, key="timeout", unit="ns", lo=1, doc="the whole run's deadline: wall time on loopback/direct; on sim both virtual and wall time (whichever comes first); an incomplete run exits 3")
    warmup: int = opt(1, lo=0, doc="unmeasured iterations of the workload (run first, recorded, left out of the statistics)")
    iterations: int = opt(5, lo=1, doc="measured iterations of the workload")
    fabric: Fabric = opt(Fabric(), doc="the fabric")
    ranks: Ranks = opt(Ranks(), doc="ranks and placement")
    workload: Workload = opt(None, required=True, doc="what traffic to run")
    congestion_control: CongestionControl = opt(CongestionControl(), doc="rate control of every queue pair")
    slo: tuple[Slo, ...] = opt((), parse=parse_slo, dumper=lambda v: [s.text for s in v], type_doc="list of strings",
                               doc="thresholds, e.g. 'all_reduce.cct.p99 < 5ms'")
    output: Output = opt(Output(), doc="results")
    perturbations: tuple[Perturbation, ...] = opt((), doc="injected stragglers, slow NICs, links down "
                                                           "(see 'Perturbations')")
    #: where it came from (file path or '<dict>'); not part of the schema
    source: str = field(default="", compare=False)

    #: keys the loader consumes before the schema sees the file (for did-you-mean suggestions)
    LOADER_KEYS: ClassVar[tuple[str, ...]] = ("extends", "matrix")

    def leaf_of(self, rank: int) -> int:
        """Leaf switch of ``rank`` (0 on a single switch)."""
        topo = self.fabric.topology
        if topo.kind != "leaf_spine" or not topo.hosts_per_leaf:
            return 0
        return self.ranks.hosts[rank] // topo.hosts_per_leaf

    def to_dict(self) -> dict[str, Any]:
        """Canonical plain data (ints in bytes, bit/s, ns) that :func:`profile_from_dict` reads back."""
        return dump(self)
