"""``emulator rank PROFILE -o DIR``: one rank of a run started by mpirun, srun or torchrun.

Rank, world size and local rank come from the launcher's environment
(:func:`~emulator.remote.launch.launcher_env`); the data-plane address from ``--interface`` or
``--addresses`` (indexed by local rank). Every rank serves an agent on its data-plane address and registers
it with rank 0 (``--master`` or ``MASTER_ADDR``/``MASTER_PORT``); rank 0 then runs the profile on every
agent as ``emulator run --hosts`` does and writes the merged results to ``-o DIR``. The other ranks exit
once rank 0 has gathered their records. Exit status: rank 0 as ``emulator run``; the others 0, or 3 when
their records were never gathered.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.error
import urllib.request

from emulator.errors import ConfigError, RunError

_REGISTER_TIMEOUT_S = 60.0


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    p = subparsers.add_parser(
        name, help=help_text,
        description="One rank of a multi-host run started by a launcher, e.g. 'mpirun -np 8 emulator rank "
                    "PROFILE -o DIR --token-file T --interface eth1'. Rank 0 gathers every rank's agent, runs "
                    "the profile on them (direct fabric) and writes the results directory.")
    p.add_argument("profile", metavar="PROFILE", help="profile YAML file")
    p.add_argument("-o", "--output", metavar="RESULTS_DIR", required=True, help="results directory (rank 0 writes it)")
    p.add_argument("--token-file", metavar="FILE", required=True, help="file holding the shared token (every rank)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--interface", metavar="IF", default=None, help="data-plane interface (its IPv4 address)")
    where.add_argument("--addresses", metavar="A,B,...", default=None,
                       help="data-plane addresses, indexed by local rank (one for all of them is fine)")
    p.add_argument("--master", metavar="ADDR:PORT", default=None,
                   help="rank 0's rendezvous address (default MASTER_ADDR:MASTER_PORT, else the address of rank 0 "
                        "with port 7400 — on one host only)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a profile key")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier run's results in RESULTS_DIR")
    p.add_argument("--quiet", action="store_true", help="no summary table and no progress line")
    p.set_defaults(func=run)


def _address(args: argparse.Namespace, local_rank: int) -> str:
    if args.interface:
        import fcntl
        import socket
        import struct

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                res = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", args.interface.encode()[:15]))
            except OSError as exc:
                raise ConfigError(f"--interface {args.interface}: no IPv4 address ({exc.strerror or exc})") from None
        return socket.inet_ntoa(res[20:24])
    addrs = [a.strip() for a in (args.addresses or "127.0.0.1").split(",") if a.strip()]
    return addrs[local_rank % len(addrs)]


def _master(args: argparse.Namespace, rank0_address: str) -> tuple[str, int]:
    from emulator.commands.agent import parse_listen

    if args.master:
        return parse_listen(args.master)
    if os.environ.get("MASTER_ADDR"):
        return parse_listen(f"{os.environ['MASTER_ADDR']}:{os.environ.get('MASTER_PORT', '7400')}")
    return rank0_address, 7400


def _post(url: str, token: str, doc: dict) -> None:
    req = urllib.request.Request(url, data=json.dumps(doc).encode(), method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        resp.read()


def run(args: argparse.Namespace) -> int:
    from emulator.commands.agent import read_token
    from emulator.remote.agent import Agent
    from emulator.remote.api import Policy, parse_allow
    from emulator.remote.launch import Rendezvous, launcher_env, start_agent_thread

    me = launcher_env(os.environ)
    token = read_token(args.token_file)
    address = _address(args, me.local_rank)
    if args.addresses:
        rank0 = [a.strip() for a in args.addresses.split(",") if a.strip()][0]
    else:
        rank0 = address
    master_host, master_port = _master(args, rank0)
    allow = parse_allow(args.addresses) if args.addresses else parse_allow(f"{address}/24")
    policy = Policy(allow=allow + parse_allow("127.0.0.0/8"))
    rdv = Rendezvous(me.world_size) if me.rank == 0 else None
    agent = Agent(token, policy, rendezvous=rdv)
    thread = start_agent_thread(agent, master_host if me.rank == 0 else address, master_port if me.rank == 0 else 0)
    try:
        reg = {"rank": me.rank, "world_size": me.world_size, "agent": thread.url, "address": address}
        if me.rank == 0:
            rdv.add(0, thread.url, address)
            return _rank0(args, rdv, token)
        _register(f"http://{master_host}:{master_port}/v1/register", token, reg)
        return _serve_until_gathered(agent, args)
    finally:
        thread.stop()


def _register(url: str, token: str, doc: dict) -> None:
    deadline = time.monotonic() + _REGISTER_TIMEOUT_S
    while True:
        try:
            _post(url, token, doc)
            return
        except urllib.error.HTTPError as exc:
            raise RunError(f"rank {doc['rank']}: rank 0 refused the registration ({exc.code}): "
                           f"{exc.read().decode(errors='replace')[:200]}") from None
        except OSError as exc:
            if time.monotonic() > deadline:
                raise RunError(f"rank {doc['rank']}: cannot reach rank 0 at {url} within "
                               f"{_REGISTER_TIMEOUT_S:g} s: {exc}") from None
            time.sleep(0.2)


def _rank0(args: argparse.Namespace, rdv, token: str) -> int:
    from emulator.config import load_profiles
    from emulator.remote.controller import ControllerConfig
    from emulator.run.pipeline import run_profile
    from emulator.run.runner import remote_driver

    deadline = time.monotonic() + _REGISTER_TIMEOUT_S
    while not rdv.complete():
        if time.monotonic() > deadline:
            missing = sorted(set(range(rdv.world_size)) - set(rdv.entries))
            raise RunError(f"rank 0: ranks {missing} did not register within {_REGISTER_TIMEOUT_S:g} s")
        time.sleep(0.05)
    profiles = load_profiles(args.profile, overrides=[*args.set, "fabric.kind=direct"])
    if len(profiles) != 1:
        raise ConfigError(f"{args.profile}: a profile with a matrix is not supported by 'emulator rank'")
    driver = remote_driver(profiles[0], rdv.plan(), ControllerConfig(token=token))
    return run_profile(profiles[0], out_dir=args.output, driver=driver, quiet=args.quiet,
                       overwrite=args.overwrite).exit_code


def _serve_until_gathered(agent, args: argparse.Namespace) -> int:
    """Wait until rank 0 has this rank's records (bounded by the profile's timeout plus setup time)."""
    from emulator.config import load_profiles

    timeout_s = load_profiles(args.profile, overrides=list(args.set))[0].timeout_ns / 1e9
    deadline = time.monotonic() + _REGISTER_TIMEOUT_S + timeout_s + 60.0
    while time.monotonic() < deadline:
        run = agent.run
        if run is not None and run.records_served:
            return 0
        time.sleep(0.1)
    return 3
