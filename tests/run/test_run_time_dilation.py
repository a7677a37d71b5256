"""fabric.time_dilation: K× slower real time, emulated times reported, K recorded; auto says what it chose;
bad values are one error line naming the key (exit 2). Loose bounds: CI runs on a loaded 2-core machine."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from emulator.cli import main
from emulator.results import read_results

RING = {
    "name": "ring", "ranks": {"count": 4}, "warmup": 0, "iterations": 2, "timeout": "30s", "seed": 1,
    "fabric": {"kind": "loopback", "ports": {"rate": "200Mbps", "buffer": "512KiB", "latency": "0us"},
               "ecn": {"kmin": "16KiB", "kmax": "64KiB", "pmax": 0.1}, "transport": {"retransmit_timeout": "60ms"}},
    "congestion_control": {"preset": "none"},
    "workload": {"collectives": [{"name": "ar", "type": "all_reduce", "group": "0-3", "size": "256KiB",
                                  "algorithm": "ring", "iterations": 2}]},
}


def _profile(tmp_path: Path, **fabric) -> Path:
    data = {**RING, "fabric": {**RING["fabric"], **fabric}}
    p = tmp_path / "ring.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


@pytest.mark.parametrize("value", ["0.5", "abc", "20000", "true", "0"])
def test_bad_time_dilation_is_one_error_line_naming_the_key(tmp_path: Path, capsys, value: str) -> None:
    rc = main(["run", str(_profile(tmp_path)), "-o", str(tmp_path / "out"), "--set", f"fabric.time_dilation={value}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and "fabric.time_dilation" in err[0], err
    assert not (tmp_path / "out").exists()


def test_direct_refuses_time_dilation(tmp_path: Path, capsys) -> None:
    rc = main(["run", str(_profile(tmp_path, time_dilation=4)), "--fabric", "direct", "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "fabric.time_dilation" in err and "Traceback" not in err


def test_direct_takes_auto_as_real_time(tmp_path: Path) -> None:
    """A loopback profile run with ``--fabric direct`` keeps its inherited ``time_dilation: auto``: on real links
    the only K there is, 1, is chosen (an explicit K > 1 stays an error, above)."""
    from emulator.config import load_profile
    from emulator.run.runner import direct_config

    prof = load_profile(_profile(tmp_path, time_dilation="auto"), env={}, overrides=["fabric.kind=direct"])
    assert prof.fabric.time_dilation == "auto"
    assert direct_config(prof, 4).addresses


def _cct_p50(doc: dict) -> float:
    return doc["summary"]["all_reduce"]["cct"]["p50"]


def test_dilated_loopback_reports_emulated_time_close_to_the_sim(tmp_path: Path, capsys) -> None:
    k = 20
    p = _profile(tmp_path, time_dilation=k)
    assert main(["run", str(p), "--fabric", "sim", "-o", str(tmp_path / "sim"), "--quiet"]) == 0
    assert main(["run", str(p), "-o", str(tmp_path / "lb")]) == 0
    printed = capsys.readouterr().out
    sim, lb = read_results(tmp_path / "sim").doc, read_results(tmp_path / "lb").doc
    health = lb["driver"]["health"]
    assert health["time_dilation"] == k and health["fidelity"]["time_dilation"] == k
    assert "fidelity: " in printed and "time dilation 20" in printed
    cct_sim, cct_lb = _cct_p50(sim), _cct_p50(lb)
    assert 0.8 * cct_sim <= cct_lb <= 2.0 * cct_sim, (cct_sim, cct_lb)  # emulated time, not K× it
    # it did run K× slower: the wall time covers K × the emulated time of the measured iterations
    assert lb["wall_s"] >= 0.8 * k * 2 * cct_lb / 1e9
    data = sum(p["dequeued_packets"] for p in lb["driver"]["fabric"]["ports"])
    assert lb["summary"]["fabric"]["ecn_marks"] <= 0.05 * data


def _first_k(health: dict) -> float:
    """The K of an auto run's first attempt: the run's own, or its re-run's first (a loaded machine's lag)."""
    return health["time_dilation_rerun"]["first_time_dilation"] if "time_dilation_rerun" in health \
        else health["time_dilation"]


def test_auto_says_what_it_chose(tmp_path: Path, capsys) -> None:
    p = _profile(tmp_path, time_dilation="auto")
    assert main(["run", str(p), "-o", str(tmp_path / "lb"), "--set", "iterations=1"]) == 0
    printed = capsys.readouterr().out
    health = read_results(tmp_path / "lb").doc["driver"]["health"]
    cal = health["time_dilation_calibration"]
    assert cal["time_dilation"] == _first_k(health) >= 1
    assert cal["time_dilation"] >= max(1.0, min(cal["k_cpu"], cal["k_lag"]))
    assert f"auto -> K = {cal['time_dilation']:g}" in printed


def test_the_loopback_retransmit_timeout_default_shrinks_with_the_dilation() -> None:
    from emulator.config.model import Transport

    t = Transport()
    assert t.retransmit_timeout_for("loopback") == 20_000_000 == t.retransmit_timeout_for("direct")
    assert t.retransmit_timeout_for("loopback", 10.0) == 2_000_000
    assert t.retransmit_timeout_for("loopback", 5000.0) == 1_000_000 == t.retransmit_timeout_for("sim", 50.0)
    assert Transport(retransmit_timeout_ns=60_000_000).retransmit_timeout_for("loopback", 100.0) == 60_000_000


def test_auto_weighs_an_incast_and_judges_its_lag_tail(tmp_path: Path, capsys) -> None:
    data = {**RING, "name": "incast", "warmup": 0, "iterations": 1,
            "fabric": {**RING["fabric"], "time_dilation": "auto"},
            "workload": {"collectives": [{"name": "g", "type": "gather", "group": "0-3", "size": "64KiB",
                                          "algorithm": "direct", "iterations": 1}]}}
    p = tmp_path / "incast.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    assert main(["run", str(p), "-o", str(tmp_path / "lb")]) in (0, 1)
    printed = capsys.readouterr().out
    health = read_results(tmp_path / "lb").doc["driver"]["health"]
    cal, fid = health["time_dilation_calibration"], health["fidelity"]
    assert cal["port_load"] == 3.0 and cal["time_dilation"] == _first_k(health)
    assert health["time_dilation"] == fid["time_dilation"]
    assert cal["time_dilation"] >= min(10_000, 2 * max(1.0, cal["k_cpu"], cal["k_lag"]))  # 3:1 fan-in: × 2
    assert fid["judged"] == "p99.9" and fid["switch_lag_ns"]["p999"] is not None
    assert fid["faithful"] == (fid["lag_judged_ns"] <= fid["reference_ns"])
    assert "a port offered 3× its rate" in printed and "machine lateness p99.9" in printed
