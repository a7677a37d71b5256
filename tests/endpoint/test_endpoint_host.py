"""The sender and receiver halves reach their rank only through their host protocol."""

from __future__ import annotations

import ast
import inspect

import emulator.endpoint.receiver as receiver
import emulator.endpoint.sender as sender
from emulator.endpoint.endpoint import RankEndpoint
from emulator.endpoint.host import ReceiverHost, SenderHost


def _members(proto: type) -> set[str]:
    out: set[str] = set()
    for klass in proto.__mro__:
        if klass in (object,) or klass.__name__ == "Protocol" or klass.__name__ == "Generic":
            continue
        out |= {n for n in vars(klass) if not n.startswith("_")} | set(getattr(klass, "__annotations__", {}))
    return out


def _host_uses(module) -> set[str]:
    """Attributes read on ``self.ep`` or on a local alias ``ep`` in ``module``."""
    used: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.Attribute):
            v = node.value
            if (isinstance(v, ast.Attribute) and v.attr == "ep" and isinstance(v.value, ast.Name)
                    and v.value.id == "self") or (isinstance(v, ast.Name) and v.id == "ep"):
                used.add(node.attr)
    return used


def test_each_half_uses_only_its_host_protocol() -> None:
    for module, proto in ((sender, SenderHost), (receiver, ReceiverHost)):
        used, allowed = _host_uses(module), _members(proto)
        assert used and used <= allowed, (module.__name__, sorted(used - allowed))


def test_the_rank_endpoint_is_both_hosts() -> None:
    for proto in (SenderHost, ReceiverHost):
        missing = [n for n in _members(proto) if n not in ("rank", "records", "t0_ns") and not hasattr(RankEndpoint, n)]
        assert not missing, (proto.__name__, missing)
