"""``emulator run PROFILE --hosts HOSTS.yaml`` against real agent processes on 127.0.0.x: one merged results
directory with every byte and every host's clock offset; an agent killed mid-run ends the run within its
timeout naming the host and its ranks (exit 3) with the other host's records kept; a refusal stops the
run before any packet with the host named."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from emulator.cli import main


def _wait_for_traffic(url: str, token_file: Path, timeout_s: float = 60.0) -> None:
    """Until the agent at ``url`` reports delivered bytes (the run is under way)."""
    req = urllib.request.Request(f"{url}/v1/status",
                                 headers={"Authorization": f"Bearer {token_file.read_text().strip()}"})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.2)
        with urllib.request.urlopen(req, timeout=5) as r:
            if json.loads(r.read()).get("progress", {}).get("bytes_delivered", 0) > 0:
                return
    pytest.fail(f"no traffic at {url} within {timeout_s:g} s")


def _port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.40", 0))
        return s.getsockname()[1]


def _setup(profiles, tmp_path, agents, ranks=("0-2", "3-5", "6-7"), workload="mixed:1MiB", **kw):
    profile, hosts = profiles
    return (profile(tmp_path / "p.yaml", workload, **kw),
            hosts(tmp_path / "hosts.yaml", agents, [f"127.0.0.{40 + i}" for i in range(len(agents))], ranks))


def test_three_hosts_one_merged_results_directory(start_agent, token_file, tmp_path, capsys, profiles):
    agents = [start_agent() for _ in range(3)]
    out = tmp_path / "out"
    prof, hosts = _setup(profiles, tmp_path, agents, port=_port())
    code = main(["run", str(prof), "--hosts", str(hosts),
                 "--token-file", str(token_file), "-o", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err
    doc = json.loads((out / "results.json").read_text())
    assert doc["complete"] and doc["fabric_kind"] == "direct"
    tot = doc["summary"]["totals"]
    assert tot["bytes_delivered"] == tot["bytes_scheduled"] > 0
    hosts = doc["driver"]["health"]["hosts"]
    assert [h["ranks"] for h in hosts] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    for h in hosts:
        assert h["samples"] == 32 and 0 < h["uncertainty_ns"] < 50_000_000 and h["lost"] is None
        assert abs(h["offset_ns"]) <= h["uncertainty_ns"] + 1_000_000  # one machine: one monotonic clock
        assert "endpoint_socket_drops" in h and "timer_lag_ns" in h
    assert doc["driver"]["health"]["controller"]["setup_to_t0_s"] < 10
    assert main(["report", str(out)]) == 0  # report reads it like any other


def test_killed_agent_ends_the_run_naming_it_and_keeps_the_others_records(start_agent, token_file, tmp_path,
                                                                          profiles):
    agents = [start_agent() for _ in range(2)]
    out = tmp_path / "out"
    prof, hosts = _setup(profiles, tmp_path, agents, ("0-3", "4-7"), "mixed:64MiB", port=_port(), timeout="60s")
    cmd = [sys.executable, "-m", "emulator", "run", str(prof), "--hosts", str(hosts), "--token-file", str(token_file),
           "-o", str(out), "--quiet"]
    t = time.monotonic()
    ctl = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_traffic(agents[1].url, token_file)
        agents[1].kill()
        killed = time.monotonic()
        stdout, stderr = ctl.communicate(timeout=40)
    finally:
        if ctl.poll() is None:
            ctl.kill()
    assert ctl.returncode == 3, stderr
    assert time.monotonic() - killed < 20  # the agent timeout (5 s) plus the abort and the gathering
    assert f"host {agents[1].url} (ranks 4-7)" in stderr
    doc = json.loads((out / "results.json").read_text())
    assert not doc["complete"]
    assert set(json.loads(json.dumps(doc["driver"]["health"]["hosts"][0]))["ranks"]) == {0, 1, 2, 3}
    kept = sorted(int(p.stem.split("_")[-1]) for p in (out / "records").glob("*")) if (out / "records").is_dir() \
        else None
    assert doc["driver"]["health"]["hosts"][0]["lost"] is None and doc["driver"]["health"]["hosts"][1]["lost"]
    assert kept is None or set(kept) >= {0, 1, 2, 3}
    assert time.monotonic() - t < 60


def test_a_refusal_stops_the_run_before_any_packet_naming_the_host(start_agent, token_file, tmp_path, capsys,
                                                                   profiles):
    ok = start_agent()
    strict = start_agent("--allow", "127.0.0.41/32")  # the run sends to 127.0.0.40 too
    port = _port()
    lis = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    lis.bind(("127.0.0.40", port))
    lis.setblocking(False)
    try:
        prof, hosts = _setup(profiles, tmp_path, [ok, strict], ("0-3", "4-7"), port=port)
        code = main(["run", str(prof), "--hosts", str(hosts),
                     "--token-file", str(token_file), "-o", str(tmp_path / "out"), "--quiet"])
        err = capsys.readouterr().err
        assert code == 2
        assert err.count("\n") == 1 and f"host {strict.url} (ranks 4-7)" in err and "(403)" in err
        time.sleep(0.5)
        with pytest.raises(BlockingIOError):
            lis.recv(65536)
    finally:
        lis.close()


@pytest.mark.parametrize("args, message", [
    (["--hosts", "H.yaml"], "--hosts needs --token-file"),
    (["--token-file", "T"], "--token-file and --ca-file go with --hosts"),
])
def test_option_errors_are_one_line(tmp_path, capsys, args, message, profiles):
    code = main(["run", str(profiles[0](tmp_path / "p.yaml", "mixed:1MiB")), *args, "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_ctrl_c_aborts_every_agent_and_keeps_what_was_measured(start_agent, token_file, tmp_path, profiles):
    agents = [start_agent() for _ in range(2)]
    out = tmp_path / "out"
    prof, hosts = _setup(profiles, tmp_path, agents, ("0-3", "4-7"), "mixed:256MiB", port=_port(), timeout="60s",
                         rate="500Mbps")
    ctl = subprocess.Popen([sys.executable, "-m", "emulator", "run", str(prof), "--hosts", str(hosts), "--token-file",
                            str(token_file), "-o", str(out), "--quiet"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_traffic(agents[1].url, token_file)
        ctl.send_signal(signal.SIGINT)
        _, stderr = ctl.communicate(timeout=40)
    finally:
        if ctl.poll() is None:
            ctl.kill()
    assert ctl.returncode == 130, stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["interrupted"] and not doc["complete"]
    hosts_health = doc["driver"]["health"]["hosts"]
    assert all(h["lost"] is None and "wall_ns" in h for h in hosts_health)  # both hosts' records came back
    ranks = doc["summary"]["ranks"]
    assert sorted(ranks, key=int) == [str(r) for r in range(8)]  # every rank's records, from both hosts
    assert sum(r["bytes_received"] for r in ranks.values()) > 0


def test_bad_token_ca_or_agent_address_keeps_the_earlier_results_under_overwrite(start_agent, token_file, tmp_path,
                                                                                 capsys, profiles):
    """The agents are asked before --overwrite deletes the earlier run (they were asked after, so a wrong
    token, a missing CA file or a misspelt agent address cost the user's earlier results)."""
    import shutil

    agent = start_agent()
    out = tmp_path / "out"
    shutil.copytree(Path(__file__).resolve().parents[1] / "data" / "results_v1", out)
    before = sorted(p.name for p in out.iterdir())
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token\n")
    prof, hosts = _setup(profiles, tmp_path, [agent, agent], ("0-3", "4-7"))
    with socket.socket() as s:  # a port nothing listens on: the misspelt agent
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    typo = tmp_path / "typo.yaml"
    typo.write_text(hosts.read_text().replace(agent.url, f"http://127.0.0.1:{dead}", 1))
    cases = [(["--hosts", str(hosts), "--token-file", str(wrong)], 2, "(401)"),
             (["--hosts", str(hosts), "--token-file", str(token_file), "--ca-file", str(tmp_path / "no-ca.pem")], 2,
              "--ca-file"),
             (["--hosts", str(typo), "--token-file", str(token_file)], 3, f"127.0.0.1:{dead}")]
    for args, code, message in cases:
        assert main(["run", str(prof), *args, "-o", str(out), "--overwrite", "--quiet"]) == code, args
        err = capsys.readouterr().err
        assert message in err and "removed" not in err, err
        assert sorted(p.name for p in out.iterdir()) == before
