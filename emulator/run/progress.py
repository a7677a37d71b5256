"""A one-line progress display on stderr for long runs, silent when stderr is not a terminal.

Theory of operation
-------------------
A daemon thread redraws one line (``\\r`` + text, erased at the end) every ``interval_s``: elapsed wall
time, and — when the driver reports progress (the socket drivers call back with ``ranks_done`` and a
``progress`` count of completed ops and packets; ``ops_done`` if a driver counts ops alone) — ranks
done, run iterations done (total ops done / ops per iteration) and the rate of progress events. The virtual-time driver reports nothing while it runs, so its line shows elapsed time
only. When the stream is not a TTY (CI logs, pipes) nothing is ever written.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


class ProgressLine:
    """Usable as ``with ProgressLine(...) as p: driver(schedule, p.update)``."""

    def __init__(self, label: str, *, ops_per_iteration: int = 0, iterations: int = 0,
                 stream: TextIO | None = None, enabled: bool | None = None, interval_s: float = 0.5) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.label = label
        self.ops_per_iteration = ops_per_iteration
        self.iterations = iterations
        self.interval_s = interval_s
        self.info: dict = {}
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._width = 0

    def update(self, info: dict) -> None:
        """Driver callback: remember the latest progress dict."""
        self.info = dict(info)

    def render(self) -> str:
        elapsed = time.monotonic() - self._t0
        parts = [f"{self.label}: {elapsed:6.1f} s"]
        info = self.info
        if "ranks" in info:
            parts.append(f"ranks done {info.get('ranks_done', 0)}/{info['ranks']}")
        ops = info.get("ops_done")
        if isinstance(ops, int) and ops >= 0 and self.ops_per_iteration and self.iterations:
            it = min(self.iterations, ops // max(1, self.ops_per_iteration))
            parts.append(f"iteration {it}/{self.iterations}")
        count = info.get("progress")
        if isinstance(count, int) and count > 0:
            parts.append(f"{count / max(elapsed, 1e-9):,.0f} events/s")
        return " · ".join(parts)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._draw(self.render())

    def _draw(self, text: str) -> None:
        pad = max(0, self._width - len(text))
        self._width = len(text)
        try:
            self.stream.write("\r" + text + " " * pad)
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def __enter__(self) -> ProgressLine:
        if self.enabled:
            self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._draw("")
            try:
                self.stream.write("\r")
                self.stream.flush()
            except (OSError, ValueError):
                pass
