"""``pytest hwtests/ --lab LAB.yaml``: the lab file names the agents (a HOSTS.yaml ``hosts:`` list), the token
file and what the network is expected to do (README.md); without ``--lab`` every test is skipped."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--lab", metavar="LAB.yaml", default=None, help="lab file (hwtests/README.md)")


@pytest.fixture(scope="session")
def lab(request: pytest.FixtureRequest) -> dict:
    path = request.config.getoption("--lab")
    if not path:
        pytest.skip("pass --lab LAB.yaml (hwtests/README.md)")
    doc = yaml.safe_load(Path(path).read_text()) or {}
    unknown = set(doc) - {"hosts", "token_file", "ca_file", "expect", "line_rate", "udp_port", "size", "timeout",
                          "dscp"}
    if unknown:
        pytest.fail(f"{path}: unknown keys {sorted(unknown)}")
    expect = doc.get("expect") or {}
    bad = set(expect) - {"ecn_marking", "pfc"}
    if bad:
        pytest.fail(f"{path}: expect: unknown keys {sorted(bad)} (ecn_marking, pfc)")
    doc["source"] = path
    return doc
