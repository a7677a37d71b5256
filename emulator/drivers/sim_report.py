"""What a sim run reports besides the records (:mod:`emulator.drivers.sim`): queue depths sampled on a time grid,
the progress line's figures, and every port's counters with the samples as a
:class:`~emulator.drivers.contract.FabricReport`."""

from __future__ import annotations

import numpy as np

from emulator.drivers.contract import FabricReport, PortReport, QueueSamples

__all__ = ["SimReport"]


class SimReport:
    """The reporting methods of the sim's run state (``sim._Sim``, whose attributes they read)."""

    __slots__ = ()

    def sample(self, t: int) -> None:
        """Record queue depths at grid points up to ``t`` (one point for an idle gap)."""
        step = self.sample_every
        self.samples_t.append(self.next_sample)
        for q, port in zip(self.samples_q, self.ports, strict=True):
            q.append(port.queue_bytes)
        nxt = self.next_sample + step
        if nxt <= t:
            nxt = t - (t - self.next_sample) % step + step
        self.next_sample = nxt
        if len(self.samples_t) >= self.cfg.max_samples:
            self.samples_t = self.samples_t[::2]
            self.samples_q = [q[::2] for q in self.samples_q]
            self.sample_every *= 2

    def progress_info(self, now: int, elapsed_s: float) -> dict:
        """What the progress line shows (see :func:`run_sim`): virtual time, bytes, packets, flows, ops."""
        counters = [rec.records.counters for rec in self.recorders]
        return {
            "elapsed_s": elapsed_s, "virtual_ns": now, "ranks_done": self.n_done, "ranks": self.n,
            "bytes_delivered": sum(c.get("bytes_received", 0) for c in counters),
            "packets_delivered": sum(c.get("packets_received", 0) for c in counters),
            "flows_done": sum(int(np.count_nonzero(rec.records.end_ns[idx] >= 0))
                              for rec, idx in zip(self.recorders, self.recv_ops, strict=True)),
            "ops_done": sum(ep.ops_completed for ep in self.eps),
        }

    def fabric(self, end_ns: int) -> FabricReport:
        """Every port's counters up to ``end_ns`` and the queue samples (one time grid for all ports)."""
        ports = tuple(PortReport.from_counters(port.counters(end_ns), name=spec.name, kind=spec.kind,
                                               rate_bps=spec.rate_bps, loss_packets=lost)
                      for spec, port, lost in zip(self.topo.ports, self.ports, self.loss_cnt, strict=True))
        n_t = len(self.samples_t)
        samples = QueueSamples.of(np.tile(np.asarray(self.samples_t, np.int64), len(ports)),
                                  np.repeat(np.asarray([p.port for p in ports], np.int64), n_t),
                                  np.concatenate([np.asarray(q, np.int64) for q in self.samples_q])
                                  if self.samples_q else np.zeros(0, np.int64))
        return FabricReport("sim", ports, samples)
