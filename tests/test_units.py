import pytest

from emulator.units import parse_duration_ns, parse_duration_us, parse_rate_bps, parse_size_bytes


@pytest.mark.parametrize(
    "text,expected",
    [("4096", 4096), ("4KiB", 4096), ("16MiB", 16 << 20), ("4KB", 4000), ("1.5KiB", 1536), (7, 7), ("2 GiB", 2 << 30)],
)
def test_sizes(text, expected):
    assert parse_size_bytes(text) == expected


@pytest.mark.parametrize("text,expected", [("25Gbps", 25 * 10**9), ("400Gb/s", 400 * 10**9), ("100Mbps", 10**8), ("1e9", 10**9)])
def test_rates(text, expected):
    assert parse_rate_bps(text) == expected


@pytest.mark.parametrize("text,expected", [("250us", 250_000), ("10ms", 10**7), ("1.5s", 1_500_000_000), ("100ns", 100), (5, 5)])
def test_durations(text, expected):
    assert parse_duration_ns(text) == expected


def test_duration_us_bare_numbers_are_micros():
    assert parse_duration_us(7) == 7
    assert parse_duration_us("2ms") == 2000
    assert parse_duration_us("50") == 50
    assert parse_duration_us("2.5") == 2  # rounded to whole microseconds (banker's rounding of 2.5)


@pytest.mark.parametrize("bad", ["", "abc", "5 parsecs", "-4", True, None, [1]])
def test_bad_values_raise_valueerror(bad):
    with pytest.raises(ValueError):
        parse_size_bytes(bad)
