"""The agent API, version 1: paths, limits, and the checks of every request (sans-IO).

Paths (all under ``/v1`` but ``/metrics``; every one needs ``Authorization: Bearer TOKEN`` except
``/metrics`` on an agent started with ``--metrics-public``):

* ``GET /v1/info`` — tool, API and schedule-format versions, host, addresses, cores, whether busy;
* ``GET /v1/clock`` (WebSocket) — answers ``{"t1_ns"}`` with ``{"t1_ns", "t2_ns", "t3_ns"}`` (clock offsets);
* ``PUT /v1/schedules/{sha256}`` — a schedule file's bytes; kept under its hash (idempotent), refused
  when the file's verified hash is another;
* ``POST /v1/runs`` — arm a run (:class:`ArmRequest`); one run at a time; the agent opens the sockets,
  builds the endpoints and says ``ready`` on the events WebSocket;
* ``POST /v1/start`` — ``{"t0_ns"}``: the common start time on the agent's monotonic clock;
* ``GET /v1/status``, ``GET /v1/events`` (WebSocket of progress events; the controller's messages on it
  are heartbeats), ``POST /v1/heartbeat``, ``GET /v1/records`` (when done), ``POST /v1/abort``.

Refusals (:class:`Refusal`, a status and a one-line reason): 401 missing or wrong token (compared in
constant time), 403 a destination outside the agent's allow-list (named) — checked before anything is
sent, 409 an unknown API or schedule-format version or a busy agent, 413 a body above its limit, 400 a
malformed body (the first wrong key named), 422 a rate or duration above the agent's caps (the cap
named). No request names a file: schedules travel as bytes, everything else as JSON values.
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import re
from dataclasses import dataclass, fields
from typing import Any

from emulator.endpoint.config import EndpointConfig
from emulator.errors import ConfigError
from emulator.pacing.notification import NpParams
from emulator.schedule.model import SCHEDULE_VERSION
from emulator.units import format_rate_bps

API_VERSION = 1
PREFIX = f"/v{API_VERSION}"
DEFAULT_PORT = 7400
#: largest JSON body of a request
MAX_JSON_BYTES = 1 << 20
#: largest schedule upload (the app-wide body limit)
MAX_SCHEDULE_BYTES = 1 << 30
HASH_RE = re.compile(r"^[0-9a-f]{64}$")
#: the default least time between two progress events of a live run
DEFAULT_PROGRESS_INTERVAL_S = 1.0
#: the shortest progress interval an agent accepts (progress is for people, not for the data path)
MIN_PROGRESS_INTERVAL_S = 0.1
#: endpoint settings the agent derives itself from the arm request's addresses
_DERIVED = ("rank_addresses", "rank_udp_ports", "dest_endpoints")


class Refusal(Exception):
    """A request the agent refuses: HTTP ``status`` and a one-line ``reason``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason.replace("\n", " ")


@dataclass(frozen=True, slots=True)
class Policy:
    """What an agent may do: destinations (``allow``), total send rate and run duration caps."""

    allow: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = (ipaddress.ip_network("127.0.0.0/8"),)
    max_rate_bps: float | None = None
    max_duration_s: float | None = None

    def allowed(self, address: str) -> bool:
        ip = ipaddress.ip_address(address)
        return any(ip in net for net in self.allow)


