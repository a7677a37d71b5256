"""The ``perturbations:`` section of a profile: injected stragglers, slow NICs and links that go down.

Each entry names either ``ranks`` (a list or a range string) with at least one of ``compute_scale``,
``delay_before`` and ``nic_rate``, or a ``link`` (a port name of the sim topology, e.g. ``host2->sw0``,
``leaf0->spine1``) with ``down``. What each does on which fabric is :mod:`emulator.schedule.perturb`'s
business; rules that need the world size or the topology are checked there, before the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulator.schema import SchemaError, join, opt
from emulator.units import format_duration_ns, format_rate_bps

DELAY_DISTS = ("fixed", "lognormal")


def _ranks(value: Any, path: str) -> tuple[int, ...]:
    from emulator.config.model import parse_rank_list

    ranks = parse_rank_list(value, path)
    if not ranks:
        raise SchemaError(path, "names no rank")
    return ranks


@dataclass(frozen=True, slots=True)
class DelayBefore:
    collective: str | None = opt(None, doc="collective type the delay precedes (all_reduce, all_to_all, ...)",
                                 default_doc="every collective")
    dist: str | None = opt(None, choices=DELAY_DISTS, doc="fixed or lognormal",
                           default_doc="fixed when `fixed` is given, else lognormal")
    fixed_ns: int | None = opt(None, key="fixed", unit="ns", lo=0, doc="the delay (dist fixed)")
    median_ns: int | None = opt(None, key="median", unit="ns", lo=1, doc="median delay (dist lognormal)")
    sigma: float = opt(0.5, lo=0.0, doc="lognormal shape: standard deviation of ln(delay)")

    @property
    def distribution(self) -> str:
        return self.dist or ("fixed" if self.fixed_ns is not None else "lognormal")

    def check(self, path: str) -> None:
        from emulator.config.model import COLLECTIVE_TYPES

        if self.collective is not None and self.collective not in COLLECTIVE_TYPES:
            raise SchemaError(join(path, "collective"),
                              f"{self.collective!r} is not one of {', '.join(COLLECTIVE_TYPES)}")
        if self.distribution == "fixed":
            if self.fixed_ns is None:
                raise SchemaError(join(path, "fixed"), "required with dist fixed")
            if self.median_ns is not None:
                raise SchemaError(join(path, "median"), "only dist lognormal takes a median")
        else:
            if self.median_ns is None:
                raise SchemaError(join(path, "median"), "required with dist lognormal")
            if self.fixed_ns is not None:
                raise SchemaError(join(path, "fixed"), "only dist fixed takes a fixed delay")

    def describe(self) -> str:
        what = self.collective or "every collective"
        if self.distribution == "fixed":
            return f"delay {_us(self.fixed_ns or 0)} before {what}"
        return f"delay lognormal (median {_us(self.median_ns or 0)}, sigma {self.sigma:g}) before {what}"


@dataclass(frozen=True, slots=True)
class LinkDown:
    at_ns: int = opt(None, key="at", unit="ns", lo=0, required=True, doc="when the link goes down (from the run's start)")
    for_ns: int = opt(None, key="for", unit="ns", lo=1, required=True, doc="how long it stays down")


@dataclass(frozen=True, slots=True)
class Perturbation:
    ranks: tuple[int, ...] | None = opt(None, parse=_ranks, dumper=list, type_doc="list of int or range string",
                                        doc="the ranks perturbed: a list or a range string like '8-15'")
    compute_scale: float | None = opt(None, lo=0.0, doc="multiply the ranks' compute delays (1.5 = a slow GPU)")
    delay_before: DelayBefore | None = opt(None, doc="an extra wait before each collective of the ranks "
                                                     "(seeded per instance)")
    nic_rate_bps: int | None = opt(None, key="nic_rate", unit="bps", lo=1,
                                   doc="cap the ranks' NIC send rate (a slow or degraded NIC)")
    link: str | None = opt(None, doc="a sim/fluid port by name, e.g. host2->sw0 or leaf0->spine1 (sim and fluid)")
    down: LinkDown | None = opt(None, doc="the link drops every packet for an interval: {at: 5ms, for: 1ms}")

    def check(self, path: str) -> None:
        if (self.ranks is None) == (self.link is None):
            raise SchemaError(path, "give exactly one of ranks and link")
        if self.link is not None:
            if self.down is None:
                raise SchemaError(join(path, "down"), "required with link")
            for key, value in (("compute_scale", self.compute_scale), ("delay_before", self.delay_before),
                               ("nic_rate", self.nic_rate_bps)):
                if value is not None:
                    raise SchemaError(join(path, key), "applies to ranks, not to a link")
            return
        if self.down is not None:
            raise SchemaError(join(path, "down"), "applies to a link, not to ranks")
        if self.compute_scale is None and self.delay_before is None and self.nic_rate_bps is None:
            raise SchemaError(path, "ranks need at least one of compute_scale, delay_before, nic_rate")

    def describe(self) -> str:
        """``injected compute ×1.5; delay 200 us before all_reduce`` (what a report prints)."""
        if self.link is not None and self.down is not None:
            return f"link {self.link} down at {_us(self.down.at_ns)} for {_us(self.down.for_ns)}"
        parts = []
        if self.compute_scale is not None:
            parts.append(f"injected compute ×{self.compute_scale:g}")
        if self.delay_before is not None:
            parts.append(f"injected {self.delay_before.describe()}")
        if self.nic_rate_bps is not None:
            parts.append(f"NIC capped at {format_rate_bps(self.nic_rate_bps)}")
        return "; ".join(parts)


def _us(ns: int) -> str:
    return format_duration_ns(ns)
