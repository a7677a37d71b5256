"""Sockets made inside a named network namespace (``ip netns``): :class:`in_netns`."""

from __future__ import annotations

import os


class NetnsError(OSError):
    """A network namespace could not be entered."""


class in_netns:  # noqa: N801 - used as a context manager, reads like a statement
    """``with in_netns("name"):`` creates sockets inside the named network namespace (``ip netns``),
    then returns the calling thread to its own namespace. ``None`` = stay where we are."""

    _CLONE_NEWNET = 0x40000000

    def __init__(self, name: str | None) -> None:
        self.name = name
        self._home = -1

    def _setns(self, fd: int) -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, self._CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise NetnsError(err, f"setns: {os.strerror(err)}")

    def __enter__(self) -> in_netns:
        if self.name is None:
            return self
        target = os.open(f"/var/run/netns/{self.name}", os.O_RDONLY)
        try:
            self._home = os.open("/proc/self/ns/net", os.O_RDONLY)
            self._setns(target)
        except OSError:
            if self._home >= 0:
                os.close(self._home)
                self._home = -1
            raise
        finally:
            os.close(target)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._home >= 0:
            try:
                self._setns(self._home)
            finally:
                os.close(self._home)
                self._home = -1
