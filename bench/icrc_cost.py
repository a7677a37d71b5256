"""Cost of ``fabric.transport.icrc: compute`` against ``zero``: the two endpoints alone, no sockets.

One RDMA WRITE flow of ``--size`` bytes from rank 0 to rank 1 at path MTU 4096, no congestion control, the
sender polled every µs (one GSO batch of 15 packets per call), every datagram handed to the receiver at
once. Reported per mode, median of ``--reps`` interleaved runs: CPU µs per batch in the sender's
``poll_transmit`` and in the receiver's ``receive`` (process CPU time, robust to other load) and the
packets/s and Gbit/s of payload one core would sustain through sender + receiver. ``--direct`` also runs
the flow on the direct fabric (two worker processes on 127.0.0.2/3, NIC line rate 100 Gbit/s) and reports
its goodput (flow bytes × 8 / (RECV end − SEND start)). ``--record`` appends the table to bench/RESULTS.md.

    python bench/icrc_cost.py [--size 128MiB] [--reps 5] [--direct] [--record]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_once(size_bytes: int, icrc: str) -> dict:
    """CPU per batch of sender and receiver (``goodput_direct.endpoint_only``) and what one core sustains."""
    sys.path.insert(0, str(HERE))
    from goodput_direct import endpoint_only

    r = endpoint_only(size_bytes, icrc)
    cpu_s = (r["tx_us_per_batch"] + r["rx_us_per_batch"]) * r["batches"] / 1e6
    return {"tx_us": r["tx_us_per_batch"], "rx_us": r["rx_us_per_batch"], "mpps": -(-size_bytes // 4096) / cpu_s / 1e6,
            "gbps": size_bytes * 8 / cpu_s / 1e9}


def run_direct_once(size_bytes: int, icrc: str) -> float:
    """Goodput in Gbit/s of one 2-rank direct run (0.0 if incomplete)."""
    sys.path.insert(0, str(HERE))
    from goodput_direct import _schedule

    from emulator.drivers.direct import DirectConfig, run_direct
    from emulator.endpoint.config import EndpointConfig

    s = _schedule(size_bytes)
    ep = EndpointConfig(mtu_bytes=4096, cc="none", line_rate_bps=100e9, retransmit_timeout_ns=50_000_000, icrc=icrc)
    cfg = DirectConfig(addresses=("127.0.0.2", "127.0.0.3"), udp_port=24893, ranks_per_worker=1)
    res = run_direct(s, cfg, ep, timeout_s=120)
    dt = int(res.records[1].end_ns[0]) - int(res.records[0].start_ns[0])
    return size_bytes * 8 / dt if res.complete and dt > 0 else 0.0


def main() -> int:
    from emulator.units import parse_size_bytes

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="128MiB")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--direct", action="store_true", help="also measure 2-rank direct goodput per mode")
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    size = parse_size_bytes(args.size)
    runs: dict[str, list[dict]] = {"zero": [], "compute": []}
    for _ in range(args.reps):
        for mode, rs in runs.items():
            rs.append(run_once(size, mode))
            if args.direct:
                rs[-1]["direct_gbps"] = run_direct_once(size, mode)
    lines = ["| icrc | sender µs/batch | receiver µs/batch | Mpackets/s (tx+rx, one core) | Gbit/s (one core) |"
             + (" direct 2-rank Gbit/s |" if args.direct else ""), "|---|---|---|---|---|" + ("---|" if args.direct else "")]
    for mode, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        lines.append(f"| {mode} | {med['tx_us']:.1f} | {med['rx_us']:.1f} | {med['mpps']:.3f} | {med['gbps']:.1f} |"
                     + (f" {med['direct_gbps']:.2f} |" if args.direct else ""))
    text = "\n".join(lines)
    print(text)
    if args.record:
        with open(HERE / "RESULTS.md", "a") as f:
            f.write(f"\n## ICRC cost, endpoints alone ({args.size}, median of {args.reps})\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
