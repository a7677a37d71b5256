"""Prometheus text exposition of an agent's state (``GET /metrics``), via ``prometheus_client``.

Live, from the run's progress: ranks done, bytes and packets delivered to the local ranks, and per local
rank the delivery rates (bytes/s, packets/s) between the last two progress snapshots
(:func:`delivery_rates`; 0 once the run is over). Per rank (bytes
and packets sent and received, CNPs, retransmits, timeouts) and per queue pair (events by kind), from
the last finished run's records; the endpoints' timer lag (p99, max) and socket drops from its health.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from emulator.endpoint.events import FlowEventKind

#: rank counters exported as ``emulator_rank_<name>_total``
RANK_COUNTERS = ("bytes_sent", "bytes_received", "packets_sent", "packets_received", "cnps_received",
                 "cnps_sent", "retransmits", "timeouts", "naks_received")


class _AgentCollector:
    def __init__(self, agent: Any) -> None:
        self.agent = agent

    def collect(self) -> Any:
        agent = self.agent
        run = agent.run
        yield GaugeMetricFamily("emulator_agent_busy", "1 while a run is in progress", value=int(agent.busy))
        yield CounterMetricFamily("emulator_agent_runs", "runs armed since the agent started",
                                  value=agent.runs_total)
        prog = run.progress if run is not None else {}
        yield GaugeMetricFamily("emulator_ranks_done", "local ranks done in the current run",
                                value=prog.get("ranks_done", 0))
        yield CounterMetricFamily("emulator_bytes_delivered", "payload bytes delivered to local ranks",
                                  value=prog.get("bytes_delivered", 0))
        yield CounterMetricFamily("emulator_packets_delivered", "data packets delivered to local ranks",
                                  value=prog.get("packets_delivered", 0))
        yield GaugeMetricFamily("emulator_run_elapsed_seconds", "seconds since t0 of the current run",
                                value=prog.get("elapsed_s", 0.0))
        rates = run.rates if run is not None else {}
        live = agent.busy
        rate_fams = (GaugeMetricFamily("emulator_rank_delivered_bytes_per_second", "payload bytes/s delivered "
                                       "to a local rank (last progress interval)", labels=["rank"]),
                     GaugeMetricFamily("emulator_rank_delivered_packets_per_second", "data packets/s delivered "
                                       "to a local rank (last progress interval)", labels=["rank"]))
        for rank, pair in sorted(rates.items(), key=lambda kv: int(kv[0])):
            for fam, v in zip(rate_fams, pair, strict=True):
                fam.add_metric([rank], v if live else 0.0)
        yield from rate_fams
        res = (run.result or {}) if run is not None else {}
        fams = {name: CounterMetricFamily(f"emulator_rank_{name}", f"{name} of a rank in the last run",
                                          labels=["rank"]) for name in RANK_COUNTERS}
        qp_events = CounterMetricFamily("emulator_qp_events", "events per queue pair in the last run (CNPs, "
                                        "NAKs, retransmits, timeouts)", labels=["rank", "qp", "kind"])
        for rank, rec in sorted(res.get("records", {}).items(), key=lambda kv: int(kv[0])):
            for name in RANK_COUNTERS:
                fams[name].add_metric([str(rank)], rec["counters"].get(name, 0))
            for (qp, kind), n in sorted(_qp_events(rec).items()):
                qp_events.add_metric([str(rank), str(qp), kind], n)
        yield from fams.values()
        yield qp_events
        health = res.get("health", {})
        lag = health.get("endpoint_timer_lag_ns", {})
        g = GaugeMetricFamily("emulator_timer_lag_seconds", "endpoint timer lag of the last run", labels=["q"])
        for q in ("p99", "max"):
            if lag.get(q) is not None:
                g.add_metric([q], lag[q] / 1e9)
        yield g
        yield CounterMetricFamily("emulator_socket_drops", "datagrams dropped by full rank socket buffers",
                                  value=health.get("endpoint_socket_drops", 0))


def delivery_rates(prev: dict[str, Any], cur: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Per rank (bytes/s, packets/s) delivered between two progress snapshots (``elapsed_s`` and
    ``rank_delivered``); a rank without an earlier value, or no time between them, counts from zero."""
    dt_s = float(cur.get("elapsed_s", 0.0)) - float(prev.get("elapsed_s", 0.0))
    before = prev.get("rank_delivered", {})
    out = {}
    for rank, (size_bytes, packets) in cur.get("rank_delivered", {}).items():
        b0, p0 = before.get(rank, (0, 0))
        out[rank] = ((size_bytes - b0) / dt_s, (packets - p0) / dt_s) if dt_s > 0 else (0.0, 0.0)
    return out


#: event code → the name the results format stores it by
_KIND_NAMES = {int(k): k.name.lower() for k in FlowEventKind}


def _qp_events(rec: dict[str, Any]) -> dict[tuple[int, str], int]:
    arrays = rec.get("arrays", {})
    out: dict[tuple[int, str], int] = {}
    for kind, qp in zip(arrays.get("event_kind", []), arrays.get("event_qp", []), strict=False):
        if kind in _KIND_NAMES:
            key = (int(qp), _KIND_NAMES[kind])
            out[key] = out.get(key, 0) + 1
    return out


def metrics_text(agent: Any) -> tuple[bytes, str]:
    """The exposition body and its content type."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_AgentCollector(agent))
    return generate_latest(reg), CONTENT_TYPE_LATEST
