"""The one exception the wire codec raises on malformed or truncated input."""

from __future__ import annotations


class WireError(ValueError):
    """A RoCEv2 packet could not be decoded; the message names the byte offset and what was wrong."""
