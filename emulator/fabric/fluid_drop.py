"""Tail drop on the fluid fabric: which flows lose what a port's buffer cannot hold, and what they resend.

Theory of operation
-------------------
A port whose queue would exceed the buffer drops the excess (``over`` bytes) at the end of a slice. A
flow that loses bytes sends them again, and a *loss epoch* (go-back-N) wastes what the flow sends from
the loss until the NAK is back — the port's queueing delay at the loss plus the path's round trip: those
bytes reach the receiver out of order and are discarded, so they are sent again (:meth:`TailDrop.wasted`,
per slice, at the rate the flow has then, as DCQCN cuts it). A flow that has sent everything it had
left when the epoch opened waits for the NAK (it sends nothing until the epoch ends), then goes back.
A flow whose last bytes are lost waits as long (the packet sim's sender would wait for its retransmit
timeout, but the expected losses that open an epoch pass a whole packet later than the flow's first
loss would fall, so the fluid would time out flows the packet sim NAKs). Drops of a flow in an epoch are of bytes sent in it, counted already. Who loses depends on the senders:

* **Rate-controlled senders (DCQCN)** — drop-tail drops arriving packets, so the excess is taken from the
  flows in proportion to what each brought to the port in the slice. A flow outside an epoch accumulates
  its expected lost packets over the overflow episode (as the NP accumulates CE marks) and opens an epoch
  once a whole packet is lost: a sustained overflow (an incast filling the buffer) puts every flow that
  arrives during it in go-back-N, as the packet sim does; a momentary overflow of a few packets spread
  over many flows opens none (its bytes are resent, nothing is wasted), where opening an epoch for every
  flow with a fraction of a packet lost would cascade into more overflow. With a ``seed`` the expected
  losses at which a flow loses its next packet are drawn, exponential of mean one packet (a full buffer
  drops whichever packets arrive: each of a flow's packets is lost by chance), afresh after each epoch, so
  identical flows go back N at different times and by different amounts, as on the packet sim; without a
  seed every flow opens its epoch at one whole packet lost.
* **Constant-rate senders** (``cc`` none or fixed) — identical pacers are phase-locked by drop-tail: the
  packet sim's losers keep losing while one flow gets through and finishes, then the next. The drops take
  as few flows as they can: first flows already in an epoch (what they send until the NAK is wasted
  anyway), then the one whose last epoch is the oldest (then the highest flow id), so the losers rotate.
  Spreading them would put every flow in an epoch at once, each wasting what it got through, and an
  overflowing incast without congestion control would never finish.

:class:`TailDrop` is sans-IO per-flow state; the fabric calls :meth:`TailDrop.drop` per level and slice.
"""

from __future__ import annotations

import numpy as np

_BYTES_PER_BIT_NS = 1e-9 / 8
_DROP_STREAM = 0x0D50  # the drops' random stream, apart from the marks' (the same seed)