def parse_allow(text: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """``CIDR[,CIDR...]`` → networks (ConfigError naming the bad entry)."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        try:
            out.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ConfigError(f"--allow: {part!r} is not an address or CIDR network") from None
    return tuple(out)


def token_ok(authorization: str | None, token: str) -> bool:
    """``Authorization: Bearer TOKEN`` matches ``token`` (constant-time compare)."""
    if not authorization or not authorization.startswith("Bearer "):
        return False
    return hmac.compare_digest(authorization[7:].encode(), token.encode())


def check_version(path: str, header: str | None) -> None:
    """409 for a path of another API version or an ``X-Emulator-Api`` header naming one."""
    m = re.match(r"^/v(\d+)/", path)
    if m and int(m.group(1)) != API_VERSION:
        raise Refusal(409, f"unknown API version v{m.group(1)} (this agent speaks v{API_VERSION})")
    if header is not None and header.strip() != str(API_VERSION):
        raise Refusal(409, f"unknown API version {header!r} (this agent speaks {API_VERSION})")


@dataclass(frozen=True, slots=True)
class ArmRequest:
    """A run to arm: the schedule (by hash), this agent's ranks, every rank's data-plane endpoint,
    the endpoint settings and the bounds of the run (``start_timeout_s``: how long the armed run waits
    for its start). ``progress_interval_s``: the least time between two progress events of the run (the
    agent does no progress work more often while the data plane is live)."""

    schedule_sha256: str
    local_ranks: tuple[int, ...]
    addresses: tuple[str, ...]
    ports: tuple[int, ...]
    endpoint: EndpointConfig
    timeout_s: float
    start_timeout_s: float = 60.0
    heartbeat_timeout_s: float = 5.0
    linger_s: float = 1.0
    ranks_per_worker: int = 0
    progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S

    def to_json(self) -> dict[str, Any]:
        return {"api": API_VERSION, "schedule_format": SCHEDULE_VERSION, "schedule_sha256": self.schedule_sha256,
                "local_ranks": list(self.local_ranks), "addresses": list(self.addresses), "ports": list(self.ports),
                "endpoint": endpoint_to_json(self.endpoint), "timeout_s": self.timeout_s,
                "start_timeout_s": self.start_timeout_s,
                "heartbeat_timeout_s": self.heartbeat_timeout_s, "linger_s": self.linger_s,
                "ranks_per_worker": self.ranks_per_worker, "progress_interval_s": self.progress_interval_s}


def endpoint_to_json(cfg: EndpointConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(cfg):
        if not f.init or f.name in _DERIVED:
            continue
        v = getattr(cfg, f.name)
        if f.name == "np":
            v = None if v is None else {g.name: getattr(v, g.name) for g in fields(v)}
        elif f.name == "cc_overrides":
            v = [list(kv) for kv in v]
        out[f.name] = v
    return out


def endpoint_from_json(doc: Any) -> EndpointConfig:
    """An :class:`EndpointConfig` from its JSON form (Refusal 400 naming the bad key)."""
    if not isinstance(doc, dict):
        raise Refusal(400, "'endpoint' must be an object")
    known = {f.name for f in fields(EndpointConfig) if f.init} - set(_DERIVED)
    for k in doc:
        if k not in known:
            raise Refusal(400, f"'endpoint.{k}' is not an endpoint setting")
    kw = dict(doc)
    try:
        if kw.get("np") is not None:
            if not isinstance(kw["np"], dict):
                raise Refusal(400, "'endpoint.np' must be an object")
            kw["np"] = NpParams(**kw["np"])
        if "cc_overrides" in kw:
            kw["cc_overrides"] = tuple((str(k), v) for k, v in kw["cc_overrides"])
        return EndpointConfig(**kw)
    except (ConfigError, TypeError, ValueError) as exc:
        raise Refusal(400, f"'endpoint': {exc}") from None


def _int_list(doc: dict, key: str) -> tuple[int, ...]:
    v = doc.get(key)
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise Refusal(400, f"'{key}' must be a list of integers")
    return tuple(v)


def _number(doc: dict, key: str, default: float | None = None) -> float:
    v = doc.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise Refusal(400, f"'{key}' must be a number >= 0")
    return float(v)


def parse_arm(doc: Any, policy: Policy) -> ArmRequest:
    """Validate an arm request against the agent's ``policy`` (the Refusals of the module docstring)."""
    if not isinstance(doc, dict):
        raise Refusal(400, "the body must be a JSON object")
    if doc.get("api") != API_VERSION:
        raise Refusal(409, f"unknown API version {doc.get('api')!r} (this agent speaks {API_VERSION})")
    if doc.get("schedule_format") != SCHEDULE_VERSION:
        raise Refusal(409, f"unknown schedule format {doc.get('schedule_format')!r} "
                           f"(this agent reads {SCHEDULE_VERSION})")
    known = set(ArmRequest.__dataclass_fields__) | {"api", "schedule_format"}
    for k in doc:
        if k not in known:
            raise Refusal(400, f"unknown key {k!r}")
    sha = doc.get("schedule_sha256")
    if not isinstance(sha, str) or not HASH_RE.match(sha):
        raise Refusal(400, "'schedule_sha256' must be 64 lowercase hex digits")
    addresses = doc.get("addresses")
    if not isinstance(addresses, list) or not addresses or not all(isinstance(a, str) for a in addresses):
        raise Refusal(400, "'addresses' must be a non-empty list of IP addresses")
    for i, a in enumerate(addresses):
        try:
            ipaddress.ip_address(a)
        except ValueError:
            raise Refusal(400, f"'addresses[{i}]' {a!r} is not an IP address") from None
    for a in addresses:  # before anything else is looked at: a run aimed outside is refused as such
        if not policy.allowed(a):
            raise Refusal(403, f"destination {a} is outside this agent's --allow "
                               f"({','.join(map(str, policy.allow))})")
    ports = _int_list(doc, "ports")
    if len(ports) != len(addresses) or not all(1 <= p <= 65535 for p in ports):
        raise Refusal(400, "'ports' must give one port in 1..65535 per address")
    local = _int_list(doc, "local_ranks")
    if not local or len(set(local)) != len(local) or not all(0 <= r < len(addresses) for r in local):
        raise Refusal(400, f"'local_ranks' must name distinct ranks 0..{len(addresses) - 1}")
    timeout_s = _number(doc, "timeout_s")
    rpw = doc.get("ranks_per_worker", 0)
    if isinstance(rpw, bool) or not isinstance(rpw, int) or rpw < 0:
        raise Refusal(400, "'ranks_per_worker' must be an integer >= 0")
    progress_s = _number(doc, "progress_interval_s", DEFAULT_PROGRESS_INTERVAL_S)
    if progress_s < MIN_PROGRESS_INTERVAL_S:
        raise Refusal(400, f"'progress_interval_s' must be at least {MIN_PROGRESS_INTERVAL_S:g} s")
    endpoint = endpoint_from_json(doc.get("endpoint"))
    if policy.max_duration_s is not None and timeout_s > policy.max_duration_s:
        raise Refusal(422, f"run timeout {timeout_s:g} s is above this agent's --max-duration "
                           f"{policy.max_duration_s:g} s")
    rate = endpoint.line_rate_bps * len(local)
    if policy.max_rate_bps is not None and rate > policy.max_rate_bps:
        raise Refusal(422, f"{len(local)} ranks at {format_rate_bps(endpoint.line_rate_bps)} "
                           f"({format_rate_bps(rate)}) is above this agent's --max-rate "
                           f"{format_rate_bps(policy.max_rate_bps)}")
    return ArmRequest(schedule_sha256=sha, local_ranks=tuple(sorted(local)), addresses=tuple(addresses),
                      ports=ports, endpoint=endpoint, timeout_s=timeout_s,
                      start_timeout_s=_number(doc, "start_timeout_s", 60.0),
                      heartbeat_timeout_s=_number(doc, "heartbeat_timeout_s", 5.0),
                      linger_s=_number(doc, "linger_s", 1.0), ranks_per_worker=rpw,
                      progress_interval_s=progress_s)


def parse_start(doc: Any, now_ns: int) -> int:
    """The t0 of a start request: a positive integer after ``now_ns`` (this agent's monotonic clock)."""
    t0 = doc.get("t0_ns") if isinstance(doc, dict) else None
    if isinstance(t0, bool) or not isinstance(t0, int) or t0 <= 0:
        raise Refusal(400, "'t0_ns' must be a positive integer (this agent's monotonic clock)")
    if t0 <= now_ns:
        raise Refusal(400, f"'t0_ns' is {(now_ns - t0) / 1e6:.1f} ms in the past")
    return t0
