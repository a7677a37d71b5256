"""fabric.transport: the retransmit timeout default depends on the fabric; overrides reach the endpoint."""

from pathlib import Path

import pytest
import yaml

from emulator.config import load_profile
from emulator.errors import ConfigError
from emulator.run.runner import endpoint_config

BASE = {"name": "t", "ranks": {"count": 2},
        "workload": {"collectives": [{"type": "all_reduce", "group": "0-1", "size": "64KiB"}]}}


def _load(tmp_path: Path, *overrides: str):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(BASE))
    return load_profile(path, overrides=overrides, env={})


@pytest.mark.parametrize("kind,expected_ns", [("sim", 1_000_000), ("loopback", 20_000_000), ("direct", 20_000_000)])
def test_retransmit_timeout_default_depends_on_fabric(tmp_path, kind, expected_ns):
    cfg = endpoint_config(_load(tmp_path, f"fabric.kind={kind}"))
    assert cfg.retransmit_timeout_ns == expected_ns


def test_transport_overrides_reach_the_endpoint(tmp_path):
    profile = _load(tmp_path, "fabric.transport.retransmit_timeout=5ms", "fabric.transport.ack_every_packets=4",
                    "fabric.transport.max_segments=8", "fabric.kind=loopback")
    cfg = endpoint_config(profile)
    assert (cfg.retransmit_timeout_ns, cfg.ack_every_packets, cfg.max_segments) == (5_000_000, 4, 8)
    assert profile.to_dict()["fabric"]["transport"]["retransmit_timeout"] == 5_000_000


def test_bad_transport_value_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"fabric\.transport\.max_segments"):
        _load(tmp_path, "fabric.transport.max_segments=100")


def test_icrc_defaults_to_zero_and_compute_reaches_the_endpoint(tmp_path):
    assert endpoint_config(_load(tmp_path)).icrc == "zero"
    for kind in ("sim", "loopback", "direct"):
        profile = _load(tmp_path, "fabric.transport.icrc=compute", f"fabric.kind={kind}")
        assert endpoint_config(profile).icrc == "compute"
        assert profile.to_dict()["fabric"]["transport"]["icrc"] == "compute"


def test_bad_icrc_value_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"fabric\.transport\.icrc"):
        _load(tmp_path, "fabric.transport.icrc=crc32")


def test_icrc_modes_of_profile_and_endpoint_agree():
    from emulator.config.model import ICRC_MODES
    from emulator.endpoint.config import ICRC_MODES as ENDPOINT_MODES

    assert ICRC_MODES == ENDPOINT_MODES


def test_a_collective_beyond_2_pow_53_bytes_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"workload\.collectives\[0\]\.size"):
        _load(tmp_path, "workload.collectives[0].size=8193TiB")
    assert _load(tmp_path, "workload.collectives[0].size=8192TiB")  # 2^53: still representable


def test_fluid_takes_the_default_icrc_and_refuses_compute(tmp_path):
    """The fluid fabric has no packets: icrc 'compute' is an error naming the key, the default 'zero' is not."""
    assert _load(tmp_path, "fabric.kind=fluid").fabric.kind == "fluid"
    with pytest.raises(ConfigError, match=r"fabric\.transport\.icrc"):
        _load(tmp_path, "fabric.kind=fluid", "fabric.transport.icrc=compute")
