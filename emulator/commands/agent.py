"""``emulator agent``: serve the agent API (:mod:`emulator.remote.agent`) until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from emulator.errors import ConfigError


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    p = subparsers.add_parser(
        name, help=help_text,
        description="Run the agent of a multi-host run: a controller ('emulator run PROFILE --hosts HOSTS.yaml') "
                    "uploads a schedule and arms runs whose ranks this host runs. Every request needs the token; "
                    "the agent sends only to destinations inside --allow (default: loopback only).")
    p.add_argument("--listen", metavar="ADDR:PORT", default="127.0.0.1:7400",
                   help="address and port to serve on (default 127.0.0.1:7400; port 0 = any free port)")
    p.add_argument("--token-file", metavar="FILE", required=True, help="file holding the shared token")
    p.add_argument("--allow", metavar="CIDR[,CIDR...]", default="127.0.0.0/8",
                   help="networks runs may send to (default 127.0.0.0/8)")
    p.add_argument("--max-rate", metavar="RATE", default=None,
                   help="refuse runs whose local ranks' line rates add up to more (e.g. 100Gbps)")
    p.add_argument("--max-duration", metavar="DUR", default=None, help="refuse runs with a longer timeout (e.g. 10m)")
    p.add_argument("--max-body", metavar="SIZE", default="1GiB",
                   help="largest request body, i.e. schedule upload (default 1GiB; larger: 413)")
    p.add_argument("--metrics-public", action="store_true", help="serve /metrics without the token")
    p.add_argument("--tls-cert", metavar="FILE", default=None, help="TLS certificate chain (PEM)")
    p.add_argument("--tls-key", metavar="FILE", default=None, help="TLS private key (PEM)")
    p.set_defaults(func=run)


def read_token(path: str, option: str = "--token-file") -> str:
    """The token in ``path`` (stripped; ConfigError when missing or empty)."""
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot read: {exc.strerror or exc}") from None
    if not token:
        raise ConfigError(f"{option} {path}: the file is empty")
    return token


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--listen {text}: expected ADDR:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def run(args: argparse.Namespace) -> int:
    from emulator.remote.agent import Agent, serve
    from emulator.remote.api import Policy, parse_allow
    from emulator.units import parse_duration_ns, parse_rate_bps, parse_size_bytes

    token = read_token(args.token_file)
    host, port = parse_listen(args.listen)
    try:
        rate = float(parse_rate_bps(args.max_rate)) if args.max_rate else None
        dur = parse_duration_ns(args.max_duration) / 1e9 if args.max_duration else None
        max_body = parse_size_bytes(args.max_body)
    except (ValueError, ConfigError) as exc:
        raise ConfigError(f"--max-rate/--max-duration/--max-body: {exc}") from None
    policy = Policy(allow=parse_allow(args.allow), max_rate_bps=rate, max_duration_s=dur)
    ssl_ctx = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise ConfigError("--tls-cert and --tls-key go together")
        import ssl

        ssl_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            ssl_ctx.load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"--tls-cert {args.tls_cert} / --tls-key {args.tls_key}: {exc}") from None
    agent = Agent(token, policy, metrics_public=args.metrics_public, max_schedule_bytes=max_body)

    async def main() -> None:
        try:
            runner, bound = await serve(agent, host, port, ssl_ctx)
        except OSError as exc:
            raise ConfigError(f"--listen {args.listen}: {exc.strerror or exc}") from None
        scheme = "https" if ssl_ctx else "http"
        print(f"agent listening on {scheme}://{host}:{bound} (allow {args.allow})", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await runner.cleanup()

    asyncio.run(main())
    print("agent stopped", file=sys.stderr)
    return 0
