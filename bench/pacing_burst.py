"""Direct mode over a veth pair: the largest back-to-back burst and the rate of one fixed-rate flow.

Issue 10 target: one fixed-rate flow at 1 Gbit/s, direct mode, over a veth pair between two network
namespaces this bench creates (and always deletes): the largest back-to-back burst seen on the receiving
side ≤ the configured burst + one GSO batch, even with a competing CPU busy loop on both cores, and the
rate within 2 % over every 100 ms window.

Method. Rank 0 (namespace A, 10.214.0.1) sends one RDMA WRITE flow sized for ``--duration`` seconds at cc
``fixed`` ``--rate`` to rank 1 (namespace B, 10.214.0.2), both ranks in ``run_direct`` (one worker each).
A forked process captures on B's veth with an ``AF_PACKET`` socket (``SO_TIMESTAMPNS``: the kernel's
receive time of each frame). A veth hands a UDP GSO batch over as one frame, so a frame carries
``⌈UDP payload / 4128⌉`` RoCE packets; its *wire bytes* are UDP payload + 66 B per packet, the unit the
pacer meters. *Back to back*: frames whose gap (from the end of the previous frame's serialisation at
``--line-rate``, the endpoint's NIC rate) is below 1.5 × one packet's serialisation time; a burst is the
wire bytes of one such run. Windows of 100 ms from the first frame (the last, partial one dropped);
error = window rate ÷ ``--rate`` − 1. ``--load N`` runs N busy-loop processes for the whole flow, each in
its own session (as ``stress -c N`` in another terminal would be).

    python bench/pacing_burst.py [--rate 1Gbps] [--duration 3] [--load 2] [--record]

Needs root (``ip netns``); prints the reason and exits 2 where namespaces cannot be made.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ADDRS = ("10.214.0.1", "10.214.0.2")
WIRE_OVERHEAD_BYTES = 66
SEGMENT_BYTES = 4096 + 32          # the largest RoCE packet of a 4 KiB MTU (BTH + RETH + payload + ICRC)
ETH_P_IP = 0x0800
SO_TIMESTAMPNS = 35
PACKET_OUTGOING = 4


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    subprocess.run(cmd, check=True, capture_output=True, timeout=10)


@contextmanager
def veth_pair(tag: str) -> Iterator[tuple[str, str]]:
    """Namespaces ``<tag>a`` and ``<tag>b`` joined by a veth pair (MTU 9000, ADDRS); deleted whatever happens.
    Raises ``OSError`` (with the reason) where namespaces cannot be made."""
    a, b = f"{tag}a", f"{tag}b"
    made: list[str] = []
    try:
        try:
            for ns in (a, b):
                _ip("ip", "netns", "add", ns)
                made.append(ns)
        except (subprocess.CalledProcessError, OSError) as exc:
            reason = exc.stderr.decode().strip() if isinstance(exc, subprocess.CalledProcessError) else str(exc)
            raise OSError(f"'ip netns add' is not permitted here: {reason}") from None
        _ip("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1", ns=a)
        _ip("ip", "link", "set", "eth1", "netns", b, ns=a)
        _ip("ip", "link", "set", "eth1", "name", "eth0", ns=b)
        for ns, addr in zip((a, b), ADDRS, strict=True):
            _ip("ip", "link", "set", "eth0", "mtu", "9000", "up", ns=ns)
            _ip("ip", "link", "set", "lo", "up", ns=ns)
            _ip("ip", "addr", "add", f"{addr}/24", "dev", "eth0", ns=ns)
        yield a, b
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def _capture(ns: str, src_addr: str, port: int, seconds: float, conn) -> None:
    """Forked: every IPv4/UDP frame from ``src_addr`` to ``port`` received on ``ns``'s eth0 → (kernel rx
    time ns, UDP payload bytes)."""
    from emulator.drivers.sockets.netns import in_netns

    try:
        with in_netns(ns):
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
        sock.bind(("eth0", ETH_P_IP))
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
        sock.settimeout(0.05)
        conn.send("ready")
        ts: list[int] = []
        sizes: list[int] = []
        end = time.monotonic() + seconds
        buf = bytearray(70_000)
        src = socket.inet_aton(src_addr)
        anc = socket.CMSG_SPACE(16)
        while time.monotonic() < end and not conn.poll():
            try:
                n, cmsgs, _f, addr = sock.recvmsg_into([buf], anc)
            except TimeoutError:
                continue
            if addr[2] == PACKET_OUTGOING or n < 42 or buf[12:14] != b"\x08\x00" or buf[14 + 9] != 17:
                continue                                      # received Ethernet/IPv4/UDP frames only
            if buf[26:30] != src:
                continue
            udp = 14 + (buf[14] & 0x0F) * 4
            if struct.unpack_from("!H", buf, udp + 2)[0] != port:
                continue
            payload = n - udp - 8
            for level, kind, data in cmsgs:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack_from("=qq", data)
                    ts.append(sec * 1_000_000_000 + nsec)
                    sizes.append(payload)
                    break
        sock.close()
        conn.send((ts, sizes))
    except Exception as exc:  # noqa: BLE001 - handed to the parent, which raises it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))


def _busy(seconds: float) -> None:
    """A ``stress -c``-like busy loop in its own session (as if started from another terminal: with
    autogroup scheduling, a session is a group that shares the CPUs with the others)."""
    os.setsid()
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        for _ in range(10_000):
            x += 1


def wire_bytes(payload: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(packets, wire bytes) per captured frame (a GSO batch is one frame on a veth)."""
    pkts = np.maximum(1, -(-payload // SEGMENT_BYTES))
    return pkts, payload + WIRE_OVERHEAD_BYTES * pkts


def largest_burst(t_ns: np.ndarray, wire: np.ndarray, pkts: np.ndarray, line_rate_bps: float) -> int:
    """Wire bytes of the largest run of frames each of which starts less than 1.5 × one packet's
    serialisation time after the previous frame finished serialising at ``line_rate_bps``."""
    if t_ns.size == 0:
        return 0
    order = np.argsort(t_ns, kind="stable")
    t, w, p = t_ns[order], wire[order], pkts[order]
    ser = w * 8e9 / line_rate_bps
    gap = t[1:] - (t[:-1] + ser[:-1])
    joined = gap < 1.5 * (ser[:-1] / p[:-1])
    best = cur = int(w[0])
    for i, j in enumerate(joined):
        cur = cur + int(w[i + 1]) if j else int(w[i + 1])
        best = max(best, cur)
    return best


def window_rates(t_ns: np.ndarray, wire: np.ndarray, window_ns: int) -> np.ndarray:
    """Wire bit/s per full window from the first frame."""
    order = np.argsort(t_ns, kind="stable")
    rel = t_ns[order] - t_ns[order][0]
    n_win = int(rel[-1] // window_ns)
    idx = rel // window_ns
    keep = idx < n_win
    return np.bincount(idx[keep], weights=wire[order][keep] * 8.0, minlength=n_win) / (window_ns / 1e9)


def measure(rate_bps: float, duration_s: float, load: int, line_rate_bps: float = 10e9,
            window_ns: int = 100_000_000, port: int = 4791, dump: Path | None = None) -> dict:
    """Run the flow over a fresh veth pair (see the module docstring) and return the figures; with ``dump``
    the capture (kernel rx time ns, UDP payload bytes per frame) is saved there as ``.npz``."""
    sys.path.insert(0, str(HERE))
    from pacing import p2p_schedule

    from emulator.drivers.direct import DirectConfig, run_direct
    from emulator.drivers.sockets.workers import socket_endpoint_config
    from emulator.endpoint.config import EndpointConfig
    from emulator.endpoint.endpoint import RankEndpoint

    size = int(rate_bps * duration_s / 8 * 4096 / (4096 + 32 + WIRE_OVERHEAD_BYTES))
    s = p2p_schedule(size)
    ecfg = EndpointConfig(mtu_bytes=4096, cc="fixed", cc_overrides=(("rate_bps", rate_bps),),
                          line_rate_bps=line_rate_bps, retransmit_timeout_ns=50_000_000)
    probe = RankEndpoint(0, s, socket_endpoint_config(ecfg))  # the configured burst, as the workers pace
    probe.start(0)
    qp = next(iter(probe._tx.qps.values()))
    burst, batch = qp.pacer.burst_bytes, probe._tx.burst
    ctx = mp.get_context("fork")
    tag = f"pb{os.getpid() % 100000}"
    with veth_pair(tag) as (ns_a, ns_b):
        parent, child = ctx.Pipe()
        cap = ctx.Process(target=_capture, args=(ns_b, ADDRS[0], port, duration_s * 3 + 30, child), daemon=True)
        cap.start()
        hogs = [ctx.Process(target=_busy, args=(duration_s * 2 + 5,), daemon=True) for _ in range(load)]
        try:
            if not parent.poll(20) or parent.recv() != "ready":
                raise RuntimeError("capture did not start")
            for h in hogs:
                h.start()
            dcfg = DirectConfig(addresses=ADDRS, netns=(ns_a, ns_b), udp_port=port, ranks_per_worker=1,
                                linger_s=0.1)
            t0 = time.monotonic()
            res = run_direct(s, dcfg, ecfg, timeout_s=duration_s * 3 + 20)
            wall = time.monotonic() - t0
            parent.send("stop")
            if not parent.poll(30):
                raise RuntimeError("capture sent nothing")
            msg = parent.recv()
            if msg and msg[0] == "error":
                raise RuntimeError(f"capture failed: {msg[1]}")
        finally:
            for h in hogs:
                h.kill()
                h.join(5)
            cap.join(5)
            if cap.is_alive():
                cap.kill()
                cap.join(5)
    t = np.asarray(msg[0], np.int64)
    payload = np.asarray(msg[1], np.int64)
    if dump is not None:
        np.savez(dump, t_ns=t, payload=payload, rate_bps=rate_bps, window_ns=window_ns)
    pkts, wire = wire_bytes(payload)
    rates = window_rates(t, wire, window_ns) if t.size else np.zeros(0)
    err = rates / rate_bps - 1
    lag = res.health.get("endpoint_timer_lag_ns") or {}
    return {"frames": int(t.size), "packets": int(pkts.sum()), "burst_bytes": burst, "batch_bytes": batch,
            "bound_bytes": burst + batch, "largest_burst_bytes": largest_burst(t, wire, pkts, line_rate_bps),
            "windows": int(rates.size), "within_2pct": int(np.sum(np.abs(err) <= 0.02)),
            "within_10pct": int(np.sum(np.abs(err) <= 0.10)),
            "mean_bps": float(wire.sum() * 8e9 / max(1, int(t.max() - t.min()))) if t.size > 1 else 0.0,
            "max_abs_err": float(np.max(np.abs(err))) if err.size else float("nan"),
            "first_err": float(err[0]) if err.size else float("nan"),
            "rate_range_bps": (float(rates.min()), float(rates.max())) if rates.size else (0.0, 0.0),
            "complete": res.complete, "errors": res.errors, "wall_s": wall, "load": load,
            "timer_lag_p99_ns": lag.get("p99")}


def _line(label: str, m: dict) -> str:
    lo, hi = m["rate_range_bps"]
    return (f"{label}: largest back-to-back burst {m['largest_burst_bytes']:,} B (bound {m['bound_bytes']:,} = "
            f"burst {m['burst_bytes']:,} + batch {m['batch_bytes']:,}); {m['windows']} windows "
            f"({m['within_2pct']} within 2 %), {lo / 1e9:.4f}..{hi / 1e9:.4f} Gbit/s, max |error| "
            f"{100 * m['max_abs_err']:.2f} % (first window {100 * m['first_err']:+.2f} %); {m['packets']:,} packets in {m['frames']:,} frames; timer lag p99 "
            f"{(m['timer_lag_p99_ns'] or 0) / 1e3:.0f} µs {'; '.join(m['errors'])}")


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HERE))
    import peers

    from emulator.units import parse_rate_bps

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", default="1Gbps")
    ap.add_argument("--line-rate", default="10Gbps", help="the endpoint's NIC rate (defines back to back)")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--load", type=int, default=2, help="busy-loop processes in the loaded run (0: skip it)")
    ap.add_argument("--record", action="store_true", help="append the figures to bench/RESULTS.md")
    ap.add_argument("--dump", type=Path, help="save each run's capture as DUMP-load<N>.npz")
    args = ap.parse_args(argv)
    rate, line = parse_rate_bps(args.rate), parse_rate_bps(args.line_rate)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = []
    try:
        for load in ([0, args.load] if args.load else [0]):
            note = peers.load_note()
            dump = args.dump.with_name(f"{args.dump.name}-load{load}.npz") if args.dump else None
            m = measure(rate, args.duration, load, line, dump=dump)
            label = f"{args.rate}, {'no busy loop' if not load else f'{load} busy loops'} ({note})"
            print(_line(label, m), flush=True)
            rows.append((label, m))
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ok = all(m["largest_burst_bytes"] <= m["bound_bytes"] and m["max_abs_err"] <= 0.02 for _, m in rows)
    if args.record:
        cmd = "python bench/pacing_burst.py " + " ".join(argv if argv is not None else sys.argv[1:])
        text = (f"\n## Direct-mode bursts over a veth pair ({started}) — issue 10\n\nCommand: `{cmd}`. Method: "
                f"bench/pacing_burst.py docstring (AF_PACKET capture with kernel timestamps on the receiving "
                f"veth; back to back = gap < 1.5 × one packet at {args.line_rate}).\n\n")
        text += "\n".join(f"- {_line(label, m)}" for label, m in rows) + "\n"
        with open(HERE / "RESULTS.md", "a") as fh:
            fh.write(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
