"""A one-line live progress display on stderr for long runs, silent when stderr is not a terminal.

Theory of operation
-------------------
A ``rich`` live display redraws one line (wrapped at the terminal width, erased at the end) every
``interval_s`` from the latest dict the driver reported (every driver calls back about four times a
second; keys it does not report are left out of the line):

* elapsed wall time; ``virtual`` time (the sim: ``virtual_ns``);
* ``ranks done`` (``ranks_done`` / ``ranks``);
* the run iteration in progress, from ``ops_done`` / ops per iteration: ``warmup 1/1`` while the warmup
  iterations run, then ``iteration 2/3`` counting measured iterations only;
* ``flows`` done of the run's flows (``flows_done``, RECV ops ended);
* the share of the run's payload bytes delivered (``bytes_delivered``: payload accepted by the
  receivers, each byte once) and, from the change since the previous redraw, the delivery rate in
  ``Gbit/s`` and the data ``packets/s`` delivered (``packets_delivered``); on the sim the delivery rate
  is over virtual time (what the simulated fabric carries) and the packet rate over wall time (how
  fast the simulator goes: ``simulated packets/s``);
* ``ETA``: elapsed × undelivered / delivered bytes (a guess: compute phases and tails are not
  proportional to bytes), once some bytes are delivered.

When the stream is not a terminal (CI logs, pipes) nothing is ever written: the results and the
summary are the record, a log of progress lines is not.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from emulator.units import format_duration_ns


def _wall(seconds: float) -> str:
    """Elapsed / remaining wall time: ``12.3 s``, ``4 min 05 s``, ``1 h 02 min``."""
    if seconds < 100:
        return f"{seconds:.1f} s"
    m, s = divmod(int(round(seconds)), 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


class ProgressLine:
    """Usable as ``with ProgressLine(...) as p: driver(schedule, p.update)``.

    ``iterations`` is the number of measured iterations and ``warmup`` the warmup ones before them
    (``ops_per_iteration`` ops each); ``bytes_total`` and ``flows_total`` are the whole run's."""

    def __init__(self, label: str, *, ops_per_iteration: int = 0, iterations: int = 0, warmup: int = 0,
                 bytes_total: int = 0, flows_total: int = 0, stream: TextIO | None = None,
                 enabled: bool | None = None, interval_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic, width: int | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:  # the stream itself decides (not FORCE_COLOR and friends): CI logs stay clean
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self._console = Console(file=self.stream, width=width, force_terminal=enabled, highlight=False)
        self.label = label
        self.ops_per_iteration = ops_per_iteration
        self.iterations = iterations
        self.warmup = warmup
        self.bytes_total = bytes_total
        self.flows_total = flows_total
        self.interval_s = interval_s
        self.info: dict = {}
        self._clock = clock
        self._t0 = clock()
        self._last: tuple[float, int, int, int] | None = None  # (elapsed s, virtual ns, bytes, packets) last drawn
        self._live: Live | None = None

    def update(self, info: dict) -> None:
        """Driver callback: remember the latest progress dict."""
        self.info = dict(info)

    def _iteration(self, ops: int) -> str:
        total = self.warmup + self.iterations
        running = min(total, ops // max(1, self.ops_per_iteration) + 1)
        if running <= self.warmup:
            return f"warmup {running}/{self.warmup}"
        return f"iteration {running - self.warmup}/{self.iterations}"

    def _rates(self, elapsed: float, virtual_ns: int | None, delivered: int, packets: int | None) -> list[str]:
        """Delivery rate and packet rate since the previous redraw (the sim: bytes over virtual time)."""
        now = (elapsed, virtual_ns or 0, delivered, packets or 0)
        last, self._last = self._last, now
        t0, v0, b0, p0 = last if last is not None else (0.0, 0, 0, 0)
        out = []
        if virtual_ns is not None:
            if now[1] > v0:
                out.append(f"{(delivered - b0) * 8 / (now[1] - v0):.2f} Gbit/s delivered (virtual time)")
        elif elapsed > t0:
            out.append(f"{(delivered - b0) * 8 / (elapsed - t0) / 1e9:.2f} Gbit/s delivered")
        if packets is not None and elapsed > t0:
            out.append(f"{(packets - p0) / (elapsed - t0):,.0f} {'simulated ' if virtual_ns is not None else ''}"
                       "packets/s")
        return out

    def render(self) -> str:
        elapsed = self._clock() - self._t0
        parts = [f"{self.label}: {_wall(elapsed)}"]
        info = self.info
        virtual = info.get("virtual_ns")
        if isinstance(virtual, int):
            parts.append(f"virtual {format_duration_ns(virtual)}")
        if "ranks" in info:
            parts.append(f"ranks done {info.get('ranks_done', 0)}/{info['ranks']}")
        ops = info.get("ops_done")
        if isinstance(ops, int) and ops >= 0 and self.ops_per_iteration and self.iterations:
            parts.append(self._iteration(ops))
        flows = info.get("flows_done")
        if isinstance(flows, int) and self.flows_total:
            parts.append(f"flows {flows:,}/{self.flows_total:,}")
        delivered = info.get("bytes_delivered")
        if isinstance(delivered, int):
            if self.bytes_total:
                parts.append(f"{100 * min(delivered, self.bytes_total) / self.bytes_total:.1f} % of bytes")
            packets = info.get("packets_delivered")
            parts.extend(self._rates(elapsed, virtual if isinstance(virtual, int) else None, delivered,
                                     packets if isinstance(packets, int) else None))
            if self.bytes_total and 0 < delivered < self.bytes_total:
                parts.append(f"ETA {_wall(elapsed * (self.bytes_total - delivered) / delivered)}")
        return " · ".join(parts)

    def __rich__(self) -> Text:
        """The line as ``rich`` draws it: wrapped at the terminal width, redrawn in place."""
        return Text(self.render())

    def __enter__(self) -> ProgressLine:
        if self.enabled:
            self._live = Live(self, console=self._console, refresh_per_second=1 / max(self.interval_s, 1e-3),
                              transient=True, redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
