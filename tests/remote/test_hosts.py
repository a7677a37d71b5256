"""HOSTS.yaml: ranks, addresses and ports per host; every mistake is one error naming the key."""

from __future__ import annotations

import pytest

from emulator.errors import ConfigError
from emulator.remote.hosts import format_ranks, load_hosts, parse_hosts


def test_ranks_addresses_and_ports():
    plan = parse_hosts({"hosts": [
        {"agent": "http://10.0.0.1:7400", "ranks": "0-2", "addresses": ["10.0.1.1", "10.0.1.2", "10.0.1.3"]},
        {"agent": "https://h2:7400/", "ranks": [3, 4], "addresses": ["10.0.2.1"]},
    ]})
    assert plan.world_size == 5
    assert plan.rank_addresses() == ("10.0.1.1", "10.0.1.2", "10.0.1.3", "10.0.2.1", "10.0.2.1")
    assert plan.rank_ports(4791) == (4791, 4791, 4791, 4791, 4792)
    assert plan.hosts[1].agent == "https://h2:7400"
    assert format_ranks((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"


@pytest.mark.parametrize("doc, key", [
    ({}, "hosts"),
    ({"hosts": [], "x": 1}, "hosts"),
    ({"hosts": [{"agent": "ftp://a:1", "ranks": 0, "addresses": ["10.0.0.1"]}]}, "hosts[0].agent"),
    ({"hosts": [{"agent": "http://a:1", "ranks": "0-x", "addresses": ["10.0.0.1"]}]}, "hosts[0].ranks"),
    ({"hosts": [{"agent": "http://a:1", "ranks": "3-1", "addresses": ["10.0.0.1"]}]}, "hosts[0].ranks"),
    ({"hosts": [{"agent": "http://a:1", "ranks": "0-1", "addresses": ["10.0.0.1", "10.0.0.2", "10.0.0.3"]}]},
     "hosts[0].addresses"),
    ({"hosts": [{"agent": "http://a:1", "ranks": 0, "addresses": ["nope"]}]}, "hosts[0].addresses[0]"),
    ({"hosts": [{"agent": "http://a:1", "ranks": 0}]}, "hosts[0].addresses"),
    ({"hosts": [{"agent": "http://a:1", "ranks": 0, "addresses": ["10.0.0.1"], "port": 1}]}, "hosts[0].port"),
    ({"hosts": [{"agent": "http://a:1", "ranks": "0-1", "addresses": ["10.0.0.1"]},
                {"agent": "http://b:1", "ranks": 1, "addresses": ["10.0.0.2"]}]}, "hosts[1].ranks"),
    ({"hosts": [{"agent": "http://a:1", "ranks": "0,2", "addresses": ["10.0.0.1"]}]}, "missing [1]"),
])
def test_bad_hosts_files_name_the_key(doc, key):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")) as exc:
        parse_hosts(doc, "H.yaml")
    assert "\n" not in str(exc.value) and str(exc.value).startswith("H.yaml")


def test_unreadable_or_broken_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_hosts(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_hosts(bad)
