"""``emulator run PROFILE --hosts HOSTS.yaml`` against real agent processes on 127.0.0.x: one merged results
directory with every byte and every host's clock offset; an agent killed mid-run ends the run within its
timeout naming the host and its ranks (exit 3) with the other host's records kept; a refusal stops the
run before any packet with the host named."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emulator.cli import main

MIXED = Path(__file__).resolve().parents[2] / "profiles" / "mixed_ar_a2a.yaml"


def _profile(tmp_path: Path, port: int, size: str = "1MiB", iterations: int = 2, timeout: str = "30s") -> Path:
    p = tmp_path / "mh.yaml"
    p.write_text(f"""extends: {MIXED}
timeout: {timeout}
warmup: 0
iterations: {iterations}
fabric:
  kind: direct
  udp_port: {port}
  time_dilation: 1
  ports:
    rate: 1Gbps
  transport:
    retransmit_timeout: 30ms
workload:
  collectives:
    - name: allreduce
      type: all_reduce
      group: 0-7
      size: {size}
      algorithm: ring
      iterations: 1
    - name: alltoall
      type: all_to_all
      group: 0-7
      size: {size}
      algorithm: direct
      iterations: 1
""")
    return p


def _hosts(tmp_path: Path, agents, ranks=("0-2", "3-5", "6-7"), base=40) -> Path:
    lines = ["hosts:"]
    for i, (a, r) in enumerate(zip(agents, ranks, strict=True)):
        lines += [f"  - agent: {a.url}", f"    ranks: {r}", f"    addresses: [127.0.0.{base + i}]"]
    p = tmp_path / "hosts.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p


def _port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.40", 0))
        return s.getsockname()[1]


def test_three_hosts_one_merged_results_directory(start_agent, token_file, tmp_path, capsys):
    agents = [start_agent() for _ in range(3)]
    out = tmp_path / "out"
    code = main(["run", str(_profile(tmp_path, _port())), "--hosts", str(_hosts(tmp_path, agents)),
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


def test_killed_agent_ends_the_run_naming_it_and_keeps_the_others_records(start_agent, token_file, tmp_path):
    agents = [start_agent() for _ in range(2)]
    out = tmp_path / "out"
    prof = _profile(tmp_path, _port(), size="64MiB", iterations=1, timeout="60s")
    hosts = _hosts(tmp_path, agents, ranks=("0-3", "4-7"))
    cmd = [sys.executable, "-m", "emulator", "run", str(prof), "--hosts", str(hosts), "--token-file", str(token_file),
           "-o", str(out), "--quiet"]
    t = time.monotonic()
    ctl = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait until traffic flows, then kill the second agent
            time.sleep(0.2)
            st = subprocess.run(["curl", "-s", "-H", f"Authorization: Bearer {token_file.read_text().strip()}",
                                 f"{agents[1].url}/v1/status"], capture_output=True, text=True).stdout
            if '"bytes_delivered": ' in st and '"bytes_delivered": 0' not in st:
                break
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


def test_a_refusal_stops_the_run_before_any_packet_naming_the_host(start_agent, token_file, tmp_path, capsys):
    ok = start_agent()
    strict = start_agent("--allow", "127.0.0.41/32")  # the run sends to 127.0.0.40 too
    port = _port()
    lis = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    lis.bind(("127.0.0.40", port))
    lis.setblocking(False)
    try:
        code = main(["run", str(_profile(tmp_path, port)), "--hosts", str(_hosts(tmp_path, [ok, strict],
                                                                                ranks=("0-3", "4-7"))),
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
def test_option_errors_are_one_line(tmp_path, capsys, args, message):
    code = main(["run", str(_profile(tmp_path, 14791)), *args, "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
