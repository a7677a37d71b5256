"""A software switch driven in-process (no switch process, no real clock) on loopback sockets of its own."""

from __future__ import annotations

from emulator.drivers.loopback.spec import SwitchSpec
from emulator.drivers.loopback.switch import _SoftwareSwitch
from emulator.drivers.sockets.udp import UdpPort
from emulator.fabric.port import PortConfig
from support.worker_loop import NullConn


def software_switch(port: PortConfig, n_ranks: int = 2, qp_src: tuple[int, ...] = (0,), qp_dst: tuple[int, ...] = (1,),
                    rank_rcvbuf_bytes: int | None = None, backpressure: bool = False,
                    **spec) -> tuple[_SoftwareSwitch, list[UdpPort]]:
    """The switch on ``ports[0]`` and ``n_ranks`` rank sockets (``ports[1:]``, of ``rank_rcvbuf_bytes`` if given;
    watched for room when ``backpressure``); ``spec`` sets the other :class:`SwitchSpec` fields. The caller
    closes the ports."""
    kw = {} if rank_rcvbuf_bytes is None else {"rcvbuf_bytes": rank_rcvbuf_bytes}
    ports = [UdpPort("127.0.0.1", 0)] + [UdpPort("127.0.0.1", 0, **kw) for _ in range(n_ranks)]
    spec.setdefault("scheduling", "normal")
    full = SwitchSpec(port=port, rank_addresses=tuple(p.address for p in ports[1:]), qp_src=qp_src, qp_dst=qp_dst,
                      seed=1, rank_fds=tuple(p.fileno for p in ports[1:]) if backpressure else (), **spec)
    return _SoftwareSwitch(full, ports[0], NullConn(), None, 1 << 62), ports
