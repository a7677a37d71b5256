"""Links that go down on the fluid fabric (``perturbations: - link: X->Y down: {at, for}``).

Theory of operation
-------------------
As on the packet sim, a port whose link is down keeps serving its queue, and what it sends in the
interval ``[at, at + for)`` is lost on the wire. On the fluid fabric the port's output of a slice that
starts in the interval is lost (for a NIC port: what the NIC sends). A flow that loses bytes opens a
*loss epoch* (go-back-N): the receiver discards whatever of the flow arrives after the gap, so the
wasted bytes are the lost ones, the flow's bytes queued behind them (at the dead port and upstream of it)
and every byte it sends until it goes back. The epoch ends

* by a NAK: the first of the flow's bytes to reach the receiver while its path is up again makes it NAK, which reaches the sender the flow's feedback delay later; or
* by the retransmit timeout: ``retransmit_timeout_ns × backoff`` after the flow last sent (the sim's
  sender restarts the timer with every batch), when no NAK came (a sender that sent everything into
  the dead link waits for it); each timeout doubles the backoff, up to ``max_backoff``, and a NAK
  resets it, as the sim's sender does.

When the epoch ends the flow sends its wasted bytes again. A flow in an epoch is never delivered.
Bytes of the flow that were ahead of the loss (downstream of it when the epoch opened) arrive first and
make no NAK.
:class:`LinkFaults` is sans-IO state the fabric calls once per slice; times are float ns.
"""

from __future__ import annotations

import numpy as np

_INF = np.inf


class LinkFaults:
    """Down intervals per port and the loss epochs of the flows that crossed them (see module docstring)."""

    def __init__(self, intervals: dict[int, list[tuple[int, int]]], n_ports: int, n_flows: int,
                 fb_delay_ns: np.ndarray, retransmit_timeout_ns: float, max_backoff: int = 64) -> None:  # fmt: skip
        self.intervals = {int(p): sorted((float(lo), float(hi)) for lo, hi in iv) for p, iv in intervals.items()}
        self.n_ports = n_ports
        self.edges = np.unique([x for iv in self.intervals.values() for pair in iv for x in pair])
        self.fb_delay_ns = fb_delay_ns
        self.rto_ns = float(retransmit_timeout_ns)
        self.max_backoff = int(max_backoff)
        self.wasted = np.zeros(n_flows)  # bytes of the open epoch the flow must send again
        self.in_epoch = np.zeros(n_flows, bool)
        self.recover_ns = np.full(n_flows, _INF)  # when the open epoch ends (NAK or timeout)
        self.nak_due = np.zeros(n_flows, bool)  # the epoch ends by a NAK (not by the timeout)
        self.backoff = np.ones(n_flows)
        self.opened_ns = np.full(n_flows, -_INF)
        self.ahead = np.zeros(n_flows)  # bytes still to arrive that were ahead of the loss
        self.n_open = 0
        self.lost_bytes = np.zeros(n_ports)
        self.epochs = 0

    def down(self, t_ns: float) -> np.ndarray | None:
        """Ports whose link is down at ``t_ns`` (None when none is)."""
        mask = None
        for port, iv in self.intervals.items():
            if any(lo <= t_ns < hi for lo, hi in iv):
                if mask is None:
                    mask = np.zeros(self.n_ports, bool)
                mask[port] = True
        return mask

    def next_change_ns(self, t_ns: float) -> float:
        """The next time after ``t_ns`` a link goes down or comes up, or an epoch ends (``inf`` = none)."""
        i = int(np.searchsorted(self.edges, t_ns, side="right"))
        t = float(self.edges[i]) if i < self.edges.size else _INF
        if self.n_open:
            t = min(t, float(self.recover_ns[self.in_epoch].min()))
        return t

    def busy(self, t_ns: float) -> bool:
        """A link is down at ``t_ns`` or a flow's epoch is open: the fabric steps in slices."""
        return self.n_open > 0 or self.down(t_ns) is not None

    def sending_in_epoch(self, flows: np.ndarray, rate_bps: np.ndarray) -> bool:
        """A flow of ``flows`` sends (``rate_bps`` > 0) in an open epoch: its NAK comes with its first byte to
        arrive, so the fabric steps in slices."""
        return self.n_open > 0 and bool((self.in_epoch[flows] & (rate_bps > 0)).any())

    def lose(self, flows: np.ndarray, ports: np.ndarray, lost: np.ndarray, queued: np.ndarray, t_ns: float,
             ahead: np.ndarray | None = None) -> None:  # fmt: skip
        """``lost[i]`` bytes of flow ``flows[i]`` (distinct) were lost at port ``ports[i]`` in the slice ending at
        ``t_ns``, with ``queued[i]`` of its bytes behind them and ``ahead[i]`` (default none) ahead of them."""
        hit = lost > 0
        if not hit.any():
            return
        self.lost_bytes += np.bincount(ports[hit], lost[hit], self.n_ports)
        new = hit & ~self.in_epoch[flows]  # an open epoch already counts these bytes (sent in it, or queued)
        if new.any():
            f = flows[new]
            self.epochs += int(f.size)
            self.in_epoch[f] = True
            self.nak_due[f] = False
            self.opened_ns[f] = t_ns
            self.ahead[f] = 0.0 if ahead is None else ahead[new]
            self.n_open += int(f.size)
            self.wasted[f] = lost[new] + queued[new]
            self.recover_ns[f] = t_ns + self.rto_ns * self.backoff[f]

    def slice_end(self, flows: np.ndarray, sent: np.ndarray, arrived: np.ndarray, path_down: np.ndarray,
                  t_end: float) -> np.ndarray:  # fmt: skip
        """Account a slice of the active ``flows``: ``sent`` left their NICs, ``arrived`` reached their
        receivers, ``path_down``: a port on their path is down. Returns the bytes each flow must send again
        (its wasted bytes, when its epoch ends)."""
        resend = np.zeros(flows.size)
        if not self.n_open:
            return resend
        ep = self.in_epoch[flows]
        if not ep.any():
            return resend
        rows = np.flatnonzero(ep)
        f = flows[rows]
        old = self.opened_ns[f] < t_end  # the epoch opened in this slice counts its bytes in queued
        self.wasted[f] += np.where(old, sent[rows], 0.0)  # sent during the epoch: lost, or discarded
        sending = (sent[rows] > 0) & ~self.nak_due[f]
        if sending.any():  # the retransmit timer restarts with every batch sent
            fs = f[sending]
            self.recover_ns[fs] = t_end + self.rto_ns * self.backoff[fs]
        arr = arrived[rows]
        first = np.minimum(arr, self.ahead[f])  # what was ahead of the loss arrives first
        self.ahead[f] -= first
        nak = (arr - first > 1e-9) & ~path_down[rows] & ~self.nak_due[f]
        if nak.any():
            fn = f[nak]
            self.nak_due[fn] = True
            self.recover_ns[fn] = np.minimum(self.recover_ns[fn], t_end + self.fb_delay_ns[fn])
        over = self.recover_ns[f] <= t_end
        if over.any():
            fo = f[over]
            timeout = ~self.nak_due[fo]
            self.backoff[fo] = np.where(timeout, np.minimum(self.backoff[fo] * 2, self.max_backoff), 1.0)
            resend[rows[over]] = self.wasted[fo]
            self.wasted[fo] = 0.0
            self.in_epoch[fo] = False
            self.n_open -= int(fo.size)
            self.nak_due[fo] = False
            self.recover_ns[fo] = _INF
        return resend
