"""Quantities with units, as users write them in profiles and on the command line.

Sizes: ``4096``, ``4KiB``, ``16MiB``, ``1GB`` (SI prefixes are powers of 10, IEC prefixes powers of 2;
``B`` optional). Rates: ``25Gbps``, ``400Gb/s``, ``100Mbps``, ``1e9`` (bits per second). Durations:
``250us``, ``10ms``, ``1.5s``, ``100ns`` (plain numbers are nanoseconds for ``parse_duration_ns``).
Every parser returns an int in the unit named by the function and raises :class:`ValueError` with a
short reason; callers wrap it in a ConfigError that names the key.
"""

from __future__ import annotations

import re

_NUM = r"([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)"

_SIZE_FACTORS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "ki": 2**10, "kib": 2**10, "mi": 2**20, "mib": 2**20, "gi": 2**30, "gib": 2**30, "ti": 2**40, "tib": 2**40,
}
_RATE_FACTORS = {
    "": 1, "bps": 1, "b/s": 1,
    "k": 10**3, "kbps": 10**3, "kb/s": 10**3, "kbit/s": 10**3,
    "m": 10**6, "mbps": 10**6, "mb/s": 10**6, "mbit/s": 10**6,
    "g": 10**9, "gbps": 10**9, "gb/s": 10**9, "gbit/s": 10**9,
    "t": 10**12, "tbps": 10**12, "tb/s": 10**12, "tbit/s": 10**12,
}
_TIME_FACTORS_NS = {
    "": 1, "ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9, "sec": 10**9, "min": 60 * 10**9,
}
_RE = re.compile(r"^\s*" + _NUM + r"\s*([a-zA-Zµ/]*)\s*$")


def _parse(value: object, table: dict[str, int], what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected a {what}, got a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{what} must not be negative: {value}")
        return value
    if isinstance(value, float):
        if value < 0 or value != value:
            raise ValueError(f"{what} must be a non-negative number: {value}")
        return round(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a {what}, got {type(value).__name__}")
    m = _RE.match(value)
    if not m:
        raise ValueError(f"cannot read {value!r} as a {what}")
    number, unit = m.group(1), m.group(2)
    key = unit.lower()
    if key not in table:
        known = ", ".join(sorted(k for k in table if k))
        raise ValueError(f"unknown unit {unit!r} in {value!r} for a {what} (known: {known})")
    return round(float(number) * table[key]) if ("." in number or "e" in number.lower()) else int(number) * table[key]


def parse_size_bytes(value: object) -> int:
    """``'16MiB'`` → 16777216; ``'4KB'`` → 4000; ints pass through."""
    return _parse(value, _SIZE_FACTORS, "size")


def parse_rate_bps(value: object) -> int:
    """``'25Gbps'`` → 25_000_000_000 bits per second."""
    return _parse(value, _RATE_FACTORS, "rate")


def parse_duration_ns(value: object) -> int:
    """``'250us'`` → 250_000 ns; bare numbers are nanoseconds."""
    return _parse(value, _TIME_FACTORS_NS, "duration")


def parse_duration_us(value: object) -> int:
    """Like :func:`parse_duration_ns` but bare numbers are microseconds, result in µs (rounded)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _parse(value, _SIZE_FACTORS, "duration")
    if isinstance(value, str):
        m = _RE.match(value)
        if m and not m.group(2):  # a bare number written as text: microseconds too
            return _parse(m.group(1), _SIZE_FACTORS, "duration")
    return round(parse_duration_ns(value) / 1000)


def format_bytes(n: float) -> str:
    """Human form with IEC prefixes: 1048576 → '1.00 MiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_duration_ns(ns: float) -> str:
    """1500 → '1.50 us'; 2_500_000 → '2.50 ms'."""
    a = abs(ns)
    if a < 1_000:
        return f"{ns:.0f} ns"
    if a < 1_000_000:
        return f"{ns / 1e3:.2f} us"
    if a < 1_000_000_000:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.3f} s"


def format_rate_bps(bps: float) -> str:
    """25e9 → '25.00 Gbps'."""
    for unit, f in (("Tbps", 1e12), ("Gbps", 1e9), ("Mbps", 1e6), ("Kbps", 1e3)):
        if abs(bps) >= f:
            return f"{bps / f:.2f} {unit}"
    return f"{bps:.0f} bps"