class TailDrop:
    """Loss epochs and accumulated expected losses per flow (see module docstring); times are float ns."""

    def __init__(self, n_flows: int, n_ports: int, rate_bps: np.ndarray, rtt_ns: np.ndarray, pkt_bytes: float,
                 spread: bool, seed: int | None = None) -> None:  # fmt: skip
        self.rate_bps = rate_bps
        self.rtt_ns = rtt_ns
        self.pkt_bytes = float(pkt_bytes)
        self.spread = spread
        self.n_ports = n_ports
        self.gbn_until_ns = np.full(n_flows, -np.inf)  # when the flow's open loss epoch ends
        self.open_until_ns = -np.inf  # the last of those
        self.budget = np.zeros(n_flows)  # bytes the flow may still waste in its epoch
        self.cover = np.zeros(n_flows)  # bytes sent in the epoch (counted for resending), not dropped since
        # lost packets since the flow's last epoch (spread form); it opens one at 1: with a seed, from 1 − Exp(1),
        # drawn at the flow's first drop (untouched zeros cost no memory for the flows that never lose)
        self._rng = np.random.default_rng([seed, _DROP_STREAM]) if seed is not None and spread else None
        self.lost_acc = np.zeros(n_flows)
        self._drawn = np.zeros(n_flows if self._rng is not None else 0, bool)
        self.dropped_bytes = np.zeros(n_ports)
        self.epochs = 0

    def stalled(self, flows: np.ndarray, t_ns: float) -> np.ndarray:
        """Which of ``flows`` wait for the end of their loss epoch at ``t_ns`` (sent all they had, NAK not back)."""
        return (t_ns < self.gbn_until_ns[flows]) & (self.budget[flows] <= 0)

    def wasted(self, flows: np.ndarray, sent: np.ndarray, t0_ns: float, t1_ns: float) -> np.ndarray:
        """Of ``sent`` (bytes ``flows`` sent in the slice ``[t0_ns, t1_ns)``), what falls in their loss epochs:
        the bytes each must send again."""
        until = self.gbn_until_ns[flows]
        w = np.clip((until - t0_ns) / max(t1_ns - t0_ns, 1e-9), 0.0, 1.0)
        waste = np.minimum(sent * w, self.budget[flows])
        self.budget[flows] -= waste
        self.cover[flows] += waste
        return waste

    def drop(self, flows: np.ndarray, ph: np.ndarray, rest: np.ndarray, arrived: np.ndarray, queue: np.ndarray,
             over: np.ndarray, left: np.ndarray, t_ns: float) -> np.ndarray:  # fmt: skip
        """Drop ``over[port]`` bytes at each overflowing port from the backlogs ``rest`` of ``flows`` (at
        ports ``ph``; ``rest`` shrinks in place); ``arrived``: each flow's bytes into its port in the slice,
        ``queue``: the ports' queues before the drop, ``left``: the flows' bytes left to send. Returns the
        bytes each flow must send again."""
        if self.spread:
            drop = _spread(ph, rest, arrived, over, self.n_ports)
        else:
            drop = self._concentrated(flows, ph, rest, over, t_ns)
        rest -= drop
        self.dropped_bytes += np.bincount(ph, drop, self.n_ports)
        hit = drop > 0
        in_epoch = t_ns < self.gbn_until_ns[flows]
        if self.spread:
            acc = self.lost_acc[flows]
            if self._rng is not None and (first := hit & ~self._drawn[flows]).any():  # the first loss: a draw
                acc[first] = 1.0 - self._rng.exponential(size=int(first.sum()))
                self._drawn[flows[first]] = True
            acc += np.where(in_epoch, 0.0, drop / self.pkt_bytes)
            new_epoch = hit & ~in_epoch & (acc >= 1.0)
            if self._rng is not None and new_epoch.any():  # the next loss: a fresh draw
                acc[new_epoch] = 1.0 - self._rng.exponential(size=int(new_epoch.sum()))
            else:
                acc = np.where(new_epoch, 0.0, acc)
            self.lost_acc[flows] = acc
        else:
            new_epoch = hit & ~in_epoch
        cover = self.cover[flows]
        covered = np.where(in_epoch, np.minimum(drop, cover), 0.0)
        self.cover[flows] = np.where(new_epoch, 0.0, cover - covered)
        if new_epoch.any():
            f = flows[new_epoch]
            self.epochs += int(f.size)
            until = t_ns + queue[ph[new_epoch]] * 8e9 / self.rate_bps[ph[new_epoch]] + self.rtt_ns[f]
            self.gbn_until_ns[f] = until
            self.open_until_ns = max(self.open_until_ns, float(until.max()))
            self.budget[f] = left[new_epoch]
        return drop - covered

    def _concentrated(self, flows: np.ndarray, ph: np.ndarray, rest: np.ndarray, over: np.ndarray,
                      t_ns: float) -> np.ndarray:  # fmt: skip
        """Per port: flows in an epoch first, then the oldest epoch, then the highest id, each up to its backlog."""
        drop = np.zeros_like(rest)
        r = np.flatnonzero(over[ph] > 0)
        until = self.gbn_until_ns[flows[r]]
        order = r[np.lexsort((-flows[r], until, t_ns >= until, ph[r]))]
        amount = rest[order]
        port = ph[order]
        ahead = np.cumsum(amount) - amount  # bytes of this port's earlier victims, plus earlier ports'
        first = np.maximum.accumulate(np.where(np.r_[True, port[1:] != port[:-1]], np.arange(order.size), 0))
        drop[order] = np.clip(over[port] - (ahead - ahead[first]), 0.0, amount)
        return drop


def _spread(ph: np.ndarray, rest: np.ndarray, arrived: np.ndarray, over: np.ndarray, n_ports: int) -> np.ndarray:
    """Per overflowing port: ``over`` taken from the flows in proportion to their arrivals, each up to its
    backlog; what that leaves (a flow that arrived with more than it holds) in proportion to the backlogs."""
    hot = over[ph] > 0
    w = np.where(hot, np.maximum(arrived, 0.0), 0.0)
    tot = np.bincount(ph, w, n_ports)
    t = tot[ph]
    part = np.divide(w, t, out=np.zeros_like(w), where=t > 0)  # each flow's share of its port's arrivals (≤ 1)
    drop = np.minimum(part * over[ph], rest)
    short = np.maximum(over - np.bincount(ph, drop, n_ports), 0.0)
    if (short > 1e-9 * np.maximum(over, 1.0)).any():
        room = np.where(hot, rest - drop, 0.0)
        held = np.bincount(ph, room, n_ports)
        frac = np.minimum(1.0, np.divide(short, held, out=np.zeros_like(short), where=held > 0))
        drop += room * frac[ph]
    return drop
